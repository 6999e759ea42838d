"""Perplexity over a text, as llama-perplexity computes it (tools/perplexity/perplexity.cpp, `perplexity()`).

The text is tokenized with the vocabulary's BOS, cut into chunks of n_ctx tokens (as many as fit, or --chunks);
each chunk is evaluated from an empty KV cache with its first token replaced by BOS (when the vocabulary adds
one), in batches of n_batch tokens; the second half of the chunk is scored: for positions first = n_ctx/2 ..
n_ctx - 2, the negative log-likelihood of the next token under

    log_softmax = (logit[tok] - max) - log(sum_exp),  sum_exp = sum of expf(logit - max) in double

accumulated in double (nll, and nll2 of its squares). After each chunk `[i]exp(nll/count)` is printed; at the
end `Final estimate: PPL = exp(nll/count) +/- sqrt((nll2/count - (nll/count)^2)/(count - 1)) * PPL`.

llama.cpp's worker threads add their partial sums in whatever order they finish; here the positions are summed
in order (the printed 4-5 decimals do not see the difference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kernels.errors import SynapseError


@dataclass
class PerplexityRun:
    n_ctx: int
    n_chunk: int
    n_tokens: int
    chunk_ppl: list[float] = field(default_factory=list)  # running estimate after each chunk
    nll: float = 0.0
    nll2: float = 0.0
    count: int = 0

    def final(self) -> tuple[float, float | None]:
        """(PPL, its +/- estimate, None when the variance is not positive as llama.cpp reports it)."""
        nll, nll2 = self.nll / self.count, self.nll2 / self.count
        ppl = math.exp(nll)
        var = nll2 - nll * nll
        return ppl, (math.sqrt(var / (self.count - 1)) * ppl if var > 0 else None)


def _nll_rows(logits: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    """Sum of -log_softmax(logits[i])[targets[i]] and of its squares over the rows, in row order."""
    from kernels.activations import log_softmax_rows

    v = log_softmax_rows(logits, targets.astype(np.int32))  # (rows,) float64, llama.cpp's arithmetic
    nll = nll2 = 0.0
    for x in (-v).tolist():
        nll += x
        nll2 += x * x
    return nll, nll2


def perplexity(ctx, tokenizer, text: bytes, n_ctx: int, n_batch: int, n_chunks: int = -1, on_chunk=None,
               on_start=None) -> PerplexityRun:
    """Run llama-perplexity's computation on `text` with a Context of at least n_ctx cells; on_start(n_chunk) is
    called before the first chunk, on_chunk(run) after each."""
    vocab = tokenizer.vocab
    tokens = np.asarray(tokenizer.encode(text, add_special=True, parse_special=False), dtype=np.int32)
    if len(tokens) < 2 * n_ctx:
        raise SynapseError(f"you need at least {2 * n_ctx} tokens to evaluate perplexity with a context of {n_ctx}; "
                           f"the text tokenizes to only {len(tokens)} tokens")
    n_chunk_max = len(tokens) // n_ctx
    n_chunk = n_chunk_max if n_chunks < 0 else min(n_chunks, n_chunk_max)
    run = PerplexityRun(n_ctx, n_chunk, len(tokens))
    if on_start is not None:
        on_start(n_chunk)
    first = n_ctx // 2
    for i in range(n_chunk):
        chunk = tokens[i * n_ctx:(i + 1) * n_ctx].copy()
        if vocab.add_bos:
            chunk[0] = vocab.bos_id  # BOS replaces the chunk's first token
        ctx.reset()
        rows = []
        for b in range(0, n_ctx, n_batch):
            batch = chunk[b:b + n_batch]
            n_out = max(0, b + len(batch) - max(b, first))  # llama.cpp asks for the logits of positions >= first
            rows.append(ctx.decode(batch, n_outputs=n_out))  # (n_out, n_vocab)
        scored = np.concatenate(rows)[: n_ctx - 1 - first]  # positions first .. n_ctx-2
        nll, nll2 = _nll_rows(scored, tokens[i * n_ctx + first + 1:(i + 1) * n_ctx])
        run.nll += nll
        run.nll2 += nll2
        run.count += n_ctx - 1 - first
        run.chunk_ppl.append(math.exp(run.nll / run.count))
        if on_chunk is not None:
            on_chunk(run)
    return run
