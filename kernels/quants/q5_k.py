"""Q5_K: 256 weights per super-block, 8 sub-blocks of 32, 5-bit quants, 6-bit scales and mins (block_q5_K).

Super-block (176 bytes):
    [0:2)     d      fp16
    [2:4)     dmin   fp16
    [4:16)    scales 12 bytes, packed exactly as Q4_K (see q4_k.py)
    [16:48)   qh     32 bytes: bit s of qh[l] = 5th bit of weight 32s + l (sub-block s)
    [48:176)  qs     128 bytes in 4 chunks of 32: byte 32c+l = hhhh llll
                 w[64c + l]      = d*scale(2c)  * (llll | bit 2c   of qh[l] << 4) - dmin*min(2c)
                 w[64c + 32 + l] = d*scale(2c+1)* (hhhh | bit 2c+1 of qh[l] << 4) - dmin*min(2c+1)

Dequantizer: dequantize_row_q5_K. Dot: ggml_vec_dot_q5_K_q8_K_generic (same float order as Q4_K).

Fast path (AVX2): ggml's x86 order, ggml_vec_dot_q5_K_q8_K's AVX2 version (see the fast path section), which
x86 llama.cpp runs for Q5_K at every batch size (neither repacked nor in tinyBLAS on x86). Rows repacked to
180-byte blocks: [0:128) qs and [128:160) qh as stored, [160:168) the 8 scales, [168:176) the 8 mins (decoded
from the 12 packed bytes), [176:178) d, [178:180) dmin. Pair sums <= 2*31*127, no saturation.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import jit, pjit
from ..ggml_type import BLOCK_GEOMETRY, QK_K, GGMLType
from . import kblock, kquants
from .kquants import hsum_float_8, lanes_half, tile_span, tiles
from ._bits import f16_to_f32, read_u16
from ._simd import (HAS_AVX2, add32, and8, cvt_f32, ffma, hsum32, load32, load8_i16_as_i32, load8_u8_as_i32, load8x32,
                    load8xf32, mul32, or8, prefetch_span, sll16, splat16, splat8, splatf, srl16, store8x32, store8xf32,
                    zerof)
from ..fp16 import fma_f32
from .base import BlockFormat, empty_aligned, register, run_repack
from .kblock import scale_min_k4

BLOCK_BYTES = BLOCK_GEOMETRY[GGMLType.Q5_K][1]  # 176


@jit
def dequantize_rows(raw, ids, out):
    K = out.shape[1]
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(K // QK_K):
            o = b * BLOCK_BYTES
            d = f16_to_f32(read_u16(row, o))
            dmin = f16_to_f32(read_u16(row, o + 2))
            for sb in range(8):
                sc, mn = scale_min_k4(row, o + 4, sb)
                d1 = np.float32(d * np.float32(sc))
                m1 = np.float32(dmin * np.float32(mn))
                q0 = o + 48 + 32 * (sb // 2)
                shift = 4 * (sb % 2)
                for l in range(32):
                    hb = ((row[o + 16 + l] >> sb) & 1) << 4
                    q = np.float32(((row[q0 + l] >> shift) & 0xF) | hb)
                    out[i, b * QK_K + 32 * sb + l] = np.float32(d1 * q) - m1


# ----------------------------------------------------------------------------------------- fast path
# ggml_vec_dot_q5_K_q8_K, AVX2 (ggml-cpu/arch/x86/quants.c; AVX-512 builds compile the same code). Per super-block:
#   d = y.d * x.d;  dmin = -y.d * x.dmin
#   summs = fma(dmin, (float)sum_s min_s * (bsums[2s] + bsums[2s+1]), summs)   (GCC contracts `summs += dmin * i`)
#   lane l (0..7) = sum over the 8 chunks of 32 weights of scale * sum of q*y over the chunk's bytes 4l..4l+3
#                   (vpmaddubsw, then vpmaddwd with the chunk's scale)
#   acc[l] = fma(d, (float)lane_l, acc[l])
# s = hsum_float_8(acc) + summs.

PACKED_BYTES = 180


@pjit
def _repack(raw, out):
    N = raw.shape[0]
    nb = out.shape[1] // PACKED_BYTES
    for n in prange(N):
        row = raw[n]
        for b in range(nb):
            o = b * BLOCK_BYTES
            q = b * PACKED_BYTES
            for p in range(128):
                out[n, q + p] = row[o + 48 + p]
            for p in range(32):
                out[n, q + 128 + p] = row[o + 16 + p]
            for sb in range(8):
                sc, mn = scale_min_k4(row, o + 4, sb)
                out[n, q + 160 + sb] = sc
                out[n, q + 168 + sb] = mn
            for i in range(4):
                out[n, q + 176 + i] = row[o + i]


@jit
def _decode_half(w, n, b, H, m0f, m01):
    """_block_ints' chunks of 64 weights 2H and 2H+1 (H = 0, 1) of super-block b of row n: their four 32-weight
    halves as unsigned quants (lo, hi, lo, hi) and the four scales, splat."""
    o = n * w.shape[1] + b * PACKED_BYTES
    ob = b * PACKED_BYTES
    hb = load32(w, o + 128)
    c = 2 * H
    qa = load32(w, o + 32 * c)
    qb = load32(w, o + 32 * c + 32)
    q = (or8(and8(qa, m0f), sll16(and8(srl16(hb, 2 * c), m01), 4)),
         or8(and8(srl16(qa, 4), m0f), sll16(and8(srl16(hb, 2 * c + 1), m01), 4)),
         or8(and8(qb, m0f), sll16(and8(srl16(hb, 2 * c + 2), m01), 4)),
         or8(and8(srl16(qb, 4), m0f), sll16(and8(srl16(hb, 2 * c + 3), m01), 4)))
    sc = (splat16(w[n, ob + 160 + 2 * c]), splat16(w[n, ob + 161 + 2 * c]), splat16(w[n, ob + 162 + 2 * c]),
          splat16(w[n, ob + 163 + 2 * c]))
    return q, sc


@jit
def _block_ints(w, n, b, qs, bs32, t, m0f, m01):
    """Super-block b of row n with token t: (<8 x i32> lanes of sum scale * q.y, sum_s min_s * bsum32_s)."""
    K = bs32.shape[1] * 32
    o = n * w.shape[1] + b * PACKED_BYTES
    q, sc = _decode_half(w, n, b, 0, m0f, m01)
    sumi = lanes_half(q, sc, qs, t, b, 0)
    q, sc = _decode_half(w, n, b, 1, m0f, m01)
    sumi = add32(sumi, lanes_half(q, sc, qs, t, b, 1))
    mins = hsum32(mul32(load8_u8_as_i32(w, o + 168), load8_i16_as_i32(bs32, 2 * (t * (K // 32) + 8 * b))))
    return sumi, mins


@jit
def row_dot_x86(w, n, qs, yd, bs32, t, PF=0):
    """Row n of w (N, nb*180) . token t (qs (T, K) int8, bs32 (T, K/32) int16): ggml's AVX2 order."""
    m0f = splat8(15)
    m01 = splat8(1)
    acc = zerof()
    summs = np.float32(0.0)
    for b in range(yd.shape[1]):
        if PF > 0:
            prefetch_span(w, n * w.shape[1] + b * PACKED_BYTES + PF, PACKED_BYTES)
        sumi, mins = _block_ints(w, n, b, qs, bs32, t, m0f, m01)
        dy = yd[t, b]
        d = np.float32(dy * f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 176)))
        dmin = np.float32(-dy * f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 178)))
        summs = fma_f32(dmin, np.float32(mins), summs)
        acc = ffma(splatf(d), cvt_f32(sumi), acc)
    return hsum_float_8(acc) + summs


@jit
def row_dot_tiled(w, n, qs, yd, bs32, t):
    """Row n . token t in llama.cpp's tiled order (kquants.TILED_MIN_BATCH)."""
    m0f = splat8(15)
    m01 = splat8(1)
    acc = np.float32(0.0)
    for b in range(yd.shape[1]):
        sumi, mins = _block_ints(w, n, b, qs, bs32, t, m0f, m01)
        r = np.float32(np.float32(hsum32(sumi)) * f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 176)))
        r = fma_f32(-f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 178)), np.float32(mins), r)
        acc = fma_f32(r, yd[t, b], acc)
    return acc


ROW_TILE = 16
TOK_TILE = 32


@pjit
def _gemm(w, qs, yd, bs32, out):
    """ROW_TILE x TOK_TILE tiles, block by block: each (row, block) is decoded once for the tile's tokens (in two
    halves: all 8 quant and 8 scale vectors do not fit 16 ymm registers; the first half's integer lanes wait per
    token in `part`), whose 8 float accumulators and summs per (row, token) live in `acc` and `summs`: per (row,
    token) the float sequence of row_dot_x86 (before: row_dot_x86 per output, every block decoded per token)."""
    N = w.shape[0]
    T = qs.shape[0]
    K = qs.shape[1]
    nb = yd.shape[1]
    n_tiles, n_tt = tiles(N, T, ROW_TILE, TOK_TILE)
    for tile in prange(n_tiles):
        r0, r1, t0, t1 = tile_span(tile, n_tt, N, T, ROW_TILE, TOK_TILE)
        acc = np.zeros((ROW_TILE, TOK_TILE, 8), np.float32)
        summs = np.zeros((ROW_TILE, TOK_TILE), np.float32)
        part = np.empty((TOK_TILE, 8), np.int32)  # (token, lane) the first half's sums of the current row
        m0f = splat8(15)
        m01 = splat8(1)
        for b in range(nb):
            for n in range(r0, r1):
                q, sc = _decode_half(w, n, b, 0, m0f, m01)
                for t in range(t0, t1):
                    store8x32(part, 32 * (t - t0), lanes_half(q, sc, qs, t, b, 0))
                q, sc = _decode_half(w, n, b, 1, m0f, m01)
                o = n * w.shape[1] + b * PACKED_BYTES
                mn = load8_u8_as_i32(w, o + 168)
                dx = f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 176))
                dmx = f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 178))
                for t in range(t0, t1):
                    sumi = add32(load8x32(part, 32 * (t - t0)), lanes_half(q, sc, qs, t, b, 1))
                    mins = hsum32(mul32(mn, load8_i16_as_i32(bs32, 2 * (t * (K // 32) + 8 * b))))
                    dy = yd[t, b]
                    d = np.float32(dy * dx)
                    dmin = np.float32(-dy * dmx)
                    summs[n - r0, t - t0] = fma_f32(dmin, np.float32(mins), summs[n - r0, t - t0])
                    so = 32 * ((n - r0) * TOK_TILE + t - t0)
                    store8xf32(acc, so, ffma(splatf(d), cvt_f32(sumi), load8xf32(acc, so)))
        for n in range(r0, r1):
            for t in range(t0, t1):
                out[t, n] = hsum_float_8(load8xf32(acc, 32 * ((n - r0) * TOK_TILE + t - t0))) + summs[n - r0, t - t0]


@pjit
def _gemv(w, qs, yd, bs32, out):
    for n in prange(w.shape[0]):
        out[0, n] = row_dot_x86(w, n, qs, yd, bs32, 0, kquants.GEMV_PF)


@pjit
def _gemm_tiled(w, qs, yd, bs32, out):
    N = w.shape[0]
    T = qs.shape[0]
    for g in prange((N + ROW_TILE - 1) // ROW_TILE):
        for n in range(g * ROW_TILE, min(N, g * ROW_TILE + ROW_TILE)):
            for t in range(T):
                out[t, n] = row_dot_tiled(w, n, qs, yd, bs32, t)


def _pack_fast(raw, K):
    out = empty_aligned((raw.shape[0], K // QK_K * PACKED_BYTES), np.uint8)
    run_repack(_repack, raw, out)
    return (out,)


def _mm_fast(packed, a, out):
    bs32 = kquants.group_sums32(a.bsums)
    (_gemv if a.qs.shape[0] == 1 else _gemm)(packed[0], a.qs, a.d, bs32, out)


def _mm_llama(packed, a, out):
    if a.qs.shape[0] < kquants.TILED_MIN_BATCH:
        return _mm_fast(packed, a, out)
    _gemm_tiled(packed[0], a.qs, a.d, kquants.group_sums32(a.bsums), out)


SCALAR = kblock.scalar_path(GGMLType.Q5_K)  # (pack, mm) of the portable path, tested on every machine
if HAS_AVX2:
    FORMAT = register(BlockFormat(GGMLType.Q5_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, _pack_fast,
                                  _mm_fast, _mm_fast, _mm_llama))
else:
    FORMAT = register(BlockFormat(GGMLType.Q5_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, SCALAR[0],
                                  SCALAR[1], SCALAR[1]))
