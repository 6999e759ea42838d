"""Q3_K: 256 weights per super-block, 16 sub-blocks of 16, 3-bit quants, 6-bit scales (block_q3_K).

Super-block (110 bytes):
    [0:32)    hmask  bit m of hmask[l]: weight 32m + l has its "high" bit set (then offset 0, else -4)
    [32:96)   qs     low 2 bits, two halves of 32 bytes; in half h byte l = 66 44 22 00:
                 w[128h + 32j + l] = d*(sc-32) * (((qs[32h+l] >> 2j) & 3) - (bit 4h+j of hmask[l] ? 0 : 4))
    [96:108)  scales 12 bytes, sixteen 6-bit scales (offset 32):
                 scale i low 4 bits  = byte i & 0xF (i < 8) | byte i-8 >> 4 (i >= 8)
                 scale i high 2 bits = (byte 8 + i%4 >> 2*(i/4)) & 3
    [108:110) d      fp16

Dequantizer: dequantize_row_q3_K. Dot: ggml_vec_dot_q3_K_q8_K_generic (lanes as Q6_K, sumf = sum of sums).

Fast path (AVX2): ggml's x86 order, ggml_vec_dot_q3_K_q8_K's AVX2 version (see the fast path section), which
x86 llama.cpp runs for Q3_K at every batch size (neither repacked nor in tinyBLAS on x86). Rows repacked to
114-byte blocks: [0:64) qs as stored, [64:96) hmask inverted (bit set = subtract 4), [96:112) the 16 scales
minus 32 as int8, [112:114) d.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import jit, pjit
from ..ggml_type import BLOCK_GEOMETRY, QK_K, GGMLType
from . import kblock, kquants
from .kblock import q3, q3_scale
from .kquants import half_scales, hsum_float_8, tile_span, tiles
from ..fp16 import fma_f32
from ._bits import f16_to_f32, read_u16
from ._simd import (HAS_AVX2, add32, and8, cvt_f32, dpwssd, ffma, hsum32, load16_i8_as_i16, load16x16, load32, load8x32,
                    load8xf32, maddubs, or8, prefetch_span, scale_halves16, sll16, splat8, splatf, srl16, store16x16,
                    store8x32, store8xf32, sub16, xor8, zero32, zerof)
from .base import BlockFormat, empty_aligned, register, run_repack

BLOCK_BYTES = BLOCK_GEOMETRY[GGMLType.Q3_K][1]  # 110


@jit
def dequantize_rows(raw, ids, out):
    K = out.shape[1]
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(K // QK_K):
            o = b * BLOCK_BYTES
            d = f16_to_f32(read_u16(row, o + 108))
            for sb in range(16):
                dl = np.float32(d * np.float32(q3_scale(row, o + 96, sb)))
                for l in range(16):
                    e = 16 * sb + l
                    out[i, b * QK_K + e] = np.float32(dl * np.float32(q3(row, o, e)))


# ----------------------------------------------------------------------------------------- fast path
# ggml_vec_dot_q3_K_q8_K, AVX2 (ggml-cpu/arch/x86/quants.c; AVX-512 builds compile the same code). Per super-block,
# chunk c = 4h + j (weights 128h + 32j .. +31, quants low2 - 4 * (high bit clear)):
#   lane l (0..7) += scale * sum of q*y over the chunk's bytes 4l..4l+3 (vpmaddubsw of the low bits minus
#                    vpmaddubsw of the 4s, then vpmaddwd with the chunk's two sub-block scales)
#   acc[l] = fma(y.d * x.d, (float)lane_l, acc[l])
# s = hsum_float_8(acc).

PACKED_BYTES = 114


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
                out[n, q + p] = row[o + 32 + p]
            for p in range(32):
                out[n, q + 64 + p] = ~row[o + p]
            for i in range(16):
                out[n, q + 96 + i] = np.uint8(np.int8(q3_scale(row, o + 96, i)))
            out[n, q + 112] = row[o + 108]
            out[n, q + 113] = row[o + 109]


@jit
def _chunk(sumi, q3bits, hbn, shift, bit, y, sc, m03, m01):
    """sumi + vpmaddwd(scales, vpmaddubsw(low2, y) - vpmaddubsw(4 * (high bit clear), y)) for one chunk."""
    ql = and8(srl16(q3bits, shift), m03)
    qh = sll16(and8(srl16(hbn, bit), m01), 2)
    return dpwssd(sumi, sub16(maddubs(ql, y), maddubs(qh, y)), sc)


@jit
def _block_lanes(w, n, b, qs, t, m03, m01):
    """<8 x i32>: super-block b of row n with token t, lane l = sum scale * q.y over the chunks' bytes 4l..4l+3."""
    K = qs.shape[1]
    o = n * w.shape[1] + b * PACKED_BYTES
    oa = t * K + b * QK_K
    hbn = load32(w, o + 64)
    sc = load16_i8_as_i16(w, o + 96)
    q0 = load32(w, o)
    q1 = load32(w, o + 32)
    v = _chunk(zero32(), q0, hbn, 0, 0, load32(qs, oa), scale_halves16(sc, 0), m03, m01)
    v = _chunk(v, q0, hbn, 2, 1, load32(qs, oa + 32), scale_halves16(sc, 1), m03, m01)
    v = _chunk(v, q0, hbn, 4, 2, load32(qs, oa + 64), scale_halves16(sc, 2), m03, m01)
    v = _chunk(v, q0, hbn, 6, 3, load32(qs, oa + 96), scale_halves16(sc, 3), m03, m01)
    v = _chunk(v, q1, hbn, 0, 4, load32(qs, oa + 128), scale_halves16(sc, 4), m03, m01)
    v = _chunk(v, q1, hbn, 2, 5, load32(qs, oa + 160), scale_halves16(sc, 5), m03, m01)
    v = _chunk(v, q1, hbn, 4, 6, load32(qs, oa + 192), scale_halves16(sc, 6), m03, m01)
    return _chunk(v, q1, hbn, 6, 7, load32(qs, oa + 224), scale_halves16(sc, 7), m03, m01)


@jit
def row_dot_x86(w, n, qs, yd, t, PF=0):
    """Row n of w (N, nb*114) . token t (qs (T, K) int8): ggml's AVX2 order."""
    m03 = splat8(3)
    m01 = splat8(1)
    acc = zerof()
    for b in range(yd.shape[1]):
        if PF > 0:
            prefetch_span(w, n * w.shape[1] + b * PACKED_BYTES + PF, PACKED_BYTES)
        v = _block_lanes(w, n, b, qs, t, m03, m01)
        d = np.float32(yd[t, b] * f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 112)))
        acc = ffma(splatf(d), cvt_f32(v), acc)
    return hsum_float_8(acc)


@jit
def row_dot_tiled(w, n, qs, yd, t):
    """Row n . token t in llama.cpp's tiled order (kquants.TILED_MIN_BATCH)."""
    m03 = splat8(3)
    m01 = splat8(1)
    acc = np.float32(0.0)
    for b in range(yd.shape[1]):
        s1 = hsum32(_block_lanes(w, n, b, qs, t, m03, m01))
        r = np.float32(np.float32(s1) * f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 112)))
        acc = fma_f32(r, yd[t, b], acc)
    return acc


@jit
def _decode_half(w, n, b, H, m03, m01, m04):
    """Chunks 4H .. 4H+3 (H = 0, 1) of super-block b of row n for the tiled gemm: u = low2 + 4 - 4 * (high bit
    clear), 0..7, and the chunks' scale pairs. maddubs(u, y) - maddubs(4, y) is _chunk's maddubs(low2, y) -
    maddubs(4 * (high bit clear), y), the same int16 pair sums (none saturates), and maddubs(4, y) depends on the
    token only."""
    o = n * w.shape[1] + b * PACKED_BYTES
    hbn = load32(w, o + 64)
    qb = load32(w, o + 32 * H)
    u = (or8(and8(qb, m03), xor8(sll16(and8(srl16(hbn, 4 * H), m01), 2), m04)),
         or8(and8(srl16(qb, 2), m03), xor8(sll16(and8(srl16(hbn, 4 * H + 1), m01), 2), m04)),
         or8(and8(srl16(qb, 4), m03), xor8(sll16(and8(srl16(hbn, 4 * H + 2), m01), 2), m04)),
         or8(and8(srl16(qb, 6), m03), xor8(sll16(and8(srl16(hbn, 4 * H + 3), m01), 2), m04)))
    return u, half_scales(load16_i8_as_i16(w, o + 96), H)


@jit
def _lanes_half(u, sc, qs, y4, t, tt, b, H):
    """_block_lanes' terms of chunks 4H .. 4H+3 with token t (its maddubs(4, y) of the block's chunks at y4[tt]):
    the two halves add up to _block_lanes (integer lanes: any grouping gives the same sums)."""
    oa = t * qs.shape[1] + b * QK_K + 128 * H
    oy = 256 * tt + 128 * H
    v0 = dpwssd(zero32(), sub16(maddubs(u[0], load32(qs, oa)), load16x16(y4, oy)), sc[0])
    v1 = dpwssd(zero32(), sub16(maddubs(u[1], load32(qs, oa + 32)), load16x16(y4, oy + 32)), sc[1])
    v0 = dpwssd(v0, sub16(maddubs(u[2], load32(qs, oa + 64)), load16x16(y4, oy + 64)), sc[2])
    v1 = dpwssd(v1, sub16(maddubs(u[3], load32(qs, oa + 96)), load16x16(y4, oy + 96)), sc[3])
    return add32(v0, v1)


ROW_TILE = 16
TOK_TILE = 32


@pjit
def _gemm(w, qs, yd, out):
    """ROW_TILE x TOK_TILE tiles, block by block: each (row, block) is decoded once for the tile's tokens (two
    halves of 4 chunks, _decode_half; the first half's integer lanes wait per token in `part`), whose 8 float
    accumulators per (row, token) live in `acc`: per (row, token) the float sequence of row_dot_x86 (before:
    row_dot_x86 per output, every block decoded per token). y4: the tile's maddubs(4, y), once per block."""
    N = w.shape[0]
    T = qs.shape[0]
    K = qs.shape[1]
    nb = yd.shape[1]
    n_tiles, n_tt = tiles(N, T, ROW_TILE, TOK_TILE)
    for tile in prange(n_tiles):
        r0, r1, t0, t1 = tile_span(tile, n_tt, N, T, ROW_TILE, TOK_TILE)
        acc = np.zeros((ROW_TILE, TOK_TILE, 8), np.float32)
        part = np.empty((TOK_TILE, 8), np.int32)       # (token, lane) the first half's sums of the current row
        y4 = np.empty((TOK_TILE, 8, 16), np.int16)    # (token, chunk, pair) maddubs(4, y) of block b
        m03 = splat8(3)
        m01 = splat8(1)
        m04 = splat8(4)
        for b in range(nb):
            for t in range(t0, t1):
                oa = t * K + b * QK_K
                for c in range(8):
                    store16x16(y4, 32 * (8 * (t - t0) + c), maddubs(m04, load32(qs, oa + 32 * c)))
            for n in range(r0, r1):
                u, sc = _decode_half(w, n, b, 0, m03, m01, m04)
                for t in range(t0, t1):
                    store8x32(part, 32 * (t - t0), _lanes_half(u, sc, qs, y4, t, t - t0, b, 0))
                u, sc = _decode_half(w, n, b, 1, m03, m01, m04)
                dx = f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 112))
                for t in range(t0, t1):
                    lanes = add32(load8x32(part, 32 * (t - t0)), _lanes_half(u, sc, qs, y4, t, t - t0, b, 1))
                    so = 32 * ((n - r0) * TOK_TILE + t - t0)
                    d = np.float32(yd[t, b] * dx)
                    store8xf32(acc, so, ffma(splatf(d), cvt_f32(lanes), load8xf32(acc, so)))
        for n in range(r0, r1):
            for t in range(t0, t1):
                out[t, n] = hsum_float_8(load8xf32(acc, 32 * ((n - r0) * TOK_TILE + t - t0)))


@pjit
def _gemv(w, qs, yd, out):
    for n in prange(w.shape[0]):
        out[0, n] = row_dot_x86(w, n, qs, yd, 0, kquants.GEMV_PF)


@pjit
def _gemm_tiled(w, qs, yd, out):
    N = w.shape[0]
    T = qs.shape[0]
    for g in prange((N + ROW_TILE - 1) // ROW_TILE):
        for n in range(g * ROW_TILE, min(N, g * ROW_TILE + ROW_TILE)):
            for t in range(T):
                out[t, n] = row_dot_tiled(w, n, qs, yd, t)


def _pack_fast(raw, K):
    out = empty_aligned((raw.shape[0], K // QK_K * PACKED_BYTES), np.uint8)
    run_repack(_repack, raw, out)
    return (out,)


def _mm_fast(packed, a, out):
    (_gemv if a.qs.shape[0] == 1 else _gemm)(packed[0], a.qs, a.d, out)


def _mm_llama(packed, a, out):
    (_gemm_tiled if a.qs.shape[0] >= kquants.TILED_MIN_BATCH else _gemm)(packed[0], a.qs, a.d, out)


SCALAR = kblock.scalar_path(GGMLType.Q3_K)  # (pack, mm) of the portable path, tested on every machine
if HAS_AVX2:
    FORMAT = register(BlockFormat(GGMLType.Q3_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, _pack_fast,
                                  _mm_fast, _mm_fast, _mm_llama))
else:
    FORMAT = register(BlockFormat(GGMLType.Q3_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, SCALAR[0],
                                  SCALAR[1], SCALAR[1]))
