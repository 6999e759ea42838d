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
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import jit, pjit
from ..ggml_type import QK_K, GGMLType
from . import kquants
from ._bits import f16_to_f32, read_u16
from ._simd import (HAS_AVX2, and8, cvt_f32, dpwssd, fadd, fmul, lanef, load16x16, load32, load8xf32,
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


def _pack_fast(raw, K):
    out = np.empty_like(raw)
    _repack(raw, out)
    return (out,)


def _gemv_fast(packed, a, out):
    k = kquants.prepare(a, 32)
    _gemv(packed[0], k.qp, k.pcorr, k.d, out)


def _gemm_fast(packed, a, out):
    k = kquants.prepare(a, 32)
    _gemm(packed[0], k.qp, k.pcorr, k.d, out)


if HAS_AVX2:
    FORMAT = register(BlockFormat(GGMLType.Q6_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, _pack_fast,
                                  _gemv_fast, _gemm_fast))
else:
    FORMAT = register(BlockFormat(GGMLType.Q6_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, _pack_raw,
                                  _mm_scalar, _mm_scalar))
SCALAR = (_pack_raw, _mm_scalar)  # the portable path, tested on every machine
