"""Q5_0: 32 weights per block, 5-bit quants with offset 16 and one fp16 scale (ggml-common.h block_q5_0).

Block (22 bytes):
    [0:2)   d   fp16
    [2:6)   qh  uint32 little endian: bit j = 5th bit of weight j (j in 0..31)
    [6:22)  qs  16 bytes: byte j = hhhh llll
                 w[j]      = ((llll | bit j      << 4) - 16) * d
                 w[j + 16] = ((hhhh | bit (j+16) << 4) - 16) * d

Dequantizer: dequantize_row_q5_0. Dot: ggml_vec_dot_q5_0_q8_0_generic: sumf += (dx*dy) * sumi.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import jit, pjit
from ..ggml_type import GGMLType
from ._bits import f16_to_f32, read_u16, read_u32
from . import q32
from ._simd import HAS_AVX2
from .base import BlockFormat, register

QK = 32
BLOCK_BYTES = 22


@jit
def dequantize_rows(raw, ids, out):
    K = out.shape[1]
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(K // QK):
            o = b * BLOCK_BYTES
            d = f16_to_f32(read_u16(row, o))
            qh = read_u32(row, o + 2)
            for j in range(QK // 2):
                q = row[o + 6 + j]
                h0 = np.int32((qh >> np.uint32(j)) & np.uint32(1)) << 4
                h1 = np.int32((qh >> np.uint32(j + 16)) & np.uint32(1)) << 4
                out[i, b * QK + j] = np.float32((np.int32(q & 0xF) | h0) - 16) * d
                out[i, b * QK + j + 16] = np.float32((np.int32(q >> 4) | h1) - 16) * d


@jit
def _dot(row, qs, yd):
    sumf = np.float32(0.0)
    for b in range(yd.shape[0]):
        o = b * BLOCK_BYTES
        qh = read_u32(row, o + 2)
        sumi = np.int32(0)
        for j in range(QK // 2):
            q = row[o + 6 + j]
            h0 = np.int32((qh >> np.uint32(j)) & np.uint32(1)) << 4
            h1 = np.int32((qh >> np.uint32(j + 16)) & np.uint32(1)) << 4
            sumi = np.int32(sumi + ((np.int32(q & 0xF) | h0) - np.int32(16)) * np.int32(qs[b * QK + j]))
            sumi = np.int32(sumi + ((np.int32(q >> 4) | h1) - np.int32(16)) * np.int32(qs[b * QK + j + 16]))
        dx = f16_to_f32(read_u16(row, o))
        sumf = sumf + np.float32(dx * yd[b]) * np.float32(sumi)
    return sumf


@pjit
def _gemm_scalar(raw, qs, yd, out):
    N = raw.shape[0]
    T = qs.shape[0]
    for n in prange(N):
        for t in range(T):
            out[t, n] = _dot(raw[n], qs[t], yd[t])


def _pack_raw(raw, K):
    return (raw,)


def _mm_scalar(packed, a, out):
    _gemm_scalar(packed[0], a.qs, a.d, out)


# fast path: q32 family kernels on rows repacked in groups of 8 (layout and constants in q32.py):
# GB=176 bytes per group-block, QH=16, QS=48, HAS_M=False, SUB=16, MODE=LANES (x86 order), Q8=False

XS = q32.XS  # x86 order: groups of q32.XG rows, layout constants of 8-row groups times XS


def _pack_fast(raw, K):
    return q32.pack(raw, 22, 6, 2, -1, 176 * XS, 16 * XS, 48 * XS, False, q32.XG)


@pjit
def _gemv(w, qa, yd, ys, asum, out):
    for g in prange(w.shape[0]):
        q32.gemv_group(w, g, 176 * XS, 16 * XS, 48 * XS, False, 16, q32.LANES, False, qa, yd, ys, asum, out, q32.GEMV_PF)


@pjit
def _gemm(w, qa, yd, ys, asum, out):
    for tile in prange(q32.n_tiles(out.shape[1], qa.shape[0])):
        q32.gemm_tile(w, tile, 176 * XS, 16 * XS, 48 * XS, False, 16, q32.LANES, False, qa, yd, ys, asum, out)


def _mm_fast(packed, a, out):
    q32.matmul_fast(_gemv, _gemm, 16, packed, a, out, lanes=True)


_mm, _pack = (_mm_fast, _pack_fast) if HAS_AVX2 else (_mm_scalar, _pack_raw)
FORMAT = register(BlockFormat(GGMLType.Q5_0, QK, BLOCK_BYTES, GGMLType.Q8_0, dequantize_rows, _pack, _mm, _mm))
SCALAR = (_pack_raw, _mm_scalar)  # the portable path, tested on every machine
