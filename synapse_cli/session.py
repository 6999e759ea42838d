"""One loaded model ready to run: weights, tokenizer, context, compiled kernels.

Shared by `decode`, `eval-callback` and `bench`, so that every command loads the same way: a Rich
progress bar while weights are mapped and prepared, then a spinner while the numba kernels are
compiled or loaded from the cache (a one-token warm-up run, as llama.cpp's own warm-up decode), both
on stderr and only when stderr is a terminal. A first run with an empty kernel cache is said on stderr in any
case (one line): it takes long once, and a user whose stderr is a log file should know why.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from .model import Context, Model


@dataclass
class Session:
    model: Model
    ctx: Context
    tokenizer: object
    load_ms: float
    t_start: float


def _progress_enabled(show: bool) -> bool:
    return show and sys.stderr.isatty()


# llama.cpp's -lm/--load-mode values that read the model into memory instead of mapping it (Model.load's use_mmap)
READ_LOAD_MODES = ("none", "dio")


def load_model(path: str, show_progress: bool = True, load_mode: str = "auto", kv_overrides=None,
               repack: bool = True) -> Model:
    use_mmap = load_mode not in READ_LOAD_MODES
    if not _progress_enabled(show_progress):
        return Model.load(path, use_mmap=use_mmap, kv_overrides=kv_overrides, repack=repack)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn

    console = Console(stderr=True)
    with Progress(TextColumn("loading {task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  console=console, transient=True) as bar:
        task = bar.add_task(path.rsplit("/", 1)[-1], total=None)

        def cb(done, total, name):
            bar.update(task, completed=done, total=total)

        return Model.load(path, progress=cb, use_mmap=use_mmap, kv_overrides=kv_overrides, repack=repack)


def kernel_cache_is_cold() -> bool:
    """No compiled model kernels in numba's cache folder yet (the first run on this machine or after a clear)."""
    import os
    from pathlib import Path

    import kernels.config  # noqa: F401  (sets NUMBA_CACHE_DIR)

    root = Path(os.environ.get("NUMBA_CACHE_DIR", ".cache/numba"))
    return not any(root.glob("kernels_*/norm.*.nbi")) if root.is_dir() else True


def warm_up(ctx: Context, show_progress: bool = True, helper=None, batch_pending: bool = False) -> None:
    """Run one token through the model and forget it: compiles (or loads) every kernel once. `helper`: the
    cold-cache warm-up process (synapse_cli/warm.py) started with the model load: in the batch-invariant
    order it compiles the one-token graph's products meanwhile (this process the other steps), and while the batch kernels
    and the one-call blocks are pending (batch_pending: it, or an earlier run's helper, compiles them for later
    runs) short batches are decoded token by token and single tokens op by op; in llama.cpp's batch order it
    compiles the batch kernels, and is waited for."""

    def run():
        if helper is not None and ctx.batch_invariant:
            # cold cache: compile the steps the helper leaves to us, then load its products from the cache
            from .model import WARM_PRODUCTS
            from .warm import wait_one_token

            for name, step in ctx.warm_steps():
                if name not in WARM_PRODUCTS:
                    step()
            ctx.reset()
            wait_one_token(helper)
        if ctx.batch_invariant:
            ctx.one_call_blocks = not batch_pending  # (compiled by the helper, after the batch kernels)
        ctx.decode([0])
        ctx.reset()
        if ctx.batch_invariant:
            ctx.single_token_batches = batch_pending
            return
        if helper is None:
            return
        try:
            helper.wait(timeout=600)
        except Exception:  # noqa: BLE001 (a helper that fails only costs the time it would have saved)
            helper.kill()

    if not _progress_enabled(show_progress):
        run()
        return
    from rich.console import Console

    with Console(stderr=True).status("preparing kernels (compiled on first use, then cached in .cache/numba)"):
        run()


def _start_cold_helper(model_path: str, n_ctx: int, n_ubatch: int, cache_type_k: str, cache_type_v: str,
                       batch_invariant: bool, flash_attn: bool, show_progress: bool):
    """Before the model loads: the warm-up process for a model and settings not yet warmed up (synapse_cli/warm.py),
    and whether the batch kernels may still be missing. A cold cache is said on stderr (one line, also to a log
    file)."""
    import os

    from .warm import start

    cold = kernel_cache_is_cold()
    if cold and not _progress_enabled(show_progress):
        print(f"synapse: compiling the kernels this model needs (first run only; cached in "
              f"{os.environ.get('NUMBA_CACHE_DIR')})", file=sys.stderr, flush=True)
    return start(model_path, n_ctx, n_ubatch, cache_type_k, cache_type_v, batch_invariant, flash_attn, cold)


def open_session(model_path: str, *, n_ctx: int = 0, n_batch: int = 2048, n_ubatch: int = 512,
                 n_threads: int | None = None, cache_type_k: str = "f16", cache_type_v: str = "f16",
                 show_progress: bool = True, warmup: bool = True, batch_invariant: bool = True,
                 flash_attn: bool = True, batched_kernels: bool = False, load_mode: str = "auto",
                 rope=None, kv_overrides=None, control_vectors=None, loras=None, repack: bool = True,
                 n_seq_max: int = 1, kv_unified: bool = False) -> Session:
    """Load a model, its tokenizer and a context, and warm the kernels up. rope: the --rope-*/--yarn-* flags'
    RopeParams; kv_overrides: --override-kv's; control_vectors: a ControlVectorSpec; loras: ((file, scale) list,
    apply) of --lora/--lora-scaled (synapse_cli/adapters.py); repack: False for -nr/--no-repack; n_seq_max,
    kv_unified: -np and -kvu (the one sequence's share of the cache)."""
    t0 = time.perf_counter()
    from tokenizer import load_tokenizer

    helper, batch_pending = (_start_cold_helper(model_path, n_ctx, n_ubatch, cache_type_k, cache_type_v,
                                                batch_invariant, flash_attn, show_progress) if warmup else (None, False))
    model = load_model(model_path, show_progress, load_mode, kv_overrides, repack)
    tok = load_tokenizer(model.reader)
    ctx = Context(model, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, cache_type_k=cache_type_k,
                  cache_type_v=cache_type_v, n_threads=n_threads, batch_invariant=batch_invariant,
                  flash_attn=flash_attn, batched_kernels=batched_kernels, rope=rope, n_seq_max=n_seq_max,
                  kv_unified=kv_unified)
    if warmup:
        warm_up(ctx, show_progress, helper, batch_pending)
    if control_vectors is not None:
        from .adapters import control_vectors as load_control_vectors

        ctx.cvec = load_control_vectors(control_vectors, model.hparams.n_layer, model.hparams.n_embd)
    if loras is not None:
        from .adapters import lora_adapters

        files, apply = loras
        adapters = lora_adapters(files, model)
        if apply and adapters:
            ctx.loras = adapters
    return Session(model, ctx, tok, (time.perf_counter() - t0) * 1e3, t0)
