"""Fast (AVX2) gemv/gemm shared by the 32-weight block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.

Which float order: that of the kernels an x86 llama.cpp runs: Q4_0 its repacked q4_0_8x8 kernels (mode 6),
Q4_1, Q5_1, Q5_0 and Q8_0 the AVX2 vec_dot kernels (modes 4, 5 below): measured against the fixtures, that order makes SmolLM2's eval-callback trace and greedy
logits identical to llama.cpp's, where the generic order diverged from layer 3 on (README, "Agreement").

The generic dot products need one int32 sum per block (no lane order). Rows are repacked at load time in
groups of 8 ("8 rows x 4 bytes" interleave, like ggml's repacked q4_0_8x8 family), so that one vpdpbusd of a
32-byte vector with a broadcast 4-byte activation group adds 4 products to the block sum of each of the 8 rows
(int32 lane r = row r) - no horizontal sums. Per group of 8 rows and block b (GB bytes, same total size as
the 8 raw blocks):

    [0:16)          d of the 8 rows, fp16
    [16:32)         m of the 8 rows, fp16                       (Q4_1, Q5_1)
    [QH:QH+32)      Q5 fifth bits: byte k of row r's 4 bytes, bit j = element 4j+k's fifth bit, the bit of
                    AVX lane j's byte k (_simd.q5_bits)         (Q5_0, Q5_1; 16-row groups: see below)
    [QS:QS+128)     4-bit formats: 4 chunks of 32 bytes, chunk j = raw qs bytes 4j..4j+3 of rows 0..7
                    (low nibbles: elements 4j..4j+3, high nibbles: 16+4j..16+4j+3)
    [QS:QS+256)     Q8_0: 8 chunks, chunk j = elements 4j..4j+3 of rows 0..7, stored q+128 (unsigned; signed
                    without VNNI, Q8_SIGNED below)

Offset quants (Q4_0: q-8, Q5_0: q-16, Q8_0's q+128 storage) use SUB * sum(activation block): exact integer
identity. The per-block float arithmetic runs in 8 lanes (one per row), each lane doing exactly the sequence of
llama.cpp's x86 kernel for its format (MODE, one of the names below).

The lane modes: ggml's AVX2 ggml_vec_dot_{q4_1_q8_1, q5_1_q8_1, q5_0_q8_0, q8_0_q8_0} (ggml-cpu/arch/x86/quants.c),
which an x86 build of llama.cpp runs instead of the generic C. They do not form one int32 sum per block: the
32 products land in 8 int32 lanes (lane j = elements 4j..4j+3: vpdpbusd / vpmaddubsw+vpmaddwd), each lane is
converted to float and fused-multiply-added into its own float accumulator, and the 8 accumulators are added
at the end (hsum_float_8):

    LANES     Q5_0, Q8_0 (and Q4_0 where llama.cpp does not repack it):
                  acc[j] = fma(dx * dy, (float)lane_j, acc[j]);  s = hsum_float_8(acc)
    LANES_M   Q4_1, Q5_1: the same, plus summs = fma(mx, sy, summs) (GCC contracts `summs += mx*sy`);
                  s = hsum_float_8(acc) + summs
    SUMI_FMA  Q4_0: x86 llama.cpp repacks Q4_0 (q4_0_8x8) and its gemv and gemm both do, per block,
                  sumf = fma((float)sumi, dx * dy, sumf) (arch/x86/repack.cpp): one int32 sum per block, the
                  8 rows' sums side by side in 8 lanes

Here chunk j of the interleaved layout (low nibbles for j < 4, high nibbles for j >= 4 in the 4-bit formats)
is exactly AVX lane j of each of the 8 rows, so vector A_j holds lane j of the 8 rows' accumulators.
Offset formats subtract SUB * (sum of the lane's 4 activations), per lane: asum (K/4 columns) holds
-SUB * sum, the starting value of vpdpbusd (a broadcast load, no arithmetic in the loop). With AVX512-VNNI the x86 modes use groups of XG = 16 rows (every offset above
times 2: d [0:32), m [32:64), chunks of 64 bytes), one zmm per lane (rows16_x86_z); without it, 8 rows
and one ymm per lane (rows8_x86). The two give the same bits (the same operations per lane). In 16-row groups
the Q5 fifth bits are stored as one 64-bit mask per lane j at QH + 8j (bit 4r + i = element 4j + i of row r),
so that a kmovq and a masked vpord add them (or16_mask; Q5_0/Q5_1 gemm +8-12 % over a byte shuffle + test).
Without VNNI (AVX2 only) the 4-byte-group sums are ggml's AVX2 ones: vpmaddubsw + vpmaddwd for the 4/5-bit
quants (below 128: no int16 saturation), and Q8_0 stored signed (Q8_SIGNED, no +128, SUB = 0) with the sign
trick vpmaddubsw(|q|, sign(a, q)); the 8-row Q5 bits are one bit per lane in each byte (_simd.q5_bits).

Bounds: |block sums| <= 32*255*127 < 2^24 (exact float conversion, no int32 overflow).
Each format module passes its constants (GB, QH, QS, HAS_M, SUB, MODE, Q8) to gemv_group / gemm_tile from
its own prange kernels, so LLVM specialises the shared code per format.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, jit, pjit
from .base import empty_aligned, run_repack
from ._simd512 import (HAS_VNNI512, and64, bcast4z, cvt_f32z, dpbusd_z, fadd_z, ffma_z, fmul_z, lanef_z, load16_f16,
                       load16xf32, load64, or16_mask, splat32z, splat8z, splatfz, srl16x2, store16xf32, store64,
                       zero16f, zero16x32)
from ._simd import (HAS_VNNI, and8, bcast4, cvt_f32, dpbssd_sign, dpbusd, dpbusd_u7, fadd, ffma, fmul, lanef, load16_lo,
                    load32, load8_f16, load8xf32, or8, prefetch_span, q5_bits, splat32, splat8, splatf, srl16, store32,
                    store8xf32, store_rows4, store_rows8, sub32, xor8, zero32, zerof)

QK = 32

# MODE: the float sequence of a block (module docstring)
LANES = 4  # x86 vec_dot: 8 int32 lanes per block, one fma per lane, hsum_float_8 at the end
LANES_M = 5  # LANES plus the offset term fma(m, s) (Q4_1, Q5_1)
SUMI_FMA = 6  # one int32 sum per block and row, sumf = fma(sumi, dx*dy, sumf) (llama.cpp's repacked Q4_0)
G = 8  # rows per interleaved group (generic modes)
XG = 16 if HAS_VNNI512 else 8  # rows per group in the x86 modes: one zmm (AVX512-VNNI) or ymm per lane
XS = XG // G  # the x86 modes' layout constants are the 8-row ones times XS
# Q8_0's quants: stored q + 128 for vpdpbusd (unsigned x signed, SUB = 128); without VNNI, in 8-row groups,
# stored as they are and multiplied by ggml's AVX2 sign trick (_simd.dpbssd_sign), SUB = 0
Q8_SIGNED = XG == 8 and not HAS_VNNI
Q8_SUB = 0 if Q8_SIGNED else 128


# ----------------------------------------------------------------------------------------- repack

def _q5_lut8() -> np.ndarray:
    """For the 8-row Q5 bits (repack): entry x (one byte of qh, bits 8m..8m+7) = for each k in 0..3, in byte k,
    bit k of x at bit 0 and bit k + 4 at bit 1 (elements 4j + k of j = 2m, 2m + 1)."""
    x = np.arange(256, dtype=np.uint32)
    lut = np.zeros(256, np.uint32)
    for k in range(4):
        lut |= (((x >> k) & 1) | (((x >> (k + 4)) & 1) << 1)) << (8 * k)
    return lut


Q5_LUT8 = _q5_lut8()


@pjit
def repack(raw, BB, QS_RAW, QH_RAW, M_RAW, GB, QH, QS, Q8, R, out):
    """raw (N, nb*BB) GGUF blocks -> out (ceil(N/R), nb*GB) in groups of R rows (8 or 16): per group-block
    d at [0, 2R), m at [2R, 4R), Q5 bits at QH + 4r, chunk j at QS + 4R*j + 4r; rows past N repeat row N-1.
    8-row groups move each block's quants with one 4-byte-group transpose (store_rows8/4)."""
    N = raw.shape[0]
    nb = raw.shape[1] // BB
    rs = raw.strides[0]
    for g in prange(out.shape[0]):
        if R == 8:
            n0, n1, n2, n3 = min(8 * g, N - 1), min(8 * g + 1, N - 1), min(8 * g + 2, N - 1), min(8 * g + 3, N - 1)
            n4, n5, n6, n7 = min(8 * g + 4, N - 1), min(8 * g + 5, N - 1), min(8 * g + 6, N - 1), min(8 * g + 7, N - 1)
            for b in range(nb):
                o = b * BB
                q = b * GB
                for r in range(8):
                    n = min(8 * g + r, N - 1)
                    out[g, q + 2 * r] = raw[n, o]
                    out[g, q + 2 * r + 1] = raw[n, o + 1]
                    if M_RAW >= 0:
                        out[g, q + 16 + 2 * r] = raw[n, o + M_RAW]
                        out[g, q + 16 + 2 * r + 1] = raw[n, o + M_RAW + 1]
                    if QH_RAW >= 0:  # byte 4r + k, bit j = fifth bit of element 4j + k (lane j; see _simd.q5_bits)
                        v = (Q5_LUT8[raw[n, o + QH_RAW]] | (Q5_LUT8[raw[n, o + QH_RAW + 1]] << np.uint32(2))
                             | (Q5_LUT8[raw[n, o + QH_RAW + 2]] << np.uint32(4))
                             | (Q5_LUT8[raw[n, o + QH_RAW + 3]] << np.uint32(6)))
                        for k in range(4):
                            out[g, q + QH + 4 * r + k] = np.uint8((v >> np.uint32(8 * k)) & np.uint32(255))
                dst = g * out.strides[0] + q + QS
                src = o + QS_RAW
                if Q8:  # rows' 32 quants -> chunk j = elements 4j..4j+3 of the 8 rows
                    f = splat8(0 if Q8_SIGNED else -128)
                    store_rows8(out, dst, 32, xor8(load32(raw, n0 * rs + src), f), xor8(load32(raw, n1 * rs + src), f),
                                xor8(load32(raw, n2 * rs + src), f), xor8(load32(raw, n3 * rs + src), f),
                                xor8(load32(raw, n4 * rs + src), f), xor8(load32(raw, n5 * rs + src), f),
                                xor8(load32(raw, n6 * rs + src), f), xor8(load32(raw, n7 * rs + src), f))
                else:  # rows' 16 quant bytes -> chunk j = bytes 4j..4j+3 of the 8 rows
                    store_rows4(out, dst, 32, load16_lo(raw, n0 * rs + src), load16_lo(raw, n1 * rs + src),
                                load16_lo(raw, n2 * rs + src), load16_lo(raw, n3 * rs + src),
                                load16_lo(raw, n4 * rs + src), load16_lo(raw, n5 * rs + src),
                                load16_lo(raw, n6 * rs + src), load16_lo(raw, n7 * rs + src))
            continue
        if XG == 8:  # R is 8 (above): 16-row groups exist where XG == 16 only; numba prunes the rest here
            continue
        for r in range(R):
            n = min(R * g + r, N - 1)
            row = raw[n]
            for b in range(nb):
                o = b * BB
                q = b * GB
                out[g, q + 2 * r] = row[o]
                out[g, q + 2 * r + 1] = row[o + 1]
                if M_RAW >= 0:
                    out[g, q + 2 * R + 2 * r] = row[o + M_RAW]
                    out[g, q + 2 * R + 2 * r + 1] = row[o + M_RAW + 1]
                if QH_RAW >= 0:  # lane j's 64-bit mask at QH + 8j: bit 4r + i = fifth bit of element 4j + i
                    qh = (np.uint32(row[o + QH_RAW]) | (np.uint32(row[o + QH_RAW + 1]) << 8)
                          | (np.uint32(row[o + QH_RAW + 2]) << 16) | (np.uint32(row[o + QH_RAW + 3]) << 24))
                    for j in range(8):
                        nib = (qh >> np.uint32(4 * j)) & np.uint32(15)
                        if r % 2 == 0:  # rows r, r + 1 share a byte (r ascends: low nibble first)
                            out[g, q + QH + 8 * j + r // 2] = np.uint8(nib)
                        else:
                            out[g, q + QH + 8 * j + r // 2] |= np.uint8(nib << np.uint32(4))
                if Q8:
                    for j in range(8):
                        for k in range(4):
                            out[g, q + QS + 4 * R * j + 4 * r + k] = row[o + QS_RAW + 4 * j + k] ^ np.uint8(
                                0 if Q8_SIGNED else 0x80)
                else:
                    for j in range(4):
                        for k in range(4):
                            out[g, q + QS + 4 * R * j + 4 * r + k] = row[o + QS_RAW + 4 * j + k]


@pjit
def block_sums(qs, asum, scale):
    """asum (T, K/n) int32 = scale * the sums of the quants, n = K / asum.shape[1] (32: per block, scale 1;
    4: per x86 lane, scale -SUB: the lane's offset correction, ready to start vpdpbusd from)."""
    T, K = qs.shape
    n = K // asum.shape[1]
    for t in prange(T):
        for b in range(asum.shape[1]):
            s = np.int32(0)
            for j in range(n):
                s += np.int32(qs[t, n * b + j])
            asum[t, b] = np.int32(scale * s)


# ----------------------------------------------------------------------------------------- kernels

@jit
def _block_sumi(w, o, qa, oa, QH, QS, Q8, m0f):
    """int32 lane r = sum of (stored unsigned quants) x activations over the block, for the 8 rows."""
    acc = zero32()
    if Q8:
        for j in range(8):
            acc = _dp(acc, load32(w, o + QS + 32 * j), bcast4(qa, oa + 4 * j), Q8)
    else:
        for j in range(4):
            v = load32(w, o + QS + 32 * j)
            lo = and8(v, m0f)
            hi = and8(srl16(v, 4), m0f)
            if QH >= 0:
                h = load32(w, o + QH)
                lo = or8(lo, q5_bits(h, j))
                hi = or8(hi, q5_bits(h, j + 4))
            acc = dpbusd_u7(acc, lo, bcast4(qa, oa + 4 * j))
            acc = dpbusd_u7(acc, hi, bcast4(qa, oa + 16 + 4 * j))
    return acc


@jit
def _dp(acc, u, s, Q8):
    """dpbusd of stored quants: Q8's are q + 128 (up to 255) or signed (Q8_SIGNED), the 4- and 5-bit ones below 128."""
    if Q8:
        return dpbssd_sign(acc, u, s) if Q8_SIGNED else dpbusd(acc, u, s)
    return dpbusd_u7(acc, u, s)


@jit
def _combine(sumf, acc, SUB, asum_tb, w, o, dy):
    """One SUMI_FMA block's float update of the 8 rows (lanes)."""
    if SUB != 0:
        acc = sub32(acc, splat32(SUB * asum_tb))
    fs = cvt_f32(acc)
    dx = load8_f16(w, o)
    # SUMI_FMA, x86 llama.cpp's repacked Q4_0 (ggml_gemv/gemm_q4_0_8x8_q8_0): fma(sumi, dx*dy, sumf)
    return ffma(fs, fmul(dx, splatf(dy)), sumf)


@ijit
def _lane(w, o, j, qa, oa, h, QH, QS, Q8, SUB, a4, m0f):
    """int32 vector, lane r = row r's AVX lane j of the block at o: sum over elements 4j..4j+3 (h: the
    block's Q5 bits). No array access under `if QH`: there numba would refcount `w` in the loop (Q5_0 gemm
    6 -> see RESULTS.md)."""
    if Q8:
        return _dp(splat32(a4) if SUB != 0 else zero32(), load32(w, o + QS + 32 * j), bcast4(qa, oa + 4 * j), Q8)
    c = load32(w, o + QS + 32 * (j % 4))
    q = and8(c, m0f) if j < 4 else and8(srl16(c, 4), m0f)
    if QH >= 0:
        q = or8(q, q5_bits(h, j))
    return dpbusd_u7(splat32(a4) if SUB != 0 else zero32(), q, bcast4(qa, oa + 4 * j))


@jit
def rows8_x86(w, go, GB, QH, QS, HAS_M, SUB, Q8, qa, t, yd, ys, asum, m0f):
    """x86-mode dot products of the 8 rows of the group at byte go with token t (modes 4 and 5 above):
    <8 x float>, lane r = row r."""
    K = qa.shape[1]
    A0 = zerof()
    A1 = zerof()
    A2 = zerof()
    A3 = zerof()
    A4 = zerof()
    A5 = zerof()
    A6 = zerof()
    A7 = zerof()
    summs = zerof()
    for b in range(K // QK):
        o = go + b * GB
        oa = t * K + QK * b
        a = 8 * b
        d = fmul(load8_f16(w, o), splatf(yd[t, b]))
        if HAS_M:
            summs = ffma(load8_f16(w, o + 16), splatf(ys[t, b]), summs)
        h = load32(w, o + max(QH, 0))  # (the d bytes when there are no Q5 bits; unused then)
        A0 = ffma(d, cvt_f32(_lane(w, o, 0, qa, oa, h, QH, QS, Q8, SUB, asum[t, a], m0f)), A0)
        A1 = ffma(d, cvt_f32(_lane(w, o, 1, qa, oa, h, QH, QS, Q8, SUB, asum[t, a + 1], m0f)), A1)
        A2 = ffma(d, cvt_f32(_lane(w, o, 2, qa, oa, h, QH, QS, Q8, SUB, asum[t, a + 2], m0f)), A2)
        A3 = ffma(d, cvt_f32(_lane(w, o, 3, qa, oa, h, QH, QS, Q8, SUB, asum[t, a + 3], m0f)), A3)
        A4 = ffma(d, cvt_f32(_lane(w, o, 4, qa, oa, h, QH, QS, Q8, SUB, asum[t, a + 4], m0f)), A4)
        A5 = ffma(d, cvt_f32(_lane(w, o, 5, qa, oa, h, QH, QS, Q8, SUB, asum[t, a + 5], m0f)), A5)
        A6 = ffma(d, cvt_f32(_lane(w, o, 6, qa, oa, h, QH, QS, Q8, SUB, asum[t, a + 6], m0f)), A6)
        A7 = ffma(d, cvt_f32(_lane(w, o, 7, qa, oa, h, QH, QS, Q8, SUB, asum[t, a + 7], m0f)), A7)
    return _hsum8((A0, A1, A2, A3, A4, A5, A6, A7), summs, HAS_M)


@ijit
def _hsum8(A, summs, HAS_M):
    """hsum_float_8 lane-wise over the 8 rows: (a4 + a0) + (a6 + a2), (a5 + a1) + (a7 + a3), their sum (+ summs
    for the formats with a minimum)."""
    s = fadd(fadd(fadd(A[4], A[0]), fadd(A[6], A[2])), fadd(fadd(A[5], A[1]), fadd(A[7], A[3])))
    return fadd(s, summs) if HAS_M else s


@ijit
def _init_z(SUB, a4):
    """vpdpbusd's starting value: the offset correction a4 = -SUB * (sum of the lane's 4 activations)."""
    return splat32z(a4) if SUB != 0 else zero16x32()


@ijit
def _decode8(w, o, QH, QS, Q8, m0f):
    """The 8 AVX lanes' quants of the 8 rows of the group-block at o: lane j = <32 x u8> (4 bytes per row:
    elements 4j..4j+3; in the 4-bit formats chunk j's low nibbles are lane j, its high nibbles lane j + 4)."""
    if Q8:
        return (load32(w, o + QS), load32(w, o + QS + 32), load32(w, o + QS + 64), load32(w, o + QS + 96),
                load32(w, o + QS + 128), load32(w, o + QS + 160), load32(w, o + QS + 192), load32(w, o + QS + 224))
    c0 = load32(w, o + QS)
    c1 = load32(w, o + QS + 32)
    c2 = load32(w, o + QS + 64)
    c3 = load32(w, o + QS + 96)
    q = (and8(c0, m0f), and8(c1, m0f), and8(c2, m0f), and8(c3, m0f),
         and8(srl16(c0, 4), m0f), and8(srl16(c1, 4), m0f), and8(srl16(c2, 4), m0f), and8(srl16(c3, 4), m0f))
    if QH < 0:
        return q
    h = load32(w, o + QH)  # fifth bits: one bit per lane in each byte (repack's 8-row layout)
    return (or8(q[0], q5_bits(h, 0)), or8(q[1], q5_bits(h, 1)), or8(q[2], q5_bits(h, 2)), or8(q[3], q5_bits(h, 3)),
            or8(q[4], q5_bits(h, 4)), or8(q[5], q5_bits(h, 5)), or8(q[6], q5_bits(h, 6)), or8(q[7], q5_bits(h, 7)))


@ijit
def _decode16(w, o, QH, QS, Q8, m0f):
    """The 8 AVX lanes' quants of the 16 rows of the group-block at o: lane j = <64 x u8> (4 bytes per row)."""
    if Q8:  # chunk j = lane j
        return (load64(w, o + QS), load64(w, o + QS + 64), load64(w, o + QS + 128), load64(w, o + QS + 192),
                load64(w, o + QS + 256), load64(w, o + QS + 320), load64(w, o + QS + 384), load64(w, o + QS + 448))
    # chunk j: low nibbles = lane j, high nibbles = lane j + 4
    c0 = load64(w, o + QS)
    c1 = load64(w, o + QS + 64)
    c2 = load64(w, o + QS + 128)
    c3 = load64(w, o + QS + 192)
    q0 = and64(c0, m0f)
    q1 = and64(c1, m0f)
    q2 = and64(c2, m0f)
    q3 = and64(c3, m0f)
    q4 = and64(srl16x2(c0, 4, 4), m0f)
    q5 = and64(srl16x2(c1, 4, 4), m0f)
    q6 = and64(srl16x2(c2, 4, 4), m0f)
    q7 = and64(srl16x2(c3, 4, 4), m0f)
    if QH >= 0:  # fifth bits: one 64-bit mask per lane (repack's 16-row layout)
        q0 = or16_mask(q0, w, o + QH)
        q1 = or16_mask(q1, w, o + QH + 8)
        q2 = or16_mask(q2, w, o + QH + 16)
        q3 = or16_mask(q3, w, o + QH + 24)
        q4 = or16_mask(q4, w, o + QH + 32)
        q5 = or16_mask(q5, w, o + QH + 40)
        q6 = or16_mask(q6, w, o + QH + 48)
        q7 = or16_mask(q7, w, o + QH + 56)
    return (q0, q1, q2, q3, q4, q5, q6, q7)


@ijit
def _acc16(Z, d, q, qa, oa, SUB, asum, t, a):
    """acc[j] = fma(d, (float)lane_j, acc[j]) for the 8 lanes of one block and token t (activations at oa)."""
    return (ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a]), q[0], bcast4z(qa, oa))), Z[0]),
            ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 1]), q[1], bcast4z(qa, oa + 4))), Z[1]),
            ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 2]), q[2], bcast4z(qa, oa + 8))), Z[2]),
            ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 3]), q[3], bcast4z(qa, oa + 12))), Z[3]),
            ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 4]), q[4], bcast4z(qa, oa + 16))), Z[4]),
            ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 5]), q[5], bcast4z(qa, oa + 20))), Z[5]),
            ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 6]), q[6], bcast4z(qa, oa + 24))), Z[6]),
            ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 7]), q[7], bcast4z(qa, oa + 28))), Z[7]))


@ijit
def _hsum16(Z, summs, HAS_M):
    """hsum_float_8 lane-wise over the 16 rows: (a4 + a0) + (a6 + a2), (a5 + a1) + (a7 + a3), their sum
    (+ summs for the formats with a minimum)."""
    s = fadd_z(fadd_z(fadd_z(Z[4], Z[0]), fadd_z(Z[6], Z[2])), fadd_z(fadd_z(Z[5], Z[1]), fadd_z(Z[7], Z[3])))
    return fadd_z(s, summs) if HAS_M else s


@jit
def rows16_x86_z(w, go, GB, QH, QS, HAS_M, SUB, Q8, qa, t, yd, ys, asum, PF):
    """rows8_x86 for the 16 rows of the group at byte go (layout constants x2), one zmm per AVX lane
    (AVX512-VNNI): <16 x float>, lane r = row r. Written out lane by lane: through the tuple helpers
    _decode16 / _acc16 the Q5 formats run 1.7-1.8x slower (re-measured 2026-11-29, 2
    threads: Q5_0 gemm 1536x8960 T=512 172-175 -> 94-97 GFLOP/s, gemv 1536x8960 50-52 -> 29 GB/s; Q8_0 and
    Q4_1 unchanged). PF > 0 (gemv): each block prefetches the bytes PF ahead of it."""
    K = qa.shape[1]
    m0f = splat8z(15)
    Z0 = zero16f()
    Z1 = zero16f()
    Z2 = zero16f()
    Z3 = zero16f()
    Z4 = zero16f()
    Z5 = zero16f()
    Z6 = zero16f()
    Z7 = zero16f()
    summs = zero16f()
    for b in range(K // QK):
        o = go + b * GB
        if PF > 0:
            prefetch_span(w, o + PF, GB)
        oa = t * K + QK * b
        a = 8 * b
        d = fmul_z(load16_f16(w, o), splatfz(yd[t, b]))
        if HAS_M:
            summs = ffma_z(load16_f16(w, o + 32), splatfz(ys[t, b]), summs)
        if Q8:  # chunk j = lane j
            q0 = load64(w, o + QS)
            q1 = load64(w, o + QS + 64)
            q2 = load64(w, o + QS + 128)
            q3 = load64(w, o + QS + 192)
            q4 = load64(w, o + QS + 256)
            q5 = load64(w, o + QS + 320)
            q6 = load64(w, o + QS + 384)
            q7 = load64(w, o + QS + 448)
        else:   # chunk j: low nibbles = lane j, high nibbles = lane j + 4
            c0 = load64(w, o + QS)
            c1 = load64(w, o + QS + 64)
            c2 = load64(w, o + QS + 128)
            c3 = load64(w, o + QS + 192)
            q0 = and64(c0, m0f)
            q1 = and64(c1, m0f)
            q2 = and64(c2, m0f)
            q3 = and64(c3, m0f)
            q4 = and64(srl16x2(c0, 4, 4), m0f)
            q5 = and64(srl16x2(c1, 4, 4), m0f)
            q6 = and64(srl16x2(c2, 4, 4), m0f)
            q7 = and64(srl16x2(c3, 4, 4), m0f)
            if QH >= 0:  # fifth bits: one 64-bit mask per lane (repack's 16-row layout)
                q0 = or16_mask(q0, w, o + QH)
                q1 = or16_mask(q1, w, o + QH + 8)
                q2 = or16_mask(q2, w, o + QH + 16)
                q3 = or16_mask(q3, w, o + QH + 24)
                q4 = or16_mask(q4, w, o + QH + 32)
                q5 = or16_mask(q5, w, o + QH + 40)
                q6 = or16_mask(q6, w, o + QH + 48)
                q7 = or16_mask(q7, w, o + QH + 56)
        Z0 = ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a]), q0, bcast4z(qa, oa))), Z0)
        Z1 = ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 1]), q1, bcast4z(qa, oa + 4))), Z1)
        Z2 = ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 2]), q2, bcast4z(qa, oa + 8))), Z2)
        Z3 = ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 3]), q3, bcast4z(qa, oa + 12))), Z3)
        Z4 = ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 4]), q4, bcast4z(qa, oa + 16))), Z4)
        Z5 = ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 5]), q5, bcast4z(qa, oa + 20))), Z5)
        Z6 = ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 6]), q6, bcast4z(qa, oa + 24))), Z6)
        Z7 = ffma_z(d, cvt_f32z(dpbusd_z(_init_z(SUB, asum[t, a + 7]), q7, bcast4z(qa, oa + 28))), Z7)
    return _hsum16((Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7), summs, HAS_M)


# x86 lane modes, batches, 16-row groups (AVX512-VNNI). Decoding a group-block's quants (the nibble masks and
# shifts, Q5's fifth bits) for every pair of tokens took 12-20 of the 32-40 vector instructions a block and pair
# (before 2026-12-03). A work item here decodes its groups once, every block, into a buffer (the quants as
# _decode16 gives them, d and m as float32) and runs all tokens of its pass over the decoded rows, two at a
# time: per block and token 8 vpdpbusd, 8 conversions, 8 FMAs, d and summs, the same operations per lane as
# rows16_x86_z. Same-process A/B, 512 tokens, 2 threads, Q4_1 576x1536 and 1536x576: 96 -> 112-121 GMAC/s a
# thread (/tmp script); SmolLM2's pp512 490-520 -> 456-483 ms (benchmarks/decode_ops.py --prefill 512,
# alternating with the previous build).

ITEM_GROUPS = 2  # 16-row groups per work item (N = 576 gives 18 items, even across 2 threads)
PASS_BYTES = 1 << 20  # activations of one pass (tokens x K bytes) at most this, so that they stay in L2


@jit
def pass_tokens(T, K):
    """Tokens per pass of a work item: all T, or T in passes of even and near-equal counts whose activations fit
    PASS_BYTES (equal passes: kernels that split their passes between threads stay balanced; 116 + 12 tokens
    left one of two threads idle most of the time)."""
    tp = max(2, PASS_BYTES // K // 2 * 2)
    if T <= tp:
        return T
    n_pass = (T + tp - 1) // tp
    tp = (T + n_pass - 1) // n_pass
    return tp + (tp & 1)


@jit
def decode_groups16(w, g0, n_g, GB, QH, QS, Q8, nb, wq, dx, mx):
    """Groups g0 .. g0+n_g-1 decoded for rows16_pair: wq (>= n_g, nb*512) u8, group i's block b lane j at
    [i, 512b + 64j) (_decode16); dx, mx (>= n_g, nb*16) float32, the rows' d and m of block b at [i, 16b)."""
    m0f = splat8z(15)
    for i in range(n_g):
        go = (g0 + i) * w.shape[1]
        qo = i * wq.strides[0]
        fo = i * dx.strides[0]
        for b in range(nb):
            o = go + b * GB
            q0, q1, q2, q3, q4, q5, q6, q7 = _decode16(w, o, QH, QS, Q8, m0f)
            store16xf32(dx, fo + 64 * b, load16_f16(w, o))
            store16xf32(mx, fo + 64 * b, load16_f16(w, o + 32))
            p = qo + 512 * b
            store64(wq, p, q0)
            store64(wq, p + 64, q1)
            store64(wq, p + 128, q2)
            store64(wq, p + 192, q3)
            store64(wq, p + 256, q4)
            store64(wq, p + 320, q5)
            store64(wq, p + 384, q6)
            store64(wq, p + 448, q7)


@jit
def rows16_pair(wq, dx, mx, i, HAS_M, SUB, qa, t, u, yd, ys, asum):
    """rows16_x86_z for tokens t and u at once (u = t: a last token alone), over group i of decode_groups16's
    buffers: each block's quants are loaded once for both."""
    K = qa.shape[1]
    z = zero16f()
    Za = (z, z, z, z, z, z, z, z)
    Zb = Za
    sa = z
    sb = z
    qo = i * wq.strides[0]
    fo = i * dx.strides[0]
    for b in range(K // QK):
        o = qo + 512 * b
        dxb = load16xf32(dx, fo + 64 * b)
        da = fmul_z(dxb, splatfz(yd[t, b]))
        db = fmul_z(dxb, splatfz(yd[u, b]))
        if HAS_M:
            mxb = load16xf32(mx, fo + 64 * b)
            sa = ffma_z(mxb, splatfz(ys[t, b]), sa)
            sb = ffma_z(mxb, splatfz(ys[u, b]), sb)
        q = (load64(wq, o), load64(wq, o + 64), load64(wq, o + 128), load64(wq, o + 192),
             load64(wq, o + 256), load64(wq, o + 320), load64(wq, o + 384), load64(wq, o + 448))
        Za = _acc16(Za, da, q, qa, t * K + QK * b, SUB, asum, t, 8 * b)
        Zb = _acc16(Zb, db, q, qa, u * K + QK * b, SUB, asum, u, 8 * b)
    return _hsum16(Za, sa, HAS_M), _hsum16(Zb, sb, HAS_M)


@jit
def rows16_one(wq, dx, mx, i, HAS_M, SUB, qa, t, yd, ys, asum):
    """rows16_pair for one token (Q8_0: with the offset's starting values, two tokens' chains spill)."""
    K = qa.shape[1]
    z = zero16f()
    Za = (z, z, z, z, z, z, z, z)
    sa = z
    qo = i * wq.strides[0]
    fo = i * dx.strides[0]
    for b in range(K // QK):
        o = qo + 512 * b
        da = fmul_z(load16xf32(dx, fo + 64 * b), splatfz(yd[t, b]))
        if HAS_M:
            sa = ffma_z(load16xf32(mx, fo + 64 * b), splatfz(ys[t, b]), sa)
        q = (load64(wq, o), load64(wq, o + 64), load64(wq, o + 128), load64(wq, o + 192),
             load64(wq, o + 256), load64(wq, o + 320), load64(wq, o + 384), load64(wq, o + 448))
        Za = _acc16(Za, da, q, qa, t * K + QK * b, SUB, asum, t, 8 * b)
    return _hsum16(Za, sa, HAS_M)


@jit
def _store_rows16(out, t, g, s16):
    """out[t, 16g:16g+16] = s16, as far as the matrix has rows."""
    N = out.shape[1]
    if 16 * g + 16 <= N:  # lane r = row 16g + r: one store
        store16xf32(out, t * out.strides[0] + 64 * g, s16)
    else:
        for r in range(N - 16 * g):
            out[t, 16 * g + r] = lanef_z(s16, r)


@jit
def gemm_item16(w, item, GB, QH, QS, HAS_M, SUB, Q8, qa, yd, ys, asum, out):
    """Work item `item` of n_tiles: ITEM_GROUPS groups x one pass of pass_tokens tokens."""
    N = out.shape[1]
    T, K = qa.shape
    nb = K // QK
    tp = pass_tokens(T, K)
    n_pass = (T + tp - 1) // tp
    g0 = (item // n_pass) * ITEM_GROUPS
    n_g = min(ITEM_GROUPS, (N + 15) // 16 - g0)
    t0 = (item % n_pass) * tp
    t1 = min(T, t0 + tp)
    wq = np.empty((ITEM_GROUPS, nb * 512), np.uint8)
    dx = np.empty((ITEM_GROUPS, nb * 16), np.float32)
    mx = np.empty((ITEM_GROUPS, nb * 16), np.float32)
    decode_groups16(w, g0, n_g, GB, QH, QS, Q8, nb, wq, dx, mx)
    for i in range(n_g):
        if Q8:
            for t in range(t0, t1):
                _store_rows16(out, t, g0 + i, rows16_one(wq, dx, mx, i, HAS_M, SUB, qa, t, yd, ys, asum))
            continue
        for t in range(t0, t1, 2):
            u = min(t + 1, t1 - 1)
            sa, sb = rows16_pair(wq, dx, mx, i, HAS_M, SUB, qa, t, u, yd, ys, asum)
            _store_rows16(out, t, g0 + i, sa)
            if u > t:
                _store_rows16(out, u, g0 + i, sb)


@jit
def x86_group(w, g, GB, QH, QS, HAS_M, SUB, Q8, qa, t, yd, ys, asum, out, PF):
    """x86 modes: out[t, rows of group g] for the XG rows of group g (w repacked with R = XG); PF: as
    rows16_x86_z (0 in the gemm, whose weights are in cache)."""
    N = out.shape[1]
    go = g * w.shape[1]
    if XG == 16:
        s16 = rows16_x86_z(w, go, GB, QH, QS, HAS_M, SUB, Q8, qa, t, yd, ys, asum, PF)
        if 16 * g + 16 <= N:  # lane r = row 16g + r: one store
            store16xf32(out, t * out.strides[0] + 64 * g, s16)
        else:
            for r in range(N - 16 * g):
                out[t, 16 * g + r] = lanef_z(s16, r)
    else:
        s8 = rows8_x86(w, go, GB, QH, QS, HAS_M, SUB, Q8, qa, t, yd, ys, asum, splat8(15))
        for r in range(8):
            if 8 * g + r < N:
                out[t, 8 * g + r] = lanef(s8, r)


@jit
def gemv_group_x86(w, g, GB, QH, QS, HAS_M, SUB, Q8, qa, yd, ys, asum, out, PF):
    """gemv_group in the x86 lane modes: x86_group for one token, prefetching PF bytes ahead block by block
    (16-row groups). 8-row groups (no AVX512-VNNI) use no software prefetch: on the 2-core Zen 3 (AVX2) the
    one-stream gemv (the format modules' _gemv) of Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 ran 1.07-1.57x faster without
    the whole-next-group prefetch (`python benchmarks/gemm_ab.py --base 4301a34 --tokens 1`), a decoded token
    (gemv1's two streams) the same (benchmarks/RESULTS.md)."""
    if XG == 16:  # one zmm per lane
        x86_group(w, g, GB, QH, QS, HAS_M, SUB, Q8, qa, 0, yd, ys, asum, out, PF)
        return
    x86_group(w, g, GB, QH, QS, HAS_M, SUB, Q8, qa, 0, yd, ys, asum, out, 0)


@jit
def gemv_group(w, g, GB, QH, QS, HAS_M, SUB, MODE, Q8, qa, yd, ys, asum, out, PF):
    """Rows 8g .. 8g+7: w (ceil(N/8), nb*GB) repacked, qa (1, K) int8, yd/ys (1, K/32) f32, asum (1, K/32)
    int32 (K/4 in the x86 modes) -> out (1, N). Software prefetch (see _simd.prefetch_span): 16-row groups
    prefetch PF bytes ahead block by block; 8-row groups the whole next group at once, on AVX512-VNNI machines
    only (without, none: gemv_group_x86). Spread out, the prefetches keep more lines in flight
    (benchmarks/kernels.py --no-gemm, 2 threads, 1536x151936, two runs against the whole-group prefetch: Q5_0
    14.4/16.8 -> 18.1/23.7 GB/s, Q4_1 15.0/22.7 -> 27.4/29.8, Q5_1 15.2/17.0 -> 19.7/22.5, Q8_0 19.2/21.5 ->
    22.9/22.0; PF of 8, 16 and 32 KB tried, 16 KB kept)."""
    N = out.shape[1]
    gb = w.shape[1]
    nb = qa.shape[1] // QK
    m0f = splat8(15)
    if MODE == LANES or MODE == LANES_M:
        gemv_group_x86(w, g, GB, QH, QS, HAS_M, SUB, Q8, qa, yd, ys, asum, out, PF)
        return
    if XG == 16:  # (AVX512-VNNI machines; without, see gemv_group_x86)
        prefetch_span(w, (g + 1) * gb, gb)  # next group
    sumf = zerof()
    for b in range(nb):
        o = g * gb + b * GB
        acc = _block_sumi(w, o, qa, QK * b, QH, QS, Q8, m0f)
        sumf = _combine(sumf, acc, SUB, asum[0, b], w, o, yd[0, b])
    for r in range(G):
        if G * g + r < N:
            out[0, G * g + r] = lanef(sumf, r)


GEMV_PF = 16384  # gemv_group's prefetch distance in bytes (all single-token calls; figures in its docstring)

ROW_TILE = 32  # rows (multiple of 8)
TOK_TILE = 32


@jit
def n_tiles(N, T, K, MODE):
    """Work items of gemm_tile for an N-row matrix and T tokens of K activations."""
    if (MODE == LANES or MODE == LANES_M) and XG == 16:
        tp = pass_tokens(T, K)
        return (N + 16 * ITEM_GROUPS - 1) // (16 * ITEM_GROUPS) * ((T + tp - 1) // tp)
    return ((N + ROW_TILE - 1) // ROW_TILE) * ((T + TOK_TILE - 1) // TOK_TILE)


@jit
def gemm_tile(w, tile, GB, QH, QS, HAS_M, SUB, MODE, Q8, qa, yd, ys, asum, out):
    """One ROW_TILE x TOK_TILE tile (x86 lane modes in 16-row groups: one gemm_item16): each (group, block) is
    decoded once and used for every token of the tile; per-(row, token) float sequence identical to gemv_group."""
    if (MODE == LANES or MODE == LANES_M) and XG == 16:
        gemm_item16(w, tile, GB, QH, QS, HAS_M, SUB, Q8, qa, yd, ys, asum, out)
        return
    N = out.shape[1]
    T, K = qa.shape
    gb = w.shape[1]
    nb = K // QK
    n_tt = (T + TOK_TILE - 1) // TOK_TILE
    r0 = (tile // n_tt) * ROW_TILE
    t0 = (tile % n_tt) * TOK_TILE
    t1 = min(T, t0 + TOK_TILE)
    g0 = r0 // G
    n_groups = (min(N, r0 + ROW_TILE) - r0 + G - 1) // G
    m0f = splat8(15)
    if (MODE == LANES or MODE == LANES_M) and not Q8:  # 4- and 5-bit x86 lane modes, 8-row groups
        gemm_tile8(w, tile, GB, QH, QS, HAS_M, SUB, qa, yd, ys, asum, out)
        return
    if MODE == LANES or MODE == LANES_M:  # Q8_0 (nothing to decode): 8 accumulators per row, weights in L1
        for g in range(r0 // XG, (min(N, r0 + ROW_TILE) + XG - 1) // XG):
            for t in range(t0, t1):
                x86_group(w, g, GB, QH, QS, HAS_M, SUB, Q8, qa, t, yd, ys, asum, out, 0)
        return
    sums = np.zeros((ROW_TILE // G, TOK_TILE, G), np.float32)
    for b in range(nb):
        for gi in range(n_groups):
            o = (g0 + gi) * gb + b * GB
            v0, v1, v2, v3, v4, v5, v6, v7 = _decode8(w, o, QH, QS, Q8, m0f)
            for t in range(t0, t1):
                oa = t * K + QK * b
                # Q8_0: v_j = elements 4j..4j+3; 4-bit: v0..v3 = 4j..4j+3, v4..v7 = 16+4j..: same offsets
                a0 = bcast4(qa, oa)
                a1 = bcast4(qa, oa + 4)
                a2 = bcast4(qa, oa + 8)
                a3 = bcast4(qa, oa + 12)
                a4 = bcast4(qa, oa + 16)
                a5 = bcast4(qa, oa + 20)
                a6 = bcast4(qa, oa + 24)
                a7 = bcast4(qa, oa + 28)
                acc = _dp(zero32(), v0, a0, Q8)
                acc = _dp(acc, v1, a1, Q8)
                acc = _dp(acc, v2, a2, Q8)
                acc = _dp(acc, v3, a3, Q8)
                acc = _dp(acc, v4, a4, Q8)
                acc = _dp(acc, v5, a5, Q8)
                acc = _dp(acc, v6, a6, Q8)
                acc = _dp(acc, v7, a7, Q8)
                so = 4 * G * (gi * TOK_TILE + t - t0)
                s = _combine(load8xf32(sums, so), acc, SUB, asum[t, b], w, o, yd[t, b])
                store8xf32(sums, so, s)
    for gi in range(n_groups):
        for r in range(G):
            n = r0 + G * gi + r
            if n < N:
                for t in range(t0, t1):
                    out[t, n] = sums[gi, t - t0, r]


# x86 lane modes, batches, 8-row groups (AVX2): as the 16-row items above, a tile decodes its groups once
# into a buffer and runs its tokens over the decoded quants, one token at a time (a token's 8 accumulators
# take half of the 16 ymm registers).

@jit
def decode_groups8(w, g0, n_g, GB, QH, QS, HAS_M, nb, wq, dx, mx):
    """Groups g0 .. g0+n_g-1 of a 4- or 5-bit format decoded for rows8_decoded: wq (>= n_g, nb*256) u8, group i's
    block b lane j at [i, 256b + 32j) (_decode8); dx, mx (>= n_g, nb*8) float32, the rows' d and m of block b at
    [i, 8b)."""
    m0f = splat8(15)
    for i in range(n_g):
        go = (g0 + i) * w.shape[1]
        qo = i * wq.strides[0]
        fo = i * dx.strides[0]
        for b in range(nb):
            o = go + b * GB
            q0, q1, q2, q3, q4, q5, q6, q7 = _decode8(w, o, QH, QS, False, m0f)
            store8xf32(dx, fo + 32 * b, load8_f16(w, o))
            if HAS_M:
                store8xf32(mx, fo + 32 * b, load8_f16(w, o + 16))
            p = qo + 256 * b
            store32(wq, p, q0)
            store32(wq, p + 32, q1)
            store32(wq, p + 64, q2)
            store32(wq, p + 96, q3)
            store32(wq, p + 128, q4)
            store32(wq, p + 160, q5)
            store32(wq, p + 192, q6)
            store32(wq, p + 224, q7)


@ijit
def _lane_dec(wq, o, j, qa, oa, SUB, a4):
    """_lane over decode_groups8's buffer: lane j of the block whose quants start at o."""
    return cvt_f32(dpbusd_u7(splat32(a4) if SUB != 0 else zero32(), load32(wq, o + 32 * j), bcast4(qa, oa + 4 * j)))


@jit
def rows8_decoded(wq, dx, mx, i, HAS_M, SUB, qa, t, yd, ys, asum):
    """rows8_x86 of token t over group i of decode_groups8's buffers: the same operations per lane."""
    K = qa.shape[1]
    A0 = zerof()
    A1 = zerof()
    A2 = zerof()
    A3 = zerof()
    A4 = zerof()
    A5 = zerof()
    A6 = zerof()
    A7 = zerof()
    summs = zerof()
    qo = i * wq.strides[0]
    fo = i * dx.strides[0]
    for b in range(K // QK):
        o = qo + 256 * b
        oa = t * K + QK * b
        a = 8 * b
        d = fmul(load8xf32(dx, fo + 32 * b), splatf(yd[t, b]))
        if HAS_M:
            summs = ffma(load8xf32(mx, fo + 32 * b), splatf(ys[t, b]), summs)
        A0 = ffma(d, _lane_dec(wq, o, 0, qa, oa, SUB, asum[t, a]), A0)
        A1 = ffma(d, _lane_dec(wq, o, 1, qa, oa, SUB, asum[t, a + 1]), A1)
        A2 = ffma(d, _lane_dec(wq, o, 2, qa, oa, SUB, asum[t, a + 2]), A2)
        A3 = ffma(d, _lane_dec(wq, o, 3, qa, oa, SUB, asum[t, a + 3]), A3)
        A4 = ffma(d, _lane_dec(wq, o, 4, qa, oa, SUB, asum[t, a + 4]), A4)
        A5 = ffma(d, _lane_dec(wq, o, 5, qa, oa, SUB, asum[t, a + 5]), A5)
        A6 = ffma(d, _lane_dec(wq, o, 6, qa, oa, SUB, asum[t, a + 6]), A6)
        A7 = ffma(d, _lane_dec(wq, o, 7, qa, oa, SUB, asum[t, a + 7]), A7)
    return _hsum8((A0, A1, A2, A3, A4, A5, A6, A7), summs, HAS_M)


@jit
def gemm_tile8(w, tile, GB, QH, QS, HAS_M, SUB, qa, yd, ys, asum, out):
    """gemm_tile in the x86 lane modes of the 4- and 5-bit formats, 8-row groups: the tile's groups decoded once,
    then every token."""
    N = out.shape[1]
    T, K = qa.shape
    nb = K // QK
    n_tt = (T + TOK_TILE - 1) // TOK_TILE
    r0 = (tile // n_tt) * ROW_TILE
    t0 = (tile % n_tt) * TOK_TILE
    t1 = min(T, t0 + TOK_TILE)
    g0 = r0 // G
    n_g = (min(N, r0 + ROW_TILE) - r0 + G - 1) // G
    wq = np.empty((ROW_TILE // G, nb * 256), np.uint8)
    dx = np.empty((ROW_TILE // G, nb * 8), np.float32)
    mx = np.empty((ROW_TILE // G, nb * 8), np.float32)
    decode_groups8(w, g0, n_g, GB, QH, QS, HAS_M, nb, wq, dx, mx)
    for i in range(n_g):
        for t in range(t0, t1):
            s8 = rows8_decoded(wq, dx, mx, i, HAS_M, SUB, qa, t, yd, ys, asum)
            if 8 * (g0 + i) + 8 <= N:
                store8xf32(out, t * out.strides[0] + 32 * (g0 + i), s8)
            else:
                for r in range(N - 8 * (g0 + i)):
                    out[t, 8 * (g0 + i) + r] = lanef(s8, r)


def pack(raw, BB, QS_RAW, QH_RAW, M_RAW, GB, QH, QS, Q8, R=G):
    N, rb = raw.shape
    out = empty_aligned(((N + R - 1) // R, rb // BB * GB), np.uint8)
    run_repack(repack, raw, BB, QS_RAW, QH_RAW, M_RAW, GB, QH, QS, Q8, R, out)
    return (out,)


def matmul_fast(gemv, gemm, SUB, packed, a, out, lanes=False):
    """Dispatch for a format module's gemv / gemm kernels (signature (w, qa, yd, ys, asum, out)); lanes: an x86
    mode (activation sums per 4 instead of per 32)."""
    T = a.qs.shape[0]
    asum = np.zeros((T, a.qs.shape[1] // (4 if lanes else QK)), np.int32)
    if SUB:
        block_sums(a.qs, asum, -SUB if lanes else 1)
    ys = a.s if a.s is not None else a.d
    (gemv if T == 1 else gemm)(packed[0], a.qs, a.d, ys, asum, out)
