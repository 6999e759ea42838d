"""Slow, obvious numpy references for the quantized matmul (test oracle, independent of kernels/).

* activation quantizers producing ggml block bytes: quantize_row_q8_0 / q8_1 in their x86 AVX flavour
  (ggml-cpu/arch/x86/quants.c) and generic flavour (ggml-quants.c *_ref), quantize_row_q8_K_ref;
* `unpack_<type>`: a weight row's blocks -> integer quants and scales, vectorised numpy;
* `vec_dot(type, w_row_bytes, act_row_bytes, flavour)`: ggml-cpu/quants.c ggml_vec_dot_<type>_<vec>_generic
  (flavour "x86": the AVX2 versions' lane order and FMAs for Q4_1, Q5_1, Q5_0, Q8_0, Q3_K, Q5_K, Q6_K, the
  repacked Q4_0/Q4_K/Q2_K gemvs', ggml_vec_dot_f32/f16's AVX512 lanes and ggml_vec_dot_bf16's AVX512_BF16
  vdpbf16ps; "x86-vec": the AVX2 vec_dot of Q4_0/Q2_K/Q4_K, for weights llama.cpp does not repack;
  "x86-sb": the repacked Q4_K gemm's; "x86-tb": tinyBLAS's F32/F16 order) with numpy float32 scalars, one
  block at a time, in the C operation order.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from kernels.ggml_type import GGMLType

f32 = np.float32
QK_K = 256


def _f16(v) -> np.ndarray:
    with np.errstate(over="ignore"):  # ggml's F16C conversion overflows to inf too
        return np.array(v, dtype=np.float32).astype(np.float16)


def _f16_val(raw2: np.ndarray) -> np.ndarray:
    """(n, 2) uint8 -> (n,) float32."""
    return np.ascontiguousarray(raw2).view(np.float16).reshape(-1).astype(np.float32)


# ----------------------------------------------------------------------------------------- activations

def quantize_q8_0(x: np.ndarray, flavour: str = "x86", with_sum: bool = False) -> np.ndarray:
    """One row x (K,) float32 -> block_q8_0 bytes (or block_q8_1 with with_sum)."""
    out = []
    for blk in x.astype(np.float32).reshape(-1, 32):
        amax = f32(np.max(np.abs(blk)))
        d = f32(amax / f32(127))
        if flavour == "x86":
            iscale = f32(f32(127) / amax) if amax != 0 else f32(0)
            v = (blk * iscale).astype(np.float32)
            q = np.rint(v)                               # ties to even (_mm256_round_ps nearest)
        else:
            iscale = f32(f32(1) / d) if d != 0 else f32(0)
            v = (blk * iscale).astype(np.float32).astype(np.float64)
            q = np.sign(v) * np.floor(np.abs(v) + 0.5)   # roundf: ties away from zero
        q = np.clip(q, -128, 127).astype(np.int8)
        head = _f16(d).tobytes()
        if with_sum:
            isum = int(q.astype(np.int64).sum())
            s = f32(d * f32(isum)) if flavour == "x86" else f32(f32(isum) * d)
            head += _f16(s).tobytes()
        out.append(head + q.tobytes())
    return np.frombuffer(b"".join(out), np.uint8).copy()


def quantize_q8_1(x: np.ndarray, flavour: str = "x86") -> np.ndarray:
    return quantize_q8_0(x, flavour, with_sum=True)


def quantize_q8_K(x: np.ndarray) -> np.ndarray:
    """quantize_row_q8_K_ref: one row -> block_q8_K bytes (d f32 | qs int8[256] | bsums int16[16])."""
    out = []
    for blk in x.astype(np.float32).reshape(-1, QK_K):
        i = int(np.argmax(np.abs(blk)))          # first index of the largest magnitude (C: strict >)
        vmax = blk[i]
        if vmax == 0:
            q = np.zeros(QK_K, np.int8)
            d = f32(0)
        else:
            iscale = f32(f32(-127) / vmax)
            q = np.minimum(127, np.rint((blk * iscale).astype(np.float32))).astype(np.int8)
            d = f32(f32(1) / iscale)
        bsums = q.astype(np.int64).reshape(16, 16).sum(axis=1).astype(np.int16)
        out.append(np.array([d], np.float32).tobytes() + q.tobytes() + bsums.tobytes())
    return np.frombuffer(b"".join(out), np.uint8).copy()


def q8_blocks(act: np.ndarray, kind: str):
    """Parse activation block bytes: Q8_0 -> (d, qs); Q8_1 -> (d, s, qs); Q8_K -> (d, qs, bsums)."""
    if kind == "Q8_0":
        b = act.reshape(-1, 34)
        return _f16_val(b[:, 0:2]), b[:, 2:].view(np.int8).astype(np.int64)
    if kind == "Q8_1":
        b = act.reshape(-1, 36)
        return _f16_val(b[:, 0:2]), _f16_val(b[:, 2:4]), b[:, 4:].view(np.int8).astype(np.int64)
    b = act.reshape(-1, 4 + QK_K + 32)
    d = np.ascontiguousarray(b[:, 0:4]).view(np.float32).reshape(-1)
    return d, b[:, 4:4 + QK_K].view(np.int8).astype(np.int64), \
        np.ascontiguousarray(b[:, 4 + QK_K:]).view(np.int16).astype(np.int64)


def dequantize_act(act: np.ndarray, kind: str) -> np.ndarray:
    """Float value of quantized activations (d * q), float64."""
    if kind == "Q8_0":
        d, q = q8_blocks(act, kind)
    elif kind == "Q8_1":
        d, _, q = q8_blocks(act, kind)
    else:
        d, q, _ = q8_blocks(act, kind)
    return (d.astype(np.float64)[:, None] * q).reshape(-1)


# ----------------------------------------------------------------------------------------- weights

def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(nb, 16) bytes -> (nb, 32): low nibbles then high nibbles."""
    return np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int64)


def _bits32(qh4: np.ndarray) -> np.ndarray:
    """(nb, 4) bytes, little-endian uint32 -> (nb, 32) bits."""
    v = np.ascontiguousarray(qh4).view(np.uint32).reshape(-1, 1)
    return ((v >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int64)


def unpack_q4_0(row):
    b = row.reshape(-1, 18)
    return _f16_val(b[:, 0:2]), _nibbles(b[:, 2:]) - 8


def unpack_q4_1(row):
    b = row.reshape(-1, 20)
    return _f16_val(b[:, 0:2]), _f16_val(b[:, 2:4]), _nibbles(b[:, 4:])


def unpack_q5_0(row):
    b = row.reshape(-1, 22)
    return _f16_val(b[:, 0:2]), (_nibbles(b[:, 6:]) | (_bits32(b[:, 2:6]) << 4)) - 16


def unpack_q5_1(row):
    b = row.reshape(-1, 24)
    return _f16_val(b[:, 0:2]), _f16_val(b[:, 2:4]), _nibbles(b[:, 8:]) | (_bits32(b[:, 4:8]) << 4)


def unpack_q8_0(row):
    b = row.reshape(-1, 34)
    return _f16_val(b[:, 0:2]), b[:, 2:].view(np.int8).astype(np.int64)


def _k4_scales(s12: np.ndarray):
    """(nb, 12) -> scales (nb, 8), mins (nb, 8) as in get_scale_min_k4."""
    s = s12.astype(np.int64)
    sc = np.empty((s.shape[0], 8), np.int64)
    mn = np.empty((s.shape[0], 8), np.int64)
    for j in range(8):
        if j < 4:
            sc[:, j] = s[:, j] & 63
            mn[:, j] = s[:, j + 4] & 63
        else:
            sc[:, j] = (s[:, j + 4] & 0xF) | ((s[:, j - 4] >> 6) << 4)
            mn[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return sc, mn


def unpack_q4_k(row):
    """-> d, dmin (nb,), scales, mins (nb, 8), q (nb, 256) in 0..15."""
    b = row.reshape(-1, 144)
    sc, mn = _k4_scales(b[:, 4:16])
    qs = b[:, 16:].reshape(-1, 4, 32).astype(np.int64)
    q = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(-1, 256)   # chunk c: 32 low nibbles, 32 high
    return _f16_val(b[:, 0:2]), _f16_val(b[:, 2:4]), sc, mn, q


def unpack_q5_k(row):
    b = row.reshape(-1, 176)
    sc, mn = _k4_scales(b[:, 4:16])
    qh = b[:, 16:48].astype(np.int64)                               # (nb, 32)
    qs = b[:, 48:].reshape(-1, 4, 32).astype(np.int64)
    q = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(-1, 8, 32)
    hb = (qh[:, None, :] >> np.arange(8)[None, :, None]) & 1        # (nb, 8 sub-blocks, 32)
    q = (q | (hb << 4)).reshape(-1, 256)
    return _f16_val(b[:, 0:2]), _f16_val(b[:, 2:4]), sc, mn, q


def unpack_q6_k(row):
    """-> d (nb,), scales (nb, 16) int8, q (nb, 256) in -32..31."""
    b = row.reshape(-1, 210)
    q = np.empty((b.shape[0], 256), np.int64)
    for h in range(2):
        ql = b[:, 64 * h:64 * h + 64].astype(np.int64)
        qh = b[:, 128 + 32 * h:128 + 32 * h + 32].astype(np.int64)
        q[:, 128 * h + 0:128 * h + 32] = (ql[:, :32] & 0xF) | (((qh >> 0) & 3) << 4)
        q[:, 128 * h + 32:128 * h + 64] = (ql[:, 32:] & 0xF) | (((qh >> 2) & 3) << 4)
        q[:, 128 * h + 64:128 * h + 96] = (ql[:, :32] >> 4) | (((qh >> 4) & 3) << 4)
        q[:, 128 * h + 96:128 * h + 128] = (ql[:, 32:] >> 4) | (((qh >> 6) & 3) << 4)
    return _f16_val(b[:, 208:210]), b[:, 192:208].view(np.int8).astype(np.int64), q - 32


def unpack_q3_k(row):
    """-> d (nb,), scales (nb, 16) in -32..31, q (nb, 256) in -4..3."""
    b = row.reshape(-1, 110)
    hm = b[:, 0:32].astype(np.int64)
    s = b[:, 96:108].astype(np.int64)
    sc = np.empty((b.shape[0], 16), np.int64)
    for i in range(16):
        lo = (s[:, i] & 0xF) if i < 8 else (s[:, i - 8] >> 4)
        hi = (s[:, 8 + i % 4] >> (2 * (i // 4))) & 3
        sc[:, i] = (lo | (hi << 4)) - 32
    q = np.empty((b.shape[0], 256), np.int64)
    for h in range(2):
        qs = b[:, 32 + 32 * h:64 + 32 * h].astype(np.int64)
        for j in range(4):
            m = 4 * h + j
            q[:, 128 * h + 32 * j:128 * h + 32 * j + 32] = ((qs >> (2 * j)) & 3) - np.where((hm >> m) & 1, 0, 4)
    return _f16_val(b[:, 108:110]), sc, q


def unpack_q2_k(row):
    """-> d, dmin (nb,), scales (nb, 16) 0..15, mins (nb, 16) 0..15, q (nb, 256) in 0..3."""
    b = row.reshape(-1, 84)
    s = b[:, 0:16].astype(np.int64)
    q = np.empty((b.shape[0], 256), np.int64)
    for h in range(2):
        qs = b[:, 16 + 32 * h:48 + 32 * h].astype(np.int64)
        for j in range(4):
            q[:, 128 * h + 32 * j:128 * h + 32 * j + 32] = (qs >> (2 * j)) & 3
    return _f16_val(b[:, 80:82]), _f16_val(b[:, 82:84]), s & 0xF, s >> 4, q


# ----------------------------------------------------------------------------------------- dot products

def _lanes8(prod: np.ndarray) -> np.ndarray:
    """(256,) int products -> aux32[l] = sum over elements with index % 8 == l."""
    return prod.reshape(-1, 8).sum(axis=0)


def fma32(a, b, c) -> np.float32:
    """float32 a*b + c rounded once (as vfmadd), from the exact rational value: round to nearest, ties even."""
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    r = f32(float(exact))  # may be one ulp off (double rounding): pick the nearest of r and its neighbours
    cands = [np.nextafter(r, f32(-np.inf)), r, np.nextafter(r, f32(np.inf))]
    return min(cands, key=lambda v: (abs(Fraction(float(v)) - exact), int(f32(v).view(np.uint32)) & 1))


# the formats whose x86 AVX2 vec_dot (ggml-cpu/arch/x86/quants.c) orders its float arithmetic differently
X86_ORDER_TYPES = (GGMLType.Q4_1, GGMLType.Q5_1, GGMLType.Q5_0, GGMLType.Q8_0, GGMLType.Q6_K, GGMLType.Q4_K,
                   GGMLType.F32, GGMLType.F16, GGMLType.Q4_0, GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q5_K,
                   GGMLType.BF16)


def _reduce_add16(v) -> np.float32:
    """_mm512_reduce_add_ps (GCC/clang tree: halves 8, 4, 2, 1)."""
    h = [f32(v[l] + v[l + 8]) for l in range(8)]
    h = [f32(h[l] + h[l + 4]) for l in range(4)]
    return f32(f32(h[0] + h[2]) + f32(h[1] + h[3]))


def _vec_dot_float_x86(t, wv, y, tinyblas: bool) -> np.float32:
    """F32/F16 weights wv . activations y (float32 values): ggml_vec_dot_f32/f16 AVX512 (4 accumulators x 16
    lanes over 64-element steps, (acc0+acc2)+(acc1+acc3), reduce tree; leftovers in double for F16) or
    llamafile tinyBLAS (one 16-lane accumulator, reduce tree)."""
    K = len(wv)
    if tinyblas:
        acc = [f32(0)] * 16
        for k in range(0, K, 16):
            acc = [fma32(wv[k + l], y[k + l], acc[l]) for l in range(16)]
        return _reduce_add16(acc)
    npart = K & ~63
    acc = [[f32(0)] * 16 for _ in range(4)]
    for i in range(0, npart, 64):
        for j in range(4):
            acc[j] = [fma32(wv[i + 16 * j + l], y[i + 16 * j + l], acc[j][l]) for l in range(16)]
    r = _reduce_add16([f32(f32(acc[0][l] + acc[2][l]) + f32(acc[1][l] + acc[3][l])) for l in range(16)])
    if npart < K:
        if t != GGMLType.F16:
            raise NotImplementedError("F32 leftovers follow GCC's code generation; the tests use K % 64 == 0")
        sd = float(r)
        for i in range(npart, K):
            sd += float(f32(wv[i] * y[i]))
        r = f32(sd)
    return r


def _vec_dot_q4_K_x86(w, act, sb: bool = False) -> np.float32:
    """x86 llama.cpp repacks Q4_K (q4_K_8x8): ggml_gemv_q4_K_8x8_q8_K accumulates per super-block
    acc = fma(I, dx*dy, acc), accm = fma(M, dminx*dy, accm) with the exact integer sums I = sum_j sc_j * q.y
    and M = sum_j min_j * (bsums of sub-block j); result acc - accm. ggml_gemm_q4_K_8x8_q8_K (groups of 4
    tokens) does the same per 64-weight pair of sub-blocks (sb=True)."""
    dy, qy, bsums = q8_blocks(act, "Q8_K")
    dx, dmx, sc, mn, q = unpack_q4_k(w)
    acc = f32(0)
    accm = f32(0)
    for b in range(len(dx)):
        d = f32(dx[b] * dy[b])
        dmin = f32(dmx[b] * dy[b])
        isub = (np.repeat(sc[b], 32) * q[b] * qy[b]).reshape(8, 32).sum(axis=1)   # per sub-block
        msub = mn[b] * bsums[b].reshape(8, 2).sum(axis=1)
        if sb:
            for j in range(4):
                acc = fma32(f32(isub[2 * j] + isub[2 * j + 1]), d, acc)
                accm = fma32(f32(msub[2 * j] + msub[2 * j + 1]), dmin, accm)
        else:
            acc = fma32(f32(isub.sum()), d, acc)
            accm = fma32(f32(msub.sum()), dmin, accm)
    return f32(acc - accm)


def _vec_dot_q6_K_x86(w, act) -> np.float32:
    """ggml_vec_dot_q6_K_q8_K AVX2: per super-block 8 int32 lanes, lane l = sum over the 8 chunks of 32
    elements of scale * (q+32) * y over the chunk's elements 4l..4l+3, minus 32 * (bsums[2l]*sc[2l] +
    bsums[2l+1]*sc[2l+1]); acc[l] = fma(y.d * x.d, lane_l, acc[l]); hsum_float_8(acc)."""
    dy, qy, bsums = q8_blocks(act, "Q8_K")
    dx, sc, q = unpack_q6_k(w)
    acc = [f32(0)] * 8
    for b in range(len(dx)):
        prod = np.repeat(sc[b], 16) * (q[b] + 32) * qy[b]                 # (256,) per element
        lanes = prod.reshape(8, 8, 4).sum(axis=(0, 2))                    # chunk, lane, element
        lanes = lanes - 32 * (bsums[b].reshape(8, 2) * sc[b].reshape(8, 2)).sum(axis=1)
        d = f32(dy[b] * dx[b])
        acc = [fma32(d, f32(lanes[l]), acc[l]) for l in range(8)]
    a = acc
    return f32(f32(f32(a[4] + a[0]) + f32(a[6] + a[2])) + f32(f32(a[5] + a[1]) + f32(a[7] + a[3])))


def _vec_dot_x86(t, w, act) -> np.float32:
    """ggml_vec_dot_{q4_1_q8_1, q5_1_q8_1, q5_0_q8_0, q8_0_q8_0} AVX2: per block 8 int32 lanes (lane j =
    elements 4j..4j+3), acc[j] = fma(dx*dy, lane_j, acc[j]); hsum_float_8(acc) (+ summs = fma(m, s, summs))."""
    if t in (GGMLType.Q4_1, GGMLType.Q5_1):
        dy, sy, qy = q8_blocks(act, "Q8_1")
        dx, mx, qx = (unpack_q4_1 if t == GGMLType.Q4_1 else unpack_q5_1)(w)
    else:
        dy, qy = q8_blocks(act, "Q8_0")
        dx, qx = {GGMLType.Q4_0: unpack_q4_0, GGMLType.Q5_0: unpack_q5_0, GGMLType.Q8_0: unpack_q8_0}[t](w)
        mx = None
    acc = [f32(0)] * 8
    summs = f32(0)
    for b in range(len(dx)):
        lanes = (qx[b].astype(np.int64) * qy[b]).reshape(8, 4).sum(axis=1)
        d = f32(dx[b] * dy[b])
        acc = [fma32(d, f32(lanes[j]), acc[j]) for j in range(8)]
        if mx is not None:
            summs = fma32(mx[b], sy[b], summs)
    a = acc
    r = f32(f32(f32(a[4] + a[0]) + f32(a[6] + a[2])) + f32(f32(a[5] + a[1]) + f32(a[7] + a[3])))
    return f32(r + summs) if mx is not None else r


def _hsum8(a) -> np.float32:
    """ggml's hsum_float_8."""
    return f32(f32(f32(a[4] + a[0]) + f32(a[6] + a[2])) + f32(f32(a[5] + a[1]) + f32(a[7] + a[3])))


def _kq_lanes(sc_per_elem, q, qy) -> np.ndarray:
    """AVX2 K-quant lanes: lane l = sum over the 8 chunks of 32 elements of scale * q * y over the chunk's
    elements 4l..4l+3 (vpmaddubsw + vpmaddwd with the chunk's scales)."""
    return (sc_per_elem * q * qy).reshape(8, 8, 4).sum(axis=(0, 2))


def _vec_dot_kq_vec_x86(t, w, act) -> np.float32:
    """ggml_vec_dot_q{2,3,4,5}_K_q8_K, AVX2 (ggml-cpu/arch/x86/quants.c)."""
    dy, qy, bsums = q8_blocks(act, "Q8_K")
    acc = [f32(0)] * 8
    extra = f32(0)
    accm4 = [f32(0)] * 4
    if t == GGMLType.Q3_K:
        dx, sc, q = unpack_q3_k(w)
    elif t == GGMLType.Q2_K:
        dx, dmx, sc, mn, q = unpack_q2_k(w)
    else:
        dx, dmx, sc, mn, q = (unpack_q4_k if t == GGMLType.Q4_K else unpack_q5_k)(w)
    for b in range(len(dx)):
        d = f32(dy[b] * dx[b])
        if t in (GGMLType.Q2_K, GGMLType.Q3_K):
            lanes = _kq_lanes(np.repeat(sc[b], 16), q[b], qy[b])
        else:
            lanes = _kq_lanes(np.repeat(sc[b], 32), q[b], qy[b])
        if t == GGMLType.Q2_K:
            dmin = f32(-f32(dy[b] * dmx[b]))
            mins = (mn[b] * bsums[b]).reshape(8, 2).sum(axis=1)
            acc = [fma32(dmin, f32(mins[l]), acc[l]) for l in range(8)]
        elif t in (GGMLType.Q4_K, GGMLType.Q5_K):
            dmin = f32(-f32(dy[b] * dmx[b]))
            mins = mn[b] * bsums[b].reshape(8, 2).sum(axis=1)
            if t == GGMLType.Q5_K:
                extra = fma32(dmin, f32(int(mins.sum())), extra)
            else:
                m4 = mins.reshape(4, 2).sum(axis=1)
                accm4 = [fma32(dmin, f32(m4[l]), accm4[l]) for l in range(4)]
        acc = [fma32(d, f32(lanes[l]), acc[l]) for l in range(8)]
    r = _hsum8(acc)
    if t == GGMLType.Q5_K:
        return f32(r + extra)
    if t == GGMLType.Q4_K:
        return f32(r + f32(f32(accm4[0] + accm4[2]) + f32(accm4[1] + accm4[3])))
    return r


def _vec_dot_q2_K_repack(w, act) -> np.float32:
    """ggml_gemv_q2_K_8x8_q8_K (Q2_K weights an AVX-512 llama.cpp repacks): acc = fma(I, dx*dy, acc),
    accm = fma(M, dminx*dy, accm) per super-block with I = sum_s sc_s * q.y, M = sum_s min_s * bsums_s."""
    dy, qy, bsums = q8_blocks(act, "Q8_K")
    dx, dmx, sc, mn, q = unpack_q2_k(w)
    acc = f32(0)
    accm = f32(0)
    for b in range(len(dx)):
        isum = int((sc[b] * (q[b] * qy[b]).reshape(16, 16).sum(axis=1)).sum())
        acc = fma32(f32(isum), f32(dx[b] * dy[b]), acc)
        accm = fma32(f32(int((mn[b] * bsums[b]).sum())), f32(dmx[b] * dy[b]), accm)
    return f32(acc - accm)


def _bf16_daz(v) -> np.float32:
    return f32(0) if (int(f32(v).view(np.uint32)) & 0x7F800000) == 0 else f32(v)


def _dpbf16(acc, a, b):
    """vdpbf16ps on one 32-element step: lane l += a[2l+1]*b[2l+1], then += a[2l]*b[2l] (FMA, RNE, inputs DAZ,
    results FTZ)."""
    out = []
    for l in range(16):
        r = acc[l]
        for i in (2 * l + 1, 2 * l):
            r = fma32(_bf16_daz(a[i]), _bf16_daz(b[i]), r)
            if abs(float(r)) < 1.1754943508222875e-38:
                r = f32(0.0) * r
        out.append(r)
    return out


def _vec_dot_bf16_x86(wv, y) -> np.float32:
    """ggml_vec_dot_bf16 with AVX512_BF16: two vdpbf16ps accumulators over 64-element steps, each reduced with
    _mm512_reduce_add_ps and added in double, leftovers in double."""
    K = len(wv)
    npart = K & ~63
    c1 = [f32(0)] * 16
    c2 = [f32(0)] * 16
    for i in range(0, npart, 64):
        c1 = _dpbf16(c1, wv[i:i + 32], y[i:i + 32])
        c2 = _dpbf16(c2, wv[i + 32:i + 64], y[i + 32:i + 64])
    s = float(_reduce_add16(c1)) + float(_reduce_add16(c2))
    for i in range(npart, K):
        s += float(f32(wv[i] * y[i]))
    return f32(s)


def vec_dot(ggml_type: int, w: np.ndarray, act: np.ndarray, flavour: str = "generic") -> np.float32:
    """One weight row (raw bytes) . one activation row (block bytes of the vec_dot_type, or float32 values
    for F32/F16/BF16), generic ggml order; flavour "x86" gives the AVX2 order for X86_ORDER_TYPES."""
    t = GGMLType(ggml_type)
    if flavour == "x86" and t == GGMLType.BF16:
        wv = (w.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        return _vec_dot_bf16_x86(wv, np.asarray(act, np.float32))
    if flavour == "x86-vec" and t in (GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K):
        return _vec_dot_kq_vec_x86(t, w, act)
    if flavour == "x86-vec" and t == GGMLType.Q4_0:
        return _vec_dot_x86(t, w, act)
    if flavour == "x86" and t == GGMLType.Q2_K:
        return _vec_dot_q2_K_repack(w, act)
    if flavour == "x86" and t in (GGMLType.Q3_K, GGMLType.Q5_K):
        return _vec_dot_kq_vec_x86(t, w, act)
    if flavour in ("x86", "x86-tb") and t in (GGMLType.F32, GGMLType.F16):
        wv = w.view(np.float32) if t == GGMLType.F32 else w.view(np.float16).astype(np.float32)
        return _vec_dot_float_x86(t, wv, np.asarray(act, np.float32), flavour == "x86-tb")
    if flavour == "x86" and t == GGMLType.Q4_0:  # repacked q4_0_8x8 gemv/gemm: fma(sumi, dx*dy, sumf)
        dy, qy = q8_blocks(act, "Q8_0")
        dx, qx = unpack_q4_0(w)
        sumf = f32(0)
        for b in range(len(dx)):
            sumf = fma32(f32(int((qx[b] * qy[b]).sum())), f32(dx[b] * dy[b]), sumf)
        return sumf
    if flavour == "x86" and t == GGMLType.Q6_K:
        return _vec_dot_q6_K_x86(w, act)
    if flavour in ("x86", "x86-sb") and t == GGMLType.Q4_K:
        return _vec_dot_q4_K_x86(w, act, sb=flavour == "x86-sb")
    if flavour == "x86" and t in X86_ORDER_TYPES:
        return _vec_dot_x86(t, w, act)
    sumf = f32(0)
    if t in (GGMLType.F32, GGMLType.F16, GGMLType.BF16):
        if t == GGMLType.F32:
            wv = w.view(np.float32)
        elif t == GGMLType.F16:
            wv = w.view(np.float16).astype(np.float32)
        else:
            wv = (w.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        s = 0.0                                         # ggml_float (double) accumulator
        for a, b in zip(wv, act):
            s += float(f32(a * b))
        return f32(s)
    if t in (GGMLType.Q4_0, GGMLType.Q5_0, GGMLType.Q8_0):
        dy, qy = q8_blocks(act, "Q8_0")
        dx, qx = {GGMLType.Q4_0: unpack_q4_0, GGMLType.Q5_0: unpack_q5_0, GGMLType.Q8_0: unpack_q8_0}[t](w)
        for b in range(len(dx)):
            sumi = int((qx[b] * qy[b]).sum())
            if t == GGMLType.Q4_0:
                sumf = f32(sumf + f32(f32(f32(sumi) * dx[b]) * dy[b]))
            elif t == GGMLType.Q5_0:
                sumf = f32(sumf + f32(f32(dx[b] * dy[b]) * f32(sumi)))
            else:
                sumf = f32(sumf + f32(f32(sumi) * f32(dx[b] * dy[b])))
        return sumf
    if t in (GGMLType.Q4_1, GGMLType.Q5_1):
        dy, sy, qy = q8_blocks(act, "Q8_1")
        dx, mx, qx = (unpack_q4_1 if t == GGMLType.Q4_1 else unpack_q5_1)(w)
        for b in range(len(dx)):
            sumi = int((qx[b] * qy[b]).sum())
            sumf = f32(sumf + f32(f32(f32(dx[b] * dy[b]) * f32(sumi)) + f32(mx[b] * sy[b])))
        return sumf
    dy, qy, bsums = q8_blocks(act, "Q8_K")
    if t == GGMLType.Q2_K:
        dx, dmx, sc, mn, q = unpack_q2_k(w)
        for b in range(len(dx)):
            summs = int((bsums[b] * mn[b]).sum())
            isum = int((sc[b] * (q[b] * qy[b]).reshape(16, 16).sum(axis=1)).sum())
            dall = f32(dy[b] * dx[b])
            dmin = f32(dy[b] * dmx[b])
            sumf = f32(sumf + f32(f32(dall * f32(isum)) - f32(dmin * f32(summs))))
        return sumf
    sums = np.zeros(8, np.float32)
    if t in (GGMLType.Q4_K, GGMLType.Q5_K):
        dx, dmx, sc, mn, q = (unpack_q4_k if t == GGMLType.Q4_K else unpack_q5_k)(w)
        for b in range(len(dx)):
            aux32 = _lanes8(np.repeat(sc[b], 32) * q[b] * qy[b])
            sumi = int((bsums[b] * np.repeat(mn[b], 2)).sum())
            d = f32(dx[b] * dy[b])
            for l in range(8):
                sums[l] = f32(sums[l] + f32(d * f32(aux32[l])))
            dmin = f32(dmx[b] * dy[b])
            sumf = f32(sumf - f32(dmin * f32(sumi)))
    else:
        if t == GGMLType.Q6_K:
            dx, sc, q = unpack_q6_k(w)
        elif t == GGMLType.Q3_K:
            dx, sc, q = unpack_q3_k(w)
        else:
            raise ValueError(t)
        for b in range(len(dx)):
            aux32 = _lanes8(np.repeat(sc[b], 16) * q[b] * qy[b])
            d = f32(dx[b] * dy[b])
            for l in range(8):
                sums[l] = f32(sums[l] + f32(d * f32(aux32[l])))
    for l in range(8):
        sumf = f32(sumf + sums[l])
    return sumf


VEC_DOT_KIND = {
    GGMLType.Q4_0: "Q8_0", GGMLType.Q5_0: "Q8_0", GGMLType.Q8_0: "Q8_0",
    GGMLType.Q4_1: "Q8_1", GGMLType.Q5_1: "Q8_1",
    GGMLType.Q2_K: "Q8_K", GGMLType.Q3_K: "Q8_K", GGMLType.Q4_K: "Q8_K", GGMLType.Q5_K: "Q8_K",
    GGMLType.Q6_K: "Q8_K",
    GGMLType.F32: "F32", GGMLType.F16: "F16", GGMLType.BF16: "BF16",
}


def bf16_round(x: np.ndarray) -> np.ndarray:
    """ggml_compute_fp32_to_bf16 -> float32 value."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = np.where(nan, (u >> 16) | 64, (u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint32)
    return (r << 16).view(np.float32)


def quantize_act_row(ggml_type: int, x: np.ndarray):
    """The activation row a weight type's vec_dot sees (bytes for Q8_*, float32 values for float types)."""
    kind = VEC_DOT_KIND[GGMLType(ggml_type)]
    if kind == "Q8_0":
        return quantize_q8_0(x)
    if kind == "Q8_1":
        return quantize_q8_1(x)
    if kind == "Q8_K":
        return quantize_q8_K(x)
    if kind == "F16":
        return x.astype(np.float16).astype(np.float32)
    if kind == "BF16":
        return bf16_round(x)
    return x.astype(np.float32)


def act_values(ggml_type: int, x: np.ndarray) -> np.ndarray:
    """float64 values of x after conversion to the vec_dot_type (xq in the error bound)."""
    kind = VEC_DOT_KIND[GGMLType(ggml_type)]
    a = quantize_act_row(ggml_type, x)
    if kind.startswith("Q8"):
        return dequantize_act(a, kind)
    return a.astype(np.float64)


def matmul(ggml_type: int, w_rows: np.ndarray, x: np.ndarray, flavour: str = "generic") -> np.ndarray:
    """w_rows (N, row_bytes), x (T, K) -> (T, N) float32, one reference vec_dot per output. flavour "x86": as
    x86 llama.cpp computes one token, which for Q4_0/Q4_K/Q2_K depends on whether it repacks the weight (row
    count a multiple of 8): the repacked gemv's order, else the AVX2 vec_dot's ("x86-vec")."""
    if flavour == "x86" and GGMLType(ggml_type) in (GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.Q2_K) \
            and w_rows.shape[0] % 8:
        flavour = "x86-vec"
    out = np.empty((x.shape[0], w_rows.shape[0]), np.float32)
    for t in range(x.shape[0]):
        a = quantize_act_row(ggml_type, x[t])
        for n in range(w_rows.shape[0]):
            out[t, n] = vec_dot(ggml_type, w_rows[n], a, flavour)
    return out


# ----------------------------------------------------------------------------------------- random data

BLOCK = {  # type -> (elements, bytes, byte offsets of fp16 scale fields)
    GGMLType.Q4_0: (32, 18, (0,)), GGMLType.Q4_1: (32, 20, (0, 2)), GGMLType.Q5_0: (32, 22, (0,)),
    GGMLType.Q5_1: (32, 24, (0, 2)), GGMLType.Q8_0: (32, 34, (0,)),
    GGMLType.Q2_K: (256, 84, (80, 82)), GGMLType.Q3_K: (256, 110, (108,)), GGMLType.Q4_K: (256, 144, (0, 2)),
    GGMLType.Q5_K: (256, 176, (0, 2)), GGMLType.Q6_K: (256, 210, (208,)),
}


def random_weight_bytes(ggml_type: int, n_rows: int, K: int, rng: np.random.Generator) -> np.ndarray:
    """(n_rows, row_bytes) uint8: random quant bits, finite random fp16 scales (about 1e-3 .. 1e-1)."""
    t = GGMLType(ggml_type)
    if t == GGMLType.F32:
        return rng.standard_normal((n_rows, K)).astype(np.float32).view(np.uint8)
    if t == GGMLType.F16:
        return (rng.standard_normal((n_rows, K)) * 0.1).astype(np.float16).view(np.uint8)
    if t == GGMLType.BF16:
        v = rng.standard_normal((n_rows, K)).astype(np.float32).view(np.uint32) >> 16
        return v.astype(np.uint16).view(np.uint8)
    qk, size, offs = BLOCK[t]
    nb = K // qk
    raw = rng.integers(0, 256, (n_rows, nb, size), dtype=np.uint8)
    for o in offs:
        scale = (rng.uniform(1e-3, 1e-1, (n_rows, nb)) * rng.choice([-1, 1], (n_rows, nb))).astype(np.float16)
        raw[:, :, o:o + 2] = scale.reshape(n_rows, nb, 1).view(np.uint8)
    return raw.reshape(n_rows, nb * size)
