"""A live trace: run a model on a prompt with the recorder installed (the model layer computes)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional



from .record import EvalCbError

# --------------------------------------------------------------------------------------------------
# live run (implemented in the model layer)


def run_live(
    model_path: str | Path,
    prompt: str,
    *,
    threads: Optional[int],
    ctx_size: int,
    batch: int,
    ubatch: int,
    cache_type_k: str,
    cache_type_v: str,
    hook: Callable[..., None],
    flash_attn: bool = True,
    rope=None,
    kv_overrides=None,
    control_vectors=None,
    loras=None,
    repack: bool = True,
) -> list[int]:
    """Decode `prompt` as one batch the way llama-eval-callback does and call `hook` for every graph
    node (see `TraceRecorder.__call__`). Tokenization: BOS added per the vocabulary, special tokens
    parsed. Returns the prompt's token ids (printed as `number of input tokens = N`).

    llama-eval-callback evaluates the whole prompt with one llama_decode (n_batch must hold it) and
    requests logits for the last token only, so the last layer reduces to that row (out_ids)."""
    from ..session import open_session

    sess = open_session(str(model_path), n_ctx=ctx_size, n_batch=batch, n_ubatch=ubatch, n_threads=threads,
                        cache_type_k=cache_type_k, cache_type_v=cache_type_v, show_progress=True,
                        batch_invariant=False,  # llama.cpp's batch summation order, to line up with its logs
                        flash_attn=flash_attn, rope=rope, kv_overrides=kv_overrides,
                        control_vectors=control_vectors, loras=loras, repack=repack)
    ids = sess.tokenizer.encode(prompt, add_special=True, parse_special=True)
    if not ids:
        raise EvalCbError("the prompt tokenizes to no tokens")
    if len(ids) > batch:
        raise EvalCbError(f"the prompt has {len(ids)} tokens, more than -b {batch}")
    sess.ctx.decode(ids, trace=hook)
    return [int(i) for i in ids]
