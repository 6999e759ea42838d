"""The K-quants' super-block decoding and ggml's portable dot over it (the formats' own modules hold their bit
diagrams, dequantizers and fast paths; kquants.py the fast paths' shared lane order).

Element quants and sub-block scales, per format (ggml-quants.c dequantize_row_<type>):
    Q2_K  q2(e) in 0..3,      16 sub-blocks of 16, (scale, min) nibbles at 0..15, d at 80, dmin at 82
    Q3_K  q3(e) in -4..3,     16 sub-blocks of 16, q3_scale: 6-bit scales minus 32 at 96, d at 108
    Q4_K  nibble in 0..15,    8 sub-blocks of 32, scale_min_k4 at 4, d at 0, dmin at 2
    Q5_K  nibble | bit << 4,  as Q4_K, fifth bits at 16, nibbles at 48
    Q6_K  q6(e) in -32..31,   16 sub-blocks of 16, int8 scales at 192, d at 208

ggml_vec_dot_<type>_q8_K_generic (ggml-cpu/quants.c): Q3_K..Q6_K sum the products of a super-block into
aux32[element mod 8] (times the sub-block's scale), then sums[l] += (dx * dy) * aux32[l] and, with mins,
sumf -= (dmin * dy) * sum(min * bsums); at the end sumf += sums[0..7]. Q2_K sums each sub-block apart:
sumf += dall * isum - dmin * summs per super-block. gemm_scalar runs them for every (row, token): the
portable path (a CPU without AVX2, SYNAPSE_NO_SIMD=1), tested against the reference on every machine.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import jit, pjit
from ..ggml_type import BLOCK_GEOMETRY, QK_K, GGMLType
from ._bits import f16_to_f32, read_u16

_K = (GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K)
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = (int(t) for t in _K)  # the type ids the kernels branch on
Q2_K_BYTES, Q3_K_BYTES, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES = (BLOCK_GEOMETRY[t][1] for t in _K)


@jit
def q2(row, o, e):
    """2-bit quant (0..3) of element e of the Q2_K super-block at byte offset o."""
    h = e // 128
    j = (e % 128) // 32
    l = e % 32
    return np.int32((row[o + 16 + 32 * h + l] >> (2 * j)) & 3)


@jit
def q3_scale(row, o, i):
    """Q3_K's 6-bit scale i (0..15) minus 32, from the 12 bytes at row[o:o+12]."""
    if i < 8:
        lo = np.int32(row[o + i]) & np.int32(0xF)
    else:
        lo = np.int32(row[o + i - 8]) >> np.int32(4)
    hi = (np.int32(row[o + 8 + i % 4]) >> np.int32(2 * (i // 4))) & np.int32(3)
    return (lo | (hi << np.int32(4))) - np.int32(32)


@jit
def q3(row, o, e):
    """Signed 3-bit quant (-4..3) of element e of the Q3_K super-block at byte offset o."""
    h = e // 128
    j = (e % 128) // 32
    l = e % 32
    lo = np.int32((row[o + 32 + 32 * h + l] >> (2 * j)) & 3)
    if (row[o + l] >> (4 * h + j)) & 1:
        return lo
    return lo - np.int32(4)


@jit
def scale_min_k4(row, o, j):
    """get_scale_min_k4: (scale, min) of sub-block j from the 12 scale bytes at row[o:o+12] (Q4_K, Q5_K)."""
    if j < 4:
        return np.int32(row[o + j] & 63), np.int32(row[o + j + 4] & 63)
    sc = (row[o + j + 4] & 0xF) | ((row[o + j - 4] >> 6) << 4)
    mn = (row[o + j + 4] >> 4) | ((row[o + j] >> 6) << 4)
    return np.int32(sc), np.int32(mn)


@jit
def q6(row, o, e):
    """Signed 6-bit quant (-32..31) of element e (0..255) of the Q6_K super-block at byte offset o."""
    h = e // 128
    r = e % 128
    g = r // 32
    l = r % 32
    qlb = row[o + 64 * h + l + 32 * (g % 2)]
    lo = (qlb >> (4 * (g // 2))) & 0xF
    hi = (row[o + 128 + 32 * h + l] >> (2 * g)) & 3
    return np.int32(lo | (hi << 4)) - np.int32(32)


@jit
def _layout(FMT):
    """(block bytes, offset of d, sub-blocks per super-block) of Q3_K..Q6_K."""
    if FMT == Q3_K:
        return Q3_K_BYTES, 108, 16
    if FMT == Q6_K:
        return Q6_K_BYTES, 208, 16
    return (Q4_K_BYTES if FMT == Q4_K else Q5_K_BYTES), 0, 8


@jit
def _scale_min(row, o, sb, FMT):
    if FMT == Q3_K:
        return q3_scale(row, o + 96, sb), np.int32(0)
    if FMT == Q6_K:
        return np.int32(np.int8(row[o + 192 + sb])), np.int32(0)
    return scale_min_k4(row, o + 4, sb)


@jit
def _quant(row, o, e, FMT):
    if FMT == Q3_K:
        return q3(row, o, e)
    if FMT == Q6_K:
        return q6(row, o, e)
    sb = e // 32
    l = e % 32
    q = (row[o + (16 if FMT == Q4_K else 48) + 32 * (sb // 2) + l] >> (4 * (sb % 2))) & 0xF
    if FMT == Q5_K:
        q |= ((row[o + 16 + l] >> sb) & 1) << 4
    return np.int32(q)


@jit
def _dot_q2_k(row, qs, yd, bsums):
    sumf = np.float32(0.0)
    for b in range(yd.shape[0]):
        o = b * Q2_K_BYTES
        summs = np.int32(0)
        isum = np.int32(0)
        for sb in range(16):
            sc = row[o + sb]
            summs = np.int32(summs + np.int32(bsums[16 * b + sb]) * np.int32(sc >> 4))
            isuml = np.int32(0)
            for l in range(16):
                e = 16 * sb + l
                isuml = np.int32(isuml + q2(row, o, e) * np.int32(qs[b * QK_K + e]))
            isum = np.int32(isum + np.int32(sc & 0xF) * isuml)
        dall = np.float32(yd[b] * f16_to_f32(read_u16(row, o + 80)))
        dmin = np.float32(yd[b] * f16_to_f32(read_u16(row, o + 82)))
        sumf = sumf + (np.float32(dall * np.float32(isum)) - np.float32(dmin * np.float32(summs)))
    return sumf


@jit
def _dot(row, qs, yd, bsums, aux32, sums, FMT):
    """One weight row (row_bytes,) against one Q8_K activation row: qs (K,) int8, yd (K/256,), bsums (K/16,)."""
    if FMT == Q2_K:
        return _dot_q2_k(row, qs, yd, bsums)
    BB, DO, n_sub = _layout(FMT)
    n = QK_K // n_sub  # elements per sub-block
    sumf = np.float32(0.0)
    sums[:] = 0
    for b in range(yd.shape[0]):
        o = b * BB
        aux32[:] = 0
        sumi = np.int32(0)  # sum of min * bsums (the formats with mins)
        for sb in range(n_sub):
            sc, mn = _scale_min(row, o, sb, FMT)
            if n_sub == 8:
                sumi = np.int32(sumi + mn * (np.int32(bsums[16 * b + 2 * sb]) + np.int32(bsums[16 * b + 2 * sb + 1])))
            for l in range(n):
                e = n * sb + l
                aux32[l % 8] += sc * (_quant(row, o, e, FMT) * np.int32(qs[b * QK_K + e]))
        d = np.float32(f16_to_f32(read_u16(row, o + DO)) * yd[b])
        for l in range(8):
            sums[l] += np.float32(d * np.float32(aux32[l]))
        if n_sub == 8:
            dmin = np.float32(f16_to_f32(read_u16(row, o + 2)) * yd[b])
            sumf = sumf - np.float32(dmin * np.float32(sumi))
    for l in range(8):
        sumf = sumf + sums[l]
    return sumf


@pjit
def _gemm_scalar(raw, qs, yd, bsums, out, FMT):
    for n in prange(raw.shape[0]):
        aux32 = np.empty(8, np.int32)
        sums = np.empty(8, np.float32)
        for t in range(qs.shape[0]):
            out[t, n] = _dot(raw[n], qs[t], yd[t], bsums[t], aux32, sums, FMT)


def scalar_path(ggml_type: int):
    """(pack, mm) of the portable path: the rows as stored, ggml's generic dot for every (row, token)."""
    def pack(raw, K):
        return (raw,)

    def mm(packed, a, out):
        _gemm_scalar(packed[0], a.qs, a.d, a.bsums, out, int(ggml_type))
    return pack, mm
