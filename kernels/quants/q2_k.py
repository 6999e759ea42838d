"""Q2_K: 256 weights per super-block, 16 sub-blocks of 16, 2-bit quants, 4-bit scales and mins (block_q2_K).

Super-block (84 bytes):
    [0:16)   scales  byte i = MMMM SSSS: scale (low) and min (high) of sub-block i (16 weights)
    [16:80)  qs      two halves of 32 bytes; in half h byte l = 66 44 22 00:
                 w[128h + 32j + l] = d*S * ((qs[32h+l] >> 2j) & 3) - dmin*M     (sub-block (128h+32j+l)/16)
    [80:82)  d       fp16
    [82:84)  dmin    fp16

Dequantizer: dequantize_row_q2_K. Dot: ggml_vec_dot_q2_K_q8_K_generic (one integer sum per super-block):
    sumf += (dy*dx) * isum - (dy*dminx) * summs,  summs = sum_j bsums[j] * M_j.

Fast path (AVX2): ggml's x86 orders (see the fast path section). An AVX-512 build of llama.cpp (the fixtures')
repacks a Q2_K weight with ne1 % 8 == 0 to q2_K_8x8 and runs ggml_gemv/gemm_q2_K_8x8_q8_K on it, for every
batch size; other Q2_K weights run ggml_vec_dot_q2_K_q8_K (and llama.cpp's tiled matmul for batches of >= 8
tokens). Rows repacked to 100-byte blocks: [0:64) qs as stored, [64:80) the 16 scales, [80:96) the 16 mins
(int8), [96:98) d, [98:100) dmin.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import jit, pjit
from ..ggml_type import BLOCK_GEOMETRY, QK_K, GGMLType
from . import kblock, kquants
from .kblock import q2
from .kquants import half_scales, hsum_float_8, lanes_half, tile_span, tiles
from ..fp16 import fma_f32
from ._bits import f16_to_f32, read_u16
from ._simd import (HAS_AVX2, and8, cvt_f32, add32, dpwssd, ffma, hsum32, load16_i8_as_i16, load16x16, load32, load8x32,
                    load8xf32, prefetch_span, splat8, splatf, srl16, store8x32, store8xf32, zero32, zerof)
from .base import BlockFormat, empty_aligned, llama_repacks, register, run_repack

BLOCK_BYTES = BLOCK_GEOMETRY[GGMLType.Q2_K][1]  # 84


@jit
def dequantize_rows(raw, ids, out):
    K = out.shape[1]
    for i in range(ids.shape[0]):
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
                    out[i, b * QK_K + e] = np.float32(dl * np.float32(q2(row, o, e))) - ml


# ----------------------------------------------------------------------------------------- fast path
# ggml_gemv_q2_K_8x8_q8_K / ggml_gemm_q2_K_8x8_q8_K (ggml-cpu/arch/x86/repack.cpp; the AVX-512 gemm and the AVX2
# gemv have the same per-output order), for repacked weights (ne1 % 8 == 0 in an AVX-512 build). Per super-block:
#   acc  = fma((float)sum_s scale_s * q.y, x.d * y.d, acc)
#   accm = fma((float)sum_s min_s * bsums_s, x.dmin * y.d, accm)
# s = acc - accm; the gemm (llama.cpp's batches: the first T - T % 4 tokens) does the two FMAs per 128-weight
# half instead of per super-block.
# ggml_vec_dot_q2_K_q8_K, AVX2 (ggml-cpu/arch/x86/quants.c), for the other weights. Per super-block:
#   acc[l] = fma(-y.d * x.dmin, (float)(min[2l] * bsums[2l] + min[2l+1] * bsums[2l+1]), acc[l])
#   lane l (0..7) = sum over the 8 chunks of 32 weights of scale * sum of q*y over the chunk's bytes 4l..4l+3
#   acc[l] = fma(y.d * x.d, (float)lane_l, acc[l])
# s = hsum_float_8(acc).

PACKED_BYTES = 100


@pjit
def _repack(raw, out):
    N = raw.shape[0]
    nb = out.shape[1] // PACKED_BYTES
    for n in prange(N):
        row = raw[n]
        for b in range(nb):
            o = b * BLOCK_BYTES
            q = b * PACKED_BYTES
            for p in range(64):
                out[n, q + p] = row[o + 16 + p]
            for i in range(16):
                out[n, q + 64 + i] = row[o + i] & 15
                out[n, q + 80 + i] = row[o + i] >> 4
            for i in range(4):
                out[n, q + 96 + i] = row[o + 80 + i]


@jit
def _decode_half(w, n, b, H, m03):
    """Half H (0, 1) of super-block b of row n: its 4 chunks' 2-bit quants and scale pairs (the row dots decode
    both halves per token, the gemm once per tile)."""
    o = n * w.shape[1] + b * PACKED_BYTES
    qb = load32(w, o + 32 * H)
    q = (and8(qb, m03), and8(srl16(qb, 2), m03), and8(srl16(qb, 4), m03), and8(srl16(qb, 6), m03))
    return q, half_scales(load16_i8_as_i16(w, o + 64), H)


@jit
def _block_ints(w, n, b, qs, bsums, t, m03):
    """Super-block b of row n with token t: (<8 x i32> min[2l]*bsums[2l] + min[2l+1]*bsums[2l+1], and for each
    128-weight half h the <8 x i32> lanes l = sum scale * q.y over its chunks' bytes 4l..4l+3)."""
    K = qs.shape[1]
    o = n * w.shape[1] + b * PACKED_BYTES
    mins = dpwssd(zero32(), load16_i8_as_i16(w, o + 80), load16x16(bsums, 2 * (t * (K // 16) + 16 * b)))
    q, sc = _decode_half(w, n, b, 0, m03)
    v0 = lanes_half(q, sc, qs, t, b, 0)
    q, sc = _decode_half(w, n, b, 1, m03)
    return mins, v0, lanes_half(q, sc, qs, t, b, 1)


@jit
def _half_mins(w, n, b, bsums, t, h):
    """sum over the 8 sub-blocks of half h of min_s * bsums_s (exact)."""
    m = np.int32(0)
    for s in range(8 * h, 8 * h + 8):
        m += np.int32(w[n, b * PACKED_BYTES + 80 + s]) * np.int32(bsums[t, 16 * b + s])
    return m


@jit
def row_dot_x86(w, n, qs, bsums, yd, t, PF=0):
    """Row n of w (N, nb*100) . token t (qs (T, K) int8, bsums (T, K/16) int16): ggml_vec_dot_q2_K_q8_K."""
    m03 = splat8(3)
    acc = zerof()
    for b in range(yd.shape[1]):
        if PF > 0:
            prefetch_span(w, n * w.shape[1] + b * PACKED_BYTES + PF, PACKED_BYTES)
        mins, v0, v1 = _block_ints(w, n, b, qs, bsums, t, m03)
        dy = yd[t, b]
        dmin = np.float32(-dy * f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 98)))
        acc = ffma(splatf(dmin), cvt_f32(mins), acc)
        d = np.float32(dy * f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 96)))
        acc = ffma(splatf(d), cvt_f32(add32(v0, v1)), acc)
    return hsum_float_8(acc)


@jit
def row_dot_repack(w, n, qs, bsums, yd, t, PF=0):
    """Row n . token t as ggml_gemv_q2_K_8x8_q8_K computes it (one FMA pair per super-block)."""
    m03 = splat8(3)
    acc = np.float32(0.0)
    accm = np.float32(0.0)
    for b in range(yd.shape[1]):
        if PF > 0:
            prefetch_span(w, n * w.shape[1] + b * PACKED_BYTES + PF, PACKED_BYTES)
        mins, v0, v1 = _block_ints(w, n, b, qs, bsums, t, m03)
        dy = yd[t, b]
        d = np.float32(f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 96)) * dy)
        dmin = np.float32(f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 98)) * dy)
        acc = fma_f32(np.float32(hsum32(v0) + hsum32(v1)), d, acc)
        accm = fma_f32(np.float32(hsum32(mins)), dmin, accm)
    return np.float32(acc - accm)


@jit
def row_dot_repack_gemm(w, n, qs, bsums, yd, t):
    """Row n . token t as ggml_gemm_q2_K_8x8_q8_K computes it (one FMA pair per 128-weight half)."""
    m03 = splat8(3)
    acc = np.float32(0.0)
    accm = np.float32(0.0)
    for b in range(yd.shape[1]):
        mins, v0, v1 = _block_ints(w, n, b, qs, bsums, t, m03)
        dy = yd[t, b]
        d = np.float32(f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 96)) * dy)
        dmin = np.float32(f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 98)) * dy)
        acc = fma_f32(np.float32(hsum32(v0)), d, acc)
        accm = fma_f32(np.float32(_half_mins(w, n, b, bsums, t, 0)), dmin, accm)
        acc = fma_f32(np.float32(hsum32(v1)), d, acc)
        accm = fma_f32(np.float32(_half_mins(w, n, b, bsums, t, 1)), dmin, accm)
    return np.float32(acc - accm)


@jit
def row_dot_tiled(w, n, qs, bsums, yd, t):
    """Row n . token t in llama.cpp's tiled order (kquants.TILED_MIN_BATCH)."""
    m03 = splat8(3)
    acc = np.float32(0.0)
    for b in range(yd.shape[1]):
        mins, v0, v1 = _block_ints(w, n, b, qs, bsums, t, m03)
        r = np.float32(np.float32(hsum32(v0) + hsum32(v1)) * f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 96)))
        r = fma_f32(-f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 98)), np.float32(hsum32(mins)), r)
        acc = fma_f32(r, yd[t, b], acc)
    return acc


ROW_TILE = 16
TOK_TILE = 32


_VEC_DOT, _REPACK, _TILED, _REPACK_GEMM = 0, 1, 2, 3  # which of llama.cpp's kernels a product follows


@jit
def _row_dot(w, n, qs, bsums, yd, t, mode, PF=0):
    if mode == _REPACK:
        return row_dot_repack(w, n, qs, bsums, yd, t, PF)
    if mode == _TILED:
        return row_dot_tiled(w, n, qs, bsums, yd, t)
    if mode == _REPACK_GEMM:
        return row_dot_repack_gemm(w, n, qs, bsums, yd, t)
    return row_dot_x86(w, n, qs, bsums, yd, t, PF)


@pjit
def _gemm(w, qs, bsums, yd, out, mode):
    """ROW_TILE x TOK_TILE tiles, block by block: each (row, block) is decoded once for the tile's tokens (in its
    two halves: v0's lanes wait per token in `part` while v1's are computed), then per (row, token) the float
    sequence of `mode`'s row dot (_row_dot) on its state in `acc`: 8 lanes (_VEC_DOT) or acc, accm in lanes 0, 1.
    Before: _row_dot per output, every block decoded per token."""
    N = w.shape[0]
    T = qs.shape[0]
    K = qs.shape[1]
    nb = yd.shape[1]
    n_tiles, n_tt = tiles(N, T, ROW_TILE, TOK_TILE)
    for tile in prange(n_tiles):
        r0, r1, t0, t1 = tile_span(tile, n_tt, N, T, ROW_TILE, TOK_TILE)
        acc = np.zeros((ROW_TILE, TOK_TILE, 8), np.float32)
        part = np.empty((TOK_TILE, 8), np.int32)  # (token, lane) v0 of the current row
        m03 = splat8(3)
        for b in range(nb):
            for n in range(r0, r1):
                q, sc = _decode_half(w, n, b, 0, m03)
                for t in range(t0, t1):
                    store8x32(part, 32 * (t - t0), lanes_half(q, sc, qs, t, b, 0))
                q, sc = _decode_half(w, n, b, 1, m03)
                mn = load16_i8_as_i16(w, n * w.shape[1] + b * PACKED_BYTES + 80)
                xd = f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 96))
                xdmin = f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 98))
                for t in range(t0, t1):
                    v0 = load8x32(part, 32 * (t - t0))
                    v1 = lanes_half(q, sc, qs, t, b, 1)
                    mins = dpwssd(zero32(), mn, load16x16(bsums, 2 * (t * (K // 16) + 16 * b)))
                    dy = yd[t, b]
                    i, j = n - r0, t - t0
                    if mode == _VEC_DOT:  # row_dot_x86
                        so = 32 * (i * TOK_TILE + j)
                        a = ffma(splatf(np.float32(-dy * xdmin)), cvt_f32(mins), load8xf32(acc, so))
                        store8xf32(acc, so, ffma(splatf(np.float32(dy * xd)), cvt_f32(add32(v0, v1)), a))
                    elif mode == _REPACK:  # row_dot_repack
                        d = np.float32(xd * dy)
                        dmin = np.float32(xdmin * dy)
                        acc[i, j, 0] = fma_f32(np.float32(hsum32(v0) + hsum32(v1)), d, acc[i, j, 0])
                        acc[i, j, 1] = fma_f32(np.float32(hsum32(mins)), dmin, acc[i, j, 1])
                    elif mode == _REPACK_GEMM:  # row_dot_repack_gemm
                        d = np.float32(xd * dy)
                        dmin = np.float32(xdmin * dy)
                        a0 = fma_f32(np.float32(hsum32(v0)), d, acc[i, j, 0])
                        a1 = fma_f32(np.float32(_half_mins(w, n, b, bsums, t, 0)), dmin, acc[i, j, 1])
                        acc[i, j, 0] = fma_f32(np.float32(hsum32(v1)), d, a0)
                        acc[i, j, 1] = fma_f32(np.float32(_half_mins(w, n, b, bsums, t, 1)), dmin, a1)
                    else:  # _TILED: row_dot_tiled
                        r = np.float32(np.float32(hsum32(v0) + hsum32(v1)) * xd)
                        r = fma_f32(-xdmin, np.float32(hsum32(mins)), r)
                        acc[i, j, 0] = fma_f32(r, dy, acc[i, j, 0])
        for n in range(r0, r1):
            for t in range(t0, t1):
                i, j = n - r0, t - t0
                if mode == _VEC_DOT:
                    out[t, n] = hsum_float_8(load8xf32(acc, 32 * (i * TOK_TILE + j)))
                elif mode == _TILED:
                    out[t, n] = acc[i, j, 0]
                else:
                    out[t, n] = np.float32(acc[i, j, 0] - acc[i, j, 1])


@pjit
def _gemv(w, qs, bsums, yd, out, mode):
    for n in prange(w.shape[0]):
        out[0, n] = _row_dot(w, n, qs, bsums, yd, 0, mode, kquants.GEMV_PF)


def _pack_fast(raw, K):
    out = empty_aligned((raw.shape[0], K // QK_K * PACKED_BYTES), np.uint8)
    run_repack(_repack, raw, out)
    return (out, _REPACK if llama_repacks(GGMLType.Q2_K, raw.shape[0]) else _VEC_DOT)


def _mm_fast(packed, a, out):
    (_gemv if a.qs.shape[0] == 1 else _gemm)(packed[0], a.qs, a.bsums, a.d, out, packed[1])


def _mm_llama(packed, a, out):
    T = a.qs.shape[0]
    if packed[1] == _VEC_DOT:
        _gemm(packed[0], a.qs, a.bsums, a.d, out, _TILED if T >= kquants.TILED_MIN_BATCH else _VEC_DOT)
        return
    # repacked (repack.cpp forward_mul_mat): the first T - T % 4 tokens through the gemm, the rest the gemv
    T4 = T - T % 4
    if T4:
        _gemm(packed[0], a.qs[:T4], a.bsums[:T4], a.d[:T4], out[:T4], _REPACK_GEMM)
    if T4 < T:
        _gemm(packed[0], a.qs[T4:], a.bsums[T4:], a.d[T4:], out[T4:], _REPACK)


SCALAR = kblock.scalar_path(GGMLType.Q2_K)  # (pack, mm) of the portable path, tested on every machine
if HAS_AVX2:
    FORMAT = register(BlockFormat(GGMLType.Q2_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, _pack_fast,
                                  _mm_fast, _mm_fast, _mm_llama))
else:
    FORMAT = register(BlockFormat(GGMLType.Q2_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, SCALAR[0],
                                  SCALAR[1], SCALAR[1]))
