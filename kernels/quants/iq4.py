"""IQ4_NL and IQ4_XS: 4-bit indices into ggml's non-linear table kvalues_iq4nl (ggml-common.h).

IQ4_NL block (18 bytes, 32 weights; the byte layout of Q4_0):
    [0:2)   d   fp16
    [2:18)  qs  byte j = hhhh llll:  w[j] = d * kvalues[llll],  w[j + 16] = d * kvalues[hhhh]   (j < 16)

IQ4_XS super-block (136 bytes, 256 weights = 8 sub-blocks of 32):
    [0:2)    d         fp16
    [2:4)    scales_h  u16 little endian: bits 2ib, 2ib+1 = the high 2 bits of sub-block ib's scale
    [4:8)    scales_l  byte ib/2, nibble ib%2 = the low 4 bits of sub-block ib's scale
    [8:136)  qs        sub-block ib's 16 bytes at 16ib, as IQ4_NL's: w = (d * (ls - 32)) * kvalues[nibble]

Dequantizers: ggml-quants.c dequantize_row_iq4_nl / _iq4_xs. Products, as llama.cpp's x86 build runs them (every
integer sum is exact; the float operations per output are ggml's, in its order):

    IQ4_NL, rows a multiple of 8   repacked (iq4_nl_8x8, arch/x86/repack.cpp gemv/gemm_q4_b32_8x8_q8_0_lut_avx,
                                   Q4_0's kernels with this table), one token or many:
                                       sumf = fma((float)sumi, dx * dy, sumf) per block             SUMI_FMA
    IQ4_NL, other row counts       one token: AVX2 ggml_vec_dot_iq4_nl_q8_0, two accumulators (even, odd
                                   blocks) of 8 lanes, acc = fma(dy * dx, (float)lane, acc), then
                                   hsum_float_8(even + odd), then an odd last block as s + d * (float)sumi     PAIRS
                                   batches: tinyBLAS_Q0_AVX, one accumulator of 8 lanes, hsum           LANES
    IQ4_XS (any row count)         one token: AVX2 ggml_vec_dot_iq4_xs_q8_K (no repack, no tinyBLAS):
                                   lane = sum over sub-blocks of (ls - 32) * 4-product sum (vpmaddwd),
                                   acc = fma(dx * y.d, (float)lane, acc) per super-block, hsum_float_8   XS
                                   batches below kquants.TILED_MIN_BATCH tokens: the same; from there on
                                   llama.cpp's tiled matmul (ggml-cpu/tiled, as for the K-quants): per
                                   super-block s1 = the exact sum of all its lanes,
                                   acc = fma(dx * (float)s1, y.d, acc)                              TILED

(lane j of a 32-weight block = its elements 4j..4j+3 for j < 4 and 16 + 4(j-4).. for j >= 4: the low nibbles of
qs bytes 4j..4j+3, then the high ones; hsum_float_8 = ((a4 + a0) + (a6 + a2)) + ((a5 + a1) + (a7 + a3)).)

Fast path (AVX2): rows interleaved in groups of 8 at load, so that a 32-byte vector holds 4 bytes of each row and
one vpshufb + sign-trick vpmaddubsw/vpmaddwd (ggml's mul_sum_i8_pairs; exact: |pair sums| <= 2 * 127 * 127) gives
one lane of the 8 rows (int32 lane r = row r):
    IQ4_NL group-block (144 bytes): [0:16) the 8 rows' d; [16:144) chunk c = qs bytes 4c..4c+3 of rows 0..7
        (MXFP4's, kernels/quants/fp4.py, the same with its E8M0 scales as bf16: the kernels' BF16 argument, None
        for fp16 scales, so that each kernel is compiled for its kind, _simd.load8_scales)
    IQ4_XS group-super-block (1296 bytes): [0:16) the 8 rows' d; [16:272) sub-block ib's scales ls - 32 at
        16 + 32ib, row r's as two int16 at 4r (vpmaddwd's operand); [272:1296) sub-block ib's 4 chunks at
        272 + 128ib (as IQ4_NL's)
Without AVX2 the same operations run on scalars, lane by lane (_mm_scalar).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, jit, pjit, work_chunks
from ..fp16 import fma_f32
from ..ggml_type import BLOCK_GEOMETRY, QK_K, GGMLType
from . import q32
from .kquants import TILED_MIN_BATCH
from ._bits import e8m0_to_f32_half, f16_to_f32, read_u16
from ._simd import (HAS_AVX2, abs8, add32, and8, bcast16b, bcast4, cvt_f32, dpwssd, fadd, ffma, fmul, lanef, load16x16,
                    load32, load8_f16, load8_scales, load8xf32, lut16, maddubs, sign8, splat16, splat8, splatf, srl16,
                    store32, store8xf32, zero32, zerof)
from .base import BlockFormat, empty_aligned, llama_repacks, register, run_repack
from .vec_dot_type import q8_0_row, q8_K_row

# ggml-common.h kvalues_iq4nl: the 16 levels of IQ4_NL and IQ4_XS (also the IQ4_NL KV cache's, kernels/kv_cache.py)
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)

NL_BYTES = BLOCK_GEOMETRY[GGMLType.IQ4_NL][1]  # 18
MXFP4_BYTES = BLOCK_GEOMETRY[GGMLType.MXFP4][1]  # 17 (the same kernels, kernels/quants/fp4.py)
XS_BYTES = BLOCK_GEOMETRY[GGMLType.IQ4_XS][1]  # 136
QK = 32
G = 8  # rows per interleaved group
NL_GB = 144  # bytes per IQ4_NL group-block
XS_GB = 1296  # bytes per IQ4_XS group-super-block
XS_Q = 272  # offset of the quants in an IQ4_XS group-super-block

# float sequence per output (module docstring)
SUMI_FMA = q32.SUMI_FMA
LANES = q32.LANES
PAIRS = 7
XS = 8
TILED = 9


# ----------------------------------------------------------------------------------------- dequantize

@jit
def xs_scale(row, o, ib):
    """Sub-block ib's scale ls - 32 of the IQ4_XS super-block at byte o of row."""
    ls = ((row[o + 4 + ib // 2] >> (4 * (ib % 2))) & 15) | (((read_u16(row, o + 2) >> (2 * ib)) & 3) << 4)
    return np.int32(ls) - 32


@jit
def _dequantize32(row, o, dl, out, i, e):
    """out[i, e:e+32] = the 32 weights of the 16 qs bytes at row[o:], scale dl."""
    for j in range(16):
        q = row[o + j]
        out[i, e + j] = np.float32(dl * np.float32(KVALUES_IQ4NL[q & 15]))
        out[i, e + j + 16] = np.float32(dl * np.float32(KVALUES_IQ4NL[q >> 4]))


@jit
def dequantize_nl(raw, ids, out):
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(out.shape[1] // QK):
            _dequantize32(row, b * NL_BYTES + 2, f16_to_f32(read_u16(row, b * NL_BYTES)), out, i, QK * b)


@jit
def dequantize_xs(raw, ids, out):
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(out.shape[1] // QK_K):
            o = b * XS_BYTES
            d = f16_to_f32(read_u16(row, o))
            for ib in range(8):
                dl = np.float32(d * np.float32(xs_scale(row, o, ib)))
                _dequantize32(row, o + 8 + 16 * ib, dl, out, i, QK_K * b + QK * ib)


# ----------------------------------------------------------------------------------------- scalar kernels

@jit
def hsum_float_8(A):
    """ggml's hsum_float_8 of the 8 floats A[0..7] (also the grid i-quants')."""
    return np.float32(np.float32(np.float32(A[4] + A[0]) + np.float32(A[6] + A[2]))
                      + np.float32(np.float32(A[5] + A[1]) + np.float32(A[7] + A[3])))


@jit
def _lanes_scalar(row, o, qa, t, e0, lut, L):
    """L[j] = lane j's 4-product sum of the 32 quants (16 qs bytes at o, levels lut) with activations
    qa[t, e0:e0+32]."""
    for j in range(8):
        s = 0
        for k in range(4):
            e = 4 * j + k
            q = row[o + e % 16]
            v = lut[q & 15] if e < 16 else lut[q >> 4]
            s += np.int32(v) * np.int32(qa[t, e0 + e])
        L[j] = s


@jit
def _nl_block(row, b, E8M0):
    """(scale, qs offset) of block b of a raw row: IQ4_NL's fp16 d, or MXFP4's E8M0 exponent (kernels/quants/fp4.py)."""
    if E8M0:
        return e8m0_to_f32_half(row[b * MXFP4_BYTES]), b * MXFP4_BYTES + 1
    return f16_to_f32(read_u16(row, b * NL_BYTES)), b * NL_BYTES + 2


@pjit
def _mm_scalar(raw, MODE, qa, yd, lut, E8M0, out):
    """out (T, N) in the float sequence MODE (module docstring) from the raw rows, lane by lane (E8M0: MXFP4
    blocks)."""
    T, K = qa.shape
    N = out.shape[1]
    for n in prange(N):
        row = raw[n]
        L = np.zeros(8, np.int32)
        A = np.zeros(8, np.float32)
        B = np.zeros(8, np.float32)
        acc = np.zeros(8, np.int32)
        for t in range(T):
            A[:] = 0
            B[:] = 0
            s = np.float32(0)
            if MODE == XS or MODE == TILED:
                for sb in range(K // QK_K):
                    o = sb * XS_BYTES
                    acc[:] = 0
                    for ib in range(8):
                        _lanes_scalar(row, o + 8 + 16 * ib, qa, t, QK_K * sb + QK * ib, lut, L)
                        ls = xs_scale(row, o, ib)
                        for j in range(8):
                            acc[j] += ls * L[j]
                    dx = f16_to_f32(read_u16(row, o))
                    if MODE == TILED:
                        s = fma_f32(np.float32(dx * np.float32(acc.sum())), yd[t, sb], s)
                        continue
                    d = np.float32(dx * yd[t, sb])
                    for j in range(8):
                        A[j] = fma_f32(d, np.float32(acc[j]), A[j])
                out[t, n] = s if MODE == TILED else hsum_float_8(A)
                continue
            nb = K // QK
            for b in range(nb):
                dx, oq = _nl_block(row, b, E8M0)
                _lanes_scalar(row, oq, qa, t, QK * b, lut, L)
                if MODE == SUMI_FMA:
                    s = fma_f32(np.float32(L.sum()), np.float32(dx * yd[t, b]), s)
                elif MODE == LANES or b < nb - nb % 2:  # PAIRS: the blocks of the pairs
                    d = np.float32(yd[t, b] * dx)
                    for j in range(8):
                        if MODE == PAIRS and b % 2 == 1:
                            B[j] = fma_f32(d, np.float32(L[j]), B[j])
                        else:
                            A[j] = fma_f32(d, np.float32(L[j]), A[j])
            if MODE == SUMI_FMA:
                out[t, n] = s
                continue
            if MODE == PAIRS:
                for j in range(8):
                    A[j] = np.float32(A[j] + B[j])
            s = hsum_float_8(A)
            if MODE == PAIRS and nb % 2 == 1:  # the last block: sumf += d * sumi, not fused
                dx, oq = _nl_block(row, nb - 1, E8M0)
                _lanes_scalar(row, oq, qa, t, QK * (nb - 1), lut, L)
                s = np.float32(s + np.float32(np.float32(yd[t, nb - 1] * dx) * np.float32(L.sum())))
            out[t, n] = s


# ----------------------------------------------------------------------------------------- AVX2 kernels
# A lane of the 8 rows: q = kvalues[nibbles] (vpshufb), then ggml's mul_sum_i8_pairs with q's sign moved onto the
# activations, vpmaddwd against ones (IQ4_NL) or against the rows' sub-block scales (IQ4_XS, as ggml's AVX2 dot).
# A batch decodes each group's quants (q and |q|) once into a buffer and runs its tokens over them.

@ijit
def _decode(w, o, j, lut, m0f):
    """Lane j's quants of the 8 rows of the group-block whose chunks start at o: <32 x i8>, 4 per row."""
    c = load32(w, o + 32 * (j % 4))
    return lut16(lut, and8(c, m0f) if j < 4 else and8(srl16(c, 4), m0f))


@ijit
def _dot(acc, q, qabs, qa, oa, scales16):
    """acc + lane sums of q x activations (4 each), times scales16 (vpmaddwd; ones for IQ4_NL)."""
    return dpwssd(acc, maddubs(qabs, sign8(bcast4(qa, oa), q)), scales16)


@ijit
def _lane(w, o, j, qa, oa, lut, m0f, scales16):
    """Lane j of the group-block at o with the activations at oa (oa: the block's first)."""
    q = _decode(w, o, j, lut, m0f)
    return _dot(zero32(), q, abs8(q), qa, oa + 4 * j, scales16)


@ijit
def _sumi(w, o, qa, oa, lut, m0f, ones):
    """The 8 rows' block sums: all 8 lanes in one int32 chain."""
    acc = zero32()
    for j in range(8):
        q = _decode(w, o, j, lut, m0f)
        acc = _dot(acc, q, abs8(q), qa, oa + 4 * j, ones)
    return acc


@ijit
def _hsum8v(A0, A1, A2, A3, A4, A5, A6, A7):
    """hsum_float_8 lane-wise over the 8 rows."""
    return fadd(fadd(fadd(A4, A0), fadd(A6, A2)), fadd(fadd(A5, A1), fadd(A7, A3)))


@ijit
def _fma_lanes(d, w, o, qa, oa, lut, m0f, ones, A):
    """(A[j] = fma(d, (float)lane j, A[j]) for j < 8) of the group-block whose chunks start at o."""
    return (ffma(d, cvt_f32(_lane(w, o, 0, qa, oa, lut, m0f, ones)), A[0]),
            ffma(d, cvt_f32(_lane(w, o, 1, qa, oa, lut, m0f, ones)), A[1]),
            ffma(d, cvt_f32(_lane(w, o, 2, qa, oa, lut, m0f, ones)), A[2]),
            ffma(d, cvt_f32(_lane(w, o, 3, qa, oa, lut, m0f, ones)), A[3]),
            ffma(d, cvt_f32(_lane(w, o, 4, qa, oa, lut, m0f, ones)), A[4]),
            ffma(d, cvt_f32(_lane(w, o, 5, qa, oa, lut, m0f, ones)), A[5]),
            ffma(d, cvt_f32(_lane(w, o, 6, qa, oa, lut, m0f, ones)), A[6]),
            ffma(d, cvt_f32(_lane(w, o, 7, qa, oa, lut, m0f, ones)), A[7]))


@jit
def _rows_nl_lanes(w, go, MODE, qa, t, yd, lut, BF16):
    """The 8 rows of the IQ4_NL group at byte go with token t in the lane modes (LANES: tinyBLAS; PAIRS: vec_dot's
    even and odd accumulators and its odd last block): <8 x float>, lane r = row r. (Weights llama.cpp does not
    repack: token by token.)"""
    K = qa.shape[1]
    nb = K // QK
    m0f = splat8(15)
    ones = splat16(1)
    z = zerof()
    A = (z, z, z, z, z, z, z, z)
    B = A
    for b in range(nb - nb % 2 if MODE == PAIRS else nb):
        o = go + b * NL_GB
        d = fmul(splatf(yd[t, b]), load8_scales(w, o, BF16))
        if MODE == PAIRS and b % 2 == 1:
            B = _fma_lanes(d, w, o + 16, qa, t * K + QK * b, lut, m0f, ones, B)
        else:
            A = _fma_lanes(d, w, o + 16, qa, t * K + QK * b, lut, m0f, ones, A)
    if MODE == LANES:
        return _hsum8v(A[0], A[1], A[2], A[3], A[4], A[5], A[6], A[7])
    s = _hsum8v(fadd(A[0], B[0]), fadd(A[1], B[1]), fadd(A[2], B[2]), fadd(A[3], B[3]), fadd(A[4], B[4]),
                fadd(A[5], B[5]), fadd(A[6], B[6]), fadd(A[7], B[7]))
    if nb % 2 == 1:  # vec_dot's odd last block: sumf += d * sumi, not fused
        o = go + (nb - 1) * NL_GB
        d = fmul(splatf(yd[t, nb - 1]), load8_scales(w, o, BF16))
        s = fadd(s, fmul(d, cvt_f32(_sumi(w, o + 16, qa, t * K + QK * (nb - 1), lut, m0f, ones))))
    return s


@ijit
def _xs_lane(w, o, j, qa, oa, lut, m0f):
    """Lane j of the 8 rows over the super-block at o: sum over sub-blocks ib of (ls - 32) * lane j of ib."""
    acc = zero32()
    for ib in range(8):
        acc = add32(acc, _lane(w, o + XS_Q + 128 * ib, j, qa, oa + QK * ib, lut, m0f, load16x16(w, o + 16 + 32 * ib)))
    return acc


@ijit
def _rows_sumi_fma(w, go, qa, t, yd, lut, BF16):
    """The 8 rows of the repacked IQ4_NL group at byte go with token t: sumf = fma((float)sumi, dx * dy, sumf)."""
    K = qa.shape[1]
    m0f = splat8(15)
    ones = splat16(1)
    s = zerof()
    for b in range(K // QK):
        o = go + b * NL_GB
        s = ffma(cvt_f32(_sumi(w, o + 16, qa, t * K + QK * b, lut, m0f, ones)), fmul(load8_scales(w, o, BF16),
                                                                                    splatf(yd[t, b])), s)
    return s


@ijit
def _rows_xs(w, go, MODE, qa, t, yd, lut):
    """The 8 rows of the IQ4_XS group at byte go with token t (XS: vec_dot; TILED: the tiled matmul)."""
    K = qa.shape[1]
    m0f = splat8(15)
    z = zerof()
    A0, A1, A2, A3, A4, A5, A6, A7 = z, z, z, z, z, z, z, z
    s = z
    for sb in range(K // QK_K):
        o = go + sb * XS_GB
        oa = t * K + QK_K * sb
        L0 = _xs_lane(w, o, 0, qa, oa, lut, m0f)
        L1 = _xs_lane(w, o, 1, qa, oa, lut, m0f)
        L2 = _xs_lane(w, o, 2, qa, oa, lut, m0f)
        L3 = _xs_lane(w, o, 3, qa, oa, lut, m0f)
        L4 = _xs_lane(w, o, 4, qa, oa, lut, m0f)
        L5 = _xs_lane(w, o, 5, qa, oa, lut, m0f)
        L6 = _xs_lane(w, o, 6, qa, oa, lut, m0f)
        L7 = _xs_lane(w, o, 7, qa, oa, lut, m0f)
        if MODE == TILED:
            s1 = add32(add32(add32(L0, L1), add32(L2, L3)), add32(add32(L4, L5), add32(L6, L7)))
            s = ffma(fmul(load8_f16(w, o), cvt_f32(s1)), splatf(yd[t, sb]), s)
        else:
            d = fmul(load8_f16(w, o), splatf(yd[t, sb]))
            A0 = ffma(d, cvt_f32(L0), A0)
            A1 = ffma(d, cvt_f32(L1), A1)
            A2 = ffma(d, cvt_f32(L2), A2)
            A3 = ffma(d, cvt_f32(L3), A3)
            A4 = ffma(d, cvt_f32(L4), A4)
            A5 = ffma(d, cvt_f32(L5), A5)
            A6 = ffma(d, cvt_f32(L6), A6)
            A7 = ffma(d, cvt_f32(L7), A7)
    return s if MODE == TILED else _hsum8v(A0, A1, A2, A3, A4, A5, A6, A7)


@ijit
def _store8(out, t, g, s):
    """out[t, 8g:8g+8] = s (lane r = row 8g + r), as far as the matrix has rows."""
    N = out.shape[1]
    if G * g + G <= N:
        store8xf32(out, t * out.strides[0] + 4 * G * g, s)
    else:
        for r in range(N - G * g):
            out[t, G * g + r] = lanef(s, r)


# --- batches: a work item = one 8-row group x a pass of tokens, its quants decoded once

@jit
def _decode_group(w, go, n_blocks, GB, QOFF, lut, dq):
    """The group's quants into dq (n_blocks * 512) bytes: block b lane j's q at 512b + 32j, |q| at 512b + 256 + 32j
    (an IQ4_XS super-block is 8 such blocks, the sub-blocks' chunks at QOFF + 128ib)."""
    m0f = splat8(15)
    for b in range(n_blocks):
        o = go + (b // 8) * GB + QOFF + 128 * (b % 8) if GB == XS_GB else go + b * GB + QOFF
        for j in range(8):
            q = _decode(w, o, j, lut, m0f)
            store32(dq, 512 * b + 32 * j, q)
            store32(dq, 512 * b + 256 + 32 * j, abs8(q))


@ijit
def _dot_pair(acc_a, acc_b, dq, p, j, qa, oa, ob, scales16):
    """_dot of the decoded lane j of the block at p for two tokens (activations at oa, ob): q and |q| loaded once."""
    q = load32(dq, p + 32 * j)
    qabs = load32(dq, p + 256 + 32 * j)
    return (dpwssd(acc_a, maddubs(qabs, sign8(bcast4(qa, oa + 4 * j), q)), scales16),
            dpwssd(acc_b, maddubs(qabs, sign8(bcast4(qa, ob + 4 * j), q)), scales16))


@jit
def _gemm_sumi_fma(w, g, t0, t1, qa, yd, BF16, dq, out):
    """Repacked IQ4_NL, tokens t0..t1-1 of group g over its decoded quants, two at a time (u = t: a last one)."""
    K = qa.shape[1]
    go = g * w.shape[1]
    ones = splat16(1)
    for t in range(t0, t1, 2):
        u = min(t + 1, t1 - 1)
        sa = zerof()
        sb = zerof()
        for b in range(K // QK):
            p = 512 * b
            acc_a = zero32()
            acc_b = zero32()
            for j in range(8):
                acc_a, acc_b = _dot_pair(acc_a, acc_b, dq, p, j, qa, t * K + QK * b, u * K + QK * b, ones)
            dx = load8_scales(w, go + b * NL_GB, BF16)
            sa = ffma(cvt_f32(acc_a), fmul(dx, splatf(yd[t, b])), sa)
            sb = ffma(cvt_f32(acc_b), fmul(dx, splatf(yd[u, b])), sb)
        _store8(out, t, g, sa)
        _store8(out, u, g, sb)


@ijit
def _xs_lane_pair(w, o, dq, p, j, qa, oa, ob):
    """_xs_lane over the decoded super-block at p for two tokens."""
    acc_a = zero32()
    acc_b = zero32()
    for ib in range(8):
        acc_a, acc_b = _dot_pair(acc_a, acc_b, dq, p + 512 * ib, j, qa, oa + QK * ib, ob + QK * ib,
                                 load16x16(w, o + 16 + 32 * ib))
    return acc_a, acc_b


@jit
def _gemm_xs(w, g, t0, t1, MODE, qa, yd, dq, out):
    """IQ4_XS, tokens t0..t1-1 of group g over its decoded quants, two at a time, in vec_dot's order (XS: the 8
    lanes' float accumulators of both tokens in acc) or the tiled matmul's (TILED)."""
    K = qa.shape[1]
    go = g * w.shape[1]
    acc = np.empty(2 * 8 * G, np.float32)  # (token, lane j, row)
    for t in range(t0, t1, 2):
        u = min(t + 1, t1 - 1)
        acc[:] = 0
        sa = zerof()
        sb = zerof()
        for s in range(K // QK_K):
            o = go + s * XS_GB
            p = 4096 * s
            oa = t * K + QK_K * s
            ob = u * K + QK_K * s
            dx = load8_f16(w, o)
            if MODE == TILED:
                s1a = zero32()
                s1b = zero32()
                for j in range(8):
                    la, lb = _xs_lane_pair(w, o, dq, p, j, qa, oa, ob)
                    s1a = add32(s1a, la)
                    s1b = add32(s1b, lb)
                sa = ffma(fmul(dx, cvt_f32(s1a)), splatf(yd[t, s]), sa)
                sb = ffma(fmul(dx, cvt_f32(s1b)), splatf(yd[u, s]), sb)
                continue
            da = fmul(dx, splatf(yd[t, s]))
            db = fmul(dx, splatf(yd[u, s]))
            for j in range(8):
                la, lb = _xs_lane_pair(w, o, dq, p, j, qa, oa, ob)
                store8xf32(acc, 32 * j, ffma(da, cvt_f32(la), load8xf32(acc, 32 * j)))
                store8xf32(acc, 256 + 32 * j, ffma(db, cvt_f32(lb), load8xf32(acc, 256 + 32 * j)))
        if MODE != TILED:
            sa = _hsum8v(load8xf32(acc, 0), load8xf32(acc, 32), load8xf32(acc, 64), load8xf32(acc, 96),
                         load8xf32(acc, 128), load8xf32(acc, 160), load8xf32(acc, 192), load8xf32(acc, 224))
            sb = _hsum8v(load8xf32(acc, 256), load8xf32(acc, 288), load8xf32(acc, 320), load8xf32(acc, 352),
                         load8xf32(acc, 384), load8xf32(acc, 416), load8xf32(acc, 448), load8xf32(acc, 480))
        _store8(out, t, g, sa)
        _store8(out, u, g, sb)


@pjit
def _mm_avx2(w, MODE, qa, yd, table, BF16, out, nt):
    """out (T, N) in the float sequence MODE. Work items of one 8-row group x one pass of tokens whose activations
    stay in L2 (q32.pass_tokens), split in nt chunks in parallel; a chunk decodes each item's quants into its one
    buffer (a buffer an item cost a page-faulting mmap each time at K = 8960)."""
    T, K = qa.shape
    lut = bcast16b(table, 0)
    tp = q32.pass_tokens(T, K)
    n_pass = (T + tp - 1) // tp
    n_items = w.shape[0] * n_pass
    for c in prange(nt):
        dq = np.empty(K // QK * 512, np.uint8)
        for item in range(c * n_items // nt, (c + 1) * n_items // nt):
            g = item // n_pass
            t0 = (item % n_pass) * tp
            t1 = min(T, t0 + tp)
            go = g * w.shape[1]
            if MODE == LANES or MODE == PAIRS:  # weights llama.cpp does not repack: token by token
                for t in range(t0, t1):
                    _store8(out, t, g, _rows_nl_lanes(w, go, MODE, qa, t, yd, lut, BF16))
            elif t1 - t0 == 1:  # one token: straight from the weights
                _store8(out, t0, g, _rows_xs(w, go, MODE, qa, t0, yd, lut) if MODE >= XS
                        else _rows_sumi_fma(w, go, qa, t0, yd, lut, BF16))
            elif MODE >= XS:
                _decode_group(w, go, K // QK, XS_GB, XS_Q, lut, dq)
                _gemm_xs(w, g, t0, t1, MODE, qa, yd, dq, out)
            else:
                _decode_group(w, go, K // QK, NL_GB, 16, lut, dq)
                _gemm_sumi_fma(w, g, t0, t1, qa, yd, BF16, dq, out)


# --- one token, fused: up to 3 weights sharing the activations (kernels/quants/gemv1.py's entries)

@jit
def _span(w, g0, g1, MODE, qa, yd, lut, BF16, out):
    """Groups [g0, g1) of one token, the two halves in alternation (two sequential streams, as gemv1's spans)."""
    h = (g1 - g0) // 2
    for i in range(g0, g0 + h):
        if MODE >= XS:
            _store8(out, 0, i, _rows_xs(w, i * w.shape[1], XS, qa, 0, yd, lut))
            _store8(out, 0, i + h, _rows_xs(w, (i + h) * w.shape[1], XS, qa, 0, yd, lut))
        else:
            _store8(out, 0, i, _rows_sumi_fma(w, i * w.shape[1], qa, 0, yd, lut, BF16))
            _store8(out, 0, i + h, _rows_sumi_fma(w, (i + h) * w.shape[1], qa, 0, yd, lut, BF16))
    if (g1 - g0) % 2:
        if MODE >= XS:
            _store8(out, 0, g1 - 1, _rows_xs(w, (g1 - 1) * w.shape[1], XS, qa, 0, yd, lut))
        else:
            _store8(out, 0, g1 - 1, _rows_sumi_fma(w, (g1 - 1) * w.shape[1], qa, 0, yd, lut, BF16))


@pjit
def _gemv_many(MODE, w0, w1, w2, n_w, x, o0, o1, o2, nt, table, BF16):
    """x (1, K) f32 -> o_i (1, N_i) = W_i x for the n_w first weights (one activation conversion, one parallel
    region: kernels/quants/gemv1.py's fused one-token products): IQ4_NL weights llama.cpp repacks (SUMI_FMA) or
    IQ4_XS (XS). Chunk c of nt takes its share of each weight's 8-row groups; any nt gives the same bits."""
    K = x.shape[1]
    if MODE >= XS:
        qa = np.empty((1, K), np.int8)
        yd = np.empty((1, K // QK_K), np.float32)
        bsums = np.empty((1, K // 16), np.int16)
        q8_K_row(x, 0, qa, yd, bsums)
    else:
        qa = np.empty((1, K), np.int8)
        d16 = np.empty((1, K // QK), np.uint16)
        yd = np.empty((1, K // QK), np.float32)
        q8_0_row(x, 0, qa, d16, yd)
    lut = bcast16b(table, 0)
    G0 = w0.shape[0]
    G1 = w1.shape[0] if n_w > 1 else 0
    G2 = w2.shape[0] if n_w > 2 else 0
    for c in prange(nt):
        _span(w0, c * G0 // nt, (c + 1) * G0 // nt, MODE, qa, yd, lut, BF16, o0)
        _span(w1, c * G1 // nt, (c + 1) * G1 // nt, MODE, qa, yd, lut, BF16, o1)
        _span(w2, c * G2 // nt, (c + 1) * G2 // nt, MODE, qa, yd, lut, BF16, o2)


@jit
def gemv_iq4_nl(w0, w1, w2, n_w, x, o0, o1, o2, nt, pf):
    """The fused one-token product of repacked IQ4_NL weights (gemv1's entry signature; pf unused)."""
    _gemv_many(SUMI_FMA, w0, w1, w2, n_w, x, o0, o1, o2, nt, KVALUES_IQ4NL, None)


@jit
def gemv_iq4_xs(w0, w1, w2, n_w, x, o0, o1, o2, nt, pf):
    """The same for IQ4_XS weights."""
    _gemv_many(XS, w0, w1, w2, n_w, x, o0, o1, o2, nt, KVALUES_IQ4NL, None)


@pjit
def _repack_xs(raw, out):
    """raw (N, nb*136) -> out (ceil(N/8), nb*1296) in the layout above; rows past N repeat row N-1."""
    N = raw.shape[0]
    nb = raw.shape[1] // XS_BYTES
    for g in prange(out.shape[0]):
        for r in range(G):
            n = min(G * g + r, N - 1)
            row = raw[n]
            for b in range(nb):
                o = b * XS_BYTES
                q = b * XS_GB
                out[g, q + 2 * r] = row[o]
                out[g, q + 2 * r + 1] = row[o + 1]
                for ib in range(8):
                    ls = xs_scale(row, o, ib)
                    p = q + 16 + 32 * ib + 4 * r
                    for k in range(4):  # the same int16 twice, little endian
                        out[g, p + k] = np.uint8((ls >> (8 * (k % 2))) & 255)
                    for c in range(4):
                        for k in range(4):
                            out[g, q + XS_Q + 128 * ib + 32 * c + 4 * r + k] = row[o + 8 + 16 * ib + 4 * c + k]


# ----------------------------------------------------------------------------------------- formats

_NL_RAW = (NL_BYTES, 2, -1, -1)  # q32.pack's raw layout: block bytes, qs offset, no fifth bits, no minimum


def _pack_nl(raw, K):
    """(interleaved rows or the raw rows, single-token mode, batch mode of llama.cpp)."""
    repacked = llama_repacks(GGMLType.IQ4_NL, raw.shape[0])
    modes = (SUMI_FMA, SUMI_FMA) if repacked else (PAIRS, LANES)
    if not HAS_AVX2:
        return (raw,) + modes
    return q32.pack(raw, *_NL_RAW, NL_GB, -1, 16, False) + modes


def _pack_xs(raw, K):
    if not HAS_AVX2:
        return (raw, XS, TILED)
    out = empty_aligned(((raw.shape[0] + G - 1) // G, raw.shape[1] // XS_BYTES * XS_GB), np.uint8)
    run_repack(_repack_xs, raw, out)
    return (out, XS, TILED)


def _run(packed, a, out, mode):
    if HAS_AVX2:
        _mm_avx2(packed[0], mode, a.qs, a.d, KVALUES_IQ4NL, None, out, work_chunks())
    else:
        _mm_scalar(packed[0], mode, a.qs, a.d, KVALUES_IQ4NL, False, out)


def _mm(packed, a, out):
    """Every row in the single-token order (gemv, and the default batch-invariant gemm)."""
    _run(packed, a, out, packed[1])


def _mm_llama(packed, a, out):
    """A batch in llama.cpp's batch order (tinyBLAS for IQ4_NL weights it does not repack, the tiled matmul for
    IQ4_XS from TILED_MIN_BATCH tokens)."""
    tiled_too_small = packed[2] == TILED and a.qs.shape[0] < TILED_MIN_BATCH
    _run(packed, a, out, packed[1] if tiled_too_small else packed[2])


FORMAT_NL = register(BlockFormat(GGMLType.IQ4_NL, QK, NL_BYTES, GGMLType.Q8_0, dequantize_nl, _pack_nl, _mm, _mm,
                                 _mm_llama))
FORMAT_XS = register(BlockFormat(GGMLType.IQ4_XS, QK_K, XS_BYTES, GGMLType.Q8_K, dequantize_xs, _pack_xs, _mm, _mm,
                                 _mm_llama))
