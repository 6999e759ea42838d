"""Q5_1: 32 weights per block, 5-bit quants, fp16 scale and fp16 minimum (ggml-common.h block_q5_1).

Block (24 bytes):
    [0:2)   d   fp16
    [2:4)   m   fp16
    [4:8)   qh  uint32 little endian: bit j = 5th bit of weight j
    [8:24)  qs  16 bytes: byte j = hhhh llll
                 w[j] = (llll | bit j << 4) * d + m,  w[j + 16] = (hhhh | bit (j+16) << 4) * d + m

Dequantizer: dequantize_row_q5_1. Dot: ggml_vec_dot_q5_1_q8_1_generic: sumf += (dx*dy)*sumi + mx*sy.
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
BLOCK_BYTES = 24


@jit
def dequantize_rows(raw, ids, out):
    K = out.shape[1]
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(K // QK):
            o = b * BLOCK_BYTES
            d = f16_to_f32(read_u16(row, o))
            m = f16_to_f32(read_u16(row, o + 2))
            qh = read_u32(row, o + 4)
            for j in range(QK // 2):
                q = row[o + 8 + j]
                h0 = np.int32((qh >> np.uint32(j)) & np.uint32(1)) << 4
                h1 = np.int32((qh >> np.uint32(j + 16)) & np.uint32(1)) << 4
                out[i, b * QK + j] = np.float32(np.float32(np.int32(q & 0xF) | h0) * d) + m
                out[i, b * QK + j + 16] = np.float32(np.float32(np.int32(q >> 4) | h1) * d) + m


@jit
def _dot(row, qs, yd, ys):
    sumf = np.float32(0.0)
    for b in range(yd.shape[0]):
        o = b * BLOCK_BYTES
        qh = read_u32(row, o + 4)
        sumi = np.int32(0)
        for j in range(QK // 2):
            q = row[o + 8 + j]
            h0 = np.int32((qh >> np.uint32(j)) & np.uint32(1)) << 4
            h1 = np.int32((qh >> np.uint32(j + 16)) & np.uint32(1)) << 4
            sumi = np.int32(sumi + (np.int32(q & 0xF) | h0) * np.int32(qs[b * QK + j]))
            sumi = np.int32(sumi + (np.int32(q >> 4) | h1) * np.int32(qs[b * QK + j + 16]))
        dx = f16_to_f32(read_u16(row, o))
        mx = f16_to_f32(read_u16(row, o + 2))
        sumf = sumf + (np.float32(np.float32(dx * yd[b]) * np.float32(sumi)) + np.float32(mx * ys[b]))
    return sumf


@pjit
def _gemm_scalar(raw, qs, yd, ys, out):
    N = raw.shape[0]
    T = qs.shape[0]
    for n in prange(N):
        for t in range(T):
            out[t, n] = _dot(raw[n], qs[t], yd[t], ys[t])


def _pack_raw(raw, K):
    return (raw,)


def _mm_scalar(packed, a, out):
    _gemm_scalar(packed[0], a.qs, a.d, a.s, out)


# fast path: q32 family kernels on rows repacked in groups of 8 (layout and constants in q32.py):
# GB=192 bytes per group-block, QH=32, QS=64, HAS_M=True, SUB=0, MODE=LANES_M (x86 order), Q8=False

XS = q32.XS  # x86 order: groups of q32.XG rows, layout constants of 8-row groups times XS


def _pack_fast(raw, K):
    return q32.pack(raw, 24, 8, 4, 2, 192 * XS, 32 * XS, 64 * XS, False, q32.XG)


@pjit
def _gemv(w, qa, yd, ys, asum, out):
    for g in prange(w.shape[0]):
        q32.gemv_group(w, g, 192 * XS, 32 * XS, 64 * XS, True, 0, q32.LANES_M, False, qa, yd, ys, asum, out, q32.GEMV_PF)


@pjit
def _gemm(w, qa, yd, ys, asum, out):
    for tile in prange(q32.n_tiles(out.shape[1], qa.shape[0])):
        q32.gemm_tile(w, tile, 192 * XS, 32 * XS, 64 * XS, True, 0, q32.LANES_M, False, qa, yd, ys, asum, out)


def _mm_fast(packed, a, out):
    q32.matmul_fast(_gemv, _gemm, 0, packed, a, out, lanes=True)


_mm, _pack = (_mm_fast, _pack_fast) if HAS_AVX2 else (_mm_scalar, _pack_raw)
FORMAT = register(BlockFormat(GGMLType.Q5_1, QK, BLOCK_BYTES, GGMLType.Q8_1, dequantize_rows, _pack, _mm, _mm))
SCALAR = (_pack_raw, _mm_scalar)  # the portable path, tested on every machine
