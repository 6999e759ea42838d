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

Fast path (AVX2): rows repacked at load time (same 210 bytes per block), element groups G = 0..7 of 32 in
the kquants.PERM order:
    [0:128)   4 x 32 bytes: byte p of vector v = lo4(G=2v+1, p) << 4 | lo4(G=2v, p)
    [128:192) 2 x 32 bytes: byte p of vector u = hi2(4u+3,p) 66 | hi2(4u+2,p) 44 | hi2(4u+1,p) 22 | hi2(4u,p) 00
    [192:208) scales int8 x 16,  [208:210) d
Quants are used unsigned (q+32, 0..63): vpmaddubsw(q+32, a) - 32*(a+a') per pair = (q)*a pair sums (both
terms <= 16002 in magnitude, no saturation), then vpmaddwd with the two sub-block scales of the group.
gemm with AVX512BW (_gemm_z): the same packed rows in zmm, two groups per instruction, signed quants against
activations + 128 (correction per (row, block), not per token; see _gemm_z); same int32 aux32, same float order.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import jit, pjit
from ..ggml_type import QK_K, GGMLType
from . import kquants
from ._bits import f16_to_f32, read_u16
from ._simd import (HAS_AVX2, HAS_AVX512, add32z, and64, bcast32x2, bcastf, dpwssd_z, fold16, load64, maddubs_z,
                    or64, perm32_flip_store, prefetchw, rows8_lane_sums, scales4pairs, sll16z, splat8z, srl16x2,
                    sub32z, sub8z, zero16x32)
from ._simd import (and8, cvt_f32, dpwssd, fadd, fmul, lanef, load16x16, load32, load8xf32,
                    maddubs, or8, pair16, prefetch_span, sll16, splat8, splatf, srl16,
                    store8xf32, sub16, zero32, zerof)
from .base import BlockFormat, register

BLOCK_BYTES = 210


@jit
def _q6(row, o, e):
    """Signed 6-bit quant (-32..31) of element e (0..255) of the super-block at byte offset o."""
    h = e // 128
    r = e % 128
    g = r // 32
    l = r % 32
    qlb = row[o + 64 * h + l + 32 * (g % 2)]
    lo = (qlb >> (4 * (g // 2))) & 0xF
    hi = (row[o + 128 + 32 * h + l] >> (2 * g)) & 3
    return np.int32(lo | (hi << 4)) - np.int32(32)


@pjit
def dequantize_rows(raw, ids, out):
    K = out.shape[1]
    for i in prange(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(K // QK_K):
            o = b * BLOCK_BYTES
            d = f16_to_f32(read_u16(row, o + 208))
            for sb in range(16):
                dl = np.float32(d * np.float32(np.int8(row[o + 192 + sb])))
                for l in range(16):
                    e = 16 * sb + l
                    out[i, b * QK_K + e] = np.float32(dl * np.float32(_q6(row, o, e)))


@jit
def _dot(row, qs, yd, aux32, sums):
    nb = yd.shape[0]
    sums[:] = 0
    for b in range(nb):
        o = b * BLOCK_BYTES
        aux32[:] = 0
        for sb in range(16):
            sc = np.int32(np.int8(row[o + 192 + sb]))
            for l in range(16):
                e = 16 * sb + l
                aux32[l % 8] += sc * (_q6(row, o, e) * np.int32(qs[b * QK_K + e]))
        d = np.float32(f16_to_f32(read_u16(row, o + 208)) * yd[b])
        for l in range(8):
            sums[l] += np.float32(d * np.float32(aux32[l]))
    sumf = np.float32(0.0)
    for l in range(8):
        sumf = sumf + sums[l]
    return sumf


@pjit
def _gemm_scalar(raw, qs, yd, out):
    N = raw.shape[0]
    T = qs.shape[0]
    for n in prange(N):
        aux32 = np.empty(8, np.int32)
        sums = np.empty(8, np.float32)
        for t in range(T):
            out[t, n] = _dot(raw[n], qs[t], yd[t], aux32, sums)


def _pack_raw(raw, K):
    return (raw,)


def _mm_scalar(packed, a, out):
    _gemm_scalar(packed[0], a.qs, a.d, out)


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
                for v in range(4):
                    lo0 = _q6(row, o, 32 * (2 * v) + _PERM[p]) + 32
                    lo1 = _q6(row, o, 32 * (2 * v + 1) + _PERM[p]) + 32
                    out[n, o + 32 * v + p] = np.uint8((lo0 & 15) | ((lo1 & 15) << 4))
                for u in range(2):
                    h = 0
                    for j in range(4):
                        h |= ((_q6(row, o, 32 * (4 * u + j) + _PERM[p]) + 32) >> 4) << (2 * j)
                    out[n, o + 128 + 32 * u + p] = np.uint8(h)
            for i in range(18):
                out[n, o + 192 + i] = row[o + 192 + i]


@jit
def _decode(w, o, G, m0f, m03):
    """Unsigned quants (q+32) of element group G of the repacked block at flat byte offset o."""
    lo = and8(srl16(load32(w, o + 32 * (G // 2)), 4 * (G % 2)), m0f)
    hi = and8(srl16(load32(w, o + 128 + 32 * (G // 4)), 2 * (G % 4)), m03)
    return or8(lo, sll16(hi, 4))


@jit
def _row_dot(w, n, qp, pc, t, yd):
    nb = yd.shape[1]
    K = nb * QK_K
    rb = w.shape[1]
    m0f = splat8(15)
    m03 = splat8(3)
    sums = zerof()
    for b in range(nb):
        o = n * rb + b * BLOCK_BYTES
        ob = b * BLOCK_BYTES
        oa = t * K + b * QK_K
        oc = 2 * (t * (K // 2) + b * 128)
        acc = zero32()
        for G in range(8):
            q = _decode(w, o, G, m0f, m03)
            p16 = sub16(maddubs(q, load32(qp, oa + 32 * G)), load16x16(pc, oc + 32 * G))
            acc = dpwssd(acc, p16, pair16(np.int8(w[n, ob + 192 + 2 * G]), np.int8(w[n, ob + 193 + 2 * G])))
        d = np.float32(f16_to_f32(read_u16(w[n], ob + 208)) * yd[t, b])
        sums = fadd(sums, fmul(splatf(d), cvt_f32(acc)))
    sumf = np.float32(0.0)
    for l in range(8):
        sumf = sumf + lanef(sums, l)
    return sumf


@pjit
def _gemv(w, qp, pc, yd, out):
    rb = w.shape[1]
    for n in prange(w.shape[0]):
        prefetch_span(w, n * rb + 4096, rb)  # a row's worth, 4 KB ahead (see _simd.prefetch_span)
        out[0, n] = _row_dot(w, n, qp, pc, 0, yd)


ROW_TILE = 16
TOK_TILE = 32


@pjit
def _gemm(w, qp, pc, yd, out):
    """ROW_TILE x TOK_TILE tiles, block by block; each (row, block) decoded once per token tile."""
    N, rb = w.shape
    T, K = qp.shape
    nb = K // QK_K
    n_rt = (N + ROW_TILE - 1) // ROW_TILE
    n_tt = (T + TOK_TILE - 1) // TOK_TILE
    for tile in prange(n_rt * n_tt):
        r0 = (tile // n_tt) * ROW_TILE
        r1 = min(N, r0 + ROW_TILE)
        t0 = (tile % n_tt) * TOK_TILE
        t1 = min(T, t0 + TOK_TILE)
        sums = np.zeros((ROW_TILE, TOK_TILE, 8), np.float32)
        m0f = splat8(15)
        m03 = splat8(3)
        for b in range(nb):
            for n in range(r0, r1):
                o = n * rb + b * BLOCK_BYTES
                ob = b * BLOCK_BYTES
                q0 = _decode(w, o, 0, m0f, m03)
                q1 = _decode(w, o, 1, m0f, m03)
                q2 = _decode(w, o, 2, m0f, m03)
                q3 = _decode(w, o, 3, m0f, m03)
                q4 = _decode(w, o, 4, m0f, m03)
                q5 = _decode(w, o, 5, m0f, m03)
                q6 = _decode(w, o, 6, m0f, m03)
                q7 = _decode(w, o, 7, m0f, m03)
                s0 = pair16(np.int8(w[n, ob + 192]), np.int8(w[n, ob + 193]))
                s1 = pair16(np.int8(w[n, ob + 194]), np.int8(w[n, ob + 195]))
                s2 = pair16(np.int8(w[n, ob + 196]), np.int8(w[n, ob + 197]))
                s3 = pair16(np.int8(w[n, ob + 198]), np.int8(w[n, ob + 199]))
                s4 = pair16(np.int8(w[n, ob + 200]), np.int8(w[n, ob + 201]))
                s5 = pair16(np.int8(w[n, ob + 202]), np.int8(w[n, ob + 203]))
                s6 = pair16(np.int8(w[n, ob + 204]), np.int8(w[n, ob + 205]))
                s7 = pair16(np.int8(w[n, ob + 206]), np.int8(w[n, ob + 207]))
                dx = f16_to_f32(read_u16(w[n], ob + 208))
                r = n - r0
                for t in range(t0, t1):
                    oa = t * K + b * QK_K
                    oc = 2 * (t * (K // 2) + b * 128)
                    acc = dpwssd(zero32(), sub16(maddubs(q0, load32(qp, oa)), load16x16(pc, oc)), s0)
                    acc = dpwssd(acc, sub16(maddubs(q1, load32(qp, oa + 32)), load16x16(pc, oc + 32)), s1)
                    acc = dpwssd(acc, sub16(maddubs(q2, load32(qp, oa + 64)), load16x16(pc, oc + 64)), s2)
                    acc = dpwssd(acc, sub16(maddubs(q3, load32(qp, oa + 96)), load16x16(pc, oc + 96)), s3)
                    acc = dpwssd(acc, sub16(maddubs(q4, load32(qp, oa + 128)), load16x16(pc, oc + 128)), s4)
                    acc = dpwssd(acc, sub16(maddubs(q5, load32(qp, oa + 160)), load16x16(pc, oc + 160)), s5)
                    acc = dpwssd(acc, sub16(maddubs(q6, load32(qp, oa + 192)), load16x16(pc, oc + 192)), s6)
                    acc = dpwssd(acc, sub16(maddubs(q7, load32(qp, oa + 224)), load16x16(pc, oc + 224)), s7)
                    d = np.float32(dx * yd[t, b])
                    so = 32 * (r * TOK_TILE + t - t0)
                    store8xf32(sums, so, fadd(load8xf32(sums, so), fmul(splatf(d), cvt_f32(acc))))
        for n in range(r0, r1):
            for t in range(t0, t1):
                s = np.float32(0.0)
                for l in range(8):
                    s = s + sums[n - r0, t - t0, l]
                out[t, n] = s


# ------------------------------------------------------------------------------------ gemm, 512-bit (AVX512BW)

Z_ROW_TILE = 16
Z_TOK_TILE = 32


@jit
def _unpack_z(w, o, v, m0f, m03, m32):
    """Signed quants (-32..31) of element groups [2v | 2v+1] of the repacked block at flat byte offset o."""
    lo = and64(srl16x2(bcast32x2(w, o + 32 * v), 0, 4), m0f)
    hi = and64(srl16x2(bcast32x2(w, o + 128 + 32 * (v // 2)), 4 * (v % 2), 4 * (v % 2) + 2), m03)
    return sub8z(or64(lo, sll16z(hi, 4)), m32)


@jit
def _scales_z(w, n, ob, v):
    """<32 x i16> scales for groups [2v | 2v+1]: (sc[4v], sc[4v+1]) pairs, then (sc[4v+2], sc[4v+3])."""
    return scales4pairs(w, n * w.shape[1] + ob + 192 + 4 * v)


@pjit
def _gemm_z(w, qu, ydT, out):
    """zmm gemm; ydT (nb, Tp) f32 = token-major yd (Tp = T rounded up to 8, padding zero).

    Activations are taken unsigned (qu = q8 + 128, 1..255) against the signed 6-bit quants, so vpmaddubsw needs
    no per-token correction: sum (a+128)*q = sum a*q + 128 * sum q, and the second term, through the same
    scale pipeline, is a per-(row, block) constant (vpmaddubsw of 128 x q) that starts each token's accumulator
    negated. No saturation: |pair| <= 2*255*32 = 16320; lane sums < 2^31. Each thread takes Z_ROW_TILE rows and
    runs through the tokens Z_TOK_TILE at a time, block by block, two rows at a time; each zmm covers element
    groups [2v | 2v+1] (64 contiguous permuted activations); lanes l and l+8 are folded to aux32[l] per (row,
    token, block); sums[l] += (dx*dy) * aux32[l], then sumf = 0 + sums[0] + ... + sums[7] (ggml's generic
    order), 8 rows per vector (rows8_lane_sums)."""
    N, rb = w.shape
    T, K = qu.shape
    nb = K // QK_K
    Tp = ydT.shape[1]
    n_rt = (N + Z_ROW_TILE - 1) // Z_ROW_TILE
    for rt in prange(n_rt):
        r0 = rt * Z_ROW_TILE
        r1 = min(N, r0 + Z_ROW_TILE)
        # row Z_ROW_TILE: scratch for the partner of an odd last row
        sums = np.empty((Z_ROW_TILE + 1, Z_TOK_TILE, 8), np.float32)
        dbuf = np.empty((2, Z_TOK_TILE), np.float32)
        m0f = splat8z(15)
        m03 = splat8z(3)
        m32 = splat8z(32)
        u128 = splat8z(128)
        for t0 in range(0, T, Z_TOK_TILE):
            t1 = min(T, t0 + Z_TOK_TILE)
            for t in range(t0, t1):  # this tile's output lines, written at its end
                prefetchw(out, 4 * (t * N + r0))
                prefetchw(out, 4 * (t * N + r1) - 4)
            n_tc = (t1 - t0 + 7) // 8
            for b in range(nb):
                ob = b * BLOCK_BYTES
                for n in range(r0, r1, 2):
                    n2 = min(n + 1, r1 - 1)
                    ra = n - r0
                    rb2 = n + 1 - r0 if n + 1 < r1 else Z_ROW_TILE
                    oa_ = n * rb + ob
                    ob_ = n2 * rb + ob
                    a0 = _unpack_z(w, oa_, 0, m0f, m03, m32)
                    a1 = _unpack_z(w, oa_, 1, m0f, m03, m32)
                    a2 = _unpack_z(w, oa_, 2, m0f, m03, m32)
                    a3 = _unpack_z(w, oa_, 3, m0f, m03, m32)
                    b0 = _unpack_z(w, ob_, 0, m0f, m03, m32)
                    b1 = _unpack_z(w, ob_, 1, m0f, m03, m32)
                    b2 = _unpack_z(w, ob_, 2, m0f, m03, m32)
                    b3 = _unpack_z(w, ob_, 3, m0f, m03, m32)
                    sa0 = _scales_z(w, n, ob, 0)
                    sa1 = _scales_z(w, n, ob, 1)
                    sa2 = _scales_z(w, n, ob, 2)
                    sa3 = _scales_z(w, n, ob, 3)
                    sb0 = _scales_z(w, n2, ob, 0)
                    sb1 = _scales_z(w, n2, ob, 1)
                    sb2 = _scales_z(w, n2, ob, 2)
                    sb3 = _scales_z(w, n2, ob, 3)
                    ca = dpwssd_z(dpwssd_z(zero16x32(), maddubs_z(u128, a0), sa0), maddubs_z(u128, a1), sa1)
                    ca = dpwssd_z(dpwssd_z(ca, maddubs_z(u128, a2), sa2), maddubs_z(u128, a3), sa3)
                    cb = dpwssd_z(dpwssd_z(zero16x32(), maddubs_z(u128, b0), sb0), maddubs_z(u128, b1), sb1)
                    cb = dpwssd_z(dpwssd_z(cb, maddubs_z(u128, b2), sb2), maddubs_z(u128, b3), sb3)
                    ca = sub32z(zero16x32(), ca)
                    cb = sub32z(zero16x32(), cb)
                    dxa = splatf(f16_to_f32(read_u16(w[n], ob + 208)))
                    dxb = splatf(f16_to_f32(read_u16(w[n2], ob + 208)))
                    for tc in range(n_tc):
                        yv = load8xf32(ydT, 4 * (b * Tp + t0 + 8 * tc))
                        store8xf32(dbuf, 32 * tc, fmul(dxa, yv))
                        store8xf32(dbuf, 4 * Z_TOK_TILE + 32 * tc, fmul(dxb, yv))
                    for t in range(t0, t1):
                        oa = t * K + b * QK_K
                        y0 = load64(qu, oa)
                        y1 = load64(qu, oa + 64)
                        y2 = load64(qu, oa + 128)
                        y3 = load64(qu, oa + 192)
                        ua = add32z(dpwssd_z(dpwssd_z(ca, maddubs_z(y0, a0), sa0), maddubs_z(y1, a1), sa1),
                                    dpwssd_z(dpwssd_z(zero16x32(), maddubs_z(y2, a2), sa2), maddubs_z(y3, a3), sa3))
                        ub = add32z(dpwssd_z(dpwssd_z(cb, maddubs_z(y0, b0), sb0), maddubs_z(y1, b1), sb1),
                                    dpwssd_z(dpwssd_z(zero16x32(), maddubs_z(y2, b2), sb2), maddubs_z(y3, b3), sb3))
                        so = 32 * (ra * Z_TOK_TILE + t - t0)
                        prev = load8xf32(sums, so) if b > 0 else zerof()  # ggml's sums start at 0
                        store8xf32(sums, so, fadd(prev, fmul(bcastf(dbuf, 4 * (t - t0)), cvt_f32(fold16(ua)))))
                        so = 32 * (rb2 * Z_TOK_TILE + t - t0)
                        prev = load8xf32(sums, so) if b > 0 else zerof()  # ggml's sums start at 0
                        dy = bcastf(dbuf, 4 * (Z_TOK_TILE + t - t0))
                        store8xf32(sums, so, fadd(prev, fmul(dy, cvt_f32(fold16(ub)))))
            for t in range(t0, t1):
                n = r0
                while n + 8 <= r1:
                    o = (n - r0) * Z_TOK_TILE + t - t0
                    v = rows8_lane_sums(sums, 32 * o, 32 * Z_TOK_TILE, zerof())
                    store8xf32(out, 4 * (t * N + n), v)
                    n += 8
                for n in range(n, r1):
                    s = np.float32(0.0)
                    for l in range(8):
                        s = s + sums[n - r0, t - t0, l]
                    out[t, n] = s

@jit  # serial: microseconds of work, where a parallel launch can cost more on a busy machine
def _prep_z(qs, d, qu, ydT):
    """Q8_K activations -> _gemm_z's inputs in one pass: qu (T, K) uint8 = q8 + 128 in kquants.PERM order,
    ydT (nb, Tp) f32 = d transposed (callers zero the padding tokens)."""
    T, K = qs.shape
    for t in range(T):
        for g in range(K // 32):
            perm32_flip_store(qu, t * K + 32 * g, qs, t * K + 32 * g)
        for b in range(K // QK_K):
            ydT[b, t] = d[t, b]


def _pack_fast(raw, K):
    out = np.empty_like(raw)
    _repack(raw, out)
    return (out,)


def _gemv_fast(packed, a, out):
    k = kquants.prepare(a, 32)
    _gemv(packed[0], k.qp, k.pcorr, k.d, out)


def _gemm_fast(packed, a, out):
    if HAS_AVX512:
        T, K = a.qs.shape
        qu = np.empty((T, K), np.uint8)
        ydT = np.zeros((K // QK_K, (T + 7) // 8 * 8), np.float32)
        _prep_z(a.qs, a.d, qu, ydT)
        _gemm_z(packed[0], qu, ydT, out)
    else:
        k = kquants.prepare(a, 32)
        _gemm(packed[0], k.qp, k.pcorr, k.d, out)


if HAS_AVX2:
    FORMAT = register(BlockFormat(GGMLType.Q6_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, _pack_fast,
                                  _gemv_fast, _gemm_fast))
else:
    FORMAT = register(BlockFormat(GGMLType.Q6_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, _pack_raw,
                                  _mm_scalar, _mm_scalar))
SCALAR = (_pack_raw, _mm_scalar)  # the portable path, tested on every machine
