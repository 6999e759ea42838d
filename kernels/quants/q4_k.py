"""Q4_K: 256 weights per super-block, 8 sub-blocks of 32 with 6-bit scales and mins (block_q4_K).

Super-block (144 bytes):
    [0:2)     d      fp16 super-scale of the scales
    [2:4)     dmin   fp16 super-scale of the mins
    [4:16)    scales 12 bytes, eight 6-bit (scale, min) pairs (get_scale_min_k4):
                 byte 0..3 : mmSSSSSS  sub-block j<4: S = scale j, mm = high bits of scale j+4
                 byte 4..7 : mmMMMMMM  sub-block j<4: M = min j,   mm = high bits of min j+4
                 byte 8..11: MMMMSSSS  low 4 bits of min (hi) / scale (lo) of sub-block j+4
    [16:144)  qs     128 bytes in 4 chunks of 32: byte 32c+l = hhhh llll
                 w[64c + l]      = d*scale(2c)  * llll - dmin*min(2c)
                 w[64c + 32 + l] = d*scale(2c+1)* hhhh - dmin*min(2c+1)

Dequantizer: dequantize_row_q4_K. Dot: ggml_vec_dot_q4_K_q8_K_generic (activations Q8_K):
    aux32[l] (l = element index mod 8) += scale * q8*q;  sums[l] += (dx*dy) * aux32[l];
    sumf -= (dminx*dy) * sum_j bsums[j]*min[j/2];  finally sumf += sums[0..7] in order.

Fast path (AVX2): the float order of x86 llama.cpp, which repacks Q4_K weights (q4_K_8x8, ggml-cpu
repack.cpp / arch/x86/repack.cpp) and never runs the generic dot: ggml_gemv_q4_K_8x8_q8_K accumulates per
super-block acc = fma(I, dx*dy, acc) and accm = fma(M, dminx*dy, accm) with the exact integer sums
I = sum_j scale_j * q.y and M = sum_j min_j * bsum32_j, and returns acc - accm; ggml_gemm_q4_K_8x8_q8_K (the
first T - T % 4 tokens of a batch) does the same per 64-weight pair of sub-blocks ("sb"). row_dot_x86 has
both (SB); matmul uses the gemv order for every token unless asked for llama.cpp's batch order
(BlockFormat.gemm_llama). Rows are repacked at load time to 148-byte blocks
    [0:128)   qs permuted per 32-byte chunk by kquants.PERM (low nibbles: sub-block 2c, high: 2c+1)
    [128:136) the 8 scales, [136:144) the 8 mins (6-bit values as bytes), [144:146) d, [146:148) dmin
and per 32-byte chunk: vpmaddubsw(nibbles, activations) -> vpmaddwd/vpdpwssd(., scale) -> int32 lanes whose
sum is the chunk's integer sum. Bounds: nibble*q8 pair <= 2*15*127 (no int16 saturation),
|I| <= 8*63*32*15*127 < 2^31 (its float conversion rounds as ggml's vcvtdq2ps).
gemm with AVX512-VNNI and T >= V_MIN_TOKENS (_gemm_vnni): tokens in the lanes - 4 weights of a row broadcast
against 4 quants of 16 tokens per vpdpbusd, scales applied per 16 weights by vpdpwssd, so the integer sums
come out per token with no horizontal reduction and the float FMAs run 16 tokens per instruction (about twice
_gemm_z's speed on large batches). gemm with AVX512BW otherwise (_gemm_z): the same packed rows in zmm, two
sub-blocks per instruction ([low | high nibbles of a chunk] against 64 contiguous activations), several
tokens per unpacked (row, block); per-block integer sums of 8 tokens reduced together so the FMAs run 8 tokens
per vector. Both give row_dot_x86's bits.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, jit, pjit
from ..ggml_type import QK_K, GGMLType
from . import kquants
from .kquants import hsum_float_8
from ._bits import f16_to_f32, read_u16
from ..fp16 import fma_f32
from ._simd import (HAS_VNNI512, as16z, bcast4z, cvt_f32z, dpbusd_z, ffma_z, fmul_z, load16xf32, load32x16z,
                    splat32z, splatfz, store16xf32, unpack_nibbles64)
from ._simd import (HAS_AVX2, HAS_AVX512, add32z, and64, bcast_pair16, bcast32x2, dpwssd_z, fold16, load16x16,
                    load64, maddubs_z, perm32_store, prefetchw, scales2x16, splat8z, srl16x2, store8x32, sums8x8,
                    zero16x32)
from ._simd import (add32, and8, cvt_f32, dpwssd, ffma, fmul, hsum32, load32, load8_i16_as_i32, load8_u8_as_i32,
                    load8x32, load8xf32, maddubs, mul32, prefetch_span, splat16, splat32, splat8, splatf, srl16,
                    store8xf32, zero32, zerof)
from .activations import Activations
from .base import BlockFormat, empty_aligned, llama_repacks, register, zeros_aligned

BLOCK_BYTES = 144


@jit
def scale_min_k4(row, o, j):
    """get_scale_min_k4: (scale, min) of sub-block j from the 12 scale bytes at row[o:o+12]."""
    if j < 4:
        return np.int32(row[o + j] & 63), np.int32(row[o + j + 4] & 63)
    sc = (row[o + j + 4] & 0xF) | ((row[o + j - 4] >> 6) << 4)
    mn = (row[o + j + 4] >> 4) | ((row[o + j] >> 6) << 4)
    return np.int32(sc), np.int32(mn)


@pjit
def dequantize_rows(raw, ids, out):
    K = out.shape[1]
    for i in prange(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(K // QK_K):
            o = b * BLOCK_BYTES
            d = f16_to_f32(read_u16(row, o))
            dmin = f16_to_f32(read_u16(row, o + 2))
            for sb in range(8):
                sc, mn = scale_min_k4(row, o + 4, sb)
                d1 = np.float32(d * np.float32(sc))
                m1 = np.float32(dmin * np.float32(mn))
                q0 = o + 16 + 32 * (sb // 2)
                shift = 4 * (sb % 2)
                for l in range(32):
                    q = np.float32((row[q0 + l] >> shift) & 0xF)
                    out[i, b * QK_K + 32 * sb + l] = np.float32(d1 * q) - m1


@jit
def _dot(row, qs, yd, bsums, aux32, sums):
    nb = yd.shape[0]
    sumf = np.float32(0.0)
    sums[:] = 0
    for b in range(nb):
        o = b * BLOCK_BYTES
        aux32[:] = 0
        sumi = np.int32(0)
        for sb in range(8):
            sc, mn = scale_min_k4(row, o + 4, sb)
            sumi = np.int32(sumi + mn * (np.int32(bsums[16 * b + 2 * sb]) + np.int32(bsums[16 * b + 2 * sb + 1])))
            q0 = o + 16 + 32 * (sb // 2)
            shift = 4 * (sb % 2)
            for l in range(32):
                w = np.int32((row[q0 + l] >> shift) & 0xF)
                aux32[l % 8] += sc * (w * np.int32(qs[b * QK_K + 32 * sb + l]))
        d = np.float32(f16_to_f32(read_u16(row, o)) * yd[b])
        for l in range(8):
            sums[l] += np.float32(d * np.float32(aux32[l]))
        dmin = np.float32(f16_to_f32(read_u16(row, o + 2)) * yd[b])
        sumf = sumf - np.float32(dmin * np.float32(sumi))
    for l in range(8):
        sumf = sumf + sums[l]
    return sumf


@pjit
def _gemm_scalar(raw, qs, yd, bsums, out):
    N = raw.shape[0]
    T = qs.shape[0]
    for n in prange(N):
        aux32 = np.empty(8, np.int32)
        sums = np.empty(8, np.float32)
        for t in range(T):
            out[t, n] = _dot(raw[n], qs[t], yd[t], bsums[t], aux32, sums)


def _mm_scalar(packed, a, out):
    _gemm_scalar(packed[0], a.qs, a.d, a.bsums, out)


# ----------------------------------------------------------------------------------------- fast path

PACKED_BYTES = 148
_PERM = kquants.PERM


@pjit
def _repack(raw, out, PERMUTE=True):
    """raw (N, nb*144) -> out (N, nb*148), layout in the module docstring (PERMUTE False: qs as stored, the
    layout of the rows llama.cpp does not repack, see the vec_dot section)."""
    N = raw.shape[0]
    nb = out.shape[1] // PACKED_BYTES
    for n in prange(N):
        row = raw[n]
        for b in range(nb):
            o = b * BLOCK_BYTES
            q = b * PACKED_BYTES
            for c in range(4):
                for p in range(32):
                    out[n, q + 32 * c + p] = row[o + 16 + 32 * c + (_PERM[p] if PERMUTE else p)]
            for sb in range(8):
                sc, mn = scale_min_k4(row, o + 4, sb)
                out[n, q + 128 + sb] = sc
                out[n, q + 136 + sb] = mn
            for i in range(4):
                out[n, q + 144 + i] = row[o + i]


@jit
def row_dot_x86(w, n, qp, t, yd, bs32, SB, PF=0):
    """One repacked row . one permuted activation row in ggml's x86 order (module docstring): per super-block
    (SB False: ggml_gemv_q4_K_8x8_q8_K) or per 64-weight half-pair sb (SB True: ggml_gemm_q4_K_8x8_q8_K)
    acc = fma(I, dx*dy, acc) and accm = fma(M, dminx*dy, accm) with the exact integer sums I, M; acc - accm.
    PF > 0: every block prefetches the bytes PF ahead of it (gemv, see kquants.GEMV_PF)."""
    nb = yd.shape[1]
    K = nb * QK_K
    rb = w.shape[1]
    m0f = splat8(15)
    acc = np.float32(0.0)
    accm = np.float32(0.0)
    for b in range(nb):
        o = n * rb + b * PACKED_BYTES
        if PF > 0:
            prefetch_span(w, o + PF, PACKED_BYTES)
        oa = t * K + b * QK_K
        dy = yd[t, b]
        d = np.float32(f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 144)) * dy)
        dmin = np.float32(f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 146)) * dy)
        v = zero32()
        for c in range(4):  # chunk c = sub-blocks 2c (low nibbles) and 2c+1 (high) = ggml's sb
            q = load32(w, o + 32 * c)
            lo = and8(q, m0f)
            hi = and8(srl16(q, 4), m0f)
            if SB:
                v = zero32()
            v = dpwssd(v, maddubs(lo, load32(qp, oa + 64 * c)), splat16(w[n, b * PACKED_BYTES + 128 + 2 * c]))
            v = dpwssd(v, maddubs(hi, load32(qp, oa + 64 * c + 32)), splat16(w[n, b * PACKED_BYTES + 129 + 2 * c]))
            if SB:
                acc = fma_f32(np.float32(hsum32(v)), d, acc)
                m = (np.int32(w[n, b * PACKED_BYTES + 136 + 2 * c]) * np.int32(bs32[t, 8 * b + 2 * c])
                     + np.int32(w[n, b * PACKED_BYTES + 137 + 2 * c]) * np.int32(bs32[t, 8 * b + 2 * c + 1]))
                accm = fma_f32(np.float32(m), dmin, accm)
        if not SB:
            acc = fma_f32(np.float32(hsum32(v)), d, acc)
            m = hsum32(mul32(load8_u8_as_i32(w, o + 136), load8_i16_as_i32(bs32, 2 * (t * (K // 32) + 8 * b))))
            accm = fma_f32(np.float32(m), dmin, accm)
    return np.float32(acc - accm)


@pjit
def _gemv(w, qp, yd, bs32, out):
    for n in prange(w.shape[0]):
        out[0, n] = row_dot_x86(w, n, qp, 0, yd, bs32, False, kquants.GEMV_PF)


ROW_TILE = 16
TOK_TILE = 32


@pjit
def _gemm(w, qp, yd, bs32, out):
    """Tiles of ROW_TILE rows x TOK_TILE tokens; inside a tile, block by block: each (row, block) is unpacked
    once and used for every token of the tile, whose activations for that block stay in L1. Per (row, token)
    row_dot_x86's sequence (SB False); the min term (M = sum_j mins[j] * bs32[j]) and its FMA are done 8
    tokens at a time (lanes = tokens)."""
    N = w.shape[0]
    T, K = qp.shape
    nb = K // QK_K
    rb = w.shape[1]
    n_rt = (N + ROW_TILE - 1) // ROW_TILE
    n_tt = (T + TOK_TILE - 1) // TOK_TILE
    for tile in prange(n_rt * n_tt):
        r0 = (tile // n_tt) * ROW_TILE
        r1 = min(N, r0 + ROW_TILE)
        t0 = (tile % n_tt) * TOK_TILE
        t1 = min(T, t0 + TOK_TILE)
        acc = np.zeros((ROW_TILE, TOK_TILE), np.float32)
        accm = np.zeros((ROW_TILE, TOK_TILE), np.float32)
        # token-major copies for the vectorised min term (padding tokens: zeros)
        bsT = np.zeros((nb, 8, TOK_TILE), np.int32)
        ydT = np.zeros((nb, TOK_TILE), np.float32)
        for t in range(t0, t1):
            for b in range(nb):
                ydT[b, t - t0] = yd[t, b]
                for j in range(8):
                    bsT[b, j, t - t0] = bs32[t, 8 * b + j]
        n_tc = (t1 - t0 + 7) // 8
        m0f = splat8(15)
        for b in range(nb):
            for n in range(r0, r1):
                o = n * rb + b * PACKED_BYTES
                ob = b * PACKED_BYTES
                q0 = load32(w, o)
                q1 = load32(w, o + 32)
                q2 = load32(w, o + 64)
                q3 = load32(w, o + 96)
                l0 = and8(q0, m0f)
                h0 = and8(srl16(q0, 4), m0f)
                l1 = and8(q1, m0f)
                h1 = and8(srl16(q1, 4), m0f)
                l2 = and8(q2, m0f)
                h2 = and8(srl16(q2, 4), m0f)
                l3 = and8(q3, m0f)
                h3 = and8(srl16(q3, 4), m0f)
                s0 = splat16(w[n, ob + 128])
                s1 = splat16(w[n, ob + 129])
                s2 = splat16(w[n, ob + 130])
                s3 = splat16(w[n, ob + 131])
                s4 = splat16(w[n, ob + 132])
                s5 = splat16(w[n, ob + 133])
                s6 = splat16(w[n, ob + 134])
                s7 = splat16(w[n, ob + 135])
                dx = f16_to_f32(read_u16(w[n], ob + 144))
                dmx = f16_to_f32(read_u16(w[n], ob + 146))
                r = n - r0
                for t in range(t0, t1):
                    oa = t * K + b * QK_K
                    v = dpwssd(zero32(), maddubs(l0, load32(qp, oa)), s0)
                    v = dpwssd(v, maddubs(h0, load32(qp, oa + 32)), s1)
                    v = dpwssd(v, maddubs(l1, load32(qp, oa + 64)), s2)
                    v = dpwssd(v, maddubs(h1, load32(qp, oa + 96)), s3)
                    v = dpwssd(v, maddubs(l2, load32(qp, oa + 128)), s4)
                    v = dpwssd(v, maddubs(h2, load32(qp, oa + 160)), s5)
                    v = dpwssd(v, maddubs(l3, load32(qp, oa + 192)), s6)
                    v = dpwssd(v, maddubs(h3, load32(qp, oa + 224)), s7)
                    d = np.float32(dx * yd[t, b])
                    acc[r, t - t0] = fma_f32(np.float32(hsum32(v)), d, acc[r, t - t0])
                for tc in range(n_tc):
                    ob8 = 4 * (8 * tc)
                    sumi = mul32(splat32(w[n, ob + 136]), load8x32(bsT, 4 * (b * 8 * TOK_TILE) + ob8))
                    for j in range(1, 8):
                        sumi = add32(sumi, mul32(splat32(w[n, ob + 136 + j]),
                                                 load8x32(bsT, 4 * ((b * 8 + j) * TOK_TILE) + ob8)))
                    dmin = fmul(splatf(dmx), load8xf32(ydT, 4 * (b * TOK_TILE) + ob8))
                    sf = 4 * (r * TOK_TILE) + ob8
                    store8xf32(accm, sf, ffma(cvt_f32(sumi), dmin, load8xf32(accm, sf)))
        for n in range(r0, r1):
            for t in range(t0, t1):
                out[t, n] = np.float32(acc[n - r0, t - t0] - accm[n - r0, t - t0])


@pjit
def _gemm_rows(w, qp, yd, bs32, SB, out):
    """row_dot_x86 for every (row, token): the llama batch order (SB) without AVX512."""
    T = qp.shape[0]
    for n in prange(w.shape[0]):
        for t in range(T):
            out[t, n] = row_dot_x86(w, n, qp, t, yd, bs32, SB)


# ------------------------------------------------------------------------------------ gemm, 512-bit (AVX512BW)

Z_ROW_TILE = 16
Z_TOK_TILE = 32


@jit
def _unpack_z(w, n, ob, rb, m0f):
    """The 4 nibble vectors [sub-block 2c | 2c+1] and scale vectors [sc(2c) x16 | sc(2c+1) x16] of (row n,
    block at byte ob)."""
    o = n * rb + ob
    q0 = and64(srl16x2(bcast32x2(w, o), 0, 4), m0f)
    q1 = and64(srl16x2(bcast32x2(w, o + 32), 0, 4), m0f)
    q2 = and64(srl16x2(bcast32x2(w, o + 64), 0, 4), m0f)
    q3 = and64(srl16x2(bcast32x2(w, o + 96), 0, 4), m0f)
    s0 = scales2x16(w, o + 128)
    s1 = scales2x16(w, o + 130)
    s2 = scales2x16(w, o + 132)
    s3 = scales2x16(w, o + 134)
    return q0, q1, q2, q3, s0, s1, s2, s3


@jit
def _min_term_z(w, n, ob, rb, b, Tp, t0, n_tc, r, bsP, ydT, accm, SB):
    """accm[r, tokens] = fma(M, dmin * dy, accm) for row n, block at byte ob, 8 tokens per ymm: M = sum_j
    min[j] * bs32[j] by vpdpwssd on (min[2j], min[2j+1]) x (bs32[2j], bs32[2j+1]) pairs - per super-block, or
    per pair j (= ggml's sb) when SB."""
    m01 = bcast_pair16(w, n * rb + ob + 136)
    m23 = bcast_pair16(w, n * rb + ob + 138)
    m45 = bcast_pair16(w, n * rb + ob + 140)
    m67 = bcast_pair16(w, n * rb + ob + 142)
    dmx = splatf(f16_to_f32(read_u16(w[n], ob + 146)))
    for tc in range(n_tc):
        tg = t0 + 8 * tc
        pb = 2 * (2 * (4 * b * Tp + tg))  # bsP[b, 0, tg, 0]
        dmin = fmul(dmx, load8xf32(ydT, 4 * (b * Tp + tg)))
        sf = 4 * (r * accm.shape[1] + 8 * tc)
        a = load8xf32(accm, sf)
        if SB:
            a = ffma(cvt_f32(dpwssd(zero32(), load16x16(bsP, pb), m01)), dmin, a)
            a = ffma(cvt_f32(dpwssd(zero32(), load16x16(bsP, pb + 4 * Tp), m23)), dmin, a)
            a = ffma(cvt_f32(dpwssd(zero32(), load16x16(bsP, pb + 8 * Tp), m45)), dmin, a)
            a = ffma(cvt_f32(dpwssd(zero32(), load16x16(bsP, pb + 12 * Tp), m67)), dmin, a)
        else:
            m = dpwssd(zero32(), load16x16(bsP, pb), m01)
            m = dpwssd(m, load16x16(bsP, pb + 4 * Tp), m23)
            m = dpwssd(m, load16x16(bsP, pb + 8 * Tp), m45)
            m = dpwssd(m, load16x16(bsP, pb + 12 * Tp), m67)
            a = ffma(cvt_f32(m), dmin, a)
        store8xf32(accm, sf, a)


@jit
def _acc_z(acc, r, tt, d, u0, u1, u2, u3, SB):
    """acc[r, tt] = fma(I, d, acc[r, tt]) with I the exact sum of the chunk vectors u0..u3: once per block, or
    once per chunk (= ggml's sb) when SB."""
    a = acc[r, tt]
    if SB:
        a = fma_f32(np.float32(hsum32(fold16(u0))), d, a)
        a = fma_f32(np.float32(hsum32(fold16(u1))), d, a)
        a = fma_f32(np.float32(hsum32(fold16(u2))), d, a)
        a = fma_f32(np.float32(hsum32(fold16(u3))), d, a)
    else:
        a = fma_f32(np.float32(hsum32(fold16(add32z(add32z(u0, u1), add32z(u2, u3))))), d, a)
    acc[r, tt] = a


@jit
def _block_sum_z(q0, q1, q2, q3, s0, s1, s2, s3, y0, y1, y2, y3):
    """<8 x i32> whose lanes add up to the block's integer sum I (chunk vectors of one row, folded)."""
    return fold16(add32z(dpwssd_z(dpwssd_z(zero16x32(), maddubs_z(q0, y0), s0), maddubs_z(q1, y1), s1),
                         dpwssd_z(dpwssd_z(zero16x32(), maddubs_z(q2, y2), s2), maddubs_z(q3, y3), s3)))


@pjit
def _gemm_z(w, qp, ydT, bsP, SB, out):
    """zmm gemm on the same repacked rows; ydT (nb, Tp) f32 and bsP (nb, 4, Tp, 2) int16 = bs32 pairs
    (2j, 2j+1) are token-major copies (Tp = T rounded up to 8, padding zero) for the vectorised min term.

    Each thread takes Z_ROW_TILE rows and runs through the tokens Z_TOK_TILE at a time, block by block, two
    rows at a time; per (row, block) the 8 sub-blocks are unpacked once into 4 zmm, each [sub-block 2c | 2c+1]
    = [low | high nibbles of chunk c], so one zmm activation load (64 contiguous permuted quants) feeds each;
    with the scale vectors [sc(2c) x16 | sc(2c+1) x16] vpmaddubsw + vpdpwssd give chunk c's integer sum in 16
    lanes. Per (row, token) row_dot_x86's float sequence (SB as there): d = dx*dy is computed for the token
    tile per (row, block); the min term is _min_term_z's."""
    N = w.shape[0]
    T, K = qp.shape
    nb = K // QK_K
    rb = w.shape[1]
    Tp = ydT.shape[1]
    n_rt = (N + Z_ROW_TILE - 1) // Z_ROW_TILE
    for rt in prange(n_rt):
        r0 = rt * Z_ROW_TILE
        r1 = min(N, r0 + Z_ROW_TILE)
        # row Z_ROW_TILE: scratch for the partner of an odd last row
        acc = np.empty((Z_ROW_TILE + 1, Z_TOK_TILE), np.float32)
        accm = np.empty((Z_ROW_TILE, Z_TOK_TILE), np.float32)
        dbuf = np.empty((2, Z_TOK_TILE), np.float32)
        ibuf = np.empty((2, 8, 8), np.int32)  # per row of the pair: 8 tokens' folded integer sums
        m0f = splat8z(15)
        for t0 in range(0, T, Z_TOK_TILE):
            t1 = min(T, t0 + Z_TOK_TILE)
            for t in range(t0, t1):  # this tile's output lines, written at its end
                prefetchw(out, 4 * (t * N + r0))
                prefetchw(out, 4 * (t * N + r1) - 4)
            acc[:] = 0
            accm[:] = 0
            n_tc = (t1 - t0 + 7) // 8
            for b in range(nb):
                ob = b * PACKED_BYTES
                for n in range(r0, r1, 2):
                    n2 = min(n + 1, r1 - 1)
                    ra = n - r0
                    rb2 = n + 1 - r0 if n + 1 < r1 else Z_ROW_TILE
                    a0, a1, a2, a3, sa0, sa1, sa2, sa3 = _unpack_z(w, n, ob, rb, m0f)
                    b0, b1, b2, b3, sb0, sb1, sb2, sb3 = _unpack_z(w, n2, ob, rb, m0f)
                    dxa = splatf(f16_to_f32(read_u16(w[n], ob + 144)))
                    dxb = splatf(f16_to_f32(read_u16(w[n2], ob + 144)))
                    for tc in range(n_tc):
                        yv = load8xf32(ydT, 4 * (b * Tp + t0 + 8 * tc))
                        store8xf32(dbuf, 32 * tc, fmul(dxa, yv))
                        store8xf32(dbuf, 4 * Z_TOK_TILE + 32 * tc, fmul(dxb, yv))
                    if SB:
                        for t in range(t0, t1):
                            oa = t * K + b * QK_K
                            y0 = load64(qp, oa)
                            y1 = load64(qp, oa + 64)
                            y2 = load64(qp, oa + 128)
                            y3 = load64(qp, oa + 192)
                            _acc_z(acc, ra, t - t0, dbuf[0, t - t0],
                                   dpwssd_z(zero16x32(), maddubs_z(a0, y0), sa0),
                                   dpwssd_z(zero16x32(), maddubs_z(a1, y1), sa1),
                                   dpwssd_z(zero16x32(), maddubs_z(a2, y2), sa2),
                                   dpwssd_z(zero16x32(), maddubs_z(a3, y3), sa3), True)
                            _acc_z(acc, rb2, t - t0, dbuf[1, t - t0],
                                   dpwssd_z(zero16x32(), maddubs_z(b0, y0), sb0),
                                   dpwssd_z(zero16x32(), maddubs_z(b1, y1), sb1),
                                   dpwssd_z(zero16x32(), maddubs_z(b2, y2), sb2),
                                   dpwssd_z(zero16x32(), maddubs_z(b3, y3), sb3), True)
                        continue
                    # per-block order: the 16-lane integer sums of 8 tokens go to ibuf, are reduced together
                    # (lanes = tokens), and the FMAs run 8 tokens per vector
                    for tc in range(n_tc):
                        ta = t0 + 8 * tc
                        tb = min(t1, ta + 8)
                        for t in range(ta, ta + 8):
                            k = t - ta
                            if t < tb:
                                oa = t * K + b * QK_K
                                y0 = load64(qp, oa)
                                y1 = load64(qp, oa + 64)
                                y2 = load64(qp, oa + 128)
                                y3 = load64(qp, oa + 192)
                                ia = _block_sum_z(a0, a1, a2, a3, sa0, sa1, sa2, sa3, y0, y1, y2, y3)
                                ib = _block_sum_z(b0, b1, b2, b3, sb0, sb1, sb2, sb3, y0, y1, y2, y3)
                                store8x32(ibuf, 32 * k, ia)
                                store8x32(ibuf, 256 + 32 * k, ib)
                            else:
                                store8x32(ibuf, 32 * k, zero32())
                                store8x32(ibuf, 256 + 32 * k, zero32())
                        sa = 4 * (ra * Z_TOK_TILE + 8 * tc)
                        store8xf32(acc, sa, ffma(cvt_f32(sums8x8(ibuf, 0)), load8xf32(dbuf, 32 * tc),
                                                 load8xf32(acc, sa)))
                        sb_ = 4 * (rb2 * Z_TOK_TILE + 8 * tc)
                        db = load8xf32(dbuf, 4 * Z_TOK_TILE + 32 * tc)
                        store8xf32(acc, sb_, ffma(cvt_f32(sums8x8(ibuf, 256)), db, load8xf32(acc, sb_)))
                for n in range(r0, r1):
                    _min_term_z(w, n, ob, rb, b, Tp, t0, n_tc, n - r0, bsP, ydT, accm, SB)
            for t in range(t0, t1):
                for n in range(r0, r1):
                    out[t, n] = np.float32(acc[n - r0, t - t0] - accm[n - r0, t - t0])


@jit  # serial: microseconds of work, where a parallel launch can cost more on a busy machine
def _prep_z(qs, bsums, d, qp, ydT, bsP):
    """Q8_K activations (qs (T, K) int8, bsums (T, K/16) int16, d (T, K/256) f32) -> _gemm_z's inputs in one
    pass: qp (T, K) int8 in kquants.PERM order (what kquants.prep_q8k gives), ydT (nb, Tp) f32 = d transposed,
    bsP (nb, 4, Tp, 2) int16: bsP[b, j, t, k] = bsum32 of group 8b + 2j + k (Tp = T rounded up to 8; callers
    zero the padding)."""
    T, K = qs.shape
    nb = K // QK_K
    for t in range(T):
        for g in range(K // 32):
            perm32_store(qp, t * K + 32 * g, qs, t * K + 32 * g)
        for b in range(nb):
            ydT[b, t] = d[t, b]
            for g in range(8):
                bsP[b, g // 2, t, g % 2] = np.int16(np.int32(bsums[t, 16 * b + 2 * g])
                                                   + np.int32(bsums[t, 16 * b + 2 * g + 1]))


# -------------------------------------------------------------- gemm, tokens in lanes (AVX512-VNNI, _gemm_vnni)

V_ROW_TILE = 16  # rows per parallel task
V_TOK_TILE = 64  # tokens per pass over a task's rows: 4 zmm of 16 tokens
# below this many tokens the padding to 32 costs more than _gemm_vnni saves (1536x8960, 2 threads, GFLOP/s
# _gemm_z / _gemm_vnni: T=8 218 / 116, T=16 251 / 257, T=24 300 / 362, T=512 242 / 473)
V_MIN_TOKENS = 16


@jit
def _prep_vnni(qs, bsums, d, row8, row32, qT32, ydT, bsP):
    """Q8_K activations -> _gemm_vnni's inputs: qT32 (Tp/16, K/4, 16) int32 = each token's quants in
    kquants.PERM order (row8 / row32: one token's scratch, two views of one buffer), 4 bytes per lane, 16 tokens
    per 64-byte vector; ydT (nb, Tp) and bsP (nb, 4, Tp, 2) as _prep_z. Callers zero the padding tokens."""
    T, K = qs.shape
    nb = K // QK_K
    for t in range(T):
        for g in range(K // 32):
            perm32_store(row8, 32 * g, qs, t * K + 32 * g)
        gt, tl = t // 16, t % 16
        for q in range(K // 4):
            qT32[gt, q, tl] = row32[q]
        for b in range(nb):
            ydT[b, t] = d[t, b]
            for g in range(8):
                bsP[b, g // 2, t, g % 2] = np.int16(np.int32(bsums[t, 16 * b + 2 * g])
                                                   + np.int32(bsums[t, 16 * b + 2 * g + 1]))


@ijit
def _fma_tokens(acc, o, i, dx, ydT, yo):
    """acc[16 tokens at byte o] = fma(float(i), dx * dy, acc) lane-wise (dy: 16 tokens at byte yo of ydT)."""
    store16xf32(acc, o, ffma_z(cvt_f32z(i), fmul_z(splatfz(dx), load16xf32(ydT, yo)), load16xf32(acc, o)))


@pjit
def _gemm_vnni(w, qT, ydT, bsP, SB, out):
    """gemm with the tokens in the lanes: qT (Tp/16, K/4, 64) int8 from _prep_vnni (Tp = T rounded up to 32).

    Per (4 rows, block) the 4-bit quants are unpacked once to bytes (wq, 1 KB in L1); then for 32 tokens at a
    time, every 4 weights of a row are broadcast to all 16 lanes and vpdpbusd adds their products with 4
    quants of 16 tokens to that (row, token group)'s half-sub-block sum S (16 weights: |S| <= 16*15*127 fits
    int16), and vpdpwssd with (scale, 0) int16 pairs adds scale * S to the block's integer sum I - exact
    integers, the same I and M as row_dot_x86 - so no horizontal sums at all: the float FMAs of
    row_dot_x86's sequence (SB as there) run 16 tokens per instruction. 4 rows x 2 token groups = 8 sums in
    registers: per 4 weights 6 loads feed 8 vpdpbusd (64 multiply-adds each)."""
    N = w.shape[0]
    T = out.shape[0]
    nb, Tp = ydT.shape
    nq = qT.shape[1]
    rb = w.shape[1]
    n_rt = (N + V_ROW_TILE - 1) // V_ROW_TILE
    for rt in prange(n_rt):
        r0 = rt * V_ROW_TILE
        r1 = min(N, r0 + V_ROW_TILE)
        wq = np.empty(4 * QK_K, np.uint8)           # (4 rows, 256) unpacked quants of one block
        sc = np.empty(32, np.int32)                 # (4 rows, 8) sub-block scales
        mp = np.empty((4, 4), np.int32)             # (4 rows, 4) min pairs (2j, 2j+1) as int16 pairs
        dx = np.empty(4, np.float32)
        dmx = np.empty(4, np.float32)
        acc = np.empty((V_ROW_TILE + 3, V_TOK_TILE), np.float32)   # + 3: clamped rows past r1
        accm = np.empty((V_ROW_TILE + 3, V_TOK_TILE), np.float32)
        for t0 in range(0, Tp, V_TOK_TILE):
            t1 = min(Tp, t0 + V_TOK_TILE)
            acc[:] = 0
            accm[:] = 0
            for b in range(nb):
                ob = b * PACKED_BYTES
                for r4 in range(r0, r1, 4):
                    ra = r4 - r0
                    for r in range(4):
                        n = min(r4 + r, r1 - 1)
                        for c in range(4):
                            unpack_nibbles64(wq, QK_K * r + 64 * c, w, n * rb + ob + 32 * c)
                        for j in range(8):
                            sc[8 * r + j] = np.int32(w[n, ob + 128 + j])
                        for jp in range(4):
                            mp[r, jp] = np.int32(w[n, ob + 136 + 2 * jp]) | (np.int32(w[n, ob + 137 + 2 * jp]) << 16)
                        dx[r] = f16_to_f32(read_u16(w[n], ob + 144))
                        dmx[r] = f16_to_f32(read_u16(w[n], ob + 146))
                    for tg in range(t0, t1, 32):
                        g0 = tg // 16
                        oy = 4 * (b * Tp + tg)           # ydT[b, tg]
                        oa = 4 * (ra * V_TOK_TILE + tg - t0)
                        i00 = i01 = i10 = i11 = i20 = i21 = i30 = i31 = zero16x32()  # block sums I
                        for c in range(4):
                            for h in range(4):
                                j = 2 * c + h // 2
                                s00 = s01 = s10 = s11 = s20 = s21 = s30 = s31 = zero16x32()  # half sums S
                                for q in range(4):
                                    k = 16 * c + 4 * h + q   # 4-weight group in the block
                                    y0 = load64(qT, 64 * (g0 * nq + 64 * b + k))
                                    y1 = load64(qT, 64 * ((g0 + 1) * nq + 64 * b + k))
                                    u = bcast4z(wq, 4 * k)
                                    s00 = dpbusd_z(s00, u, y0)
                                    s01 = dpbusd_z(s01, u, y1)
                                    u = bcast4z(wq, QK_K + 4 * k)
                                    s10 = dpbusd_z(s10, u, y0)
                                    s11 = dpbusd_z(s11, u, y1)
                                    u = bcast4z(wq, 2 * QK_K + 4 * k)
                                    s20 = dpbusd_z(s20, u, y0)
                                    s21 = dpbusd_z(s21, u, y1)
                                    u = bcast4z(wq, 3 * QK_K + 4 * k)
                                    s30 = dpbusd_z(s30, u, y0)
                                    s31 = dpbusd_z(s31, u, y1)
                                v = as16z(splat32z(sc[j]))
                                i00 = dpwssd_z(i00, as16z(s00), v)
                                i01 = dpwssd_z(i01, as16z(s01), v)
                                v = as16z(splat32z(sc[8 + j]))
                                i10 = dpwssd_z(i10, as16z(s10), v)
                                i11 = dpwssd_z(i11, as16z(s11), v)
                                v = as16z(splat32z(sc[16 + j]))
                                i20 = dpwssd_z(i20, as16z(s20), v)
                                i21 = dpwssd_z(i21, as16z(s21), v)
                                v = as16z(splat32z(sc[24 + j]))
                                i30 = dpwssd_z(i30, as16z(s30), v)
                                i31 = dpwssd_z(i31, as16z(s31), v)
                            # ggml_gemm_q4_K_8x8_q8_K (SB): one FMA per 64-weight pair; ggml_gemv_q4_K_8x8_q8_K:
                            # one per block
                            if SB or c == 3:
                                _fma_tokens(acc, oa, i00, dx[0], ydT, oy)
                                _fma_tokens(acc, oa + 64, i01, dx[0], ydT, oy + 64)
                                _fma_tokens(acc, oa + 4 * V_TOK_TILE, i10, dx[1], ydT, oy)
                                _fma_tokens(acc, oa + 4 * V_TOK_TILE + 64, i11, dx[1], ydT, oy + 64)
                                _fma_tokens(acc, oa + 8 * V_TOK_TILE, i20, dx[2], ydT, oy)
                                _fma_tokens(acc, oa + 8 * V_TOK_TILE + 64, i21, dx[2], ydT, oy + 64)
                                _fma_tokens(acc, oa + 12 * V_TOK_TILE, i30, dx[3], ydT, oy)
                                _fma_tokens(acc, oa + 12 * V_TOK_TILE + 64, i31, dx[3], ydT, oy + 64)
                                i00 = i01 = i10 = i11 = i20 = i21 = i30 = i31 = zero16x32()
                        # the min term accm = fma(M, dmin * dy, accm), M = sum_j min_j * bs32_j by vpdpwssd on
                        # (min 2j, min 2j+1) x (bs32 2j, bs32 2j+1) pairs: per block, or per pair (SB)
                        for r in range(4):
                            dmr = splatfz(dmx[r])
                            for t in range(tg, tg + 32, 16):
                                o = 4 * ((ra + r) * V_TOK_TILE + t - t0)
                                bo = 4 * (b * 4 * Tp + t)           # bsP[b, 0, t, 0]
                                dmin_y = fmul_z(dmr, load16xf32(ydT, 4 * (b * Tp + t)))
                                a = load16xf32(accm, o)
                                if SB:
                                    for jp in range(4):
                                        m = dpwssd_z(zero16x32(), load32x16z(bsP, bo + 4 * jp * Tp),
                                                     as16z(splat32z(mp[r, jp])))
                                        a = ffma_z(cvt_f32z(m), dmin_y, a)
                                else:
                                    m = dpwssd_z(zero16x32(), load32x16z(bsP, bo), as16z(splat32z(mp[r, 0])))
                                    m = dpwssd_z(m, load32x16z(bsP, bo + 4 * Tp), as16z(splat32z(mp[r, 1])))
                                    m = dpwssd_z(m, load32x16z(bsP, bo + 8 * Tp), as16z(splat32z(mp[r, 2])))
                                    m = dpwssd_z(m, load32x16z(bsP, bo + 12 * Tp), as16z(splat32z(mp[r, 3])))
                                    a = ffma_z(cvt_f32z(m), dmin_y, a)
                                store16xf32(accm, o, a)
            for t in range(t0, min(T, t1)):
                for n in range(r0, r1):
                    out[t, n] = np.float32(acc[n - r0, t - t0] - accm[n - r0, t - t0])


# ------------------------------------------------------------ weights llama.cpp does not repack (ne1 % 8 != 0)
# ggml_vec_dot_q4_K_q8_K, AVX2 (ggml-cpu/arch/x86/quants.c), below 8 tokens, and llama.cpp's tiled K-quant
# matmul from 8 on (kquants.TILED_MIN_BATCH), on rows packed as above with qs in stored order. vec_dot, per
# super-block: lane l (0..7) of sum scale * q.y over the chunks' bytes 4l..4l+3, acc[l] = fma(y.d * x.d,
# (float)lane_l, acc[l]); the mins in 4 lanes, m[l] = fma(-y.d * x.dmin, (float)(min[2l] * bsum32[2l] +
# min[2l+1] * bsum32[2l+1]), m[l]); s = hsum_float_8(acc) + ((m0 + m2) + (m1 + m3)).


@jit
def _rows_block(w, n, b, qs, bs32, t, m0f):
    """(<8 x i32> lanes of sum scale * q.y, the 4 min lanes as int32 scalars) of super-block b of row n."""
    K = qs.shape[1]
    o = n * w.shape[1] + b * PACKED_BYTES
    ob = b * PACKED_BYTES
    oa = t * K + b * QK_K
    sumi = zero32()
    for c in range(4):
        q = load32(w, o + 32 * c)
        sumi = dpwssd(sumi, maddubs(and8(q, m0f), load32(qs, oa + 64 * c)), splat16(w[n, ob + 128 + 2 * c]))
        sumi = dpwssd(sumi, maddubs(and8(srl16(q, 4), m0f), load32(qs, oa + 64 * c + 32)),
                      splat16(w[n, ob + 129 + 2 * c]))
    m = np.empty(4, np.int32)
    for l in range(4):
        m[l] = (np.int32(w[n, ob + 136 + 2 * l]) * np.int32(bs32[t, 8 * b + 2 * l])
                + np.int32(w[n, ob + 137 + 2 * l]) * np.int32(bs32[t, 8 * b + 2 * l + 1]))
    return sumi, m


@jit
def row_dot_vec_dot(w, n, qs, yd, bs32, t, PF=0):
    m0f = splat8(15)
    acc = zerof()
    m0 = m1 = m2 = m3 = np.float32(0.0)
    for b in range(yd.shape[1]):
        if PF > 0:
            prefetch_span(w, n * w.shape[1] + b * PACKED_BYTES + PF, PACKED_BYTES)
        sumi, m = _rows_block(w, n, b, qs, bs32, t, m0f)
        dy = yd[t, b]
        d = np.float32(dy * f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 144)))
        dmin = np.float32(-dy * f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 146)))
        m0 = fma_f32(dmin, np.float32(m[0]), m0)
        m1 = fma_f32(dmin, np.float32(m[1]), m1)
        m2 = fma_f32(dmin, np.float32(m[2]), m2)
        m3 = fma_f32(dmin, np.float32(m[3]), m3)
        acc = ffma(splatf(d), cvt_f32(sumi), acc)
    return hsum_float_8(acc) + np.float32(np.float32(m0 + m2) + np.float32(m1 + m3))


@jit
def row_dot_tiled(w, n, qs, yd, bs32, t):
    """Row n . token t in llama.cpp's tiled order (kquants.TILED_MIN_BATCH)."""
    m0f = splat8(15)
    acc = np.float32(0.0)
    for b in range(yd.shape[1]):
        sumi, m = _rows_block(w, n, b, qs, bs32, t, m0f)
        r = np.float32(np.float32(hsum32(sumi)) * f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 144)))
        r = fma_f32(-f16_to_f32(read_u16(w[n], b * PACKED_BYTES + 146)), np.float32(m[0] + m[1] + m[2] + m[3]), r)
        acc = fma_f32(r, yd[t, b], acc)
    return acc


@pjit
def _gemm_unpacked(w, qs, yd, bs32, out, TILED):
    N = w.shape[0]
    T = qs.shape[0]
    for g in prange((N + ROW_TILE - 1) // ROW_TILE):
        for n in range(g * ROW_TILE, min(N, g * ROW_TILE + ROW_TILE)):
            for t in range(T):
                if TILED:
                    out[t, n] = row_dot_tiled(w, n, qs, yd, bs32, t)
                else:
                    out[t, n] = row_dot_vec_dot(w, n, qs, yd, bs32, t, kquants.GEMV_PF if T == 1 else 0)


def _mm_unpacked(packed, a, out, llama_order=False):
    tiled = llama_order and a.qs.shape[0] >= kquants.TILED_MIN_BATCH
    _gemm_unpacked(packed[0], a.qs, a.d, kquants.group_sums32(a.bsums), out, tiled)


def _pack_fast(raw, K):
    out = empty_aligned((raw.shape[0], K // QK_K * PACKED_BYTES), np.uint8)
    if llama_repacks(GGMLType.Q4_K, raw.shape[0]):
        _repack(raw, out, True)
        return (out,)
    _repack(raw, out, False)
    return (out, "vec_dot")


def _gemv_fast(packed, a, out):
    if len(packed) > 1:
        return _mm_unpacked(packed, a, out)
    k = kquants.prepare(a, 0)
    _gemv(packed[0], k.qp, k.d, k.bs32, out)


def _gemm_fast(packed, a, out, sb=False):
    if len(packed) > 1:
        return _mm_unpacked(packed, a, out)
    if HAS_VNNI512 and a.qs.shape[0] >= V_MIN_TOKENS:
        T, K = a.qs.shape
        nb, Tp = K // QK_K, (T + 31) // 32 * 32
        buf = empty_aligned(K, np.int8)
        qT = zeros_aligned((Tp // 16, K // 4, 64), np.int8)
        ydT = zeros_aligned((nb, Tp), np.float32)
        bsP = zeros_aligned((nb, 4, Tp, 2), np.int16)
        _prep_vnni(a.qs, a.bsums, a.d, buf, buf.view(np.int32), qT.view(np.int32), ydT, bsP)
        _gemm_vnni(packed[0], qT, ydT, bsP, sb, out)
    elif HAS_AVX512:
        T, K = a.qs.shape
        nb, Tp = K // QK_K, (T + 7) // 8 * 8
        qp = empty_aligned((T, K), np.int8)
        ydT = zeros_aligned((nb, Tp), np.float32)
        bsP = zeros_aligned((nb, 4, Tp, 2), np.int16)
        _prep_z(a.qs, a.bsums, a.d, qp, ydT, bsP)
        _gemm_z(packed[0], qp, ydT, bsP, sb, out)
    else:
        k = kquants.prepare(a, 0)
        if sb:
            _gemm_rows(packed[0], k.qp, k.d, k.bs32, True, out)
        else:
            _gemm(packed[0], k.qp, k.d, k.bs32, out)


def _pack_raw(raw, K):
    return (raw,)


def _gemm_llama(packed, a, out):
    """llama.cpp's batch order (ggml-cpu repack.cpp forward_mul_mat): the first T - T % 4 tokens through
    ggml_gemm_q4_K_8x8_q8_K (per-sb order), the rest through ggml_gemv_q4_K_8x8_q8_K (per-block order)."""
    if len(packed) > 1:
        return _mm_unpacked(packed, a, out, llama_order=True)
    T = a.qs.shape[0]
    T4 = T - T % 4
    for t0, t1, sb in ((0, T4, True), (T4, T, False)):
        if t1 > t0:
            part = Activations(a.vec_dot_type)
            part.qs, part.d, part.bsums = a.qs[t0:t1], a.d[t0:t1], a.bsums[t0:t1]
            if t1 - t0 == 1 and not sb:
                _gemv_fast(packed, part, out[t0:t1])
            else:
                _gemm_fast(packed, part, out[t0:t1], sb)


if HAS_AVX2:
    FORMAT = register(BlockFormat(GGMLType.Q4_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, _pack_fast,
                                  _gemv_fast, _gemm_fast, _gemm_llama))
else:
    FORMAT = register(BlockFormat(GGMLType.Q4_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, _pack_raw,
                                  _mm_scalar, _mm_scalar))
SCALAR = (_pack_raw, _mm_scalar)  # the portable path, tested on every machine
