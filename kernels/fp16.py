"""16-bit float conversions (F16, BF16) and float32 bit-level helpers, as ggml's CPU backend does them.

Mirrors:
* F32 -> F16: `GGML_CPU_FP32_TO_FP16` / `ggml_cpu_fp32_to_fp16` (ggml/src/ggml-cpu/ggml-cpu.c), which on x86
  with F16C is the hardware `vcvtps2ph` with `_MM_FROUND_TO_NEAREST_INT`: round to nearest even, subnormal
  halves kept, overflow (|x| >= 65520) to inf, NaN quieted keeping the top 10 payload bits.
* F16 -> F32: exact (`ggml_compute_fp16_to_fp32`, `vcvtph2ps`).
* F32 -> BF16: `ggml_compute_fp32_to_bf16` (ggml/src/ggml-impl.h): round to nearest even on the bit pattern,
  NaN forced quiet (`| 64`); no flushing of subnormals. This is what `ggml_cpu_fp32_to_bf16` (BF16's
  `from_float`) calls. BF16 -> F32 is a 16-bit shift.

Also home of the low-level helpers the element-wise kernels share: `fma_f32` (llvm.fma.f32: a*b+c rounded
once, as `_mm512_fmadd_ps` and the FMA contractions GCC/clang make in ggml's C code; LLVM never fuses on
its own without fastmath), the float32 <-> uint32 bit casts `f32_bits` / `bits_f32`, `pow2_f32`, the
hardware F16 conversions `f16_bits_to_f32_hw` / `f32_to_f16_bits_hw` (LLVM fpext/fptrunc: vcvtph2ps /
vcvtps2ph with F16C, vectorisable; bit-identical to the written-out conversions, tested); `jit` / `pjit` are kernels/config.py's.
"""

from __future__ import annotations

from kernels.config import jit, pjit  # noqa: F401  (first: NUMBA_CACHE_DIR before numba; re-exported)

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


# ----------------------------------------------------------------------------------------------
# LLVM intrinsics


@intrinsic
def fma_f32(typingctx, a, b, c):
    """float32 a*b + c with a single rounding (llvm.fma.f32; a vfmadd instruction, or libm fmaf)."""
    if a != types.float32 or b != types.float32 or c != types.float32:
        return None
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        return builder.fma(args[0], args[1], args[2])

    return sig, codegen


@intrinsic
def fma_f16_arith(typingctx, x, v, y):
    """FP16 fma(x, fp16(v), y) with one FP16 rounding, of float32 scalars holding F16 values (x, y) and a float32
    v: one element of ggml_vec_mad_f16 in FP16 arithmetic (kernels/_vec.py F16_ARITH; vfmadd...sh)."""
    if x != types.float32 or v != types.float32 or y != types.float32:
        return None
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        h = ir.HalfType()
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(h, [h, h, h]), "llvm.fma.f16")
        return builder.fpext(builder.call(fma, [builder.fptrunc(a, h) for a in args]), ir.FloatType())

    return sig, codegen


@intrinsic
def mul_f16_arith(typingctx, y, v):
    """y * fp16(v) in FP16, of a float32 holding an F16 value and a float32: one element of ggml_vec_scale_f16 in
    FP16 arithmetic."""
    if y != types.float32 or v != types.float32:
        return None
    sig = types.float32(types.float32, types.float32)

    def codegen(context, builder, signature, args):
        h = ir.HalfType()
        return builder.fpext(builder.fmul(builder.fptrunc(args[0], h), builder.fptrunc(args[1], h)), ir.FloatType())

    return sig, codegen


@intrinsic
def f32_bits(typingctx, x):
    """The IEEE bit pattern of a float32, as uint32."""
    if x != types.float32:
        return None
    sig = types.uint32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return sig, codegen


@intrinsic
def bits_f32(typingctx, x):
    """The float32 whose IEEE bit pattern is the uint32 `x`."""
    if x != types.uint32:
        return None
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


def int_to_width(builder, v, from_bits: int, to_bits: int):
    """An intrinsic's integer argument truncated or zero-extended to to_bits."""
    if from_bits > to_bits:
        return builder.trunc(v, ir.IntType(to_bits))
    if from_bits < to_bits:
        return builder.zext(v, ir.IntType(to_bits))
    return v


@intrinsic
def f16_bits_to_f32_hw(typingctx, h):
    """F16 bits (any unsigned integer type, its low 16 bits) -> float32 as an LLVM `fpext half` (vcvtph2ps with
    F16C; vectorises). Exact."""
    if not isinstance(h, types.Integer):
        return None
    sig = types.float32(h)

    def codegen(context, builder, signature, args):
        v = int_to_width(builder, args[0], signature.args[0].bitwidth, 16)
        return builder.fpext(builder.bitcast(v, ir.HalfType()), ir.FloatType())

    return sig, codegen


@intrinsic
def f32_to_f16_bits_hw(typingctx, x):
    """float32 -> F16 bits as an LLVM `fptrunc` (vcvtps2ph with F16C, round to nearest even; vectorises)."""
    if x != types.float32:
        return None
    sig = types.uint16(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return sig, codegen


@jit
def pow2_f32(k):
    """2^k as float32 for integer k in [-126, 127] (built from its bits)."""
    return bits_f32(np.uint32((k + 127) << 23))


# ----------------------------------------------------------------------------------------------
# scalar conversions written out on the bits (the specification; the `_hw` intrinsics above compute
# the same values, tested bit for bit, and are what the array kernels use because they vectorise)


@jit
def f32_to_f16_bits(f):
    """float32 -> F16 bits, round to nearest even (vcvtps2ph semantics)."""
    a = np.int64(f32_bits(np.float32(f)))
    sign = (a >> 16) & 0x8000
    a &= 0x7FFFFFFF
    if a > 0x7F800000:  # NaN: quiet bit set, top payload bits kept
        return np.uint16(sign | 0x7E00 | ((a >> 13) & 0x3FF))
    if a >= 0x477FF000:  # >= 65520 (halfway above 65504) ties to even = inf; inf itself
        return np.uint16(sign | 0x7C00)
    if a >= 0x38800000:  # normal half: rebias the exponent (127 -> 15) and round the 13 dropped bits
        h = (a - 0x38000000) >> 13
        rem = a & 0x1FFF
        if rem > 0x1000 or (rem == 0x1000 and (h & 1) == 1):
            h += 1  # a carry into the exponent is the correct rounding
        return np.uint16(sign | h)
    e = a >> 23
    if e < 101:  # below 2^-25: rounds to (signed) zero
        return np.uint16(sign)
    # subnormal half: the value in units of 2^-24 is mant * 2^(e-126)
    mant = (a & 0x7FFFFF) | 0x800000
    shift = 126 - e  # 14..25
    q = mant >> shift
    rem = mant & ((np.int64(1) << shift) - 1)
    half = np.int64(1) << (shift - 1)
    if rem > half or (rem == half and (q & 1) == 1):
        q += 1  # may become 0x400, the smallest normal: still the right encoding
    return np.uint16(sign | q)


@jit
def f16_bits_to_f32(h):
    """F16 bits -> float32 (exact)."""
    h = np.int64(h)
    sign = (h & 0x8000) << 16
    e = (h >> 10) & 0x1F
    m = h & 0x3FF
    if e != 0 and e != 0x1F:  # normal: the common case first
        return bits_f32(np.uint32(sign | ((e + 112) << 23) | (m << 13)))
    if e == 0x1F:  # inf / NaN: payload kept, NaN quieted (vcvtph2ps)
        q = 0x400000 if m != 0 else 0
        return bits_f32(np.uint32(sign | 0x7F800000 | q | (m << 13)))
    v = np.float32(m) * np.float32(5.9604644775390625e-08)  # m * 2^-24, exact (also +-0)
    return -v if sign != 0 else v


@jit
def f32_to_bf16_bits(f):
    """ggml_compute_fp32_to_bf16: RNE on the bit pattern, NaN forced quiet."""
    u = np.int64(f32_bits(np.float32(f)))
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return np.uint16(((u >> 16) | 64) & 0xFFFF)
    return np.uint16(((u + (0x7FFF + ((u >> 16) & 1))) >> 16) & 0xFFFF)


@jit
def bf16_bits_to_f32(h):
    return bits_f32(np.uint32(np.int64(h) << 16))


@jit
def round_f16_scalar(f):
    """float32 rounded through F16 and back (what an F16 operand of a ggml matmul holds)."""
    return f16_bits_to_f32_hw(f32_to_f16_bits_hw(np.float32(f)))


# ----------------------------------------------------------------------------------------------
# array conversions: any C-contiguous shape, same number of elements; `out` is written in place


@jit
def _to_half(x, out, bf16):
    xf = x.reshape(-1)
    of = out.reshape(-1)
    if xf.size != of.size:
        raise ValueError("f32 -> 16-bit conversion: x and out sizes differ")
    for i in range(xf.size):
        of[i] = f32_to_bf16_bits(xf[i]) if bf16 else f32_to_f16_bits_hw(xf[i])


@jit
def _from_half(h, out, bf16):
    hf = h.reshape(-1)
    of = out.reshape(-1)
    if hf.size != of.size:
        raise ValueError("16-bit -> f32 conversion: h and out sizes differ")
    for i in range(hf.size):
        of[i] = bf16_bits_to_f32(hf[i]) if bf16 else f16_bits_to_f32_hw(hf[i])


def fp32_to_fp16(x: np.ndarray, out: np.ndarray) -> None:
    """x: f32 (...), out: uint16 (...) with x.size elements."""
    _to_half(x, out, False)


def fp16_to_fp32(h: np.ndarray, out: np.ndarray) -> None:
    """h: uint16 (...), out: f32 (...) with h.size elements."""
    _from_half(h, out, False)


def fp32_to_bf16(x: np.ndarray, out: np.ndarray) -> None:
    """x: f32 (...), out: uint16 (...) with x.size elements."""
    _to_half(x, out, True)


def bf16_to_fp32(h: np.ndarray, out: np.ndarray) -> None:
    """h: uint16 (...), out: f32 (...) with h.size elements."""
    _from_half(h, out, True)


def round_fp16(x: np.ndarray) -> np.ndarray:
    """New f32 array: `x` rounded through F16 (convenience; allocates)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    h = np.empty(x.shape, np.uint16)
    out = np.empty(x.shape, np.float32)
    fp32_to_fp16(x, h)
    fp16_to_fp32(h, out)
    return out


def round_bf16(x: np.ndarray) -> np.ndarray:
    """New f32 array: `x` rounded through BF16 (convenience; allocates)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    h = np.empty(x.shape, np.uint16)
    out = np.empty(x.shape, np.float32)
    fp32_to_bf16(x, h)
    bf16_to_fp32(h, out)
    return out
