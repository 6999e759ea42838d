"""Shared pieces of the K-quant family (Q2_K..Q6_K, 256-weight super-blocks, Q8_K activations).

Lane order. ggml_vec_dot_q{3,4,5,6}_K_q8_K_generic accumulate the integer products of a super-block into
aux32[l], l = element index mod 8, then do `sums[l] += d * aux32[l]` in float. To get exactly those eight
int32 sums from vpmaddubsw/vpmaddwd (which add *adjacent* products), the weights are repacked at load time
and the activations of each call permuted the same way, so that adjacent bytes hold elements of the same
class l. Within every group of 32 elements (two 16-element halves s = 0, 1):

    position p = 4*l + 2*s + k   (l = 0..7, s = 0..1, k = 0..1)   holds element  16*s + 8*k + l

vpmaddubsw then pairs (k = 0, 1) -> int16 lane 2l+s, and vpmaddwd with per-half scales (scale_s0, scale_s1)
pairs (s = 0, 1) -> int32 lane l = class l, for one 32-element group: eight lanes = aux32[0..7] contributions.
Integer sums are exact (bounds in each module), so the result equals ggml's for any summation order.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import jit, pjit
from ..ggml_type import QK_K
from ._simd import add32, dpwssd, lanef, load32, maddubs, scale_halves16, zero32
from .base import empty_aligned

# Q4_K / Q6_K gemv prefetch (row_dot_x86's PF): every block prefetches (into L2) the bytes GEMV_PF ahead of it.
# Spread over the blocks the prefetches keep more lines in flight than one burst per row 4 KB ahead did (2
# threads, GB/s, two runs each, a /tmp script timing matmul as benchmarks/kernels.py --types Q4_K,Q6_K
# --no-gemm does): Q4_K 1536x151936 24.8/29.5 -> 34.4/35.2, 8960x1536 24.4/23.9 -> 30.4/37.4; Q6_K 1536x151936
# 20.8/20.7 -> 22.6/23.2, 8960x1536 27.3/27.4 -> 42.8/39.0 (4, 8 and 16 KB tried; 8 KB best for both).
GEMV_PF = 8192

# llama.cpp's tiled K-quant matmul (ggml-cpu/tiled/tiled.cpp, `ggml_compute_forward_mul_mat_tiled`) takes every
# MUL_MAT of a Q2_K..Q6_K weight that is not in the repack buffer once the batch has TILED_MIN_BATCH tokens or more
# (`ggml_tiled_min_batch`); smaller batches run ggml_vec_dot per (row, token). Its float order per (row, token),
# super-block by super-block (tiled-kernel.cpp, AVX-512 VNNI and AVX2 microtiles alike; GCC contracts the
# AVX-512 epilogue's add(buf, mul(r, d1)) into one FMA):
#     s1 = sum_s scale_s * (q . y)_s              exact int32 (offset codes corrected by BIAS * bsums)
#     s2 = sum_s min_s * bsums_s                  exact int32 (formats with mins)
#     r  = (float)s1 * x.d;  r = fma(-x.dmin, (float)s2, r);  acc = fma(r, y.d, acc)
TILED_MIN_BATCH = 8


def lane_token_tile(K: int, Tp: int, unit: int) -> int:
    """Tokens per pass of the AVX512-VNNI gemms with the tokens in the lanes (q4_k_gemm512, q6_k) over a thread's
    rows: whole units, up to 192 tokens, the activations of a tile (tokens x K bytes) at most 1 MB so that they
    stay in L2 while the row tiles go by (Q4_K 1536x8960 and 8960x1536, 512 tokens, 2 threads: 192 and 96 tokens
    beat 48 and 528 by 3-20 %); Tp when that is less."""
    return min(Tp, unit * max(1, min(192 // unit, (1 << 20) // (K * unit))))


@jit
def tiles(N, T, RT, TT):
    """How many tiles of RT rows x TT tokens cover an N x T product, and how many token tiles per row tile."""
    n_tt = (T + TT - 1) // TT
    return ((N + RT - 1) // RT) * n_tt, n_tt


@jit
def tile_span(tile, n_tt, N, T, RT, TT):
    """Rows r0..r1-1 and tokens t0..t1-1 of tile number `tile` (token tiles vary fastest)."""
    r0 = (tile // n_tt) * RT
    t0 = (tile % n_tt) * TT
    return r0, min(N, r0 + RT), t0, min(T, t0 + TT)


# The AVX2 gemms of Q2_K, Q3_K, Q5_K and Q6_K take a row's super-block in two halves of 4 chunks of 32 weights:
# all 8 chunks' quant and scale vectors do not fit AVX2's 16 ymm registers (benchmarks/RESULTS.md, the fifth Zen 3
# session). Integer lanes give the same sums in any grouping.

@jit
def half_scales(s16, H):
    """The scale pairs (q6_k / q3_k / q2_k: vpermw of the 16 sub-block scales s16) of chunks 4H .. 4H+3, H = 0, 1
    (scale_halves16 needs literal chunk numbers)."""
    if H == 0:
        return scale_halves16(s16, 0), scale_halves16(s16, 1), scale_halves16(s16, 2), scale_halves16(s16, 3)
    return scale_halves16(s16, 4), scale_halves16(s16, 5), scale_halves16(s16, 6), scale_halves16(s16, 7)


@jit
def lanes_half(q, sc, qs, t, b, H):
    """<8 x i32>: sum over chunks 4H .. 4H+3 of super-block b of vpmaddwd(sc[j], vpmaddubsw(q[j], y)) with token
    t's quants y (qs (T, K) int8): half of the row dot's lanes."""
    oa = t * qs.shape[1] + b * QK_K + 128 * H
    v0 = dpwssd(zero32(), maddubs(q[0], load32(qs, oa)), sc[0])
    v1 = dpwssd(zero32(), maddubs(q[1], load32(qs, oa + 32)), sc[1])
    v0 = dpwssd(v0, maddubs(q[2], load32(qs, oa + 64)), sc[2])
    v1 = dpwssd(v1, maddubs(q[3], load32(qs, oa + 96)), sc[3])
    return add32(v0, v1)


# PERM[p] = natural element (within a 32-group) stored at permuted position p
PERM = np.array([16 * s + 8 * k + l for l in range(8) for s in range(2) for k in range(2)], dtype=np.int64)


@pjit
def prep_q8k(qs, bsums, mult, qp, bs32, pcorr):
    """Per-call activation layout for the K-quant kernels.

    qs (T, K) int8, bsums (T, K/16) int16 (from quantize_q8_K), mult: int ->
    qp (T, K) int8 permuted by PERM per 32-group; bs32 (T, K/32) int16 = sum of the 32 quants of a group;
    pcorr (T, K/2) int16 = mult * (qp[2i] + qp[2i+1]), the pair sums vpmaddubsw would give for constant
    weights `mult` (subtracted to turn offset unsigned quants back into signed ones)."""
    T, K = qs.shape
    for t in prange(T):
        for g in range(K // 32):
            o = 32 * g
            for p in range(32):
                qp[t, o + p] = qs[t, o + PERM[p]]
            bs32[t, g] = np.int16(np.int32(bsums[t, 2 * g]) + np.int32(bsums[t, 2 * g + 1]))
            if mult != 0:
                for i in range(16):
                    pcorr[t, 16 * g + i] = np.int16(mult * (np.int32(qp[t, o + 2 * i]) + np.int32(qp[t, o + 2 * i + 1])))


class KActs:
    """Activations prepared for a K-quant kernel: qp (T, K) int8, d (T, K/256) f32, bs32, pcorr."""

    __slots__ = ("qp", "d", "bs32", "pcorr")


def prepare(a, mult: int) -> KActs:
    T, K = a.qs.shape
    k = KActs()
    k.qp = empty_aligned((T, K), np.int8)
    k.bs32 = empty_aligned((T, K // 32), np.int16)
    k.pcorr = empty_aligned((T, K // 2 if mult else 1), np.int16)
    k.d = a.d
    prep_q8k(a.qs, a.bsums, mult, k.qp, k.bs32, k.pcorr)
    return k


@jit
def hsum_float_8(v):
    """ggml's hsum_float_8 of a <8 x float>: (v4 + v0) + (v6 + v2), (v5 + v1) + (v7 + v3), then their sum."""
    a = np.float32(np.float32(lanef(v, 4) + lanef(v, 0)) + np.float32(lanef(v, 6) + lanef(v, 2)))
    c = np.float32(np.float32(lanef(v, 5) + lanef(v, 1)) + np.float32(lanef(v, 7) + lanef(v, 3)))
    return np.float32(a + c)


@pjit
def _group_sums32(bsums, out):
    for t in prange(bsums.shape[0]):
        for g in range(out.shape[1]):
            out[t, g] = np.int16(np.int32(bsums[t, 2 * g]) + np.int32(bsums[t, 2 * g + 1]))


def group_sums32(bsums):
    """bs32 (T, K/32) int16: the sums of the activations' 32-element groups (pairs of Q8_K's bsums)."""
    out = empty_aligned((bsums.shape[0], bsums.shape[1] // 2), np.int16)
    _group_sums32(bsums, out)
    return out
