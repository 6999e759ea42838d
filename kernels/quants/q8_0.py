"""Q8_0: 32 weights per block, 8-bit signed quants and one fp16 scale (ggml-common.h block_q8_0).

Block (34 bytes):
    [0:2)   d   fp16 scale
    [2:34)  qs  int8 x 32             w[j] = qs[j] * d

Dequantizer: ggml-quants.c dequantize_row_q8_0. Dot: ggml-cpu/quants.c ggml_vec_dot_q8_0_q8_0_generic
(activations quantized to Q8_0):  sumf += sumi * (dx * dy)  per block, blocks in order.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import jit, pjit
from ..ggml_type import GGMLType
from ._bits import f16_to_f32, read_u16
from . import q32
from ._simd import HAS_AVX2
from .base import BlockFormat, register

QK = 32
BLOCK_BYTES = 34


@jit
def dequantize_rows(raw, ids, out):
    K = out.shape[1]
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(K // QK):
            o = b * BLOCK_BYTES
            d = f16_to_f32(read_u16(row, o))
            for j in range(QK):
                out[i, b * QK + j] = np.float32(np.int8(row[o + 2 + j])) * d


@jit
def _dot(row, qs, yd):
    """ggml_vec_dot_q8_0_q8_0_generic for one weight row (row_bytes,) and one activation row."""
    sumf = np.float32(0.0)
    for b in range(yd.shape[0]):
        o = b * BLOCK_BYTES
        sumi = np.int32(0)
        for j in range(QK):
            sumi = np.int32(sumi + np.int32(np.int8(row[o + 2 + j])) * np.int32(qs[b * QK + j]))
        dx = f16_to_f32(read_u16(row, o))
        sumf = sumf + np.float32(sumi) * np.float32(dx * yd[b])
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
# GB=272 bytes per group-block, QH=-1, QS=16, HAS_M=False, SUB=q32.Q8_SUB, MODE=LANES (x86 order), Q8=True

XS = q32.XS  # x86 order: groups of q32.XG rows, layout constants of 8-row groups times XS


def _pack_fast(raw, K):
    return q32.pack(raw, 34, 2, -1, -1, 272 * XS, -1, 16 * XS, True, q32.XG)


@pjit
def _gemv(w, qa, yd, ys, asum, out):
    for g in prange(w.shape[0]):
        q32.gemv_group(w, g, 272 * XS, -1, 16 * XS, False, q32.Q8_SUB, q32.LANES, True, qa, yd, ys, asum, out, q32.GEMV_PF)


@pjit
def _gemm(w, qa, yd, ys, asum, out):
    for tile in prange(q32.n_tiles(out.shape[1], qa.shape[0])):
        q32.gemm_tile(w, tile, 272 * XS, -1, 16 * XS, False, q32.Q8_SUB, q32.LANES, True, qa, yd, ys, asum, out)


def _mm_fast(packed, a, out):
    q32.matmul_fast(_gemv, _gemm, q32.Q8_SUB, packed, a, out, lanes=True)


_mm, _pack = (_mm_fast, _pack_fast) if HAS_AVX2 else (_mm_scalar, _pack_raw)
FORMAT = register(BlockFormat(GGMLType.Q8_0, QK, BLOCK_BYTES, GGMLType.Q8_0, dequantize_rows, _pack, _mm, _mm))
SCALAR = (_pack_raw, _mm_scalar)  # the portable path, tested on every machine
