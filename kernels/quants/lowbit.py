"""Q1_0 and Q2_0: llama-quantize's 1-bit and 2-bit round-to-nearest formats (one fp16 scale d a block; activations
Q8_0, two or four Q8_0 blocks per weight block).

Blocks (18 bytes; weight j):
    Q1_0 (128 weights)   d fp16 at [0:2); bit j % 8 of byte 2 + j / 8: 1 = +d, 0 = -d
    Q2_0 (64 weights)    d fp16 at [0:2); bits 2(j % 4).. of byte 2 + j / 4 = code c, weight (c - 1) * d
    (ggml-quants.c dequantize_row_q1_0 / _q2_0)

Products, as llama.cpp's x86 build runs them for every batch size (no repack: x86 has none for these types; no
tinyBLAS, no tiled matmul). Per 32-weight sub-block k (its Q8_0 activation block, scale dy_k), 8 int32 lanes l_k
(lane i: weights 4i..4i+3, exact):
    Q1_0   AVX2 ggml_vec_dot_q1_0_q8_0: B = dy_0 * (float)l_0, B = fma(dy_k, (float)l_k, B) for k = 1..3;
           acc = fma(d, B, acc); out = hsum_float_8(acc)
    Q2_0   ggml_vec_dot_q2_0_q8_0_generic (x86 has no SIMD one): sumi += dy_k * (float)sum(l_k) for k = 0, 1
           from sumi = 0 (each product exact: an fp16 times an integer below 2^13); sumf = sumf + d * sumi, rounded
           twice (the build's GCC does not contract this `+=`: tests/reference lowbit.bin); out = sumf

AVX2: a sub-block's 32 signed weights (Q1_0: bit_signs of its bits; Q2_0: its codes spread by vpshufb, shifted
and masked per byte position, minus 1), then vpmaddubsw of their magnitudes with the activations signed by them
and vpmaddwd by ones. A batch runs four tokens a time per decoded sub-block. Without AVX2 the same sums run on
scalars (_mm_scalar).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, jit, pjit, work_chunks
from ..fp16 import fma_f32
from ..ggml_type import GGMLType
from .iq4 import hsum_float_8
from .iq_grid import hsum8v
from ._bits import f16_to_f32, read_u16
from ._simd import (HAS_AVX2, abs8, and8, bcast16b, bit_signs, cvt_f32, dpwssd, ffma, fmul, hsum32, load32, load_u32, lut16,
                    maddubs, or8, sign8, splat16, splat8, splatf, srl16, sub8, zero32, zerof)
from .base import BlockFormat, register_as_stored

Q1_0, Q2_0 = int(GGMLType.Q1_0), int(GGMLType.Q2_0)
TYPES = (Q1_0, Q2_0)
BYTES = 18
QK8 = 32
# Q2_0: vpshufb indices of sub-block k (byte m of the vector <- code byte 8k + m / 4), then the masks keeping the
# two bits of byte positions m % 4 == 0, 1, 2, 3 (after shifts by 0, 2, 4, 6)
Q2_SPREAD = np.array([8 * k + m // 4 for k in range(2) for m in range(32)], np.uint8)
Q2_MASKS = np.array([3 if m % 4 == i else 0 for i in range(4) for m in range(32)], np.uint8)


@ijit
def _sub_blocks(TYPE):
    """32-weight sub-blocks (Q8_0 blocks) per block."""
    return 4 if TYPE == Q1_0 else 2


@ijit
def _value(row, o, TYPE, j):
    """Weight j of the block at byte o, in units of d."""
    if TYPE == Q1_0:
        return np.int32(2 * ((row[o + 2 + j // 8] >> (j % 8)) & 1) - 1)
    return np.int32(((row[o + 2 + j // 4] >> (2 * (j % 4))) & 3) - 1)


# ----------------------------------------------------------------------------------------- dequantize

@jit
def _dequantize(raw, ids, out, TYPE):
    """out[i] = row ids[i] (Q1_0: +-d; Q2_0: (float)(c - 1) * d)."""
    QB = QK8 * _sub_blocks(TYPE)
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(out.shape[1] // QB):
            d = f16_to_f32(read_u16(row, BYTES * b))
            for j in range(QB):
                out[i, QB * b + j] = np.float32(np.float32(_value(row, BYTES * b, TYPE, j)) * d)


def _dequantizer(TYPE):
    def dequantize_rows(raw, ids, out):
        _dequantize(raw, ids, out, TYPE)

    return dequantize_rows


# ----------------------------------------------------------------------------------------- scalar kernels

@jit
def _lanes_scalar(row, o, TYPE, k, qa, t, e0, lanes):
    """lanes[i] = the 4-product sums of sub-block k with the activations qa[t, e0:e0+32]."""
    for i in range(8):
        s = np.int32(0)
        for j in range(4 * i, 4 * i + 4):
            s += _value(row, o, TYPE, QK8 * k + j) * np.int32(qa[t, e0 + j])
        lanes[i] = s


@pjit
def _mm_scalar(raw, TYPE, qa, yd, out):
    """out (T, N) from the raw rows, lane by lane (module docstring)."""
    T, K = qa.shape
    N = out.shape[1]
    SB = _sub_blocks(TYPE)
    for n in prange(N):
        row = raw[n]
        A = np.zeros(8, np.float32)
        B = np.zeros(8, np.float32)
        lanes = np.zeros(8, np.int32)
        for t in range(T):
            A[:] = 0
            sumf = np.float32(0)
            for b in range(K // (QK8 * SB)):
                o = BYTES * b
                d = f16_to_f32(read_u16(row, o))
                sumi = np.float32(0)
                for k in range(SB):
                    _lanes_scalar(row, o, TYPE, k, qa, t, QK8 * (SB * b + k), lanes)
                    dy = yd[t, SB * b + k]
                    for i in range(8):
                        B[i] = np.float32(dy * np.float32(lanes[i])) if k == 0 else fma_f32(dy, np.float32(lanes[i]),
                                                                                              B[i])
                    sumi = np.float32(sumi + np.float32(dy * np.float32(lanes.sum())))
                for i in range(8):
                    A[i] = fma_f32(d, B[i], A[i])
                sumf = np.float32(sumf + np.float32(d * sumi))
            out[t, n] = hsum_float_8(A) if TYPE == Q1_0 else sumf


# ----------------------------------------------------------------------------------------- AVX2 kernels

@ijit
def _weights32(row, o, TYPE, k):
    """Sub-block k's 32 weights in units of d (<32 x i8>)."""
    if TYPE == Q1_0:
        return bit_signs(load_u32(row, o + 2 + 4 * k))
    s = lut16(bcast16b(row, o + 2), load32(Q2_SPREAD, 32 * k))
    c = or8(or8(and8(s, load32(Q2_MASKS, 0)), and8(srl16(s, 2), load32(Q2_MASKS, 32))),
            or8(and8(srl16(s, 4), load32(Q2_MASKS, 64)), and8(srl16(s, 6), load32(Q2_MASKS, 96))))
    return sub8(c, splat8(1))


@ijit
def _lanes(TYPE, w, qa, oa):
    """The 8 lanes of the weights w with the 32 activations at byte oa (Q1_0's |w| is 1: ggml's vpmaddubsw by
    ones)."""
    return dpwssd(zero32(), maddubs(splat8(1) if TYPE == Q1_0 else abs8(w), sign8(load32(qa, oa), w)), splat16(1))


@ijit
def _step(TYPE, k, dy, lanes, B, sumi):
    """Sub-block k's float step into B (Q1_0) or sumi (Q2_0)."""
    if TYPE == Q2_0:
        return B, np.float32(sumi + np.float32(dy * np.float32(hsum32(lanes))))
    if k == 0:
        return fmul(splatf(dy), cvt_f32(lanes)), sumi
    return ffma(splatf(dy), cvt_f32(lanes), B), sumi


@ijit
def _block_step(TYPE, d, B, sumi, A, sumf):
    """A block's end: acc = fma(d, B, acc) (Q1_0), sumf = sumf + d * sumi (Q2_0)."""
    if TYPE == Q1_0:
        return ffma(splatf(d), B, A), sumf
    return A, np.float32(sumf + np.float32(d * sumi))


@ijit
def _finish(TYPE, A, sumf):
    return hsum8v(A) if TYPE == Q1_0 else sumf


@ijit
def _row_tokens(row, TYPE, qa, yd, t, u, v, x, n, out):
    """One row with the tokens t, u, v, x (repeats allowed), each decoded sub-block used for the four."""
    K = qa.shape[1]
    SB = _sub_blocks(TYPE)
    z = zerof()
    A0, A1, A2, A3 = z, z, z, z
    f0 = f1 = f2 = f3 = np.float32(0)
    for b in range(K // (QK8 * SB)):
        o = BYTES * b
        B0, B1, B2, B3 = z, z, z, z
        s0 = s1 = s2 = s3 = np.float32(0)
        for k in range(SB):
            w = _weights32(row, o, TYPE, k)
            e = QK8 * (SB * b + k)
            B0, s0 = _step(TYPE, k, yd[t, SB * b + k], _lanes(TYPE, w, qa, t * K + e), B0, s0)
            B1, s1 = _step(TYPE, k, yd[u, SB * b + k], _lanes(TYPE, w, qa, u * K + e), B1, s1)
            B2, s2 = _step(TYPE, k, yd[v, SB * b + k], _lanes(TYPE, w, qa, v * K + e), B2, s2)
            B3, s3 = _step(TYPE, k, yd[x, SB * b + k], _lanes(TYPE, w, qa, x * K + e), B3, s3)
        d = f16_to_f32(read_u16(row, o))
        A0, f0 = _block_step(TYPE, d, B0, s0, A0, f0)
        A1, f1 = _block_step(TYPE, d, B1, s1, A1, f1)
        A2, f2 = _block_step(TYPE, d, B2, s2, A2, f2)
        A3, f3 = _block_step(TYPE, d, B3, s3, A3, f3)
    out[t, n] = _finish(TYPE, A0, f0)
    out[u, n] = _finish(TYPE, A1, f1)
    out[v, n] = _finish(TYPE, A2, f2)
    out[x, n] = _finish(TYPE, A3, f3)


@ijit
def _row_one(row, TYPE, qa, yd, n, out):
    """One row with token 0."""
    K = qa.shape[1]
    SB = _sub_blocks(TYPE)
    A = zerof()
    sumf = np.float32(0)
    for b in range(K // (QK8 * SB)):
        o = BYTES * b
        B = zerof()
        sumi = np.float32(0)
        for k in range(SB):
            B, sumi = _step(TYPE, k, yd[0, SB * b + k], _lanes(TYPE, _weights32(row, o, TYPE, k), qa, QK8 * (SB * b + k)),
                            B, sumi)
        A, sumf = _block_step(TYPE, f16_to_f32(read_u16(row, o)), B, sumi, A, sumf)
    out[0, n] = _finish(TYPE, A, sumf)


def _mm_avx2_of(TYPE: int):
    """The AVX2 kernel of one type, TYPE a constant of its closure (so its branches fold: iq_grid._mm_avx2_of)."""

    @pjit
    def mm(raw, qa, yd, out, nt):
        """out (T, N) in nt chunks of rows in parallel (any nt: the same bits); a batch four tokens a time per
        row (a last group repeats its last token)."""
        T = qa.shape[0]
        N = raw.shape[0]
        for c in prange(nt):
            for n in range(c * N // nt, (c + 1) * N // nt):
                if T == 1:
                    _row_one(raw[n], TYPE, qa, yd, n, out)
                    continue
                for t in range(0, T, 4):
                    _row_tokens(raw[n], TYPE, qa, yd, t, min(t + 1, T - 1), min(t + 2, T - 1), min(t + 3, T - 1),
                                n, out)

    return mm


_MM_AVX2 = {t: _mm_avx2_of(t) for t in TYPES}


def run(TYPE: int, raw: np.ndarray, a, out: np.ndarray) -> None:
    """out (T, N) = raw's rows times the Q8_0 activations a."""
    if HAS_AVX2:
        _MM_AVX2[TYPE](raw, a.qs, a.d, out, work_chunks())
    else:
        _mm_scalar(raw, TYPE, a.qs, a.d, out)


# ----------------------------------------------------------------------------------------- formats

def _register(ggml_type: GGMLType) -> BlockFormat:
    TYPE = int(ggml_type)

    def mm(raw, a, out):
        """Every row in ggml_vec_dot's order (llama.cpp's for any batch)."""
        run(TYPE, raw, a, out)

    return register_as_stored(ggml_type, GGMLType.Q8_0, _dequantizer(TYPE), mm)


for _t in (GGMLType.Q1_0, GGMLType.Q2_0):
    _register(_t)
