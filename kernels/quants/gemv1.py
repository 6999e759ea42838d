"""Fused single-token (T = 1) matmul kernels: activation quantization + gemv of up to 3 weights sharing the
activations (Q/K/V, gate/up), in ONE numba call and ONE parallel region (ggml-cpu's mul_mat for src1 with one
row: from_float once into wdata, then vec_dot over the rows of each weight, split between threads).

Why: for small models the per-call fixed costs (Python wrappers, numba dispatch, allocations, launching a
parallel region for the quantizer and another for the gemv) dominated the ~3 ms of weight streaming. Here
one call per (group of) weights does:

    serial:    x (1, K) f32 -> Q8_0 / Q8_1 (+ block sums) or Q8_K (+ the K-quant kernels' permuted layout)
               into scratch allocated inside the kernel (no Python-side numpy work)
    parallel:  prange over nt chunks (nt = threads): chunk c computes rows [c*N_i/nt, (c+1)*N_i/nt) of every
               weight i (8-row groups for the 32-weight formats), i.e. a static split in few large pieces

Every output row gets the same integer sums and the same float operation sequence as the format modules' gemv
(q32.gemv_group for the 32-weight formats, q4_k.row_dot_x86, q6_k.row_dot_x86), so results are bit-identical to
`matmul` with T > 1 rows and to the slow reference, for any thread count.

The weights' packed layouts are those of the format modules (q32.py, q4_k.py 148-byte blocks, q6_k.py): a
layout change there must be mirrored here (tests/test_matmul.py compares every path with the reference).
numba caches per file: after editing q32.py / vec_dot_type.py / _simd.py delete .cache/numba so this
module's kernels recompile.

Formats (AVX2 fast path only; others use the generic path in kernels/matmul.py):
    Q8_1 activations: Q4_1, Q5_1                       -> gemv_q4_1, gemv_q5_1 (gemv_many_q8_1)
    Q8_0 activations: Q4_0, Q5_0, Q8_0                 -> gemv_q4_0, gemv_q5_0, gemv_q8_0 (gemv_many_q8_0)
    Q8_K activations: Q4_K (code 0), Q6_K (1)          -> gemv_many_q8_K
    IQ4_NL (repacked), IQ4_XS                         -> iq4.gemv_iq4_nl, iq4.gemv_iq4_xs
    MXFP4 (repacked)                                  -> fp4.gemv_mxfp4 (iq4.py's kernel)
Unused weight slots repeat slot 0 with n_w telling how many are real (one compiled signature per kernel).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, jit, pjit
from ..ggml_type import QK_K
from . import fp4, iq4, q32, q4_k, q6_k
from .vec_dot_type import q8_0_row, q8_1_row, q8_K_row
from .kquants import PERM

QK = 32
XS = q32.XS  # x86-order formats: layout constants of 8-row groups times XS (see q32.py)


# ----------------------------------------------------------------------------------------- 32-weight blocks

@jit
def _q32_span(w, g0, g1, GB, QH, QS, HAS_M, SUB, MODE, Q8, qa, yd, ys, asum, out, pf):
    """Groups [g0, g1): q32.gemv_group, prefetching pf bytes ahead, the two halves in alternation (two sequential
    streams, as _k_rows; two groups per iteration with shared activation loads measured no faster)."""
    if MODE == q32.LANES or MODE == q32.LANES_M:
        _x86_span(w, g0, g1, GB, QH, QS, HAS_M, SUB, Q8, qa, yd, ys, asum, out, pf)
        return
    h = (g1 - g0) // 2
    for i in range(h):
        q32.gemv_group(w, g0 + i, GB, QH, QS, HAS_M, SUB, MODE, Q8, qa, yd, ys, asum, out, pf)
        q32.gemv_group(w, g0 + h + i, GB, QH, QS, HAS_M, SUB, MODE, Q8, qa, yd, ys, asum, out, pf)
    if (g1 - g0) % 2:
        q32.gemv_group(w, g1 - 1, GB, QH, QS, HAS_M, SUB, MODE, Q8, qa, yd, ys, asum, out, pf)


@jit
def _x86_span(w, g0, g1, GB, QH, QS, HAS_M, SUB, Q8, qa, yd, ys, asum, out, pf):
    """_q32_span in the x86 lane modes, straight to q32.gemv_group_x86. Through gemv_group (which also holds the
    generic modes, their helpers inlined) numba wrapped every group in reference counts of its six arrays, twelve
    NRT calls an 8-row group; without them a decoded SmolLM2 token takes 0.87-0.99x the time (`python
    benchmarks/decode_ab.py --base 4ea709c`, benchmarks/RESULTS.md)."""
    h = (g1 - g0) // 2
    for i in range(h):
        q32.gemv_group_x86(w, g0 + i, GB, QH, QS, HAS_M, SUB, Q8, qa, yd, ys, asum, out, pf)
        q32.gemv_group_x86(w, g0 + h + i, GB, QH, QS, HAS_M, SUB, Q8, qa, yd, ys, asum, out, pf)
    if (g1 - g0) % 2:
        q32.gemv_group_x86(w, g1 - 1, GB, QH, QS, HAS_M, SUB, Q8, qa, yd, ys, asum, out, pf)


@jit
def _block_sums_row(qa, asum, scale):
    """as q32.block_sums for one row"""
    n = qa.shape[1] // asum.shape[1]
    for b in range(asum.shape[1]):
        s = np.int32(0)
        for j in range(n):
            s += np.int32(qa[0, n * b + j])
        asum[0, b] = np.int32(scale * s)


@jit
def _q8_row_arrays(K):
    """One row's Q8_0 / Q8_1 activations: quants (1, K) int8, fp16 block scales (1, K/32) and their f32 values."""
    return np.empty((1, K), np.int8), np.empty((1, K // QK), np.uint16), np.empty((1, K // QK), np.float32)


@ijit
def _chunk(c, nt, GB, QH, QS, HAS_M, SUB, MODE, Q8, w0, w1, w2, n_w, qa, yd, ys, asum, o0, o1, o2, pf):
    """Chunk c of nt of the n_w first weights: its contiguous span of each one's row groups (inlined into the
    callers' prange: a jitted level between them costs ~10 s of cold compile, benchmarks/kernels.py)."""
    G0 = w0.shape[0]
    G1 = w1.shape[0] if n_w > 1 else 0
    G2 = w2.shape[0] if n_w > 2 else 0
    _q32_span(w0, c * G0 // nt, (c + 1) * G0 // nt, GB, QH, QS, HAS_M, SUB, MODE, Q8, qa, yd, ys, asum, o0, pf)
    _q32_span(w1, c * G1 // nt, (c + 1) * G1 // nt, GB, QH, QS, HAS_M, SUB, MODE, Q8, qa, yd, ys, asum, o1, pf)
    _q32_span(w2, c * G2 // nt, (c + 1) * G2 // nt, GB, QH, QS, HAS_M, SUB, MODE, Q8, qa, yd, ys, asum, o2, pf)


@pjit
def gemv_many_q8_1(GB, QH, QS, HAS_M, SUB, MODE, Q8, w0, w1, w2, n_w, x, o0, o1, o2, nt, pf):
    """x (1, K) f32 -> o_i (1, N_i) = W_i x for the n_w first repacked weights w_i (ceil(N_i/8), nb*GB) of one
    Q8_1-activation format, its layout constants first (see gemv_q4_1, gemv_q5_1). nt = chunks = threads
    (numba.get_num_threads() inside a kernel would make it uncacheable); any nt gives the same bits."""
    qa, d16, yd = _q8_row_arrays(x.shape[1])
    s16 = np.empty_like(d16)
    ys = np.empty_like(yd)
    # unread (Q4_1 and Q5_1 have SUB = 0); np.zeros would be a parallel region of its own here (numba makes the
    # array expressions of a parallel function parfors): a second launch on every call
    asum = np.empty(yd.shape, np.int32)
    q8_1_row(x, 0, qa, d16, yd, s16, ys)
    for c in prange(nt):
        _chunk(c, nt, GB, QH, QS, HAS_M, SUB, MODE, Q8, w0, w1, w2, n_w, qa, yd, ys, asum, o0, o1, o2, pf)


@pjit
def gemv_many_q8_0(GB, QH, QS, HAS_M, SUB, MODE, Q8, SUMS4, w0, w1, w2, n_w, x, o0, o1, o2, nt, pf):
    """As gemv_many_q8_1 for Q8_0 activations (gemv_q4_0, gemv_q5_0, gemv_q8_0). SUMS4: the activation sums per
    4 weights scaled by -SUB (x86-order Q5_0, Q8_0), or 0 for the per-block sums (generic-order Q4_0)."""
    qa, d16, yd = _q8_row_arrays(x.shape[1])
    asum = np.empty(yd.shape, np.int32)
    asum4 = np.empty((1, x.shape[1] // 4), np.int32)
    q8_0_row(x, 0, qa, d16, yd)
    _block_sums_row(qa, asum, 1)                     # Q4_0 (generic order)
    _block_sums_row(qa, asum4, SUMS4 if SUMS4 != 0 else -128)  # x86 order: -SUB * lane sums (Q5_0, Q8_0)
    sums = asum4 if SUMS4 != 0 else asum
    for c in prange(nt):
        _chunk(c, nt, GB, QH, QS, HAS_M, SUB, MODE, Q8, w0, w1, w2, n_w, qa, yd, yd, sums, o0, o1, o2, pf)


# Each 32-weight format's layout constants (as in its format module) passed down to q32.gemv_group: (GB, QH, QS,
# HAS_M, SUB, MODE, Q8) and, for the Q8_0-activation formats, SUMS4 (gemv_many_q8_0); by entry number F (the
# order of Q32_ENTRIES below). A constant F lets numba compile the spans of the formats a model uses, not all five
# (the cold first run, issue #16).

@ijit
def q32_layout(F):
    if F == 0:  # Q4_1
        return 160 * XS, -1, 32 * XS, True, 0, q32.LANES_M, False, 0
    if F == 1:  # Q5_1
        return 192 * XS, 32 * XS, 64 * XS, True, 0, q32.LANES_M, False, 0
    if F == 2:  # Q4_0 (generic order: per-block sums)
        return 144, -1, 16, False, 8, q32.SUMI_FMA, False, 0
    if F == 3:  # Q5_0
        return 176 * XS, 16 * XS, 48 * XS, False, 16, q32.LANES, False, -16
    return 272 * XS, -1, 16 * XS, False, q32.Q8_SUB, q32.LANES, True, -q32.Q8_SUB  # Q8_0


# One entry per format: serial functions that call the parallel kernel (its prange runs as usual).

@jit
def gemv_q4_1(w0, w1, w2, n_w, x, o0, o1, o2, nt, pf):
    GB, QH, QS, HAS_M, SUB, MODE, Q8, _ = q32_layout(0)
    gemv_many_q8_1(GB, QH, QS, HAS_M, SUB, MODE, Q8, w0, w1, w2, n_w, x, o0, o1, o2, nt, pf)


@jit
def gemv_q5_1(w0, w1, w2, n_w, x, o0, o1, o2, nt, pf):
    GB, QH, QS, HAS_M, SUB, MODE, Q8, _ = q32_layout(1)
    gemv_many_q8_1(GB, QH, QS, HAS_M, SUB, MODE, Q8, w0, w1, w2, n_w, x, o0, o1, o2, nt, pf)


@jit
def gemv_q4_0(w0, w1, w2, n_w, x, o0, o1, o2, nt, pf):
    GB, QH, QS, HAS_M, SUB, MODE, Q8, SUMS4 = q32_layout(2)
    gemv_many_q8_0(GB, QH, QS, HAS_M, SUB, MODE, Q8, SUMS4, w0, w1, w2, n_w, x, o0, o1, o2, nt, pf)


@jit
def gemv_q5_0(w0, w1, w2, n_w, x, o0, o1, o2, nt, pf):
    GB, QH, QS, HAS_M, SUB, MODE, Q8, SUMS4 = q32_layout(3)
    gemv_many_q8_0(GB, QH, QS, HAS_M, SUB, MODE, Q8, SUMS4, w0, w1, w2, n_w, x, o0, o1, o2, nt, pf)


@jit
def gemv_q8_0(w0, w1, w2, n_w, x, o0, o1, o2, nt, pf):
    GB, QH, QS, HAS_M, SUB, MODE, Q8, SUMS4 = q32_layout(4)
    gemv_many_q8_0(GB, QH, QS, HAS_M, SUB, MODE, Q8, SUMS4, w0, w1, w2, n_w, x, o0, o1, o2, nt, pf)


Q32_ENTRIES = (gemv_q4_1, gemv_q5_1, gemv_q4_0, gemv_q5_0, gemv_q8_0)  # entry F of q32_layout


# The same product split into its serial and parallel halves, for a caller that is already inside a parallel
# region (kernels/layer.py's one-region decode): one thread quantizes x into the scratch, the threads meet, and
# each computes its chunk, the rows gemv_many_q8_1 / gemv_many_q8_0 give chunk c of nt.

@jit
def q32_scratch(K):
    """One row's quantized activations for q32_prepare and q32_chunk: (qa, d16, yd, s16, ys, asum, asum4)."""
    qa, d16, yd = _q8_row_arrays(K)
    return (qa, d16, yd, np.empty_like(d16), np.empty_like(yd), np.empty(yd.shape, np.int32),
            np.empty((1, K // 4), np.int32))


@ijit
def q32_prepare(F, x, s):
    """x (1, K) f32 quantized into the scratch s for entry F, as gemv_many_q8_1 (F 0, 1) / gemv_many_q8_0 do."""
    qa, d16, yd, s16, ys, asum, asum4 = s
    SUMS4 = q32_layout(F)[7]
    if F <= 1:
        q8_1_row(x, 0, qa, d16, yd, s16, ys)
    else:
        q8_0_row(x, 0, qa, d16, yd)
        _block_sums_row(qa, asum, 1)
        _block_sums_row(qa, asum4, SUMS4 if SUMS4 != 0 else -128)


@ijit
def q32_chunk(F, c, nt, w0, w1, w2, n_w, s, o0, o1, o2, pf):
    """Chunk c of nt of entry F's product of the n_w first weights, from q32_prepare's scratch s."""
    GB, QH, QS, HAS_M, SUB, MODE, Q8, SUMS4 = q32_layout(F)
    qa, d16, yd, s16, ys, asum, asum4 = s
    if F <= 1:
        _chunk(c, nt, GB, QH, QS, HAS_M, SUB, MODE, Q8, w0, w1, w2, n_w, qa, yd, ys, asum, o0, o1, o2, pf)
    else:
        _chunk(c, nt, GB, QH, QS, HAS_M, SUB, MODE, Q8, w0, w1, w2, n_w, qa, yd, yd,
               asum4 if SUMS4 != 0 else asum, o0, o1, o2, pf)


# (activation kind, format code) of matmul._FUSED -> the format's entry
Q32_GEMV = {("q8_1", 0): gemv_q4_1, ("q8_1", 1): gemv_q5_1,
            ("q8_0", 0): gemv_q4_0, ("q8_0", 1): gemv_q5_0, ("q8_0", 2): gemv_q8_0,
            ("iq4", 0): iq4.gemv_iq4_nl, ("iq4", 1): iq4.gemv_iq4_xs,  # (IQ4_NL and IQ4_XS: kernels in iq4.py)
            ("iq4", 2): fp4.gemv_mxfp4}


# ----------------------------------------------------------------------------------------- K-quants

@jit
def _prep_q8K_row(x, qs, d, bsums, qp, bs32):
    """quantize_q8_K of one row (qs, d, bsums: what the Q6_K kernel reads), then Q4_K's layout (kquants.prep_q8k):
    qp (1, K) permuted quants, bs32 (1, K/32)."""
    q8_K_row(x, 0, qs, d, bsums)
    K = x.shape[1]
    for g in range(K // 32):
        o = 32 * g
        for p in range(32):
            qp[0, o + p] = qs[0, o + PERM[p]]
        bs32[0, g] = np.int16(np.int32(bsums[0, 2 * g]) + np.int32(bsums[0, 2 * g + 1]))


@jit
def _k_rows(F, w, n0, n1, qp, qs, bsums, yd, bs32, out, pf):
    """Rows [n0, n1) of a K-quant weight, the two halves in alternation: two sequential streams, each followed by
    the hardware prefetchers and by the blocks' software prefetches pf bytes ahead (see _simd.prefetch_span).
    One stream a thread left DRAM bandwidth unused (1.1 GB of Q4_K 1536x8960 pairs, 2 threads: 19.7 -> 24.2
    GB/s; the sum probe 31 GB/s). The format's branch stays outside the loops (a helper called per row cost a
    quarter of the speed on weights in cache)."""
    h = (n1 - n0) // 2
    if F == 0:
        for i in range(h):
            out[0, n0 + i] = q4_k.row_dot_gemv(w, n0 + i, qp, 0, yd, bs32, pf)
            out[0, n0 + h + i] = q4_k.row_dot_gemv(w, n0 + h + i, qp, 0, yd, bs32, pf)
        if (n1 - n0) % 2:
            out[0, n1 - 1] = q4_k.row_dot_gemv(w, n1 - 1, qp, 0, yd, bs32, pf)
    else:
        for i in range(h):
            out[0, n0 + i] = q6_k.row_dot_x86(w, n0 + i, qs, bsums, yd, 0, pf)
            out[0, n0 + h + i] = q6_k.row_dot_x86(w, n0 + h + i, qs, bsums, yd, 0, pf)
        if (n1 - n0) % 2:
            out[0, n1 - 1] = q6_k.row_dot_x86(w, n1 - 1, qs, bsums, yd, 0, pf)


@jit
def q8K_scratch(K):
    """One row's Q8_K activations for q8K_prepare and q8K_chunk: (qs, d, bsums, qp, bs32)."""
    return (np.empty((1, K), np.int8), np.empty((1, K // QK_K), np.float32), np.empty((1, K // 16), np.int16),
            np.empty((1, K), np.int8), np.empty((1, K // 32), np.int16))


@ijit
def q8K_prepare(x, s):
    """x (1, K) f32 quantized into the scratch s (quantize_q8_K, then the Q4_K kernels' layout)."""
    qs, d, bsums, qp, bs32 = s
    _prep_q8K_row(x, qs, d, bsums, qp, bs32)


@ijit
def q8K_chunk(c, nt, f0, w0, f1, w1, f2, w2, n_w, s, o0, o1, o2, pf):
    """Chunk c of nt of the n_w first K-quant weights' products (their rows c*N/nt .. (c+1)*N/nt), from s."""
    qs, d, bsums, qp, bs32 = s
    N0 = w0.shape[0]
    N1 = w1.shape[0] if n_w > 1 else 0
    N2 = w2.shape[0] if n_w > 2 else 0
    _k_rows(f0, w0, c * N0 // nt, (c + 1) * N0 // nt, qp, qs, bsums, d, bs32, o0, pf)
    _k_rows(f1, w1, c * N1 // nt, (c + 1) * N1 // nt, qp, qs, bsums, d, bs32, o1, pf)
    _k_rows(f2, w2, c * N2 // nt, (c + 1) * N2 // nt, qp, qs, bsums, d, bs32, o2, pf)


@pjit
def gemv_many_q8_K(f0, w0, f1, w1, f2, w2, n_w, x, o0, o1, o2, nt, pf):
    """x (1, K) f32 -> o_i (1, N_i) = W_i x for the n_w first repacked K-quant weights w_i (N_i, row bytes),
    format codes f_i (Q4_K 0, Q6_K 1)."""
    s = q8K_scratch(x.shape[1])
    q8K_prepare(x, s)
    for c in prange(nt):
        q8K_chunk(c, nt, f0, w0, f1, w1, f2, w2, n_w, s, o0, o1, o2, pf)
