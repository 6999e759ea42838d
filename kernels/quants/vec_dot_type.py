"""Activation quantization to a weight type's vec_dot_type, bit for bit as ggml-cpu does it before mul_mat.

ggml-cpu's mul_mat converts every row of src1 (the activations, float32) with
`type_traits_cpu[vec_dot_type].from_float` (ggml-cpu/ggml-cpu.c), then calls vec_dot on (weight row, converted
row). The converted rows are kept here as structure-of-arrays (int8 quants + float32 scales) instead of ggml's
packed blocks so the dot kernels can stream them; `*_to_blocks` helpers give the packed ggml bytes for tests.

Q8_0 / Q8_1 (for Q4_0, Q5_0, Q8_0 / Q4_1, Q5_1 weights): we use the x86 AVX2/AVX512 quantize_row_q8_0 /
quantize_row_q8_1 of ggml-cpu/arch/x86/quants.c, because the reference fixtures come from an AVX512 x86
build, which runs that code, not the generic one. It differs from quantize_row_q8_0_ref (ggml-quants.c):
    x86:  d = amax/127, id = amax != 0 ? 127/amax : 0, q = _mm256_round_ps(x*id) (nearest, ties to EVEN),
          converted with saturating packs;   Q8_1 s = fp16(d * sum(q)) with d the float32 (unrounded) scale
    ref:  d = amax/127, id = d != 0 ? 1/d : 0,   q = roundf(x*id)        (ties AWAY from zero);
          Q8_1 s = fp16(sum(q) * d)
Both are implemented (the x86 flag of quantize_q8_0/q8_1; tests compare both); the matmul uses the x86 ones.

Q8_K (for the K-quants): quantize_row_q8_K_ref (x86 calls it too): signed max of largest magnitude,
iscale = -127/max, q = min(127, nearest_int(iscale*x)), bsums of 16, d = 1/iscale.

F16 / BF16 weights: activations rounded to fp16 (F16C, nearest even) / bf16 (ggml_compute_fp32_to_bf16);
F32 weights use the float32 activations unchanged.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import jit, pjit
from ..ggml_type import QK_K, GGMLType
from ._bits import f16_to_f32, f32_to_bf16, f32_to_f16, bf16_to_f32
from .base import empty_aligned
from .._vec import (abs_max16, first_abs_eq16, hmax16, load16, store16_nearest_int, store16_round_sat,
                      zero16)

QK8 = 32  # block of Q8_0 / Q8_1


@jit
def _roundf_i8(v):
    """C roundf (ties away from zero) then conversion to int8."""
    t = np.trunc(v)
    if abs(v - t) >= 0.5:
        t += np.sign(v)
    if t != t:  # NaN: undefined in C; pick 0
        return np.int8(0)
    return np.int8(min(127.0, max(-128.0, t)))


@jit
def _q8_block_ref(x, t, o, qs, d16, d, b):
    """Block b (values o..o+31 of row t) of quantize_row_q8_0_ref (id = 1/d, ties away from zero). Returns (the
    unrounded d, the sum of the block's quants)."""
    xo = t * (x.strides[0] // 4) + o  # rows have unit inner stride (all callers)
    amax = hmax16(abs_max16(abs_max16(zero16(), load16(x, xo)), load16(x, xo + 16)))
    dd = np.float32(amax / np.float32(127.0))
    h = f32_to_f16(dd)
    d16[t, b] = h
    d[t, b] = f16_to_f32(h)
    iscale = np.float32(1.0) / dd if dd != np.float32(0.0) else np.float32(0.0)
    isum = 0
    for j in range(QK8):
        q = _roundf_i8(np.float32(x[t, o + j] * iscale))
        qs[t, o + j] = q
        isum += np.int32(q)
    return dd, isum


@jit
def _q8_row_x86(x, t, qs, d16, d, s16, s, HAS_S, scratch):
    """Row t of the AVX2 quantize_row_q8_0 (HAS_S: q8_1, plus s = fp16(d * sum(q)) with the unrounded d): per
    block d = amax/127, id = amax != 0 ? 127/amax : 0, q = round-half-even(x * id) (saturating packs). In
    passes over the row's blocks, so that the scales' divisions and F16 conversions run 16 blocks a vector
    (LLVM vectorises the plain loops) instead of in each block's dependency chain (2.2-2.6x faster, 512 x 576
    and 512 x 1536, /tmp script). scratch (3, >= K/32) float32."""
    nb = x.shape[1] // QK8
    xr = t * (x.strides[0] // 4)  # rows have unit inner stride (all callers)
    qr = t * qs.strides[0]
    amax = scratch[0]
    iscale = scratch[1]
    isum = scratch[2]  # exact in float32: |sum| <= 32 * 128
    for b in range(nb):
        o = xr + QK8 * b
        amax[b] = hmax16(abs_max16(abs_max16(zero16(), load16(x, o)), load16(x, o + 16)))
    for b in range(nb):
        a = amax[b]
        h = f32_to_f16(np.float32(a / np.float32(127.0)))
        d16[t, b] = h
        d[t, b] = f16_to_f32(h)
        iscale[b] = np.float32(127.0) / a if a != np.float32(0.0) else np.float32(0.0)
    for b in range(nb):
        o = QK8 * b
        isum[b] = (store16_round_sat(qs, qr + o, load16(x, xr + o), iscale[b])
                   + store16_round_sat(qs, qr + o + 16, load16(x, xr + o + 16), iscale[b]))
    if HAS_S:
        for b in range(nb):
            hs = f32_to_f16(np.float32(np.float32(amax[b] / np.float32(127.0)) * isum[b]))
            s16[t, b] = hs
            s[t, b] = f16_to_f32(hs)


@jit
def q8_0_row(x, t, qs, d16, d, x86=True):
    """Row t of quantize_q8_0 (serial; also called by the fused T = 1 gemv kernels and the KV cache)."""
    if x86:
        _q8_row_x86(x, t, qs, d16, d, d16, d, False, np.empty((3, x.shape[1] // QK8), np.float32))
        return
    for b in range(x.shape[1] // QK8):
        _q8_block_ref(x, t, b * QK8, qs, d16, d, b)


@jit
def q8_1_row(x, t, qs, d16, d, s16, s, x86=True):
    """Row t of quantize_q8_1: q8_0's blocks plus s = fp16(d * sum(q)) with the unrounded d (both flavours)."""
    if x86:
        _q8_row_x86(x, t, qs, d16, d, s16, s, True, np.empty((3, x.shape[1] // QK8), np.float32))
        return
    for b in range(x.shape[1] // QK8):
        dd, isum = _q8_block_ref(x, t, b * QK8, qs, d16, d, b)
        hs = f32_to_f16(np.float32(dd * np.float32(isum)))
        s16[t, b] = hs
        s[t, b] = f16_to_f32(hs)


@jit
def _q8_rows(x, t0, t1, qs, d16, d, s16, s, HAS_S, x86):
    """Rows t0..t1-1 of quantize_q8_0 / q8_1, one scratch for all."""
    if not x86:
        for t in range(t0, t1):
            if HAS_S:
                q8_1_row(x, t, qs, d16, d, s16, s, False)
            else:
                q8_0_row(x, t, qs, d16, d, False)
        return
    scratch = np.empty((3, x.shape[1] // QK8), np.float32)
    for t in range(t0, t1):
        _q8_row_x86(x, t, qs, d16, d, s16, s, HAS_S, scratch)


QUANTIZE_CHUNK = 16  # rows per parallel work item of quantize_q8_0 / q8_1


@pjit
def quantize_q8_0(x, qs, d16, d, x86):
    """x (T, K) f32 -> qs (T, K) int8, d16 (T, K/32) fp16 bits, d (T, K/32) = fp32 value of d16. x86: the AVX2
    quantize_row_q8_0 that matmul uses; else the generic-C _ref, which differs on ties and where 127/amax and
    1/(amax/127) round apart (module docstring)."""
    T = x.shape[0]
    for c in prange((T + QUANTIZE_CHUNK - 1) // QUANTIZE_CHUNK):
        _q8_rows(x, c * QUANTIZE_CHUNK, min(T, (c + 1) * QUANTIZE_CHUNK), qs, d16, d, d16, d, False, x86)


@pjit
def quantize_q8_1(x, qs, d16, d, s16, s, x86):
    """As quantize_q8_0 plus s16/s (T, K/32): fp16(d * sum(q)) with d the unrounded float32 scale."""
    T = x.shape[0]
    for c in prange((T + QUANTIZE_CHUNK - 1) // QUANTIZE_CHUNK):
        _q8_rows(x, c * QUANTIZE_CHUNK, min(T, (c + 1) * QUANTIZE_CHUNK), qs, d16, d, s16, s, True, x86)


@jit
def q8_K_row(x, t, qs, d, bsums):
    """Row t of quantize_q8_K (serial; also called by the fused T = 1 gemv kernels), 16 values a vector: the
    first value of largest magnitude (its sign decides iscale's), then each 16 values' quants and their bsum."""
    K = x.shape[1]
    xr = t * (x.strides[0] // 4)  # rows have unit inner stride (all callers)
    qr = t * qs.strides[0]
    for b in range(K // QK_K):
        o = b * QK_K
        m = zero16()
        for j in range(0, QK_K, 16):
            m = abs_max16(m, load16(x, xr + o + j))
        amax = hmax16(m)
        if amax == np.float32(0.0):
            # ggml leaves bsums untouched here; with d = 0 they never matter, we zero them
            d[t, b] = np.float32(0.0)
            for j in range(QK_K):
                qs[t, o + j] = 0
            for j in range(QK_K // 16):
                bsums[t, b * 16 + j] = 0
            continue
        j = 0
        while j < QK_K - 16 and first_abs_eq16(load16(x, xr + o + j), amax) == 16:
            j += 16
        vmax = x[t, o + j + first_abs_eq16(load16(x, xr + o + j), amax)]
        iscale = np.float32(np.float32(-127.0) / vmax)
        for g in range(QK_K // 16):
            bsums[t, b * 16 + g] = np.int16(store16_nearest_int(qs, qr + o + 16 * g, load16(x, xr + o + 16 * g),
                                                                 iscale))
        d[t, b] = np.float32(np.float32(1.0) / iscale)


@pjit
def quantize_q8_K(x, qs, d, bsums):
    """quantize_row_q8_K_ref: x (T, K) -> qs (T, K) int8, d (T, K/256) f32, bsums (T, K/16) int16."""
    for t in prange(x.shape[0]):
        q8_K_row(x, t, qs, d, bsums)


@pjit
def round_to_half(x, h, xr, bf16):
    """ggml_cpu_fp32_to_fp16, or with bf16 ggml_cpu_fp32_to_bf16 (scalar GGML_FP32_TO_BF16): h (T, K) the 16-bit
    patterns; xr (T, K) f32 their values."""
    T, K = x.shape
    for t in prange(T):
        for k in range(K):
            b = f32_to_bf16(x[t, k]) if bf16 else f32_to_f16(x[t, k])
            h[t, k] = b
            xr[t, k] = bf16_to_f32(b) if bf16 else f16_to_f32(b)


class Activations:
    """Activations converted to a vec_dot_type. Fields (T = tokens, K = inner size):

    Q8_0: qs (T, K) int8, d (T, K/32) f32, d16 fp16 bits of d
    Q8_1: as Q8_0 plus s (T, K/32) f32 (= fp16 of d*sum(qs)), s16 its bits
    Q8_K: qs (T, K) int8, d (T, K/256) f32, bsums (T, K/16) int16
    F16 / BF16: x (T, K) f32 holding the rounded values, h (T, K) their 16-bit patterns
    F32: x (T, K) f32 (the input itself)
    """

    __slots__ = ("vec_dot_type", "qs", "d", "d16", "s", "s16", "bsums", "x", "h")

    def __init__(self, vec_dot_type: GGMLType):
        self.vec_dot_type = vec_dot_type
        self.qs = self.d = self.d16 = self.s = self.s16 = self.bsums = self.x = self.h = None


def quantize_activations(vec_dot_type: GGMLType, x: np.ndarray, flavour: str = "x86") -> Activations:
    """x (T, K) float32 C-contiguous -> Activations of `vec_dot_type`. flavour 'ref' selects the generic-C
    quantize_row_q8_0_ref / q8_1_ref (only used by tests; matmul uses 'x86', see the module docstring). Other
    layouts are copied first: the quantizers read rows 16 values at a time."""
    x = np.ascontiguousarray(x)
    T, K = x.shape
    a = Activations(vec_dot_type)
    if vec_dot_type in (GGMLType.Q8_0, GGMLType.Q8_1):
        nb = K // QK8
        a.qs = empty_aligned((T, K), np.int8)
        a.d16 = empty_aligned((T, nb), np.uint16)
        a.d = empty_aligned((T, nb), np.float32)
        if vec_dot_type == GGMLType.Q8_0:
            quantize_q8_0(x, a.qs, a.d16, a.d, flavour == "x86")
        else:
            a.s16 = empty_aligned((T, nb), np.uint16)
            a.s = empty_aligned((T, nb), np.float32)
            quantize_q8_1(x, a.qs, a.d16, a.d, a.s16, a.s, flavour == "x86")
    elif vec_dot_type == GGMLType.Q8_K:
        a.qs = empty_aligned((T, K), np.int8)
        a.d = empty_aligned((T, K // QK_K), np.float32)
        a.bsums = empty_aligned((T, K // 16), np.int16)
        quantize_q8_K(x, a.qs, a.d, a.bsums)
    elif vec_dot_type in (GGMLType.F16, GGMLType.BF16):
        a.h = empty_aligned((T, K), np.uint16)
        a.x = empty_aligned((T, K), np.float32)
        round_to_half(x, a.h, a.x, vec_dot_type == GGMLType.BF16)
    elif vec_dot_type == GGMLType.F32:
        a.x = x
    else:
        raise ValueError(f"no activation quantizer for {vec_dot_type!r}")
    return a


def to_blocks(a: Activations) -> np.ndarray:
    """Pack Q8_0 / Q8_1 / Q8_K activations into ggml's block bytes (T, row_bytes) uint8 (for tests)."""
    T, K = a.qs.shape
    if a.vec_dot_type == GGMLType.Q8_0:  # block_q8_0: d fp16 | qs[32]
        nb = K // QK8
        blk = np.empty((T, nb, 34), np.uint8)
        blk[:, :, 0:2] = a.d16.reshape(T, nb, 1).view(np.uint8)
        blk[:, :, 2:] = a.qs.reshape(T, nb, QK8).view(np.uint8)
    elif a.vec_dot_type == GGMLType.Q8_1:  # block_q8_1: d fp16 | s fp16 | qs[32]
        nb = K // QK8
        blk = np.empty((T, nb, 36), np.uint8)
        blk[:, :, 0:2] = a.d16.reshape(T, nb, 1).view(np.uint8)
        blk[:, :, 2:4] = a.s16.reshape(T, nb, 1).view(np.uint8)
        blk[:, :, 4:] = a.qs.reshape(T, nb, QK8).view(np.uint8)
    elif a.vec_dot_type == GGMLType.Q8_K:  # block_q8_K: d f32 | qs[256] | bsums int16[16]
        nb = K // QK_K
        blk = np.empty((T, nb, 4 + QK_K + 32), np.uint8)
        blk[:, :, 0:4] = a.d.reshape(T, nb, 1).view(np.uint8)
        blk[:, :, 4:4 + QK_K] = a.qs.reshape(T, nb, QK_K).view(np.uint8)
        blk[:, :, 4 + QK_K:] = a.bsums.reshape(T, nb, 16).view(np.uint8)
    else:
        raise ValueError(f"{a.vec_dot_type!r} has no block layout")
    return blk.reshape(T, -1)
