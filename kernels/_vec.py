"""16-lane float32 vectors (one AVX512 zmm register) for the element-wise and attention kernels.

ggml's CPU kernels are specified by their AVX512 code (ggml_vec_dot_f16/f32: 4 accumulators x 16 lanes,
`_mm512_reduce_add_ps` trees). numba's auto-vectoriser does not reproduce such multi-accumulator layouts
(nor horizontal reductions over many dot products at once), so the hot loops are written with explicit
LLVM `<16 x float>` values here:

    type       F32x16
    memory     load16(arr, i)   16 elements at element offset i of a C-contiguous float32 array, or of a
                                uint16 (F16 bits) array converted exactly (fpext half = vcvtph2ps)
               store16(arr, i, v)  into a float32 array
    float      fma16 (llvm.fma: one rounding, vfmadd), add16, mul16 (lane-wise IEEE, never fused), zero16,
               splat16, round_f16_16 (each lane rounded to F16 and back: an F16 accumulator held as float32)
    reduce     fold8 / fold4 / fold2 / fold1: one level of `_mm512_reduce_add_ps`'s tree (halves 8, 4, 2, 1)
               applied to the groups of two vectors at once (see `fold_level`), so 16 dot products
               are reduced with 15 shuffle pairs instead of 16 scalar trees; every lane sums exactly the
               same two values as the scalar tree, so the results are bit-identical.

Every function using these marks itself "min-legal-vector-width"="512" (as clang does for its 512-bit
intrinsics) so LLVM keeps the vectors in zmm registers instead of splitting them on this CPU model.
Callers must only use them on C-contiguous arrays (the attention kernel checks, and falls back to its
scalar loops otherwise). Without AVX512 / F16C LLVM still lowers the same IR correctly (narrower registers,
a library call for the F16 conversion), only slower; `HAS_AVX512` says which case this machine is.
"""

from __future__ import annotations

from kernels import config  # (first: NUMBA_CACHE_DIR before numba)

import functools
import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

from kernels.config import ijit as _inline, jit


HAS_AVX512 = {"avx512f", "f16c"} <= config.CPU_FEATURES
HAS_GATHER = "avx2" in config.CPU_FEATURES  # vpgatherqq (expf16's table lookup without AVX512)
# A native build on a CPU with AVX512-FP16 (Sapphire Rapids and later) compiles ggml's F16 vector ops (GGML_F16_VEC:
# ggml_vec_mad_f16, ggml_vec_scale_f16) to FP16 arithmetic, 32 lanes, steps of F16_ARITH_STEP elements: each
# element rounded once in FP16, the float scalar rounded to FP16 first (simd-mappings.h). The elements past the last
# whole step take the scalar loop (float arithmetic, rounded to FP16), as every other build does for all of them.
# The fixtures' AMD build has no AVX512-FP16; a head dimension below 128 is computed the same either way.
F16_ARITH = "avx512fp16" in config.CPU_FEATURES
F16_ARITH_STEP = 128


class F32x16Type(types.Type):
    """An LLVM <16 x float> value."""

    def __init__(self):
        super().__init__(name="f32x16")


F32x16 = F32x16Type()
_VT = ir.VectorType(ir.FloatType(), 16)
_i32 = ir.IntType(32)


@register_model(F32x16Type)
class _F32x16Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _VT)


def _wide(builder):
    # llvmlite's FunctionAttributes only accepts enum attributes: add the string attribute to the set itself
    set.add(builder.function.attributes, '"min-legal-vector-width"="512"')


def _elem_ptr(context, builder, aryty, ary, index, idxty, elty):
    a = context.make_array(aryty)(context, builder, ary)
    i = context.cast(builder, index, idxty, types.int64)
    return builder.gep(builder.bitcast(a.data, elty.as_pointer()), [i])


@intrinsic
def load16(typingctx, arr, i):
    """<16 x float> from elements i..i+15 of a float32 array, or of a uint16 F16 array (exact fpext)."""
    if not (isinstance(arr, types.Array) and isinstance(i, types.Integer)):
        return None
    if arr.dtype == types.float32:
        elty = ir.FloatType()
    elif arr.dtype == types.uint16:
        elty = ir.HalfType()
    else:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        p = _elem_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1], elty)
        v = builder.load(builder.bitcast(p, ir.VectorType(elty, 16).as_pointer()), align=1)
        return v if elty == ir.FloatType() else builder.fpext(v, _VT)

    return F32x16(arr, i), codegen


@intrinsic
def store16(typingctx, arr, i, v):
    """Store 16 float32 at elements i..i+15 of a float32 array."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.float32 and isinstance(i, types.Integer)
            and v == F32x16):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        p = _elem_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1], ir.FloatType())
        builder.store(args[2], builder.bitcast(p, _VT.as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(arr, i, v), codegen


@intrinsic
def zero16(typingctx):
    def codegen(context, builder, sig, args):
        return ir.Constant(_VT, None)

    return F32x16(), codegen


@intrinsic
def splat16(typingctx, x):
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        v = builder.insert_element(ir.Constant(_VT, ir.Undefined), args[0], ir.Constant(_i32, 0))
        return builder.shuffle_vector(v, ir.Constant(_VT, ir.Undefined), ir.Constant(ir.VectorType(_i32, 16), [0] * 16))

    return F32x16(x), codegen


@intrinsic
def fma16(typingctx, a, b, c):
    """a*b + c lane-wise with one rounding (llvm.fma.v16f32)."""
    if a != F32x16 or b != F32x16 or c != F32x16:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VT, [_VT, _VT, _VT]), "llvm.fma.v16f32")
        return builder.call(fn, args)

    return F32x16(a, b, c), codegen


@intrinsic
def round_f16_16(typingctx, a):
    """Each lane rounded to F16 (nearest even) and back: fptrunc + fpext (vcvtps2ph / vcvtph2ps with F16C)."""
    if a != F32x16:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return builder.fpext(builder.fptrunc(args[0], ir.VectorType(ir.HalfType(), 16)), _VT)

    return F32x16(a), codegen


class F16x16Type(types.Type):
    """An LLVM <16 x half> value: an F16 accumulator in FP16 arithmetic (F16_ARITH), half a zmm register."""

    def __init__(self):
        super().__init__(name="f16x16")


F16x16 = F16x16Type()
_HT = ir.VectorType(ir.HalfType(), 16)


@register_model(F16x16Type)
class _F16x16Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _HT)


@intrinsic
def to_f16x16(typingctx, a):
    """F32x16 -> F16x16, each lane rounded to F16 (exact for float32 values of F16)."""
    if a != F32x16:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return builder.fptrunc(args[0], _HT)

    return F16x16(a), codegen


@intrinsic
def from_f16x16(typingctx, a):
    """F16x16 -> F32x16 (exact)."""
    if a != F16x16:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return builder.fpext(args[0], _VT)

    return F32x16(a), codegen


@intrinsic
def load16h(typingctx, arr, i):
    """<16 x half> from elements i..i+15 of a uint16 (F16 bits) array, without conversion."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.uint16 and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        p = _elem_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1], ir.HalfType())
        return builder.load(builder.bitcast(p, _HT.as_pointer()), align=1)

    return F16x16(arr, i), codegen


@intrinsic
def mad16h(typingctx, x, v, y):
    """ggml_vec_mad_f16 in FP16 arithmetic on 16 lanes: fma(x, fp16(v), y) rounded once to FP16 (vfmadd...ph)."""
    if x != F16x16 or y != F16x16 or v != types.float32:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_HT, [_HT, _HT, _HT]), "llvm.fma.v16f16")
        return builder.call(fma, [args[0], _half_splat16(builder, args[1]), args[2]])

    return F16x16(x, v, y), codegen


@intrinsic
def scale16h(typingctx, y, v):
    """ggml_vec_scale_f16 in FP16 arithmetic on 16 lanes: y * fp16(v) (vmulph)."""
    if y != F16x16 or v != types.float32:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return builder.fmul(args[0], _half_splat16(builder, args[1]))

    return F16x16(y, v), codegen


def _half16(builder, v):
    return builder.fptrunc(v, ir.VectorType(ir.HalfType(), 16))


def _half_splat16(builder, x):
    h = builder.fptrunc(x, ir.HalfType())
    v = builder.insert_element(ir.Constant(ir.VectorType(ir.HalfType(), 16), ir.Undefined), h, ir.Constant(_i32, 0))
    return builder.shuffle_vector(v, ir.Constant(ir.VectorType(ir.HalfType(), 16), ir.Undefined),
                                  ir.Constant(ir.VectorType(_i32, 16), [0] * 16))


@intrinsic
def mad_f16_arith16(typingctx, x, v, y):
    """ggml_vec_mad_f16 with FP16 arithmetic (F16_ARITH) on 16 lanes: fp16 fma(x, fp16(v), y), one FP16 rounding
    (vfmadd...ph); x and y hold F16 values as float32 (exact), v a float32 scalar."""
    if x != F32x16 or y != F32x16 or v != types.float32:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        h16 = ir.VectorType(ir.HalfType(), 16)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(h16, [h16, h16, h16]), "llvm.fma.v16f16")
        r = builder.call(fma, [_half16(builder, args[0]), _half_splat16(builder, args[1]), _half16(builder, args[2])])
        return builder.fpext(r, _VT)

    return F32x16(x, v, y), codegen


@intrinsic
def scale_f16_arith16(typingctx, y, v):
    """ggml_vec_scale_f16 with FP16 arithmetic (F16_ARITH) on 16 lanes: y * fp16(v) in FP16 (vmulph)."""
    if y != F32x16 or v != types.float32:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return builder.fpext(builder.fmul(_half16(builder, args[0]), _half_splat16(builder, args[1])), _VT)

    return F32x16(y, v), codegen


def _binary16(build):
    """An intrinsic (F32x16, F32x16) -> F32x16 whose IR is build(builder, a, b)."""
    @intrinsic
    def binop(typingctx, a, b):
        if a != F32x16 or b != F32x16:
            return None

        def codegen(context, builder, sig, args):
            _wide(builder)
            return build(builder, args[0], args[1])

        return F32x16(a, b), codegen

    return binop


add16 = _binary16(lambda builder, a, b: builder.fadd(a, b))
mul16 = _binary16(lambda builder, a, b: builder.fmul(a, b))


def fold_masks(m: int):
    """Shuffle masks over the 32 lanes of (a, b) for one reduce level on groups of m lanes: the result's
    groups of m/2 lanes are a's groups then b's, group lane l = lane l + lane l + m/2 of the source group."""
    lo, hi = [], []
    for g in range(32 // m):
        lo += [g * m + l for l in range(m // 2)]
        hi += [g * m + m // 2 + l for l in range(m // 2)]
    return lo, hi


def _make_fold(m):
    lo, hi = (ir.Constant(ir.VectorType(_i32, 16), mask) for mask in fold_masks(m))
    return _binary16(lambda builder, a, b: builder.fadd(builder.shuffle_vector(a, b, lo),
                                                        builder.shuffle_vector(a, b, hi)))


# fold8: two vectors of one 16-lane group each -> two groups of 8 (l + l+8); fold4: groups of 8 -> 4 (l + l+4);
# fold2: groups of 4 -> 2; fold1: groups of 2 -> 1 lane each. After the four levels over 16 vectors, lane i of
# the result is _mm512_reduce_add_ps of vector i.
fold8 = _make_fold(16)
fold4 = _make_fold(8)
fold2 = _make_fold(4)
fold1 = _make_fold(2)


@intrinsic
def lane16(typingctx, v, i):
    if v != F32x16 or not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return builder.extract_element(args[0], context.cast(builder, args[1], sig.args[1], types.int32))

    return types.float32(v, i), codegen


# The activation quantizers' pieces (kernels/quants/vec_dot_type.py): the block maximum, its first position, and
# the rounding of x * iscale to int8 by the two recipes ggml uses, 16 values at a time.

_V16I32 = ir.VectorType(_i32, 16)


def _fabs16(builder):
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VT, [_VT]), "llvm.fabs.v16f32")


@intrinsic
def abs_max16(typingctx, m, v):
    """Lane-wise |v| if |v| > m else m: the scalar `if |x| > amax: amax = |x|` (NaN never taken)."""
    if m != F32x16 or v != F32x16:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return _max(builder, args[0], builder.call(_fabs16(builder), [args[1]]))

    return F32x16(m, v), codegen


@intrinsic
def hmax16(typingctx, v):
    """The largest lane of a vector without NaN."""
    if v != F32x16:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        m = args[0]
        for k in (8, 4, 2, 1):
            m = _max(builder, m, builder.shuffle_vector(m, m, ir.Constant(_V16I32, [(i + k) % 16 for i in range(16)])))
        return builder.extract_element(m, ir.Constant(_i32, 0))

    return types.float32(v), codegen


@intrinsic
def first_abs_eq16(typingctx, v, a):
    """The first lane i with |v[i]| == a, or 16."""
    if v != F32x16 or a != types.float32:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        eq = builder.fcmp_ordered("==", builder.call(_fabs16(builder), [args[0]]), _splat_ir(builder, args[1]))
        bits = builder.or_(builder.zext(builder.bitcast(eq, ir.IntType(16)), _i32), ir.Constant(_i32, 1 << 16))
        cttz = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_i32, [_i32, ir.IntType(1)]),
                                              "llvm.cttz.i32")
        return builder.call(cttz, [bits, ir.Constant(ir.IntType(1), 1)])

    return types.int32(v, a), codegen


def _splat_ir(builder, x):
    v = builder.insert_element(ir.Constant(_VT, ir.Undefined), x, ir.Constant(_i32, 0))
    return builder.shuffle_vector(v, ir.Constant(_VT, ir.Undefined), ir.Constant(_V16I32, [0] * 16))


def _store_i8_sum(context, builder, sig, arr, i, q):
    """Store the int32 lanes q (each in -128..127) as int8 at elements i..i+15 of an int8 array; their sum."""
    i8 = ir.IntType(8)
    p = _elem_ptr(context, builder, sig.args[0], arr, i, sig.args[1], i8)
    builder.store(builder.trunc(q, ir.VectorType(i8, 16)), builder.bitcast(p, ir.VectorType(i8, 16).as_pointer()),
                  align=1)
    add = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_i32, [_V16I32]),
                                         "llvm.vector.reduce.add.v16i32")
    return builder.call(add, [q])


def _check_store_i8(arr, i, v, s):
    return (isinstance(arr, types.Array) and arr.dtype == types.int8 and isinstance(i, types.Integer)
            and v == F32x16 and s == types.float32)


@intrinsic
def store16_nearest_int(typingctx, qs, i, v, iscale):
    """quantize_row_q8_K_ref's rounding of 16 values: q = min(127, nearest_int(iscale * x)) (ggml's nearest_int:
    + 1.5 * 2^23, the low mantissa bits; the product rounded first), stored as int8 at elements i..i+15 of qs;
    returns their sum (a bsum of 16)."""
    if not _check_store_i8(qs, i, v, iscale):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        qs, i, v, iscale = args
        y = builder.fadd(builder.fmul(v, _splat_ir(builder, iscale)), _splat_const(12582912.0))
        n = builder.sub(builder.and_(builder.bitcast(y, _V16I32), ir.Constant(_V16I32, [0x007FFFFF] * 16)),
                        ir.Constant(_V16I32, [0x00400000] * 16))
        c127 = ir.Constant(_V16I32, [127] * 16)
        n = builder.select(builder.icmp_signed("<", c127, n), c127, n)
        return _store_i8_sum(context, builder, sig, qs, i, n)

    return types.int32(qs, i, v, iscale), codegen


@intrinsic
def store16_round_sat(typingctx, qs, i, v, iscale):
    """The AVX2 quantize_row_q8_0's rounding of 16 values: _mm256_round_ps(x * id, nearest even), cvtps_epi32
    (INT_MIN for NaN and out of range), the saturating packs to int8; stored at elements i..i+15 of qs, returns
    their sum."""
    if not _check_store_i8(qs, i, v, iscale):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        qs, i, v, iscale = args
        rint = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VT, [_VT]), "llvm.rint.v16f32")
        r = builder.call(rint, [builder.fmul(v, _splat_ir(builder, iscale))])
        inside = builder.and_(builder.fcmp_ordered(">=", r, _splat_const(-2147483648.0)),
                              builder.fcmp_ordered("<", r, _splat_const(2147483648.0)))
        n = builder.select(inside, builder.fptosi(r, _V16I32), ir.Constant(_V16I32, [-2147483648] * 16))
        c127 = ir.Constant(_V16I32, [127] * 16)
        cm128 = ir.Constant(_V16I32, [-128] * 16)
        n = builder.select(builder.icmp_signed("<", c127, n), c127, n)
        n = builder.select(builder.icmp_signed("<", n, cm128), cm128, n)
        return _store_i8_sum(context, builder, sig, qs, i, n)

    return types.int32(qs, i, v, iscale), codegen


# glibc's expf (sysdeps/ieee754/flt-32/e_expf.c, 2.28 on) on 16 lanes, as its FMA variant (__expf_fma, which
# glibc's ifunc picks on x86 CPUs with FMA) computes it: in double, x * N/ln2 = k + r, a 32-entry table of
# 2^(j/32), a degree-3 polynomial. The contractions (the kd and r FMAs) were read off Debian's glibc 2.36
# libm.so.6; `expf16_matches_libm` checks them against the C library before a kernel relies on them.
_EXP2F_N = 32
_EXPF_INVLN2N = float.fromhex("0x1.71547652b82fep+0") * _EXP2F_N
_EXPF_SHIFT = float.fromhex("0x1.8p+52")
_EXPF_C = (float.fromhex("0x1.c6af84b912394p-5") / _EXP2F_N ** 3, float.fromhex("0x1.ebfce50fac4f3p-3") / _EXP2F_N ** 2,
           float.fromhex("0x1.62e42ff0c52d6p-1") / _EXP2F_N)
# __exp2f_data.tab (e_exp2f_data.c): asuint64(2^(j/N)) - (j << 52 - 5), j < 32 (k's exponent bits added back)
_EXP2F_TAB = [int(h, 16) for h in """
    3ff0000000000000 3fefd9b0d3158574 3fefb5586cf9890f 3fef9301d0125b51 3fef72b83c7d517b 3fef54873168b9aa
    3fef387a6e756238 3fef1e9df51fdee1 3fef06fe0a31b715 3feef1a7373aa9cb 3feedea64c123422 3feece086061892d
    3feebfdad5362a27 3feeb42b569d4f82 3feeab07dd485429 3feea47eb03a5585 3feea09e667f3bcd 3fee9f75e8ec5f74
    3feea11473eb0187 3feea589994cce13 3feeace5422aa0db 3feeb737b0cdc5e5 3feec49182a3f090 3feed503b23e255d
    3feee89f995ad3ad 3feeff76f2fb5e47 3fef199bdd85529c 3fef3720dcef9069 3fef5818dcfba487 3fef7c97337b9b5f
    3fefa4afa2a490da 3fefd0765b6e4540""".split()]
_EXPF_UFLOW = float.fromhex("-0x1.9fe368p6")  # below: 0 (log 2^-150)
_EXPF_MAY_UFLOW = float.fromhex("-0x1.9d1d9ep6")  # below: __math_may_uflowf, 0x1.4p-75f squared = 2^-149
_EXPF_OFLOW = float.fromhex("0x1.62e42ep6")  # above: +inf


def _exp2f_tab_ir(builder, j):
    """The table entries _EXP2F_TAB[j] of a <16 x i64> of indices 0..31: two vpermi2q per 8 lanes (AVX512), four
    vpgatherqq (AVX2), or a load per lane."""
    i64 = ir.IntType(64)
    q16 = ir.VectorType(i64, 16)
    q8 = ir.VectorType(i64, 8)
    q4 = ir.VectorType(i64, 4)
    if HAS_AVX512:
        perm = cgutils.get_or_insert_function(builder.module, ir.FunctionType(q8, [q8, q8, q8]),
                                              "llvm.x86.avx512.vpermi2var.q.512")
        tabs = [ir.Constant(q8, _EXP2F_TAB[8 * i: 8 * i + 8]) for i in range(4)]
        halves = []
        for h in range(2):
            jh = builder.shuffle_vector(j, j, ir.Constant(ir.VectorType(_i32, 8), list(range(8 * h, 8 * h + 8))))
            lo = builder.call(perm, [tabs[0], jh, tabs[1]])  # entries 0..15 (index bits 0-3)
            hi = builder.call(perm, [tabs[2], jh, tabs[3]])  # entries 16..31
            upper = builder.icmp_unsigned(">=", jh, ir.Constant(q8, [16] * 8))
            halves.append(builder.select(upper, hi, lo))
        return builder.shuffle_vector(halves[0], halves[1], ir.Constant(ir.VectorType(_i32, 16), list(range(16))))
    name = "synapse.exp2f_tab"
    tab = builder.module.globals.get(name)
    if tab is None:
        tab = cgutils.global_constant(builder.module, name, ir.Constant(ir.ArrayType(i64, _EXP2F_N), _EXP2F_TAB))
    if HAS_GATHER:
        i8p = ir.IntType(8).as_pointer()
        gather = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(q4, [q4, i8p, q4, q4, ir.IntType(8)]), "llvm.x86.avx2.gather.q.q.256")
        base = builder.bitcast(tab, i8p)
        ones = ir.Constant(q4, [-1] * 4)
        parts = []
        for k in range(4):
            jk = builder.shuffle_vector(j, j, ir.Constant(ir.VectorType(_i32, 4), list(range(4 * k, 4 * k + 4))))
            parts.append(builder.call(gather, [ir.Constant(q4, [0] * 4), base, jk, ones, ir.Constant(ir.IntType(8), 8)]))
        lo = builder.shuffle_vector(parts[0], parts[1], ir.Constant(ir.VectorType(_i32, 8), list(range(8))))
        hi = builder.shuffle_vector(parts[2], parts[3], ir.Constant(ir.VectorType(_i32, 8), list(range(8))))
        return builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_i32, 16), list(range(16))))
    t = ir.Constant(q16, ir.Undefined)
    zero = ir.Constant(_i32, 0)
    for k in range(16):
        jk = builder.extract_element(j, ir.Constant(_i32, k))
        t = builder.insert_element(t, builder.load(builder.gep(tab, [zero, jk])), ir.Constant(_i32, k))
    return t


def _expf_ir(builder, xf):
    """IR of glibc's expf (see above) on a <16 x float>."""
    d16 = ir.VectorType(ir.DoubleType(), 16)
    i64 = ir.IntType(64)
    q16 = ir.VectorType(i64, 16)
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(d16, [d16, d16, d16]), "llvm.fma.v16f64")

    def dc(v):
        return ir.Constant(d16, [v] * 16)

    xd = builder.fpext(xf, d16)
    kd = builder.call(fma, [dc(_EXPF_INVLN2N), xd, dc(_EXPF_SHIFT)])  # vfmadd: z + shift in one rounding
    ki = builder.bitcast(kd, q16)
    kd = builder.fsub(kd, dc(_EXPF_SHIFT))
    r = builder.call(fma, [dc(_EXPF_INVLN2N), xd, builder.fneg(kd)])  # vfmsub: z - kd, z unrounded
    j = builder.and_(ki, ir.Constant(q16, [_EXP2F_N - 1] * 16))
    t = _exp2f_tab_ir(builder, j)
    t = builder.add(t, builder.shl(ki, ir.Constant(q16, [52 - 5] * 16)))
    s = builder.bitcast(t, d16)
    z = builder.call(fma, [r, dc(_EXPF_C[0]), dc(_EXPF_C[1])])
    r2 = builder.fmul(r, r)
    y = builder.call(fma, [r, dc(_EXPF_C[2]), dc(1.0)])
    y = builder.call(fma, [z, r2, y])
    y = builder.fptrunc(builder.fmul(y, s), _VT)
    y = builder.select(builder.fcmp_ordered("<", xf, _splat_const(_EXPF_MAY_UFLOW)), _splat_const(2.0 ** -149), y)
    y = builder.select(builder.fcmp_ordered("<", xf, _splat_const(_EXPF_UFLOW)), _splat_const(0.0), y)
    y = builder.select(builder.fcmp_ordered(">", xf, _splat_const(_EXPF_OFLOW)), _splat_const(float("inf")), y)
    return builder.select(builder.fcmp_unordered("uno", xf, xf), builder.fadd(xf, xf), y)


def _splat_const(v):
    return ir.Constant(_VT, [v] * 16)


@intrinsic
def expf16(typingctx, x):
    """glibc expf of each lane (see above): the same bits as the C library's expf (the scalar kernels' math.exp on
    a float32) where `expf16_matches_libm()`. The table lookup: _exp2f_tab_ir."""
    if x != F32x16:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return _expf_ir(builder, args[0])

    return F32x16(x), codegen


def _lane_shift_up(builder, v, k, fill):
    """Lanes moved up by k (lane i takes lane i - k), the first k lanes from the vector fill."""
    return builder.shuffle_vector(fill, v, ir.Constant(ir.VectorType(_i32, 16), [16 + i - k if i >= k else i
                                                                                 for i in range(16)]))


def _max(builder, a, b):
    return builder.select(builder.fcmp_ordered(">", b, a), b, a)


@intrinsic
def online_soft_max16(typingctx, x, visible, M):
    """ggml's one-row online soft-max for 16 cells at once: x the cells' scaled scores, visible nonzero in the
    lanes of cells the mask lets through (the others are skipped: they neither move the maximum nor take ms,
    vs), M the running maximum before the first. Returns (ms, vs, M after the last): per lane, against the
    maximum m of M and the visible lanes before it (a prefix scan, 4 steps), a new maximum (x > m) gives ms =
    expf(m - x), vs = 1, otherwise ms = 1, vs = expf(x - m): one expf16 per lane. NaN scores never become the
    maximum (as `s > M` in the scalar loop)."""
    if x != F32x16 or visible != F32x16 or M != types.float32:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        x, visible, m0 = args
        ninf = _splat_const(float("-inf"))
        counts = builder.and_(builder.fcmp_ordered("!=", visible, _splat_const(0.0)),
                              builder.fcmp_ordered("ord", x, x))
        m = builder.select(counts, x, ninf)
        for k in (1, 2, 4, 8):  # inclusive running maximum
            m = _max(builder, m, _lane_shift_up(builder, m, k, ninf))
        c = builder.insert_element(ir.Constant(_VT, ir.Undefined), m0, ir.Constant(_i32, 0))
        c = builder.shuffle_vector(c, ir.Constant(_VT, ir.Undefined), ir.Constant(ir.VectorType(_i32, 16), [0] * 16))
        m = _max(builder, m, c)
        before = _lane_shift_up(builder, m, 1, c)
        new = builder.fcmp_ordered(">", x, before)
        e = _expf_ir(builder, builder.select(new, builder.fsub(before, x), builder.fsub(x, before)))
        one = _splat_const(1.0)
        ms = builder.select(new, e, one)
        vs = builder.select(new, one, e)
        last = builder.extract_element(m, ir.Constant(_i32, 15))
        return context.make_tuple(builder, sig.return_type, [ms, vs, last])

    return types.Tuple((F32x16, F32x16, types.float32))(x, visible, M), codegen


@jit
def _expf16_mismatches(lo_bits, hi_bits, step):
    """How many float32 of bit patterns lo_bits, lo_bits + step, ... < hi_bits expf16 computes otherwise than
    the C library's expf (math.exp on a float32 calls it), NaN against NaN counting as equal."""
    xs = np.empty(16, np.uint32)
    out = np.empty(16, np.float32)
    bad = 0
    for b in range(lo_bits, hi_bits, 16 * step):
        for i in range(16):
            xs[i] = min(b + i * step, hi_bits - 1)
        xf = xs.view(np.float32)
        store16(out, 0, expf16(load16(xf, 0)))
        for i in range(16):
            ref = np.float32(math.exp(xf[i]))
            if out[i] != ref and not (ref != ref and out[i] != out[i]):
                bad += 1
    return bad


@functools.cache
def expf16_matches_libm() -> bool:
    """Whether expf16 gives this C library's expf on a sample of every range its code distinguishes (each 1009th
    float32 of [-104, 0], each 65537th of the rest, the thresholds, and -63.0995..., the one argument of [-104, 0]
    where r's contraction shows; ~10 ms): checked once a process before the vectorised kernels use it; a different
    libm keeps them on their scalar paths (the same bits, slower)."""
    edges = np.array([0.0, -0.0, 1.0, -1.0, _EXPF_UFLOW, _EXPF_MAY_UFLOW, _EXPF_OFLOW, 88.0, -88.0, np.inf, -np.inf,
                      np.nan, -103.0, 1e-30, -1e-30, 2.0 ** -149, -63.09946060180664], np.float32).view(np.uint32)
    runs = [(0xC2D00000, 0xFFFFFFFF + 1, 65537), (0x80000000, 0xC2D00000, 1009), (0, 0x80000000, 65537)]
    return (sum(_expf16_mismatches(lo, hi, step) for lo, hi, step in runs)
            + sum(_expf16_mismatches(int(b), int(b) + 1, 1) for b in edges)) == 0


# ggml's F16 vector ops on the one-row flash-attention kernel's F16 accumulator, 16 lanes (float32 values of F16)


@_inline
def f16_arith_dims(D):
    """How many of the D dimensions ggml's F16 vector ops compute in FP16 arithmetic: whole steps of
    F16_ARITH_STEP where the build has AVX512-FP16 (kernels/_vec.py F16_ARITH), none otherwise."""
    return D // F16_ARITH_STEP * F16_ARITH_STEP if F16_ARITH else 0


@_inline
def vec_scale_f16_16(a, ms, arith):
    """fp16(a * ms) for one 16-lane vector of the F16 accumulator (ggml_vec_scale_f16); a * fp16(ms) in FP16 for
    dimensions below f16_arith_dims (arith)."""
    if F16_ARITH and arith:
        return scale_f16_arith16(a, ms)
    return round_f16_16(mul16(a, splat16(ms)))


@_inline
def vec_mad_f16_16(v, vs, a, arith):
    """fp16(fma(V, vs, a)) for one 16-lane vector (ggml_vec_mad_f16), V float32 values of F16 (v); an FP16 fma with
    fp16(vs) for dimensions below f16_arith_dims (arith)."""
    if F16_ARITH and arith:
        return mad_f16_arith16(v, vs, a)
    return round_f16_16(fma16(v, splat16(vs), a))
