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
gemv with AVX512BW (row_dot_z): the same per-block sequence on zmm, two sub-blocks per instruction as in
_gemm_z, the scales expanded from one broadcast load, and acc / accm updated as two lanes of one vector (~10 %
faster than row_dot_x86 side by side: benchmarks/q4k_rowdot.py).
gemm with AVX512-VNNI and T >= V_MIN_TOKENS (_gemm_vnni): tokens in the lanes - 4 weights of a row broadcast
against 4 quants of 16 tokens per vpdpbusd, scales applied per sub-block by vpdpwssd on the two 16-weight
sums as one int16 pair, so the integer sums come out per token with no horizontal reduction and the float FMAs
run 16 tokens per instruction (about 2.5 times _gemm_z's speed on large batches); 4 rows x 32 tokens a pass,
results streamed out a line per token. gemm with AVX512BW otherwise (_gemm_z): the same packed rows in zmm, two
sub-blocks per instruction ([low | high nibbles of a chunk] against 64 contiguous activations), several
tokens per unpacked (row, block); per-block integer sums of 8 tokens reduced together so the FMAs run 8 tokens
per vector. Both give row_dot_x86's bits.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, jit, pjit, work_chunks
from ..ggml_type import BLOCK_GEOMETRY, QK_K, GGMLType
from . import kblock, kquants
from .kblock import scale_min_k4
from .kquants import hsum_float_8, tile_span, tiles
from ._bits import f16_to_f32, read_u16
from ..fp16 import fma_f32
from ._simd512 import HAS_AVX512, HAS_VNNI512
from ._simd import (HAS_AVX2, add32, and8, bcast16b, byte_splat16, cvt_f32, dpwssd, ffma, fmul, hsum32, hsum32x4,
                    load32, load8_i16_as_i32, load8_u8_as_i32, load8x32, load8xf32, maddubs, mul32, prefetch_span,
                    splat16, splat32, splat8, splatf, srl16, store8xf32, zero32, zerof)
from .vec_dot_type import Activations
from . import q4_k_gemm256
from .q4_k_gemm512 import PACKED_BYTES, V_MIN_TOKENS, V_UNIT, _gemm_vnni, _gemm_z, _prep_vnni, _prep_z, row_dot_z
from .base import BlockFormat, empty_aligned, llama_repacks, register, run_repack, streams_out, zeros_aligned

BLOCK_BYTES = BLOCK_GEOMETRY[GGMLType.Q4_K][1]  # 144


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
                q0 = o + 16 + 32 * (sb // 2)
                shift = 4 * (sb % 2)
                for l in range(32):
                    q = np.float32((row[q0 + l] >> shift) & 0xF)
                    out[i, b * QK_K + 32 * sb + l] = np.float32(d1 * q) - m1


# ----------------------------------------------------------------------------------------- fast path

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


@ijit
def _chunk(w, n, b, c, qp, oa, m0f, vlo, vhi, sv):
    """Chunk c of super-block b of row n (sub-blocks 2c: low nibbles, 2c+1: high) against the
    permuted activations at oa: vlo + scale_2c * (lo . y), vhi + scale_2c+1 * (hi . y), int32 lanes; sv: the
    block's scales and mins (bcast16b at its byte 128)."""
    q = load32(w, n * w.shape[1] + b * PACKED_BYTES + 32 * c)
    vlo = dpwssd(vlo, maddubs(and8(q, m0f), load32(qp, oa + 64 * c)), byte_splat16(sv, 2 * c))
    vhi = dpwssd(vhi, maddubs(and8(srl16(q, 4), m0f), load32(qp, oa + 64 * c + 32)), byte_splat16(sv, 2 * c + 1))
    return vlo, vhi


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
        sv = bcast16b(w, o + 128)
        if SB:  # ggml_gemm_q4_K_8x8_q8_K: one FMA per 64-weight pair of sub-blocks (chunk c)
            for c in range(4):
                v, vh = _chunk(w, n, b, c, qp, oa, m0f, zero32(), zero32(), sv)
                acc = fma_f32(np.float32(hsum32(add32(v, vh))), d, acc)
                m = (np.int32(w[n, b * PACKED_BYTES + 136 + 2 * c]) * np.int32(bs32[t, 8 * b + 2 * c])
                     + np.int32(w[n, b * PACKED_BYTES + 137 + 2 * c]) * np.int32(bs32[t, 8 * b + 2 * c + 1]))
                accm = fma_f32(np.float32(m), dmin, accm)
        else:
            # four integer accumulators: one made the block a chain of 8 dependent vpdpwssd whose latency bounded
            # the gemv (2-core Zen 4, benchmarks/RESULTS.md); integer sums, so any grouping gives the same I
            v0, v1 = _chunk(w, n, b, 0, qp, oa, m0f, zero32(), zero32(), sv)
            v2, v3 = _chunk(w, n, b, 1, qp, oa, m0f, zero32(), zero32(), sv)
            v0, v1 = _chunk(w, n, b, 2, qp, oa, m0f, v0, v1, sv)
            v2, v3 = _chunk(w, n, b, 3, qp, oa, m0f, v2, v3, sv)
            acc = fma_f32(np.float32(hsum32(add32(add32(v0, v2), add32(v1, v3)))), d, acc)
            m = hsum32(mul32(load8_u8_as_i32(w, o + 136), load8_i16_as_i32(bs32, 2 * (t * (K // 32) + 8 * b))))
            accm = fma_f32(np.float32(m), dmin, accm)
    return np.float32(acc - accm)


@jit
def row_dot_gemv(w, n, qp, t, yd, bs32, PF):
    """The single-token dot: row_dot_x86's per-block order, on zmm where AVX512BW is (row_dot_z, the same bits).
    numba prunes the branch a CPU does not take (a global constant)."""
    if HAS_AVX512:
        return row_dot_z(w, n, qp, t, yd, bs32, PF)
    return row_dot_x86(w, n, qp, t, yd, bs32, False, PF)


@pjit
def _gemv(w, qp, yd, bs32, out):
    for n in prange(w.shape[0]):
        out[0, n] = row_dot_gemv(w, n, qp, 0, yd, bs32, kquants.GEMV_PF)


ROW_TILE = 16
TOK_TILE = 32


@pjit
def _gemm(w, qp, yd, bs32, SB, out):
    """Tiles of ROW_TILE rows x TOK_TILE tokens; inside a tile, block by block: each (row, block) is unpacked
    once and used for every token of the tile, whose activations for that block stay in L1. Per (row, token)
    row_dot_x86's sequence (SB: its per-sb order, llama.cpp's gemm); the min term (M = sum_j mins[j] * bs32[j],
    with SB per pair of sub-blocks) and its FMA are done 8 tokens at a time (lanes = tokens)."""
    N = w.shape[0]
    T, K = qp.shape
    nb = K // QK_K
    rb = w.shape[1]
    n_tiles, n_tt = tiles(N, T, ROW_TILE, TOK_TILE)
    for tile in prange(n_tiles):
        r0, r1, t0, t1 = tile_span(tile, n_tt, N, T, ROW_TILE, TOK_TILE)
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
                    d = np.float32(dx * yd[t, b])
                    if SB:  # one FMA per 64 weights (sb), in order
                        f0, f1, f2, f3 = hsum32x4(
                            dpwssd(dpwssd(zero32(), maddubs(l0, load32(qp, oa)), s0), maddubs(h0, load32(qp, oa + 32)), s1),
                            dpwssd(dpwssd(zero32(), maddubs(l1, load32(qp, oa + 64)), s2), maddubs(h1, load32(qp, oa + 96)), s3),
                            dpwssd(dpwssd(zero32(), maddubs(l2, load32(qp, oa + 128)), s4), maddubs(h2, load32(qp, oa + 160)), s5),
                            dpwssd(dpwssd(zero32(), maddubs(l3, load32(qp, oa + 192)), s6), maddubs(h3, load32(qp, oa + 224)), s7))
                        a = fma_f32(f0, d, acc[r, t - t0])
                        a = fma_f32(f1, d, a)
                        a = fma_f32(f2, d, a)
                        acc[r, t - t0] = fma_f32(f3, d, a)
                        continue
                    v = dpwssd(zero32(), maddubs(l0, load32(qp, oa)), s0)
                    v = dpwssd(v, maddubs(h0, load32(qp, oa + 32)), s1)
                    v = dpwssd(v, maddubs(l1, load32(qp, oa + 64)), s2)
                    v = dpwssd(v, maddubs(h1, load32(qp, oa + 96)), s3)
                    v = dpwssd(v, maddubs(l2, load32(qp, oa + 128)), s4)
                    v = dpwssd(v, maddubs(h2, load32(qp, oa + 160)), s5)
                    v = dpwssd(v, maddubs(l3, load32(qp, oa + 192)), s6)
                    v = dpwssd(v, maddubs(h3, load32(qp, oa + 224)), s7)
                    acc[r, t - t0] = fma_f32(np.float32(hsum32(v)), d, acc[r, t - t0])
                for tc in range(n_tc):
                    ob8 = 4 * (8 * tc)
                    dmin = fmul(splatf(dmx), load8xf32(ydT, 4 * (b * TOK_TILE) + ob8))
                    sf = 4 * (r * TOK_TILE) + ob8
                    am = load8xf32(accm, sf)
                    sumi = mul32(splat32(w[n, ob + 136]), load8x32(bsT, 4 * (b * 8 * TOK_TILE) + ob8))
                    for j in range(1, 8):
                        if SB and j % 2 == 0:  # one FMA per pair of sub-blocks
                            am = ffma(cvt_f32(sumi), dmin, am)
                            sumi = zero32()
                        sumi = add32(sumi, mul32(splat32(w[n, ob + 136 + j]),
                                                 load8x32(bsT, 4 * ((b * 8 + j) * TOK_TILE) + ob8)))
                    store8xf32(accm, sf, ffma(cvt_f32(sumi), dmin, am))
        for n in range(r0, r1):
            for t in range(t0, t1):
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
        run_repack(_repack, raw, out, True)
        return (out,)
    run_repack(_repack, raw, out, False)
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
        nb, Tp = K // QK_K, (T + 15) // 16 * 16
        qT = zeros_aligned((Tp // 16, K // 4, 64), np.int8)
        ydT = zeros_aligned((nb, Tp), np.float32)
        bsP = zeros_aligned((nb, 4, Tp, 2), np.int16)
        _prep_vnni(a.qs, a.bsums, a.d, qT.view(np.int32), ydT, bsP)
        _gemm_vnni(packed[0], qT, ydT, bsP, sb, kquants.lane_token_tile(K, Tp, V_UNIT), work_chunks(), streams_out(out),
                   out)
    elif HAS_AVX512:
        T, K = a.qs.shape
        nb, Tp = K // QK_K, (T + 7) // 8 * 8
        qp = empty_aligned((T, K), np.int8)
        ydT = zeros_aligned((nb, Tp), np.float32)
        bsP = zeros_aligned((nb, 4, Tp, 2), np.int16)
        _prep_z(a.qs, a.bsums, a.d, qp, ydT, bsP)
        _gemm_z(packed[0], qp, ydT, bsP, sb, out)
    elif a.qs.shape[0] >= q4_k_gemm256.L_MIN_TOKENS:
        T, K = a.qs.shape
        nb, Tp = K // QK_K, (T + 15) // 16 * 16
        qT = zeros_aligned((Tp // 16, K // 4, 64), np.int8)
        ydT = zeros_aligned((nb, Tp), np.float32)
        bsP = zeros_aligned((nb, 4, Tp, 2), np.int16)
        _prep_vnni(a.qs, a.bsums, a.d, qT.view(np.int32), ydT, bsP)
        q4_k_gemm256._gemm_lanes(packed[0], qT, ydT, bsP, sb, q4_k_gemm256.token_tile(K, Tp), work_chunks(), out)
    else:
        k = kquants.prepare(a, 0)
        _gemm(packed[0], k.qp, k.d, k.bs32, sb, out)


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


SCALAR = kblock.scalar_path(GGMLType.Q4_K)  # (pack, mm) of the portable path, tested on every machine
if HAS_AVX2:
    FORMAT = register(BlockFormat(GGMLType.Q4_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, _pack_fast,
                                  _gemv_fast, _gemm_fast, _gemm_llama))
else:
    FORMAT = register(BlockFormat(GGMLType.Q4_K, QK_K, BLOCK_BYTES, GGMLType.Q8_K, dequantize_rows, SCALAR[0],
                                  SCALAR[1], SCALAR[1]))
