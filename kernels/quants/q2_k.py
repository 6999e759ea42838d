"""Q2_K: 256 weights per super-block, 16 sub-blocks of 16, 2-bit quants, 4-bit scales and mins (block_q2_K).

Super-block (84 bytes):
    [0:16)   scales  byte i = MMMM SSSS: scale (low) and min (high) of sub-block i (16 weights)
    [16:80)  qs      two halves of 32 bytes; in half h byte l = 66 44 22 00:
                 w[128h + 32j + l] = d*S * ((qs[32h+l] >> 2j) & 3) - dmin*M     (sub-block (128h+32j+l)/16)
    [80:82)  d       fp16
    [82:84)  dmin    fp16

Dequantizer: dequantize_row_q2_K. Dot: ggml_vec_dot_q2_K_q8_K_generic (one integer sum per super-block):
    sumf += (dy*dx) * isum - (dy*dminx) * summs,  summs = sum_j bsums[j] * M_j.

Fast path (AVX2), rows repacked (84 bytes): [0:64) the 2-bit quants in kquants.PERM order, packed as Q3_K's
low2 planes, [64:80) scales, [80:82) d, [82:84) dmin. isum = lanes of vpmaddwd(vpmaddubsw(q, a), scales).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import jit, pjit
from ..ggml_type import QK_K, GGMLType
from . import kquants
from ._bits import f16_to_f32, read_u16
from ._simd import (HAS_AVX2, and8, dpwssd, hsum32, load32, maddubs, pair16, prefetch_span, splat8, srl16,
                    zero32)
from .base import BlockFormat, register

BLOCK_BYTES = 84


@jit
def _q2(row, o, e):
    h = e // 128
    j = (e % 128) // 32
    l = e % 32
    return np.int32((row[o + 16 + 32 * h + l] >> (2 * j)) & 3)


@pjit
def dequantize_rows(raw, ids, out):
    K = out.shape[1]
    for i in prange(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(K // QK_K):
            o = b * BLOCK_BYTES
            d = f16_to_f32(read_u16(row, o + 80))
            dmin = f16_to_f32(read_u16(row, o + 82))
            for sb in range(16):
                sc = row[o + sb]
                dl = np.float32(d * np.float32(sc & 0xF))
                ml = np.float32(dmin * np.float32(sc >> 4))
                for l in range(16):
                    e = 16 * sb + l
                    out[i, b * QK_K + e] = np.float32(dl * np.float32(_q2(row, o, e))) - ml


@jit
def _dot(row, qs, yd, bsums):
    nb = yd.shape[0]
    sumf = np.float32(0.0)
    for b in range(nb):
        o = b * BLOCK_BYTES
        summs = np.int32(0)
        isum = np.int32(0)
        for sb in range(16):
            sc = row[o + sb]
            summs = np.int32(summs + np.int32(bsums[16 * b + sb]) * np.int32(sc >> 4))
            isuml = np.int32(0)
            for l in range(16):
                e = 16 * sb + l
                isuml = np.int32(isuml + _q2(row, o, e) * np.int32(qs[b * QK_K + e]))
            isum = np.int32(isum + np.int32(sc & 0xF) * isuml)
        dall = np.float32(yd[b] * f16_to_f32(read_u16(row, o + 80)))
        dmin = np.float32(yd[b] * f16_to_f32(read_u16(row, o + 82)))
        sumf = sumf + (np.float32(dall * np.float32(isum)) - np.float32(dmin * np.float32(summs)))
    return sumf


@pjit
def _gemm_scalar(raw, qs, yd, bsums, out):
    N = raw.shape[0]
    T = qs.shape[0]
    for n in prange(N):
        for t in range(T):
            out[t, n] = _dot(raw[n], qs[t], yd[t], bsums[t])


def _pack_raw(raw, K):
    return (raw,)


def _mm_scalar(packed, a, out):
    _gemm_scalar(packed[0], a.qs, a.d, a.bsums, out)


# ----------------------------------------------------------------------------------------- fast path

_PERM = kquants.PERM


@pjit
def _repack(raw, out):
    N, rb = raw.shape
    nb = rb // BLOCK_BYTES
    for n in prange(N):
        row = raw[n]
        for b in range(nb):
            o = b * BLOCK_BYTES
            for p in range(32):
                for u in range(2):
                    lo = 0
                    for j in range(4):
                        lo |= _q2(row, o, 32 * (4 * u + j) + _PERM[p]) << (2 * j)
                    out[n, o + 32 * u + p] = np.uint8(lo)
            for i in range(16):
                out[n, o + 64 + i] = row[o + i]
            for i in range(4):
                out[n, o + 80 + i] = row[o + 80 + i]


@jit
def _row_dot(w, n, qp, yd, bsums, t):
    nb = yd.shape[1]
    K = nb * QK_K
    rb = w.shape[1]
    m03 = splat8(3)
    sumf = np.float32(0.0)
    for b in range(nb):
        o = n * rb + b * BLOCK_BYTES
        ob = b * BLOCK_BYTES
        oa = t * K + b * QK_K
        acc = zero32()
        for G in range(8):
            q = and8(srl16(load32(w, o + 32 * (G // 4)), 2 * (G % 4)), m03)
            acc = dpwssd(acc, maddubs(q, load32(qp, oa + 32 * G)),
                         pair16(w[n, ob + 64 + 2 * G] & 15, w[n, ob + 65 + 2 * G] & 15))
        isum = hsum32(acc)
        summs = np.int32(0)
        for j in range(16):
            summs += np.int32(bsums[t, 16 * b + j]) * np.int32(w[n, ob + 64 + j] >> 4)
        dall = np.float32(yd[t, b] * f16_to_f32(read_u16(w[n], ob + 80)))
        dmin = np.float32(yd[t, b] * f16_to_f32(read_u16(w[n], ob + 82)))
        sumf = sumf + (np.float32(dall * np.float32(isum)) - np.float32(dmin * np.float32(summs)))
    return sumf


ROW_TILE = 8
TOK_TILE = 32


@pjit
def _gemm(w, qp, yd, bsums, out):
    """Tiles of rows x tokens, each output one _row_dot (the gemv's code, so rows are bit-identical)."""
    N = w.shape[0]
    T = qp.shape[0]
    n_rt = (N + ROW_TILE - 1) // ROW_TILE
    n_tt = (T + TOK_TILE - 1) // TOK_TILE
    for tile in prange(n_rt * n_tt):
        r0 = (tile // n_tt) * ROW_TILE
        t0 = (tile % n_tt) * TOK_TILE
        for n in range(r0, min(N, r0 + ROW_TILE)):
            for t in range(t0, min(T, t0 + TOK_TILE)):
                out[t, n] = _row_dot(w, n, qp, yd, bsums, t)


@pjit
def _gemv(w, qp, yd, bsums, out):
    rb = w.shape[1]
    for n in prange(w.shape[0]):
        prefetch_span(w, n * rb + 4096, rb)  # a row's worth, 4 KB ahead (see _simd.prefetch_span)
        out[0, n] = _row_dot(w, n, qp, yd, bsums, 0)


def _pack_fast(raw, K):
    out = np.empty_like(raw)
    _repack(raw, out)
    return (out,)


def _mm_fast(packed, a, out):
    k = kquants.prepare(a, 0)
    (_gemv if a.qs.shape[0] == 1 else _gemm)(packed[0], k.qp, k.d, a.bsums, out)


if HAS_AVX2:
    FORMAT = register(BlockFormat(GGMLType.Q2_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, _pack_fast,
                                  _mm_fast, _mm_fast))
else:
    FORMAT = register(BlockFormat(GGMLType.Q2_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, _pack_raw,
                                  _mm_scalar, _mm_scalar))
SCALAR = (_pack_raw, _mm_scalar)  # the portable path, tested on every machine
