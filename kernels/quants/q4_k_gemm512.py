"""Q4_K's batched 512-bit kernels over the repacked rows of `q4_k` (PACKED_BYTES-byte blocks): `_gemm_z`
(AVX512BW, rows unpacked once for several tokens) and `_gemm_vnni` (AVX512-VNNI, tokens in the lanes). Both give
q4_k.row_dot_x86's bits; see q4_k's docstring for the orders."""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, jit, pjit
from ..ggml_type import QK_K
from ._bits import f16_to_f32, read_u16
from ..fp16 import fma_f32
from ._simd512 import (as16z, bcast4z, cvt_f32z, dpbusd_z, ffma_z, fmul_z, load16xf32, load32x16z, splat32z, splatfz,
                       store16xf32, unpack_nibbles64)
from ._simd import load16x16
from ._simd512 import (add32z, and64, bcast_pair16, bcast32x2, dpwssd_z, fold16, load64, maddubs_z, perm32_store,
                       prefetchw, scales2x16, splat8z, srl16x2, store8x32, sums8x8, zero16x32)
from ._simd import (cvt_f32, dpwssd, ffma, fmul, hsum32, load8_i16_as_i32, load8_u8_as_i32, load8xf32, mul32,
                    prefetch_span, splatf, store8xf32, zero32)
from ._simd512 import pair_lo16z, store_diff_t16_nt
from ._simd512 import (d_dmin_y, fma_i_m, lane0_minus_lane1, scales8_pair0, scales8_pair1, scales8_pair2, scales8_pair3,
                       zero4f)

PACKED_BYTES = 148  # a repacked Q4_K block (q4_k's docstring: qs permuted, 8 scales, 8 mins, d, dmin)


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


@jit
def row_dot_z(w, n, qp, t, yd, bs32, PF=0):
    """row_dot_x86's per-block order (ggml_gemv_q4_K_8x8_q8_K) on zmm, with fewer instructions per block: the
    nibbles as in _unpack_z, the four scale vectors from one broadcast load, I summed by _block_sum_z, and the
    two float chains (acc = fma(I, dx*dy, acc), accm = fma(M, dminx*dy, accm)) as two lanes of one vector,
    reduced together. The same I, M and FMAs. PF as there."""
    nb = yd.shape[1]
    K = nb * QK_K
    rb = w.shape[1]
    m0f = splat8z(15)
    acc = zero4f()  # [acc, accm, -, -]
    for b in range(nb):
        o = n * rb + b * PACKED_BYTES
        if PF > 0:
            prefetch_span(w, o + PF, PACKED_BYTES)
        oa = t * K + b * QK_K
        q0 = and64(srl16x2(bcast32x2(w, o), 0, 4), m0f)  # [sub-block 2c | 2c+1] of chunk c, as _unpack_z
        q1 = and64(srl16x2(bcast32x2(w, o + 32), 0, 4), m0f)
        q2 = and64(srl16x2(bcast32x2(w, o + 64), 0, 4), m0f)
        q3 = and64(srl16x2(bcast32x2(w, o + 96), 0, 4), m0f)
        v = _block_sum_z(q0, q1, q2, q3, scales8_pair0(w, o + 128), scales8_pair1(w, o + 128),
                         scales8_pair2(w, o + 128), scales8_pair3(w, o + 128),
                         load64(qp, oa), load64(qp, oa + 64), load64(qp, oa + 128), load64(qp, oa + 192))
        m = mul32(load8_u8_as_i32(w, o + 136), load8_i16_as_i32(bs32, 2 * (t * (K // 32) + 8 * b)))
        acc = fma_i_m(acc, v, m, d_dmin_y(w, o + 144, yd[t, b]))
    return lane0_minus_lane1(acc)


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
        r0, r1 = rt * Z_ROW_TILE, min(N, (rt + 1) * Z_ROW_TILE)
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


@ijit
def _token_scales(bsums, d, t, ydT, bsP):
    """Token t's column of the gemms' token-major scales: ydT[b, t] = d[t, b] and bsP[b, j, t, k] = the bsum32 of
    group 8b + 2j + k (the pairs the min term's vpdpwssd takes)."""
    for b in range(ydT.shape[0]):
        ydT[b, t] = d[t, b]
        for g in range(8):
            bsP[b, g // 2, t, g % 2] = np.int16(np.int32(bsums[t, 16 * b + 2 * g])
                                               + np.int32(bsums[t, 16 * b + 2 * g + 1]))


@jit  # serial: microseconds of work, where a parallel launch can cost more on a busy machine
def _prep_z(qs, bsums, d, qp, ydT, bsP):
    """Q8_K activations (qs (T, K) int8, bsums (T, K/16) int16, d (T, K/256) f32) -> _gemm_z's inputs in one
    pass: qp (T, K) int8 in kquants.PERM order (what kquants.prep_q8k gives), ydT (nb, Tp) f32 = d transposed,
    bsP (nb, 4, Tp, 2) int16: bsP[b, j, t, k] = bsum32 of group 8b + 2j + k (Tp = T rounded up to 8; callers
    zero the padding)."""
    T, K = qs.shape
    for t in range(T):
        for g in range(K // 32):
            perm32_store(qp, t * K + 32 * g, qs, t * K + 32 * g)
        _token_scales(bsums, d, t, ydT, bsP)


# -------------------------------------------------------------- gemm, tokens in lanes (AVX512-VNNI, _gemm_vnni)

V_ROW_TILE = 16  # rows whose block is unpacked at once (wq: 4 KB); a row tile's output is one line per token
V_UNIT = 32      # tokens per pass of the inner loop: 2 zmm of 16, so 4 rows x 2 x 2 half sub-blocks = 16 chains
# below this many tokens the padding to a unit costs more than _gemm_vnni saves over _gemm_z (1536x8960, 2 threads,
# ms _gemm_vnni / _gemm_z with 48-token units: T=16 2.01 / 1.96, T=20 2.17 / 2.01, T=24 2.13 / 2.19, T=32 2.04 / 2.74)
V_MIN_TOKENS = 24


@pjit
def _prep_vnni(qs, bsums, d, qT32, ydT, bsP):
    """Q8_K activations -> _gemm_vnni's inputs: qT32 (Tp/16, K/4, 16) int32 = each token's quants in
    kquants.PERM order, 4 bytes per lane, 16 tokens per 64-byte vector; ydT (nb, Tp) and bsP (nb, 4, Tp, 2) as
    _prep_z. Tp: T rounded up to 16; callers zero the padding tokens. In parallel by groups of 16 tokens
    (serial, it took 1.8 ms of a 19 ms 8960x1536 product with 512 tokens)."""
    T, K = qs.shape
    for gt in prange((T + 15) // 16):
        row8 = np.empty(K, np.int8)
        row32 = row8.view(np.int32)
        for t in range(16 * gt, min(T, 16 * gt + 16)):
            for g in range(K // 32):
                perm32_store(row8, 32 * g, qs, t * K + 32 * g)
            tl = t % 16
            for q in range(K // 4):
                qT32[gt, q, tl] = row32[q]
            _token_scales(bsums, d, t, ydT, bsP)


@ijit
def unpack_rows(w, r0, r1, ob, wq, sc, dx):
    """The block at byte ob of len(dx) rows from r0 (past r1 - 1: copies of the last), unpacked for the gemms
    with the tokens in the lanes: wq (rows x 256) its quants as bytes (a chunk's low nibbles, then its high ones),
    sc (rows x 8) the sub-block scales, dx the super-block scales d."""
    rb = w.shape[1]
    for r in range(dx.shape[0]):
        n = min(r0 + r, r1 - 1)
        for c in range(4):
            unpack_nibbles64(wq, QK_K * r + 64 * c, w, n * rb + ob + 32 * c)
        for j in range(8):
            sc[8 * r + j] = w[n, ob + 128 + j]
        dx[r] = f16_to_f32(read_u16(w[n], ob + 144))


@ijit
def _fma_tokens(acc, o, i, dx, ydT, yo):
    """acc[16 tokens at byte o] = fma(float(i), dx * dy, acc) lane-wise (dy: 16 tokens at byte yo of ydT)."""
    store16xf32(acc, o, ffma_z(cvt_f32z(i), fmul_z(splatfz(dx), load16xf32(ydT, yo)), load16xf32(acc, o)))


@ijit
def _rows4_group(qT, g, b, wq, ow, sc, j0, SB, acc, oa, R, dx, r4, ydT, oy):
    """_gemm_vnni's work for 4 rows (from r4; quants at byte ow of wq, scales from sc[j0]) and the one token group
    g (16 tokens, acc at byte oa, their d factors at byte oy of ydT): the last tokens of a tile with a group of 16
    past its units of V_UNIT."""
    nq = qT.shape[1]
    i0 = i1 = i2 = i3 = zero16x32()
    for c in range(4):
        for hp in range(2):
            j = j0 + 2 * c + hp
            a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = zero16x32()
            for q in range(4):
                k = 16 * c + 8 * hp + q
                y = load64(qT, 64 * (g * nq + 64 * b + k))
                a0 = dpbusd_z(a0, bcast4z(wq, ow + 4 * k), y)
                a1 = dpbusd_z(a1, bcast4z(wq, ow + QK_K + 4 * k), y)
                a2 = dpbusd_z(a2, bcast4z(wq, ow + 2 * QK_K + 4 * k), y)
                a3 = dpbusd_z(a3, bcast4z(wq, ow + 3 * QK_K + 4 * k), y)
                y = load64(qT, 64 * (g * nq + 64 * b + k + 4))
                b0 = dpbusd_z(b0, bcast4z(wq, ow + 4 * k + 16), y)
                b1 = dpbusd_z(b1, bcast4z(wq, ow + QK_K + 4 * k + 16), y)
                b2 = dpbusd_z(b2, bcast4z(wq, ow + 2 * QK_K + 4 * k + 16), y)
                b3 = dpbusd_z(b3, bcast4z(wq, ow + 3 * QK_K + 4 * k + 16), y)
            i0 = dpwssd_z(i0, pair_lo16z(a0, b0), as16z(splat32z(sc[j] * 0x10001)))
            i1 = dpwssd_z(i1, pair_lo16z(a1, b1), as16z(splat32z(sc[j + 8] * 0x10001)))
            i2 = dpwssd_z(i2, pair_lo16z(a2, b2), as16z(splat32z(sc[j + 16] * 0x10001)))
            i3 = dpwssd_z(i3, pair_lo16z(a3, b3), as16z(splat32z(sc[j + 24] * 0x10001)))
        if SB or c == 3:
            _fma_tokens(acc, oa, i0, dx[r4], ydT, oy)
            _fma_tokens(acc, oa + R, i1, dx[r4 + 1], ydT, oy)
            _fma_tokens(acc, oa + 2 * R, i2, dx[r4 + 2], ydT, oy)
            _fma_tokens(acc, oa + 3 * R, i3, dx[r4 + 3], ydT, oy)
            i0 = i1 = i2 = i3 = zero16x32()


@pjit
def _gemm_vnni(w, qT, ydT, bsP, SB, TT, nt, NT, out):
    """gemm with the tokens in the lanes: qT (Tp/16, K/4, 64) int8 from _prep_vnni (Tp = T rounded up to 16, TT a
    multiple of V_UNIT or Tp; a tile's last 16 tokens past its units go by _rows4_group).

    nt chunks of consecutive row tiles (one per thread; any nt gives the same bits), each going through the
    tokens TT at a time (kquants.lane_token_tile) and, per token tile, through its row tiles: per (16 rows,
    block) the 4-bit quants are unpacked once to bytes (wq, 4 KB in L1); then for 32 tokens at a time and 4 rows at
    a time, every 4 weights of a row are broadcast to all 16 lanes and vpdpbusd adds their products with 4 quants of
    16 tokens to that (row, token group)'s half-sub-block sum S (16 weights: |S| <= 16*15*127 fits int16); the
    two halves' S of a sub-block go as one int16 pair (pair_lo16z) into vpdpwssd with (scale, scale), which adds
    scale * (S0 + S1) to the block's integer sum I - exact integers, the same I and M as row_dot_x86 - so no
    horizontal sums at all: the float FMAs of row_dot_x86's sequence (SB as there) run 16 tokens per instruction.
    4 rows x 2 token groups x 2 halves = 16 chains in registers: per 4 weights of each half 6 loads feed 8
    vpdpbusd (64 multiply-adds each), and one vpdpwssd per 32 weights where a (scale, 0) pair per half took
    two (1.06x at 1536x8960, 480 tokens, Zen 4). A full row tile's results go out transposed, a line
    per token by streaming stores (store_diff_t16_nt) when NT (out's rows 64-byte aligned), element by element
    otherwise: written through the caches, the 18 MB of a 512 x 8960 output pushed the activations out of L2
    (1536x8960, 512 tokens, one thread: 36 -> 29 ms)."""
    N = w.shape[0]
    T = out.shape[0]
    nb, Tp = ydT.shape
    nq = qT.shape[1]
    ost = out.strides[0]
    n_rt = (N + V_ROW_TILE - 1) // V_ROW_TILE
    R = 4 * TT  # bytes per row of acc
    for ch in prange(nt):
        wq = np.empty(V_ROW_TILE * QK_K, np.uint8)   # (16 rows, 256) unpacked quants of one block
        sc = np.empty(V_ROW_TILE * 8, np.int32)      # (16 rows, 8) sub-block scales
        mp = np.empty((V_ROW_TILE, 4), np.int32)     # (16 rows, 4) min pairs (2j, 2j+1) as int16 pairs
        dx = np.empty(V_ROW_TILE, np.float32)
        dmx = np.empty(V_ROW_TILE, np.float32)
        acc = np.empty((V_ROW_TILE, TT), np.float32)   # (rows, tokens); rows past N: copies of the last
        accm = np.empty((V_ROW_TILE, TT), np.float32)
        for t0 in range(0, Tp, TT):
            t1 = min(Tp, t0 + TT)
            for rt in range(ch * n_rt // nt, (ch + 1) * n_rt // nt):
                r0, r1 = rt * V_ROW_TILE, min(N, (rt + 1) * V_ROW_TILE)
                acc[:] = 0
                accm[:] = 0
                for b in range(nb):
                    ob = b * PACKED_BYTES
                    unpack_rows(w, r0, r1, ob, wq, sc, dx)
                    for r in range(V_ROW_TILE):
                        n = min(r0 + r, r1 - 1)
                        for jp in range(4):
                            mp[r, jp] = np.int32(w[n, ob + 136 + 2 * jp]) | (np.int32(w[n, ob + 137 + 2 * jp]) << 16)
                        dmx[r] = f16_to_f32(read_u16(w[n], ob + 146))
                    for tg in range(t0, t1, V_UNIT):
                        g0 = tg // 16
                        oy = 4 * (b * Tp + tg)           # ydT[b, tg]
                        for r4 in range(0, V_ROW_TILE, 4):
                            oa = 4 * (r4 * TT + tg - t0)
                            ow = QK_K * r4
                            if tg + V_UNIT > t1:  # a last group of 16 tokens
                                _rows4_group(qT, g0, b, wq, ow, sc, 8 * r4, SB, acc, oa, R, dx, r4, ydT, oy)
                                continue
                            i00 = i01 = i10 = i11 = i20 = i21 = i30 = i31 = zero16x32()
                            for c in range(4):
                                for hp in range(2):
                                    j = 8 * r4 + 2 * c + hp
                                    a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = zero16x32()
                                    b00 = b01 = b10 = b11 = b20 = b21 = b30 = b31 = zero16x32()
                                    for q in range(4):
                                        k = 16 * c + 8 * hp + q   # 4-weight group of the first half
                                        y0 = load64(qT, 64 * (g0 * nq + 64 * b + k))
                                        y1 = load64(qT, 64 * ((g0 + 1) * nq + 64 * b + k))
                                        u = bcast4z(wq, ow + 4 * k)
                                        a00 = dpbusd_z(a00, u, y0)
                                        a01 = dpbusd_z(a01, u, y1)
                                        u = bcast4z(wq, ow + QK_K + 4 * k)
                                        a10 = dpbusd_z(a10, u, y0)
                                        a11 = dpbusd_z(a11, u, y1)
                                        u = bcast4z(wq, ow + 2 * QK_K + 4 * k)
                                        a20 = dpbusd_z(a20, u, y0)
                                        a21 = dpbusd_z(a21, u, y1)
                                        u = bcast4z(wq, ow + 3 * QK_K + 4 * k)
                                        a30 = dpbusd_z(a30, u, y0)
                                        a31 = dpbusd_z(a31, u, y1)
                                        y0 = load64(qT, 64 * (g0 * nq + 64 * b + k + 4))
                                        y1 = load64(qT, 64 * ((g0 + 1) * nq + 64 * b + k + 4))
                                        u = bcast4z(wq, ow + 4 * k + 16)
                                        b00 = dpbusd_z(b00, u, y0)
                                        b01 = dpbusd_z(b01, u, y1)
                                        u = bcast4z(wq, ow + QK_K + 4 * k + 16)
                                        b10 = dpbusd_z(b10, u, y0)
                                        b11 = dpbusd_z(b11, u, y1)
                                        u = bcast4z(wq, ow + 2 * QK_K + 4 * k + 16)
                                        b20 = dpbusd_z(b20, u, y0)
                                        b21 = dpbusd_z(b21, u, y1)
                                        u = bcast4z(wq, ow + 3 * QK_K + 4 * k + 16)
                                        b30 = dpbusd_z(b30, u, y0)
                                        b31 = dpbusd_z(b31, u, y1)
                                    v = as16z(splat32z(sc[j] * 0x10001))
                                    i00 = dpwssd_z(i00, pair_lo16z(a00, b00), v)
                                    i01 = dpwssd_z(i01, pair_lo16z(a01, b01), v)
                                    v = as16z(splat32z(sc[j + 8] * 0x10001))
                                    i10 = dpwssd_z(i10, pair_lo16z(a10, b10), v)
                                    i11 = dpwssd_z(i11, pair_lo16z(a11, b11), v)
                                    v = as16z(splat32z(sc[j + 16] * 0x10001))
                                    i20 = dpwssd_z(i20, pair_lo16z(a20, b20), v)
                                    i21 = dpwssd_z(i21, pair_lo16z(a21, b21), v)
                                    v = as16z(splat32z(sc[j + 24] * 0x10001))
                                    i30 = dpwssd_z(i30, pair_lo16z(a30, b30), v)
                                    i31 = dpwssd_z(i31, pair_lo16z(a31, b31), v)
                                if SB or c == 3:
                                    _fma_tokens(acc, oa, i00, dx[r4], ydT, oy)
                                    _fma_tokens(acc, oa + 64, i01, dx[r4], ydT, oy + 64)
                                    _fma_tokens(acc, oa + R, i10, dx[r4 + 1], ydT, oy)
                                    _fma_tokens(acc, oa + R + 64, i11, dx[r4 + 1], ydT, oy + 64)
                                    _fma_tokens(acc, oa + 2 * R, i20, dx[r4 + 2], ydT, oy)
                                    _fma_tokens(acc, oa + 2 * R + 64, i21, dx[r4 + 2], ydT, oy + 64)
                                    _fma_tokens(acc, oa + 3 * R, i30, dx[r4 + 3], ydT, oy)
                                    _fma_tokens(acc, oa + 3 * R + 64, i31, dx[r4 + 3], ydT, oy + 64)
                                    i00 = i01 = i10 = i11 = i20 = i21 = i30 = i31 = zero16x32()
                        # the min term accm = fma(M, dmin * dy, accm), M = sum_j min_j * bs32_j by vpdpwssd on
                        # (min 2j, min 2j+1) x (bs32 2j, bs32 2j+1) pairs: per block, or per pair (SB)
                        for t in range(tg, min(t1, tg + V_UNIT), 16):
                            bo = 4 * (b * 4 * Tp + t)           # bsP[b, 0, t, 0]
                            p0 = load32x16z(bsP, bo)
                            p1 = load32x16z(bsP, bo + 4 * Tp)
                            p2 = load32x16z(bsP, bo + 8 * Tp)
                            p3 = load32x16z(bsP, bo + 12 * Tp)
                            yv = load16xf32(ydT, 4 * (b * Tp + t))
                            for r in range(V_ROW_TILE):
                                o = 4 * (r * TT + t - t0)
                                dmin_y = fmul_z(splatfz(dmx[r]), yv)
                                a = load16xf32(accm, o)
                                if SB:
                                    a = ffma_z(cvt_f32z(dpwssd_z(zero16x32(), p0, as16z(splat32z(mp[r, 0])))), dmin_y, a)
                                    a = ffma_z(cvt_f32z(dpwssd_z(zero16x32(), p1, as16z(splat32z(mp[r, 1])))), dmin_y, a)
                                    a = ffma_z(cvt_f32z(dpwssd_z(zero16x32(), p2, as16z(splat32z(mp[r, 2])))), dmin_y, a)
                                    a = ffma_z(cvt_f32z(dpwssd_z(zero16x32(), p3, as16z(splat32z(mp[r, 3])))), dmin_y, a)
                                else:
                                    m = dpwssd_z(zero16x32(), p0, as16z(splat32z(mp[r, 0])))
                                    m = dpwssd_z(m, p1, as16z(splat32z(mp[r, 1])))
                                    m = dpwssd_z(m, p2, as16z(splat32z(mp[r, 2])))
                                    m = dpwssd_z(m, p3, as16z(splat32z(mp[r, 3])))
                                    a = ffma_z(cvt_f32z(m), dmin_y, a)
                                store16xf32(accm, o, a)
                        if b == nb - 1:  # this unit's sums are final: out = acc - accm
                            for t in range(tg, min(T, tg + V_UNIT), 16):
                                if NT and t + 16 <= T and r1 - r0 == V_ROW_TILE:
                                    store_diff_t16_nt(out, t * ost + 4 * r0, ost, acc, accm, 4 * (t - t0), R)
                                else:  # (transposed plain stores measured slower than these: 40 vs 36 ms)
                                    for tt in range(t, min(T, t + 16)):
                                        for n in range(r0, r1):
                                            out[tt, n] = np.float32(acc[n - r0, tt - t0] - accm[n - r0, tt - t0])
