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
        """(PPL, its +/- estimate, None when the variance is not positive as llama.cpp reports it; C's division:
        no scored token (-c 2, --chunks 0) gives -nan and that report)."""
        nll, nll2 = _div(self.nll, self.count), _div(self.nll2, self.count)
        ppl = math.exp(nll)
        var = nll2 - nll * nll
        return ppl, (math.sqrt(_div(var, self.count - 1)) * ppl if var > 0 else None)

    def running(self) -> str:
        """The value printed after a chunk: `%.4lf` of exp(nll/count) (-nan when nothing was scored)."""
        return _f(math.exp(_div(self.nll, self.count)), ".4f")

    def running_type1(self, offset: int) -> str:
        """--ppl-output-type 1's line after a chunk: `%8d  %.4lf  %4lf  %4lf` of the chunk's first token (llama.cpp
        prints i*n_ctx with i the first chunk of the batch), the running PPL, mean nll and its uncertainty (or, when
        the variance is not positive, that variance itself)."""
        av = _div(self.nll, self.count)
        av2 = _div(self.nll2, self.count) - av * av
        if av2 > 0:
            av2 = math.sqrt(_div(av2, self.count - 1))
        return f"{offset:8d}  {_f(math.exp(av), '.4f')}  {_f(av, '4f')}  {_f(av2, '4f')}"


def _nll_rows(logits: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    """Sum of -log_softmax(logits[i])[targets[i]] and of its squares over the rows, in row order."""
    from kernels.activations import log_softmax_rows

    v = log_softmax_rows(logits, targets.astype(np.int32))  # (rows,) float64, llama.cpp's arithmetic
    nll = nll2 = 0.0
    for x in (-v).tolist():
        nll += x
        nll2 += x * x
    return nll, nll2


def _logits_buffer(ctx, n_ctx: int) -> np.ndarray:
    """(n_ctx - n_ctx/2, n_vocab) float32: one chunk's output rows, reused by every chunk."""
    return np.empty((n_ctx - n_ctx // 2, ctx.hp.n_vocab), np.float32)


def _chunk_logits(ctx, vocab, tokens: np.ndarray, i: int, n_ctx: int, n_batch: int, buf: np.ndarray) -> np.ndarray:
    """Chunk i from an empty cache, BOS replacing its first token: the logits (n_ctx - 1 - n_ctx/2, n_vocab) of the
    positions that predict the scored tokens (llama.cpp asks for positions >= n_ctx/2 only), a view of buf
    (_logits_buffer)."""
    first = n_ctx // 2
    chunk = tokens[i * n_ctx:(i + 1) * n_ctx].copy()
    if vocab.add_bos:
        chunk[0] = vocab.bos_id
    ctx.reset()
    rows = 0
    for b in range(0, n_ctx, n_batch):
        batch = chunk[b:b + n_batch]
        rows += len(ctx.decode(batch, n_outputs=max(0, b + len(batch) - max(b, first)), out=buf[rows:]))
    return buf[: n_ctx - 1 - first]


def n_vocab_padded(n_vocab: int) -> int:
    """uint16 entries per row of a base-logits file: 2 floats (4 entries), the levels, padding to even."""
    return 2 * ((n_vocab + 1) // 2) + 4


def perplexity(ctx, tokenizer, text: bytes, n_ctx: int, n_batch: int, n_chunks: int = -1, on_chunk=None,
               on_start=None, base_out=None) -> PerplexityRun:
    """Run llama-perplexity's computation on `text` with a Context of at least n_ctx cells; on_start(n_chunk) is
    called before the first chunk, on_chunk(run) after each. base_out: a binary file to write llama.cpp's
    --kl-divergence-base format to ("_logits_", n_ctx, n_vocab, n_chunk int32, the chunks' tokens int32, then
    per scored position its log-probability record, base_log_probs); the nll is then computed as that path of
    llama-perplexity computes it (in float)."""
    vocab = tokenizer.vocab
    tokens = np.asarray(tokenizer.encode(text, add_special=True, parse_special=False), dtype=np.int32)
    if len(tokens) < 2 * n_ctx:
        raise SynapseError(f"you need at least {2 * n_ctx} tokens to evaluate perplexity with a context of {n_ctx}; "
                           f"the text tokenizes to only {len(tokens)} tokens")
    n_chunk_max = len(tokens) // n_ctx
    n_chunk = n_chunk_max if n_chunks < 0 else min(n_chunks, n_chunk_max)
    run = PerplexityRun(n_ctx, n_chunk, len(tokens))
    n_vocab = vocab.n_tokens
    if base_out is not None:
        base_out.write(b"_logits_" + np.array([n_ctx, n_vocab, n_chunk], np.int32).tobytes())
        base_out.write(tokens[: n_chunk * n_ctx].astype("<i4").tobytes())
    if on_start is not None:
        on_start(n_chunk)
    first = n_ctx // 2
    buf = _logits_buffer(ctx, n_ctx)
    for i in range(n_chunk):
        scored = _chunk_logits(ctx, vocab, tokens, i, n_ctx, n_batch, buf)  # positions first .. n_ctx-2
        targets = tokens[i * n_ctx + first + 1:(i + 1) * n_ctx].astype(np.int32)
        if base_out is None:
            nll, nll2 = _nll_rows(scored, targets)
        else:
            from kernels.activations import base_log_probs

            rec = np.empty((len(scored), n_vocab_padded(n_vocab)), np.uint16)
            v = base_log_probs(scored, targets, rec)
            base_out.write(rec.astype("<u2").tobytes())
            nll = nll2 = 0.0
            for x in v.tolist():
                nll += x
                nll2 += x * x
        run.nll += nll
        run.nll2 += nll2
        run.count += n_ctx - 1 - first
        run.chunk_ppl.append(math.exp(_div(run.nll, run.count)))
        if on_chunk is not None:
            on_chunk(run)
    return run


# ------------------------------------------------------------------------------------- strided (perplexity_v2)

def _pad256(n: int) -> int:
    return -(-n // 256) * 256


@dataclass
class StrideGeometry:
    """What llama-perplexity's main() and llama_context make of -c, -b and --ppl-stride: n_parallel = max(1, b/c)
    sequences of c tokens, the context n_parallel*c + stride/2 (the "adjusting context size from A to B" line),
    padded by llama_context to a multiple of 256; with several sequences each gets n_ctx/n_parallel cells, padded
    to 256 again, and n_ctx becomes that times n_parallel. perplexity_v2's chunk is the whole n_ctx (llama_n_ctx),
    evaluated in batches of min(b, n_parallel*c) tokens as one sequence (seq 0)."""
    ctx_from: int  # n_parallel * c
    ctx_to: int  # + stride/2
    n_ctx: int  # llama_n_ctx(ctx): perplexity_v2's chunk
    n_ctx_seq: int  # cells one sequence can use
    n_batch: int
    n_parallel: int

    @classmethod
    def of(cls, c: int, b: int, stride: int) -> "StrideGeometry":
        n_par = max(1, b // c)
        n_ctx = _pad256(n_par * c + stride // 2)
        n_ctx_seq = n_ctx
        if n_par > 1:  # kv_unified is false for perplexity
            n_ctx_seq = _pad256(n_ctx // n_par)
            n_ctx = n_ctx_seq * n_par
        return cls(n_par * c, n_par * c + stride // 2, n_ctx, n_ctx_seq, min(b, n_par * c), n_par)


@dataclass
class StridedRun:
    n_ctx: int
    stride: int
    n_chunk: int
    n_tokens: int
    chunk_ppl: list[float] = field(default_factory=list)
    nll: float = 0.0
    count: int = 0

    def ppl(self) -> float:
        return math.exp(_div(self.nll, self.count))


def perplexity_v2(ctx, tokenizer, text: bytes, geo: StrideGeometry, stride: int, n_chunks: int = -1,
                  on_start=None, on_chunk=None) -> StridedRun:
    """llama-perplexity --ppl-stride (perplexity.cpp `perplexity_v2`): chunk i is the n_ctx tokens from i*stride,
    evaluated from an empty cache in batches of n_batch, every position's logits kept; the last `stride` tokens of
    the chunk are scored with `softmax` (float probabilities) and -logf(p), summed in double. Quirks kept: the
    chunk is llama_n_ctx (the padded context, not -c + stride/2), and the BOS token is written into the first
    token only after that batch was decoded (and restored at once), so no chunk but the text's first starts with
    BOS. There is no final-estimate line (llama.cpp prints none in this mode).

    Where llama.cpp fails or reads outside its buffers, a SynapseError: a text under 2*n_ctx tokens; several
    sequences (-b >= 2*-c), whose chunk of n_ctx tokens cannot fit into seq 0's n_ctx_seq cells (llama.cpp: "decode:
    failed to find a memory slot", then nothing); a stride >= n_ctx, whose first scored row would lie before the
    chunk's logits (perplexity.cpp reads memory before its vector there)."""
    from kernels.activations import softmax_nll_rows

    n_ctx, n_batch = geo.n_ctx, geo.n_batch
    tokens = np.asarray(tokenizer.encode(text, add_special=True, parse_special=False), dtype=np.int32)
    if len(tokens) < 2 * n_ctx:
        raise SynapseError(f"you need at least {2 * n_ctx} tokens to evaluate perplexity with a context of {n_ctx}"
                           f"{f' (-c + --ppl-stride/2 = {geo.ctx_to}, padded to 256)' if n_ctx != geo.ctx_to else ''}"
                           f"; the text tokenizes to only {len(tokens)} tokens")
    n_chunk_max = (len(tokens) - n_ctx + stride - 1) // stride
    n_chunk = n_chunk_max if n_chunks < 0 else min(n_chunks, n_chunk_max)
    run = StridedRun(n_ctx, stride, n_chunk, len(tokens))
    if on_start is not None:
        on_start(run)
    if n_ctx > geo.n_ctx_seq and n_chunk > 0:
        used = 0
        while used + n_batch <= geo.n_ctx_seq:
            used += n_batch
        raise SynapseError(f"decode: failed to find a memory slot for batch of size {min(n_batch, n_ctx - used)} "
                           f"(-b >= 2*-c with --ppl-stride: llama-perplexity makes {geo.n_parallel} sequences of "
                           f"{geo.n_ctx_seq} cells and evaluates its chunk of {n_ctx} tokens as one; use -b <= -c)")
    if stride > n_ctx - 1 and n_chunk > 0:
        raise SynapseError(f"--ppl-stride {stride} must be < the context of {n_ctx} tokens: llama-perplexity would "
                           f"score logits from before the chunk (it reads outside its buffer)")
    first = n_ctx - stride - 1  # rows first .. n_ctx-2 are scored
    for i in range(n_chunk):
        start = i * stride
        ctx.reset()
        rows = []
        for b in range(0, n_ctx, n_batch):
            logits = ctx.decode(tokens[start + b:start + min(n_ctx, b + n_batch)], all_logits=True)
            lo = max(b, first) - b  # every row is computed (llama.cpp asks for all); only these are kept
            if lo < len(logits):
                rows.append(logits[lo:])
        scored = np.concatenate(rows)[: n_ctx - 1 - first]
        v = softmax_nll_rows(scored, tokens[start + first + 1:start + n_ctx].astype(np.int32))
        for x in v.tolist():
            run.nll += x
        run.count += len(v)
        run.chunk_ppl.append(run.ppl())
        if on_chunk is not None:
            on_chunk(run)
    return run


# ------------------------------------------------------------------------------------------- KL divergence

@dataclass
class KLDRun:
    """llama-perplexity --kl-divergence: kl_divergence_result's sums (float values added to doubles as there) and
    every position's KLD and Δp for the quantiles."""
    n_ctx: int
    n_chunk: int
    sums: dict = field(default_factory=lambda: dict.fromkeys(
        ("nll", "nll2", "nll_base", "nll_base2", "nll_nll_base", "kld", "kld2", "p_diff", "p_diff2", "p_diff4"), 0.0))
    max_p_diff: float = 0.0
    n_same_top: int = 0
    count: int = 0
    kld_values: list = field(default_factory=list)
    p_diff_values: list = field(default_factory=list)

    def add(self, nll, nll_base, kld, p_diff, same_top) -> None:
        s = self.sums
        f32 = np.float32
        for n, nb, k, pd, same in zip(nll.tolist(), nll_base.tolist(), kld.tolist(), p_diff.tolist(), same_top.tolist()):
            s["nll"] += n
            s["nll2"] += float(f32(n) * f32(n))
            s["nll_base"] += nb
            s["nll_base2"] += float(f32(nb) * f32(nb))
            s["nll_nll_base"] += float(f32(n) * f32(nb))
            s["kld"] += k
            s["kld2"] += k * k
            s["p_diff"] += pd
            pd2 = float(f32(pd) * f32(pd))
            s["p_diff2"] += pd2
            s["p_diff4"] += pd2 * pd2
            self.max_p_diff = max(self.max_p_diff, abs(pd))
            self.n_same_top += bool(same)
            self.count += 1
        self.kld_values.extend(np.asarray(kld, np.float32).tolist())
        self.p_diff_values.extend(p_diff.tolist())


def read_base(path: str, n_vocab: int):
    """The header and tokens of a --kl-divergence-base file, and the open file positioned at the first record."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise SynapseError(f"failed to open {path}: {e.strerror or e}") from None
    if f.read(8) != b"_logits_":
        raise SynapseError(f"{path} does not look like a file containing log-probabilities")
    hdr = f.read(12)
    if len(hdr) != 12:
        raise SynapseError(f"failed reading n_vocab, n_chunk from {path}")
    n_ctx, nv_file, n_chunk = (int(x) for x in np.frombuffer(hdr, "<i4"))
    if nv_file != n_vocab:
        raise SynapseError(f"inconsistent vocabulary ({nv_file} vs {n_vocab}): {path} was made with another model family")
    if n_ctx <= 1 or n_chunk <= 0:
        raise SynapseError(f"{path}: n_ctx {n_ctx}, n_chunk {n_chunk}: not a base-logits file")
    raw = f.read(4 * n_ctx * n_chunk)
    if len(raw) != 4 * n_ctx * n_chunk:
        raise SynapseError(f"failed reading evaluation tokens from {path}")
    return n_ctx, n_chunk, np.frombuffer(raw, "<i4").astype(np.int32), f


def kl_divergence(ctx, tokenizer, base_path: str, n_batch: int, on_start=None, on_chunk=None) -> KLDRun:
    """llama-perplexity --kl-divergence: the base file's tokens evaluated as perplexity does, each scored position
    compared with the base model's log-probabilities."""
    from kernels.activations import kld_rows

    vocab = tokenizer.vocab
    n_vocab = vocab.n_tokens
    n_ctx, n_chunk, tokens, f = read_base(base_path, n_vocab)
    if n_ctx > ctx.n_ctx:
        raise SynapseError(f"{base_path} has been computed with {n_ctx}, while the current context is {ctx.n_ctx}. "
                           "Increase it with -c and retry")
    first = n_ctx // 2
    n_tok = n_ctx - 1 - first
    nv = n_vocab_padded(n_vocab)
    run = KLDRun(n_ctx, n_chunk)
    if on_start is not None:
        on_start(run)
    buf = _logits_buffer(ctx, n_ctx)
    with f:
        for i in range(n_chunk):
            scored = _chunk_logits(ctx, vocab, tokens, i, n_ctx, min(n_batch, n_ctx), buf)
            raw = f.read(2 * n_tok * nv)
            if len(raw) != 2 * n_tok * nv:
                raise SynapseError(f"failed reading log-probs for chunk {i} from {base_path} (truncated file)")
            base = np.frombuffer(raw, "<u2").reshape(n_tok, nv)
            targets = tokens[i * n_ctx + first + 1:(i + 1) * n_ctx]
            out = (np.empty(n_tok, np.float32), np.empty(n_tok, np.float32), np.empty(n_tok, np.float64),
                   np.empty(n_tok, np.float32), np.empty(n_tok, np.bool_))
            kld_rows(scored, np.ascontiguousarray(base), targets, *out)
            run.add(*out)
            if on_chunk is not None:
                on_chunk(run, i)
    return run


def _sqrt(x: float) -> float:
    """C's sqrt: a negative argument gives x86's default NaN (sign bit set, printed "-nan")."""
    return math.sqrt(x) if x >= 0 else math.copysign(math.nan, -1.0)


def _div(a: float, b: float) -> float:
    """IEEE division as C does it (x/0 = +-inf, 0/0 = -nan)."""
    if b != 0:
        return a / b
    if a == 0 or math.isnan(a):
        return math.copysign(math.nan, -1.0)
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _f(x: float, spec: str) -> str:
    """printf("%<spec>", x), including glibc's "-nan"."""
    if math.isnan(x):
        width = int(spec.split(".")[0] or 0)
        return (("-" if math.copysign(1.0, x) < 0 else "") + "nan").rjust(width)
    return format(x, spec)


def mean_and_uncertainty(s: float, s2: float, count: int) -> tuple[float, float]:
    if count < 1:
        return 0.0, 0.0
    f = s / count
    df = s2 / count - f * f
    return f, (math.sqrt(df / (count - 1)) if df > 0 and count > 10 else 0.0)


def covariance(a: float, b: float, ab: float, count: int) -> float:
    if count < 10:
        return 0.0
    return (ab / count - (a / count) * (b / count)) / (count - 1)


def kld_table_row(run: KLDRun, chunk: int) -> str:
    """One line of llama-perplexity's per-chunk KL-divergence table (running values)."""
    s, n = run.sums, run.count
    lp = mean_and_uncertainty(s["nll"], s["nll2"], n)
    ppl = math.exp(lp[0])
    out = f"{chunk:4d}    {_f(ppl, '9.4f')} ± {_f(ppl * lp[1], '9.4f')}"
    lb = mean_and_uncertainty(s["nll_base"], s["nll_base2"], n)
    cov = covariance(s["nll"], s["nll_base"], s["nll_nll_base"], n)
    ratio_unc = _sqrt(lp[1] * lp[1] + lb[1] * lb[1] - 2.0 * cov)
    out += f"    {_f(lp[0] - lb[0], '10.5f')} ± {_f(ratio_unc, '10.5f')}"
    kl = mean_and_uncertainty(s["kld"], s["kld2"], n)
    out += f"    {_f(kl[0], '10.5f')} ± {_f(kl[1], '10.5f')}"
    mse = mean_and_uncertainty(s["p_diff2"], s["p_diff4"], n)
    rms = _sqrt(mse[0])
    out += f"    {_f(100.0 * rms, '6.3f')} ± {_f(100.0 * (_div(0.5, rms) * mse[1]), '6.3f')} %"
    top = run.n_same_top / n
    out += f"    {_f(100.0 * top, '6.3f')} ± {_f(100.0 * _sqrt(_div(top * (1 - top), n - 1)), '6.3f')} %"
    return out


KLD_TABLE_HEADER = ("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
                    "Δp RMS            Same top p")


def _percentile(values: list[float], fraction: float) -> float:
    """perplexity.cpp's percentile lambda, in float as there."""
    f32 = np.float32
    if fraction <= 0:
        return values[0]
    if fraction >= 1:
        return values[-1]
    p = f32(f32(fraction) * f32(len(values) - 1))
    ip = int(p)
    p = f32(p - f32(ip))
    return float(f32(f32(f32(1) - p) * f32(values[ip])) + f32(p * f32(values[min(ip + 1, len(values) - 1)])))


def _median(values: list[float]) -> float:
    n = len(values)
    if n % 2:
        return values[n // 2]
    return float(np.float32(0.5) * np.float32(np.float32(values[n // 2]) + np.float32(values[n // 2 - 1])))


def kld_statistics(run: KLDRun) -> list[str]:
    """The three statistics blocks llama-perplexity prints after the table (only from 100 positions on)."""
    if run.count < 100:
        return []
    s, n = run.sums, run.count
    kv, pv = sorted(run.kld_values), sorted(run.p_diff_values)
    lp = mean_and_uncertainty(s["nll"], s["nll2"], n)
    ppl, ppl_unc = math.exp(lp[0]), math.exp(lp[0]) * lp[1]
    lb = mean_and_uncertainty(s["nll_base"], s["nll_base2"], n)
    ppl_b, ppl_b_unc = math.exp(lb[0]), math.exp(lb[0]) * lb[1]
    cov = covariance(s["nll"], s["nll_base"], s["nll_nll_base"], n)
    cor = _div(cov, lp[1] * lb[1])
    r_val, r_unc = lp[0] - lb[0], _sqrt(lp[1] * lp[1] + lb[1] * lb[1] - 2.0 * cov)
    pr_val = math.exp(r_val)
    d_unc = _sqrt(ppl_unc * ppl_unc + ppl_b_unc * ppl_b_unc - 2.0 * (ppl * ppl_b * cov))
    lines = ["====== Perplexity statistics ======",
             f"Mean PPL(Q)                   : {_f(ppl, '10.6f')} ± {_f(ppl_unc, '10.6f')}",
             f"Mean PPL(base)                : {_f(ppl_b, '10.6f')} ± {_f(ppl_b_unc, '10.6f')}",
             f"Cor(ln(PPL(Q)), ln(PPL(base))): {_f(100.0 * cor, '6.2f')}%",
             f"Mean ln(PPL(Q)/PPL(base))     : {_f(r_val, '10.6f')} ± {_f(r_unc, '10.6f')}",
             f"Mean PPL(Q)/PPL(base)         : {_f(pr_val, '10.6f')} ± {_f(pr_val * r_unc, '10.6f')}",
             f"Mean PPL(Q)-PPL(base)         : {_f(ppl - ppl_b, '10.6f')} ± {_f(d_unc, '10.6f')}",
             "",
             "====== KL divergence statistics ======"]
    kl = mean_and_uncertainty(s["kld"], s["kld2"], n)
    lines.append(f"Mean    KLD: {_f(kl[0], '10.6f')} ± {_f(kl[1], '10.6f')}")
    lines.append(f"Maximum KLD: {_f(kv[-1], '10.6f')}")
    for label, fr in (("99.9%", 0.999), ("99.0%", 0.990), ("95.0%", 0.950), ("90.0%", 0.900)):
        lines.append(f"{label}   KLD: {_f(_percentile(kv, float(np.float32(fr))), '10.6f')}")
    lines.append(f"Median  KLD: {_f(_median(kv), '10.6f')}")
    for label, fr in (("10.0%", 0.100), (" 5.0%", 0.050), (" 1.0%", 0.010), (" 0.1%", 0.001)):
        lines.append(f"{label}   KLD: {_f(_percentile(kv, float(np.float32(fr))), '10.6f')}")
    lines.append(f"Minimum KLD: {_f(kv[0], '10.6f')}")
    lines += ["", "====== Token probability statistics ======"]
    pd = mean_and_uncertainty(s["p_diff"], s["p_diff2"], n)
    lines.append(f"Mean    Δp: {_f(100.0 * pd[0], '6.3f')} ± {_f(100.0 * pd[1], '5.3f')} %")
    lines.append(f"Maximum Δp: {_f(100.0 * pv[-1], '6.3f')}%")
    for label, fr in (("99.9%", 0.999), ("99.0%", 0.990), ("95.0%", 0.950), ("90.0%", 0.900), ("75.0%", 0.750)):
        lines.append(f"{label}   Δp: {_f(100.0 * _percentile(pv, float(np.float32(fr))), '6.3f')}%")
    lines.append(f"Median  Δp: {_f(100.0 * _median(pv), '6.3f')}%")
    for label, fr in (("25.0%", 0.250), ("10.0%", 0.100), (" 5.0%", 0.050), (" 1.0%", 0.010), (" 0.1%", 0.001)):
        lines.append(f"{label}   Δp: {_f(100.0 * _percentile(pv, float(np.float32(fr))), '6.3f')}%")
    lines.append(f"Minimum Δp: {_f(100.0 * pv[0], '6.3f')}%")
    mse = mean_and_uncertainty(s["p_diff2"], s["p_diff4"], n)
    rms = _sqrt(mse[0])
    lines.append(f"RMS Δp    : {_f(100.0 * rms, '6.3f')} ± {_f(100.0 * (_div(0.5, rms) * mse[1]), '5.3f')} %")
    top = run.n_same_top / n
    lines.append(f"Same top p: {_f(100.0 * top, '6.3f')} ± {_f(100.0 * _sqrt(_div(top * (1.0 - top), n - 1)), '5.3f')} %")
    return lines
