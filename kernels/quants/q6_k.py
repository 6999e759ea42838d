"""Q6_K: 256 weights per super-block, 16 sub-blocks of 16, 6-bit quants with offset 32, int8 scales (block_q6_K).

Super-block (210 bytes):
    [0:128)    ql      low 4 bits, two halves of 64 bytes (half h covers weights 128h .. 128h+127)
    [128:192)  qh      high 2 bits, two halves of 32 bytes
    [192:208)  scales  int8 x 16, one per 16 weights
    [208:210)  d       fp16
  within half h (ql' = ql[64h:], qh' = qh[32h:]), l in 0..31, qh'[l] = 66 44 22 00 (bit pairs):
    w[128h + l]      = d*sc * ((ql'[l]    & 0xF | 00 << 4) - 32)
    w[128h + l + 32] = d*sc * ((ql'[l+32] & 0xF | 22 << 4) - 32)
    w[128h + l + 64] = d*sc * ((ql'[l]    >> 4  | 44 << 4) - 32)
    w[128h + l + 96] = d*sc * ((ql'[l+32] >> 4  | 66 << 4) - 32)      sc = scales[index / 16]

Dequantizer: dequantize_row_q6_K. Dot: ggml_vec_dot_q6_K_q8_K_generic:
    aux32[l] (l = index mod 8) += scale * q8*q;  sums[l] += (dx*dy) * aux32[l];  sumf = sum of sums[0..7].

Fast path (AVX2): ggml's x86 order (ggml_vec_dot_q6_K_q8_K's AVX2 version, see the fast path section), on the
rows as stored in the file. The generic order above is the portable path (SCALAR). Batches with AVX-512: rows in
the lanes (_gemm_z, two rows a zmm); from V_UNIT tokens with AVX512-VNNI, tokens in the lanes (_gemm_vnni, 1.06x
at 1536x8960 and 1.13x at 8960x1536 with 512 tokens: `python benchmarks/gemm_ab.py --base 0c600a0 --types Q6_K
--shapes 1536x8960,8960x1536 --rounds 25`, Zen 4). All give row_dot_x86's bits.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, jit, pjit, work_chunks
from ..ggml_type import BLOCK_GEOMETRY, QK_K, GGMLType
from . import kblock, kquants
from .kblock import q6
from .kquants import half_scales, hsum_float_8, lanes_half, tile_span, tiles
from ..fp16 import fma_f32
from ._bits import f16_to_f32, read_u16
from ._simd512 import (HAS_AVX512, HAS_VNNI512, as16z, bcast4z, bcast16x16x2, bcast32x2, cat16x2, cat8x2, cvt_f32z,
                       dpbusd_z, dpwssd_z, fadd_z, ffma_z, fmul_z, hsum8x2_rows, load16xf32, load32x16z, load64,
                       maddubs_z, pair_lo16z, splat2f, splat32z, splatfz, store16xf32, zero16x32)
from ._simd import (HAS_AVX2, add32, and8, chunk_pair_scales16, cvt_f32, dpwssd, ffma, hsum32, load16_i8_as_i16,
                    load16x16, load32, load8x32, load8xf32, or8, prefetch_span, sll16, sll16i, splat8, splatf, srl16,
                    store16x16, store32, store8x32, store8xf32, sub16, zero16, zerof)
from .base import BlockFormat, empty_aligned, register, zeros_aligned

BLOCK_BYTES = BLOCK_GEOMETRY[GGMLType.Q6_K][1]  # 210


@jit
def dequantize_rows(raw, ids, out):
    K = out.shape[1]
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(K // QK_K):
            o = b * BLOCK_BYTES
            d = f16_to_f32(read_u16(row, o + 208))
            for sb in range(16):
                dl = np.float32(d * np.float32(np.int8(row[o + 192 + sb])))
                for l in range(16):
                    e = 16 * sb + l
                    out[i, b * QK_K + e] = np.float32(dl * np.float32(q6(row, o, e)))


# ----------------------------------------------------------------------------------------- fast path
# ggml's x86 order: ggml_vec_dot_q6_K_q8_K's AVX2 version (ggml-cpu/arch/x86/quants.c), which an x86 llama.cpp
# runs for Q6_K at every batch size (Q6_K is neither repacked nor in tinyBLAS on x86). Per super-block, 8 int32
# lanes: chunk c (elements 32c..32c+31, unsigned q+32 from ql/qh) adds to lane l the sum over its elements
# 4l..4l+3 of scale * (q+32) * y (vpmaddubsw, then vpmaddwd with the chunk's two sub-block scales); then lane
# l -= 32 * (bsums[2l]*sc[2l] + bsums[2l+1]*sc[2l+1]) (the offset, per lane as ggml applies it); acc[l] =
# fma(y.d * x.d, (float)lane_l, acc[l]); s = hsum_float_8(acc). The rows are used as stored in the file.
# Bounds: |vpmaddubsw pair| <= 2*63*127 < 2^15; |-32 * scale| <= 4096; lanes fit int32.


@jit
def _decode_half(w, n, b, H, m0f, m03):
    """_decode's chunks 4H .. 4H+3 (H = 0, 1) of super-block b of row n: their unsigned quants and scale pairs,
    and the offset term -32 * scales (used with half 0)."""
    o = n * w.shape[1] + b * BLOCK_BYTES
    qa = load32(w, o + 64 * H)
    qb = load32(w, o + 64 * H + 32)
    qh = load32(w, o + 128 + 32 * H)
    q = (or8(and8(qa, m0f), sll16(and8(qh, m03), 4)),
         or8(and8(qb, m0f), sll16(and8(srl16(qh, 2), m03), 4)),
         or8(and8(srl16(qa, 4), m0f), sll16(and8(srl16(qh, 4), m03), 4)),
         or8(and8(srl16(qb, 4), m0f), sll16(and8(srl16(qh, 6), m03), 4)))
    s16 = load16_i8_as_i16(w, o + 192)
    return q, half_scales(s16, H), sub16(zero16(), sll16i(s16, 5))


@jit
def _lanes_half(q, sc, nsc32, qs, bsums, t, b, H):
    """<8 x i32>: the AVX lanes of chunks 4H .. 4H+3 of super-block b with token t (kquants.lanes_half), with the
    offset term in half 0: lane l = sum over the chunks of scale * (q+32) * y over elements 32c+4l .. 32c+4l+3,
    minus 32 * (bsums[2l]*sc[2l] + bsums[2l+1]*sc[2l+1]) (ggml's q8sclsub). The two halves add up to the block's
    lanes (integer lanes: any grouping gives the same sums)."""
    v = lanes_half(q, sc, qs, t, b, H)
    if H == 0:
        v = dpwssd(v, load16x16(bsums, 2 * (t * (qs.shape[1] // 16) + 16 * b)), nsc32)
    return v


@jit
def _decode(w, n, b, m0f, m03):
    """The 8 chunks of super-block b of row n as unsigned quants q+32 (ggml's q4_0 .. q4_3 per half), their
    sub-block scale pairs, and -32 * the 16 scales (the offset term, applied with the activations' bsums)."""
    q0, sc0, nsc32 = _decode_half(w, n, b, 0, m0f, m03)
    q1, sc1, _ = _decode_half(w, n, b, 1, m0f, m03)
    return q0 + q1, sc0 + sc1, nsc32


@jit
def row_dot_x86(w, n, qs, bsums, yd, t, PF=0):
    """Row n of w (N, nb*210) . token t: ggml_vec_dot_q6_K_q8_K (x86 AVX2 order); PF > 0: every block
    prefetches the bytes PF ahead of it (gemv, see kquants.GEMV_PF)."""
    m0f = splat8(15)
    m03 = splat8(3)
    acc = zerof()
    for b in range(yd.shape[1]):
        if PF > 0:
            prefetch_span(w, n * w.shape[1] + b * BLOCK_BYTES + PF, BLOCK_BYTES)
        q, sc, nsc32 = _decode_half(w, n, b, 0, m0f, m03)
        lanes = _lanes_half(q, sc, nsc32, qs, bsums, t, b, 0)
        q, sc, nsc32 = _decode_half(w, n, b, 1, m0f, m03)
        lanes = add32(lanes, _lanes_half(q, sc, nsc32, qs, bsums, t, b, 1))
        d = np.float32(yd[t, b] * f16_to_f32(read_u16(w[n], b * BLOCK_BYTES + 208)))
        acc = ffma(splatf(d), cvt_f32(lanes), acc)
    return hsum_float_8(acc)


@pjit
def _gemv(w, qs, bsums, yd, out):
    for n in prange(w.shape[0]):
        out[0, n] = row_dot_x86(w, n, qs, bsums, yd, 0, kquants.GEMV_PF)


ROW_TILE = 16
TOK_TILE = 32


@pjit
def _gemm(w, qs, bsums, yd, out, TILED=False):
    """AVX2: ROW_TILE x TOK_TILE tiles, block by block: each (row, block) is decoded once for the tile's tokens,
    whose 8 float accumulators per (row, token) live in `acc`; per (row, token) the float sequence of
    row_dot_x86. A block's 8 chunks go by in two halves of 4 (the first half's integer lanes kept per token in
    `part`): all 8 chunks' quants and scales (17 ymm) did not fit the 16 registers. TILED: llama.cpp's tiled
    order (kquants.TILED_MIN_BATCH) instead, one accumulator (lane 0) per (row, token): acc = fma((float)s1 *
    x.d, y.d, acc) with s1 the lanes' integer total."""
    N, T, nb = w.shape[0], qs.shape[0], yd.shape[1]
    n_tiles, n_tt = tiles(N, T, ROW_TILE, TOK_TILE)
    for tile in prange(n_tiles):
        r0, r1, t0, t1 = tile_span(tile, n_tt, N, T, ROW_TILE, TOK_TILE)
        acc = np.zeros((ROW_TILE, TOK_TILE, 8), np.float32)
        part = np.empty((TOK_TILE, 8), np.int32)  # (token, lane) the first half's sums of the current row
        m0f = splat8(15)
        m03 = splat8(3)
        for b in range(nb):
            for n in range(r0, r1):
                q, sc, nsc32 = _decode_half(w, n, b, 0, m0f, m03)
                for t in range(t0, t1):
                    store8x32(part, 32 * (t - t0), _lanes_half(q, sc, nsc32, qs, bsums, t, b, 0))
                q, sc, nsc32 = _decode_half(w, n, b, 1, m0f, m03)
                dx = f16_to_f32(read_u16(w[n], b * BLOCK_BYTES + 208))
                for t in range(t0, t1):
                    lanes = add32(load8x32(part, 32 * (t - t0)), _lanes_half(q, sc, nsc32, qs, bsums, t, b, 1))
                    if TILED:
                        r = np.float32(np.float32(hsum32(lanes)) * dx)
                        acc[n - r0, t - t0, 0] = fma_f32(r, yd[t, b], acc[n - r0, t - t0, 0])
                        continue
                    so = 32 * ((n - r0) * TOK_TILE + t - t0)
                    d = np.float32(yd[t, b] * dx)
                    store8xf32(acc, so, ffma(splatf(d), cvt_f32(lanes), load8xf32(acc, so)))
        for n in range(r0, r1):
            for t in range(t0, t1):
                if TILED:
                    out[t, n] = acc[n - r0, t - t0, 0]
                else:
                    out[t, n] = hsum_float_8(load8xf32(acc, 32 * ((n - r0) * TOK_TILE + t - t0)))


Z_TOK_TILE = 64  # 32 KB of accumulators; 32 and 48 measured slower, 128 too


@pjit
def _prep_z(qs, bsums, yB, bB):
    """Q8_K activations block-major for _gemm_z: yB (nb, T, 256) int8, bB (nb, T, 16) int16, so that a tile's
    tokens of one block are contiguous (with rows K apart the gemm ran 10-13 % slower)."""
    T, K = qs.shape
    for t in prange(T):
        for b in range(K // QK_K):
            for i in range(QK_K):
                yB[b, t, i] = qs[t, b * QK_K + i]
            for i in range(16):
                bB[b, t, i] = bsums[t, 16 * b + i]


@pjit
def _gemm_z(w, yB, bB, yd, out):
    """AVX512: as _gemm with two rows per instruction (rows n, n+1 in the low and high halves of a zmm), tiles
    of ROW_TILE x Z_TOK_TILE, activations block-major (_prep_z); a full tile's 16 hsum_float_8 per token are
    one transposition (hsum8x2_rows) and one store."""
    N, T, nb = w.shape[0], out.shape[0], yd.shape[1]
    n_tiles, n_tt = tiles(N, T, ROW_TILE, Z_TOK_TILE)
    for tile in prange(n_tiles):
        r0, r1, t0, t1 = tile_span(tile, n_tt, N, T, ROW_TILE, Z_TOK_TILE)
        acc = np.zeros((ROW_TILE // 2, Z_TOK_TILE, 16), np.float32)  # (row pair, token, rows n | n+1 x 8 lanes)
        m0f = splat8(15)
        m03 = splat8(3)
        for b in range(nb):
            for n in range(r0, r1, 2):
                n1 = min(n + 1, r1 - 1)  # an odd last row pairs with itself (the copy is dropped)
                qa, sa, na = _decode(w, n, b, m0f, m03)
                qb, sb, nbb = _decode(w, n1, b, m0f, m03)
                q0 = cat8x2(qa[0], qb[0])
                q1 = cat8x2(qa[1], qb[1])
                q2 = cat8x2(qa[2], qb[2])
                q3 = cat8x2(qa[3], qb[3])
                q4 = cat8x2(qa[4], qb[4])
                q5 = cat8x2(qa[5], qb[5])
                q6 = cat8x2(qa[6], qb[6])
                q7 = cat8x2(qa[7], qb[7])
                s0 = cat16x2(sa[0], sb[0])
                s1 = cat16x2(sa[1], sb[1])
                s2 = cat16x2(sa[2], sb[2])
                s3 = cat16x2(sa[3], sb[3])
                s4 = cat16x2(sa[4], sb[4])
                s5 = cat16x2(sa[5], sb[5])
                s6 = cat16x2(sa[6], sb[6])
                s7 = cat16x2(sa[7], sb[7])
                nsc = cat16x2(na, nbb)
                dxa = f16_to_f32(read_u16(w[n], b * BLOCK_BYTES + 208))
                dxb = f16_to_f32(read_u16(w[n1], b * BLOCK_BYTES + 208))
                dx2 = splat2f(dxa, dxb)  # d = y.d * x.d per half: one multiply per token (commutes exactly)
                for t in range(t0, t1):
                    oa = (b * T + t) * QK_K
                    v = dpwssd_z(zero16x32(), bcast16x16x2(bB, 32 * (b * T + t)), nsc)
                    v = dpwssd_z(v, maddubs_z(q0, bcast32x2(yB, oa)), s0)
                    v = dpwssd_z(v, maddubs_z(q1, bcast32x2(yB, oa + 32)), s1)
                    v = dpwssd_z(v, maddubs_z(q2, bcast32x2(yB, oa + 64)), s2)
                    v = dpwssd_z(v, maddubs_z(q3, bcast32x2(yB, oa + 96)), s3)
                    v = dpwssd_z(v, maddubs_z(q4, bcast32x2(yB, oa + 128)), s4)
                    v = dpwssd_z(v, maddubs_z(q5, bcast32x2(yB, oa + 160)), s5)
                    v = dpwssd_z(v, maddubs_z(q6, bcast32x2(yB, oa + 192)), s6)
                    v = dpwssd_z(v, maddubs_z(q7, bcast32x2(yB, oa + 224)), s7)
                    so = 64 * (((n - r0) // 2) * Z_TOK_TILE + t - t0)
                    d = fmul_z(dx2, splatfz(yd[t, b]))
                    store16xf32(acc, so, ffma_z(d, cvt_f32z(v), load16xf32(acc, so)))
        if r1 - r0 == ROW_TILE:  # 16 rows' hsum_float_8 at once, one store per token
            st = 64 * Z_TOK_TILE  # bytes per row pair
            for t in range(t0, t1):
                so = 64 * (t - t0)
                s16 = hsum8x2_rows(load16xf32(acc, so), load16xf32(acc, so + st), load16xf32(acc, so + 2 * st),
                                   load16xf32(acc, so + 3 * st), load16xf32(acc, so + 4 * st),
                                   load16xf32(acc, so + 5 * st), load16xf32(acc, so + 6 * st),
                                   load16xf32(acc, so + 7 * st))
                store16xf32(out, t * out.strides[0] + 4 * r0, s16)
        else:
            for n in range(r0, r1):
                for t in range(t0, t1):  # row pair (n - r0) // 2, half n % 2
                    so = 64 * (((n - r0) // 2) * Z_TOK_TILE + t - t0) + 32 * ((n - r0) % 2)
                    out[t, n] = hsum_float_8(load8xf32(acc, so))


# ------------------------------------------------------------------ gemm, tokens in lanes (AVX512-VNNI)
# row_dot_x86's integer lanes with the tokens in the SIMD lanes: per (row, lane l, 16 tokens) one int32 vector.
# Lane l of chunk c is the 4-weight group 8c + l: vpdpbusd of its 4 weights (broadcast) with 16 tokens' 4 quants
# gives their sums S (|S| <= 4*63*128 < 2^15), and the S of chunks 2p and 2p+1 go into one vpdpwssd as int16
# pairs against (scale of chunk 2p, scale of chunk 2p+1): 3 multiplies per 128 weight x token products where
# rows in the lanes (_gemm_z) take 4. The offset term -32 * (bsums[2l]*sc[2l] + bsums[2l+1]*sc[2l+1]) is one
# more vpdpwssd per lane. The same exact integer lanes, then per lane acc = fma(dx*dy, float(lane), acc) and
# hsum_float_8, 16 tokens per instruction.

V_ROW_TILE = 16    # rows whose block is decoded at once (wq: 4 KB)
V_UNIT = 48        # tokens per pass of the inner loop: 3 zmm of 16, so 4 rows x 3 = 12 lane sums in registers


@pjit
def _prep_vnni(qs, bsums, d, qT32, ydT, bsL):
    """Q8_K activations -> _gemm_vnni's: qT32 (Tp/16, K/4, 16) int32 = each token's quants in element order,
    4 bytes a lane, 16 tokens per 64-byte vector; ydT (nb, Tp) f32 = d transposed; bsL (nb, 8, Tp) int32 = the
    int16 pair (bsums[16b + 2l], bsums[16b + 2l + 1]) of lane l. Tp: T rounded up to 16; callers zero the
    padding tokens."""
    T, K = qs.shape
    nb = K // QK_K
    for gt in prange((T + 15) // 16):
        for t in range(16 * gt, min(T, 16 * gt + 16)):
            q32 = qs[t].view(np.int32)
            b32 = bsums[t].view(np.int32)
            tl = t % 16
            for q in range(K // 4):
                qT32[gt, q, tl] = q32[q]
            for b in range(nb):
                ydT[b, t] = d[t, b]
                for l in range(8):
                    bsL[b, l, t] = b32[8 * b + l]


@jit
def _unpack_rows(w, r0, r1, b, wq, scp, nsp, dx, m0f, m03):
    """Super-block b of V_ROW_TILE rows from r0 (past r1 - 1: copies of the last) for _gemm_vnni: wq (rows x 256)
    the unsigned quants q+32 in element order; scp (rows, 8) int16 pairs (scale of chunk 2p, of chunk 2p+1) of the
    lanes l with l // 4 = h at [2p + h] (sc[4p + h], sc[4p + 2 + h]); nsp (rows, 8) int16 pairs (-32 sc[2l],
    -32 sc[2l+1]) of lane l; dx the d."""
    for r in range(dx.shape[0]):
        n = min(r0 + r, r1 - 1)
        q, _, nsc32 = _decode_half(w, n, b, 0, m0f, m03)
        store32(wq, QK_K * r, q[0])
        store32(wq, QK_K * r + 32, q[1])
        store32(wq, QK_K * r + 64, q[2])
        store32(wq, QK_K * r + 96, q[3])
        store16x16(nsp, 32 * r, nsc32)
        q, _, _ = _decode_half(w, n, b, 1, m0f, m03)
        store32(wq, QK_K * r + 128, q[0])
        store32(wq, QK_K * r + 160, q[1])
        store32(wq, QK_K * r + 192, q[2])
        store32(wq, QK_K * r + 224, q[3])
        store16x16(scp, 32 * r, chunk_pair_scales16(load16_i8_as_i16(w, n * w.shape[1] + b * BLOCK_BYTES + 192)))
        dx[r] = f16_to_f32(read_u16(w[n], b * BLOCK_BYTES + 208))
        prefetch_span(w, n * w.shape[1] + (b + 2) * BLOCK_BYTES, BLOCK_BYTES)  # 16 row streams: ahead of the
        # hardware prefetcher


@ijit
def _row3(i0, i1, i2, wq, ow, v, ya0, ya1, ya2, yb0, yb1, yb2):
    """One row's lane sums of 3 token groups += scales * S of chunks 2p (4 weights at byte ow of wq) and 2p+1
    (ow + 32), v the scale pair."""
    ua = bcast4z(wq, ow)
    ub = bcast4z(wq, ow + 32)
    z = zero16x32()
    return (dpwssd_z(i0, pair_lo16z(dpbusd_z(z, ua, ya0), dpbusd_z(z, ub, yb0)), v),
            dpwssd_z(i1, pair_lo16z(dpbusd_z(z, ua, ya1), dpbusd_z(z, ub, yb1)), v),
            dpwssd_z(i2, pair_lo16z(dpbusd_z(z, ua, ya2), dpbusd_z(z, ub, yb2)), v))


@ijit
def _fma3(acc, oa, i0, i1, i2, dbuf, od):
    """acc[16 tokens at byte oa + 64 g] = fma(d, float(i_g), acc) for the 3 token groups, d at byte od of dbuf."""
    for g, i in ((0, i0), (1, i1), (2, i2)):
        o = oa + 64 * g
        store16xf32(acc, o, ffma_z(load16xf32(dbuf, od + 64 * g), cvt_f32z(i), load16xf32(acc, o)))


@ijit
def _lane_4x3(qT, g0, b, l, wq, r4, scp, nsp, bsL, tg, acc, oa, RL, dbuf):
    """Lane l of super-block b for rows r4 .. r4+3 and the 48 tokens from tg (token groups g0 .. g0+2): the 12
    integer lane sums in registers, then acc[row, l, tokens] = fma(d, float(sum), acc) (acc at byte oa for row
    r4, RL bytes per (row, lane))."""
    nq = qT.shape[1]
    Tp = bsL.shape[2]
    i00 = i01 = i02 = i10 = i11 = i12 = i20 = i21 = i22 = i30 = i31 = i32 = zero16x32()
    for p in range(4):
        ka = 64 * b + 16 * p + l  # the 4-weight group of lane l in chunk 2p
        ya0 = load64(qT, 64 * (g0 * nq + ka))
        ya1 = load64(qT, 64 * ((g0 + 1) * nq + ka))
        ya2 = load64(qT, 64 * ((g0 + 2) * nq + ka))
        yb0 = load64(qT, 64 * (g0 * nq + ka + 8))
        yb1 = load64(qT, 64 * ((g0 + 1) * nq + ka + 8))
        yb2 = load64(qT, 64 * ((g0 + 2) * nq + ka + 8))
        ow = QK_K * r4 + 64 * p + 4 * l
        j = 2 * p + l // 4
        i00, i01, i02 = _row3(i00, i01, i02, wq, ow, as16z(splat32z(scp[r4, j])), ya0, ya1, ya2, yb0, yb1, yb2)
        i10, i11, i12 = _row3(i10, i11, i12, wq, ow + QK_K, as16z(splat32z(scp[r4 + 1, j])),
                              ya0, ya1, ya2, yb0, yb1, yb2)
        i20, i21, i22 = _row3(i20, i21, i22, wq, ow + 2 * QK_K, as16z(splat32z(scp[r4 + 2, j])),
                              ya0, ya1, ya2, yb0, yb1, yb2)
        i30, i31, i32 = _row3(i30, i31, i32, wq, ow + 3 * QK_K, as16z(splat32z(scp[r4 + 3, j])),
                              ya0, ya1, ya2, yb0, yb1, yb2)
    bo = 4 * ((b * 8 + l) * Tp + tg)  # bsL[b, l, tg]
    p0 = load32x16z(bsL, bo)
    p1 = load32x16z(bsL, bo + 64)
    p2 = load32x16z(bsL, bo + 128)
    v = as16z(splat32z(nsp[r4, l]))
    i00, i01, i02 = dpwssd_z(i00, p0, v), dpwssd_z(i01, p1, v), dpwssd_z(i02, p2, v)
    v = as16z(splat32z(nsp[r4 + 1, l]))
    i10, i11, i12 = dpwssd_z(i10, p0, v), dpwssd_z(i11, p1, v), dpwssd_z(i12, p2, v)
    v = as16z(splat32z(nsp[r4 + 2, l]))
    i20, i21, i22 = dpwssd_z(i20, p0, v), dpwssd_z(i21, p1, v), dpwssd_z(i22, p2, v)
    v = as16z(splat32z(nsp[r4 + 3, l]))
    i30, i31, i32 = dpwssd_z(i30, p0, v), dpwssd_z(i31, p1, v), dpwssd_z(i32, p2, v)
    _fma3(acc, oa, i00, i01, i02, dbuf, 0)
    _fma3(acc, oa + 8 * RL, i10, i11, i12, dbuf, 192)
    _fma3(acc, oa + 16 * RL, i20, i21, i22, dbuf, 384)
    _fma3(acc, oa + 24 * RL, i30, i31, i32, dbuf, 576)


@ijit
def _lane_4x1(qT, g, b, l, wq, r4, scp, nsp, bsL, tg, acc, oa, RL, dbuf, od):
    """_lane_4x3 for the one token group g (tokens tg .. tg+15), its d at byte od of dbuf's row 0."""
    nq = qT.shape[1]
    Tp = bsL.shape[2]
    z = zero16x32()
    pb = load32x16z(bsL, 4 * ((b * 8 + l) * Tp + tg))
    for r in range(4):
        i = dpwssd_z(z, pb, as16z(splat32z(nsp[r4 + r, l])))
        for p in range(4):
            ka = 64 * b + 16 * p + l
            ow = QK_K * (r4 + r) + 64 * p + 4 * l
            s = pair_lo16z(dpbusd_z(z, bcast4z(wq, ow), load64(qT, 64 * (g * nq + ka))),
                           dpbusd_z(z, bcast4z(wq, ow + 32), load64(qT, 64 * (g * nq + ka + 8))))
            i = dpwssd_z(i, s, as16z(splat32z(scp[r4 + r, 2 * p + l // 4])))
        o = oa + r * 8 * RL
        store16xf32(acc, o, ffma_z(load16xf32(dbuf, od + 192 * r), cvt_f32z(i), load16xf32(acc, o)))


@pjit
def _gemm_vnni(w, qT, ydT, bsL, TT, nt, out):
    """gemm with the tokens in the lanes (see above): qT (Tp/16, K/4, 64) int8, ydT, bsL from _prep_vnni.

    nt chunks of consecutive row tiles (one per thread; any nt gives the same bits), each going through the
    tokens TT at a time and, per token tile, through its row tiles: per (16 rows, super-block) the quants are
    decoded once (_unpack_rows); then for 48 tokens and 4 rows at a time, lane by lane, 12 lane sums in
    registers. acc (rows, 8 lanes, TT) holds row_dot_x86's 8 float accumulators per (row, token)."""
    N = w.shape[0]
    T = out.shape[0]
    nb, Tp = ydT.shape
    n_rt = (N + V_ROW_TILE - 1) // V_ROW_TILE
    RL = 4 * TT      # bytes per (row, lane) of acc
    for ch in prange(nt):
        wq = np.empty(V_ROW_TILE * QK_K, np.uint8)
        scp = np.empty((V_ROW_TILE, 8), np.int32)
        nsp = np.empty((V_ROW_TILE, 8), np.int32)
        dx = np.empty(V_ROW_TILE, np.float32)
        dbuf = np.empty((4, 3, 16), np.float32)  # d = dx * dy of 4 rows x 3 token groups
        acc = np.empty((V_ROW_TILE, 8, TT), np.float32)
        sbuf = np.empty(16, np.float32)
        m0f = splat8(15)
        m03 = splat8(3)
        for t0 in range(0, Tp, TT):
            t1 = min(Tp, t0 + TT)
            for rt in range(ch * n_rt // nt, (ch + 1) * n_rt // nt):
                r0, r1 = rt * V_ROW_TILE, min(N, (rt + 1) * V_ROW_TILE)
                acc[:] = 0
                for b in range(nb):
                    _unpack_rows(w, r0, r1, b, wq, scp, nsp, dx, m0f, m03)
                    for tg in range(t0, t1, V_UNIT):
                        g0 = tg // 16
                        ng = min(3, (t1 - tg) // 16)
                        oy = 4 * (b * Tp + tg)  # ydT[b, tg]
                        for r4 in range(0, V_ROW_TILE, 4):
                            for r in range(4):
                                dv = splatfz(dx[r4 + r])
                                for g in range(ng):
                                    store16xf32(dbuf, 64 * (3 * r + g), fmul_z(dv, load16xf32(ydT, oy + 64 * g)))
                            for l in range(8):
                                oa = r4 * 8 * RL + l * RL + 4 * (tg - t0)  # acc[r4, l, tg - t0]
                                if ng == 3:
                                    _lane_4x3(qT, g0, b, l, wq, r4, scp, nsp, bsL, tg, acc, oa, RL, dbuf)
                                else:  # the last tokens: 1 or 2 groups of 16
                                    for g in range(ng):
                                        _lane_4x1(qT, g0 + g, b, l, wq, r4, scp, nsp, bsL, tg + 16 * g, acc,
                                                  oa + 64 * g, RL, dbuf, 64 * g)
                # hsum_float_8 of each (row, token)'s 8 lanes, 16 tokens at a time
                for t in range(t0, min(T, t1), 16):
                    for r in range(r1 - r0):
                        o = r * 8 * RL + 4 * (t - t0)
                        s = fadd_z(fadd_z(fadd_z(load16xf32(acc, o + 4 * RL), load16xf32(acc, o)),
                                          fadd_z(load16xf32(acc, o + 6 * RL), load16xf32(acc, o + 2 * RL))),
                                   fadd_z(fadd_z(load16xf32(acc, o + 5 * RL), load16xf32(acc, o + RL)),
                                          fadd_z(load16xf32(acc, o + 7 * RL), load16xf32(acc, o + 3 * RL))))
                        store16xf32(sbuf, 0, s)
                        for tt in range(t, min(T, t + 16)):
                            out[tt, r0 + r] = sbuf[tt - t]


def _mm_llama(packed, a, out):
    if a.qs.shape[0] >= kquants.TILED_MIN_BATCH:
        _gemm(packed[0], a.qs, a.bsums, a.d, out, True)
    else:
        _mm_fast(packed, a, out)


def _mm_fast(packed, a, out):
    T, K = a.qs.shape
    if T == 1:
        _gemv(packed[0], a.qs, a.bsums, a.d, out)
    elif HAS_VNNI512 and T >= V_UNIT:
        nb, Tp = K // QK_K, (T + 15) // 16 * 16
        qT = zeros_aligned((Tp // 16, K // 4, 64), np.int8)
        ydT = zeros_aligned((nb, Tp), np.float32)
        bsL = zeros_aligned((nb, 8, Tp), np.int32)
        _prep_vnni(a.qs, a.bsums, a.d, qT.view(np.int32), ydT, bsL)
        _gemm_vnni(packed[0], qT, ydT, bsL, kquants.lane_token_tile(K, Tp, V_UNIT), work_chunks(), out)
    elif HAS_AVX512:
        _gemm_rows_z(packed[0], a.qs, a.bsums, a.d, out)
    else:
        _gemm(packed[0], a.qs, a.bsums, a.d, out)


def _gemm_rows_z(w, qs, bsums, d, out):
    T, K = qs.shape
    yB = empty_aligned((K // QK_K, T, QK_K), np.int8)
    bB = empty_aligned((K // QK_K, T, 16), np.int16)
    _prep_z(qs, bsums, yB, bB)
    _gemm_z(w, yB, bB, d, out)


SCALAR = kblock.scalar_path(GGMLType.Q6_K)  # (pack, mm) of the portable path, tested on every machine
if HAS_AVX2:
    FORMAT = register(BlockFormat(GGMLType.Q6_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, SCALAR[0],
                                  _mm_fast, _mm_fast, _mm_llama))
else:
    FORMAT = register(BlockFormat(GGMLType.Q6_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, SCALAR[0],
                                  SCALAR[1], SCALAR[1]))
