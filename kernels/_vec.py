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

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model


HAS_AVX512 = {"avx512f", "f16c"} <= config.CPU_FEATURES


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
