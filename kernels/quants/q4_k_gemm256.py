"""Q4_K's batched 256-bit kernel with the tokens in the lanes (AVX2 without AVX-512), over the repacked rows of
`q4_k` (PACKED_BYTES-byte blocks). It gives q4_k.row_dot_x86's bits; see q4_k's docstring for the orders.

AVX2 has no vpdpbusd, and q4_k._gemm (a row's block against one token at a time) spends most of its work on
horizontal sums and on the 8 nibble and 8 scale vectors that do not fit the 16 ymm registers. Here, as in
q4_k_gemm512._gemm_vnni, 4 weights of a row are broadcast against 4 quants of 8 tokens: vpmaddubsw gives each
token two int16 pair sums, and those of a whole 32-weight sub-block are added in int16 (each lane collects 16
products nibble x quant: |S| <= 16 * 15 * 127 = 30480 < 2^15, no saturation) before one vpmaddwd by the
sub-block's scale turns them into the token's int32 scale * S. So a sub-block costs 8 vpmaddubsw + 8 vpaddw per
8 tokens and one vpmaddwd, instead of 2 multiplies per 32 weights and a horizontal sum per token; the integer
sums I and M are row_dot_x86's, and its float FMAs run 8 tokens per instruction.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, pjit
from ..ggml_type import QK_K
from ._simd import add16, bcast4, cvt_f32, dpwssd, ffma, fmul, load32, load8xf32, maddubs, splat16, splatf, store8xf32, zero16, zero32
from .q4_k_gemm512 import PACKED_BYTES, _min_term_z, unpack_rows

L_ROW_TILE = 16  # rows whose block is unpacked at once (wq: 4 KB in L1)
L_UNIT = 16      # tokens per pass of the inner loop: 2 ymm of 8, so 4 rows x 2 = 8 int16 chains
L_MIN_TOKENS = 16  # below: q4_k._gemm (1536x2048, 2 threads, Zen 3, GFLOP/s _gemm / this: T=8 87 / 66, 12 84 / 85, 16 97 / 114)


def token_tile(K: int, Tp: int) -> int:
    """Tokens per pass over a thread's rows: activations of about 1 MB (K bytes a token; from L3 on the 512 KB
    L2 of a Zen 3 core): each pass unpacks the rows' blocks and starts their sums again, and a longer pass costs
    less (1536x8960 and 8960x1536, 512 tokens, 2 threads, Zen 3: 16 tokens 172 / 32 267 / 128 339 / 512 336
    GFLOP/s for K = 8960)."""
    return min(Tp, L_UNIT * max(1, (1 << 20) // (K * L_UNIT)))


@ijit
def _fma_tokens(acc, o, i0, i1, dx, ydT, yo):
    """acc[16 tokens at byte o] = fma(float(i), dx * dy, acc) lane-wise (i0: the first 8 tokens, i1: the next;
    dy: 16 tokens at byte yo of ydT)."""
    store8xf32(acc, o, ffma(cvt_f32(i0), fmul(splatf(dx), load8xf32(ydT, yo)), load8xf32(acc, o)))
    store8xf32(acc, o + 32, ffma(cvt_f32(i1), fmul(splatf(dx), load8xf32(ydT, yo + 32)), load8xf32(acc, o + 32)))


@pjit
def _gemm_lanes(w, qT, ydT, bsP, SB, TT, nt, out):
    """qT (Tp/16, K/4, 64) int8 from q4_k_gemm512._prep_vnni (16 tokens' 4-byte groups per 64 bytes; Tp = T
    rounded up to L_UNIT, padding zero), ydT (nb, Tp) and bsP (nb, 4, Tp, 2) as there. nt chunks of consecutive
    row tiles (one per thread; any nt gives the same bits), each going through the tokens TT at a time and, per
    token tile, through its row tiles: per (16 rows, block) the nibbles are unpacked once to bytes, then for 16
    tokens and 4 rows at a time the sub-block sums above; SB as row_dot_x86 (an FMA per pair of sub-blocks)."""
    N = w.shape[0]
    T = out.shape[0]
    nb, Tp = ydT.shape
    nq = qT.shape[1]
    rb = w.shape[1]
    n_rt = (N + L_ROW_TILE - 1) // L_ROW_TILE
    R = 4 * TT  # bytes per row of acc
    for ch in prange(nt):
        wq = np.empty(L_ROW_TILE * QK_K, np.uint8)   # (16 rows, 256) unpacked quants of one block
        sc = np.empty(L_ROW_TILE * 8, np.int16)      # (16 rows, 8) sub-block scales
        dx = np.empty(L_ROW_TILE, np.float32)
        acc = np.empty((L_ROW_TILE, TT), np.float32)   # (rows, tokens); rows past N: copies of the last
        accm = np.empty((L_ROW_TILE, TT), np.float32)
        for t0 in range(0, Tp, TT):
            t1 = min(Tp, t0 + TT)
            for rt in range(ch * n_rt // nt, (ch + 1) * n_rt // nt):
                r0, r1 = rt * L_ROW_TILE, min(N, (rt + 1) * L_ROW_TILE)
                acc[:] = 0
                accm[:] = 0
                for b in range(nb):
                    ob = b * PACKED_BYTES
                    unpack_rows(w, r0, r1, ob, wq, sc, dx)
                    for tg in range(t0, t1, L_UNIT):
                        ya = 64 * ((tg // 16) * nq + 64 * b)  # qT: group k of these 16 tokens at ya + 64 k
                        oy = 4 * (b * Tp + tg)                # ydT[b, tg]
                        for r4 in range(0, L_ROW_TILE, 4):
                            ow = QK_K * r4
                            oa = 4 * (r4 * TT + tg - t0)      # acc[r4, tg - t0]
                            i00 = i01 = i10 = i11 = i20 = i21 = i30 = i31 = zero32()
                            for j in range(8):  # sub-block j: 4-weight groups 8j .. 8j+7
                                s00 = s01 = s10 = s11 = s20 = s21 = s30 = s31 = zero16()
                                for k in range(8 * j, 8 * j + 8):
                                    y0 = load32(qT, ya + 64 * k)
                                    y1 = load32(qT, ya + 64 * k + 32)
                                    u = bcast4(wq, ow + 4 * k)
                                    s00 = add16(s00, maddubs(u, y0))
                                    s01 = add16(s01, maddubs(u, y1))
                                    u = bcast4(wq, ow + QK_K + 4 * k)
                                    s10 = add16(s10, maddubs(u, y0))
                                    s11 = add16(s11, maddubs(u, y1))
                                    u = bcast4(wq, ow + 2 * QK_K + 4 * k)
                                    s20 = add16(s20, maddubs(u, y0))
                                    s21 = add16(s21, maddubs(u, y1))
                                    u = bcast4(wq, ow + 3 * QK_K + 4 * k)
                                    s30 = add16(s30, maddubs(u, y0))
                                    s31 = add16(s31, maddubs(u, y1))
                                v = splat16(sc[8 * r4 + j])
                                i00 = dpwssd(i00, s00, v)
                                i01 = dpwssd(i01, s01, v)
                                v = splat16(sc[8 * r4 + 8 + j])
                                i10 = dpwssd(i10, s10, v)
                                i11 = dpwssd(i11, s11, v)
                                v = splat16(sc[8 * r4 + 16 + j])
                                i20 = dpwssd(i20, s20, v)
                                i21 = dpwssd(i21, s21, v)
                                v = splat16(sc[8 * r4 + 24 + j])
                                i30 = dpwssd(i30, s30, v)
                                i31 = dpwssd(i31, s31, v)
                                # ggml_gemm_q4_K_8x8_q8_K (SB): one FMA per pair of sub-blocks;
                                # ggml_gemv_q4_K_8x8_q8_K: one per block
                                if (SB and j % 2 == 1) or j == 7:
                                    _fma_tokens(acc, oa, i00, i01, dx[r4], ydT, oy)
                                    _fma_tokens(acc, oa + R, i10, i11, dx[r4 + 1], ydT, oy)
                                    _fma_tokens(acc, oa + 2 * R, i20, i21, dx[r4 + 2], ydT, oy)
                                    _fma_tokens(acc, oa + 3 * R, i30, i31, dx[r4 + 3], ydT, oy)
                                    i00 = i01 = i10 = i11 = i20 = i21 = i30 = i31 = zero32()
                    # the min term accm = fma(M, dmin * dy, accm), per block or per pair (SB), 8 tokens a vector
                    for r in range(L_ROW_TILE):
                        _min_term_z(w, min(r0 + r, r1 - 1), ob, rb, b, Tp, t0, (t1 - t0) // 8, r, bsP, ydT, accm, SB)
                for t in range(t0, min(T, t1)):
                    for n in range(r0, r1):
                        out[t, n] = np.float32(acc[n - r0, t - t0] - accm[n - r0, t - t0])
