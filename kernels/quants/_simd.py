"""SIMD building blocks for the dot kernels: LLVM vector values as numba types, plus a few x86 instructions.

numba does not reliably auto-vectorise the quantized dot products (the K-quants' 8-lane accumulation order,
which we must keep, defeats the vectoriser: a straightforward loop ran at ~0.6 GB/s), so the hot loops are
written with explicit 256-bit vectors that LLVM keeps in registers:

    types      V32I8 (<32 x i8>), V16I16, V8I32, V8F32
    memory     load32 / load16x16 / load8x32 / load8xf32 / store8xf32 / store32 (any C-contiguous array, byte offset,
               unaligned), load_u32, load8_u8_as_i32, load8_i16_as_i32, load8_f16, load16_lo, bcast4, store_rows8/4,
               prefetch_span
    integer    and8, or8, xor8, srl16/sll16 (16-bit lane shifts of byte vectors; callers mask), sub16, add16, add32, sub32,
               mul32, and32, xor32, sra32, sub8, add8, splat*, pair16, q5_bits (Q5 fifth bits), trits8 (TQ1_0's base-3
               digits), hsum32; pdep64 (BMI2, `HAS_BMI2`)
    x86        maddubs (vpmaddubsw: u8 x s8 adjacent pairs -> int16, saturating), dpwssd (acc + vpmaddwd),
               lut16 (vpshufb: a 16-byte table looked up by 4-bit indices), abs8, sign8 (vpabsb, vpsignb),
               dpbusd (acc + 4-byte-group u8 x s8 sums; vpdpbusd with VNNI, an exact emulation without), dpbusd_u7
               (the same for u < 128: vpmaddubsw + vpmaddwd without VNNI), dpbssd_sign (signed x signed),
               entries8 / entries4 (eight 4-byte / four 8-byte table entries), sign_bytes / bit_signs (32 bits -> +-1
               bytes), bytes_to_qwords, halves16, bytes16, shuffle16, iq1m_scales
    float      cvt_f32, fadd, fmul (lane-wise IEEE float32, never fused), ffma (fused), lanef

The integer identities used by the kernels are exact (ranges checked in each format module), so integer sums
equal ggml's; float operations are lane-wise in ggml's order. The x86 instructions need AVX2 (`HAS_AVX2`);
without it the format modules select their scalar kernels. The features are those numba compiles for
(NUMBA_CPU_NAME / NUMBA_CPU_FEATURES honoured); SYNAPSE_NO_SIMD=1 forces the scalar kernels.

The 512-bit blocks (`HAS_AVX512`, the gemm kernels' zmm pieces) are in `_simd512`.
"""

from __future__ import annotations

from llvmlite import ir

from .. import config  # (first: NUMBA_CACHE_DIR before numba)
import numpy as np  # noqa: E402
from numba import types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic, models, register_model  # noqa: E402


_FEATURES = config.CPU_FEATURES
HAS_AVX2 = "avx2" in _FEATURES and not config.NO_SIMD
# AVX-VNNI or AVX512-VNNI(+VL): vpdpwssd / vpdpbusd on ymm registers
HAS_VNNI = HAS_AVX2 and ("avxvnni" in _FEATURES or {"avx512vnni", "avx512vl"} <= _FEATURES)
# pdep (ggml's AVX2 IQ1 kernels gather their grid indices with it when __BMI2__ is defined)
HAS_BMI2 = "bmi2" in _FEATURES and not config.NO_SIMD


class Vec(types.Type):
    """An LLVM vector value <n x i{bits}> or <n x float>."""

    def __init__(self, kind: str, bits: int, n: int):
        self.kind, self.bits, self.n = kind, bits, n
        super().__init__(name=f"vec{n}x{kind}{bits}")

    def llvm_type(self):
        elem = ir.FloatType() if self.kind == "f" else ir.IntType(self.bits)
        return ir.VectorType(elem, self.n)


V32I8 = Vec("i", 8, 32)
V16I16 = Vec("i", 16, 16)
V8I32 = Vec("i", 32, 8)
V8F32 = Vec("f", 32, 8)


@register_model(Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, fe_type.llvm_type())


_i8, _i16, _i32, _i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)


def _byte_ptr(context, builder, aryty, ary, offset, offty):
    a = context.make_array(aryty)(context, builder, ary)
    base = builder.bitcast(a.data, _i8.as_pointer())
    off = context.cast(builder, offset, offty, types.int64)
    return builder.gep(base, [off])


def _call(builder, name, ret, args):
    fnty = ir.FunctionType(ret, [a.type for a in args])
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    return builder.call(fn, args)


def _splat(builder, value, vt: ir.VectorType):
    v = builder.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(_i32, 0))
    return builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(_i32, vt.count), [0] * vt.count))


def _is_array(a):
    return isinstance(a, types.Array) and a.layout == "C"


def _wide(builder):
    """Let LLVM keep this function's 512-bit vectors in zmm registers."""
    # llvmlite's FunctionAttributes only accepts enum attributes: add the string attribute to the set itself
    set.add(builder.function.attributes, '"min-legal-vector-width"="512"')


# ------------------------------------------------------------------------------------------------ loads

def _make_load(vt: Vec):
    @intrinsic
    def load(typingctx, arr, offset):
        """vector at byte offset `offset` of a C-contiguous array (unaligned)."""
        if not (_is_array(arr) and isinstance(offset, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            if vt.bits * vt.n == 512:
                _wide(builder)  # (defined with the 512-bit section below)
            p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            return builder.load(builder.bitcast(p, vt.llvm_type().as_pointer()), align=1)

        return vt(arr, offset), codegen

    return load


def _make_store(vt: Vec):
    @intrinsic
    def store(typingctx, arr, offset, v):
        """store a vector at byte offset `offset` of a C-contiguous array (unaligned)."""
        if not (_is_array(arr) and isinstance(offset, types.Integer) and v == vt):
            return None

        def codegen(context, builder, sig, args):
            if vt.bits * vt.n == 512:
                _wide(builder)
            p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            builder.store(args[2], builder.bitcast(p, vt.llvm_type().as_pointer()), align=1)
            return context.get_dummy_value()

        return types.none(arr, offset, v), codegen

    return store


load32 = _make_load(V32I8)      # 32 bytes
load16x16 = _make_load(V16I16)  # 16 int16 (32 bytes)
load8x32 = _make_load(V8I32)    # 8 int32 (32 bytes)
load8xf32 = _make_load(V8F32)   # 8 float32 (32 bytes)


store8xf32 = _make_store(V8F32)  # 8 float32
store8x32 = _make_store(V8I32)  # 8 int32
store16x16 = _make_store(V16I16)  # 16 int16
store32 = _make_store(V32I8)  # 32 bytes


@intrinsic
def load_u32(typingctx, arr, offset):
    """The little-endian uint32 at byte offset (one unaligned load, where read_u32's four byte loads stay four)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        return builder.load(builder.bitcast(p, _i32.as_pointer()), align=1)

    return types.uint32(arr, offset), codegen


@intrinsic
def load8_u8_as_i32(typingctx, arr, offset):
    """8 bytes at byte offset -> <8 x i32> zero-extended."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = builder.load(builder.bitcast(p, ir.VectorType(_i8, 8).as_pointer()), align=1)
        return builder.zext(v, V8I32.llvm_type())

    return V8I32(arr, offset), codegen


@intrinsic
def load8_i16_as_i32(typingctx, arr, offset):
    """8 int16 at byte offset -> <8 x i32> sign-extended."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = builder.load(builder.bitcast(p, ir.VectorType(_i16, 8).as_pointer()), align=1)
        return builder.sext(v, V8I32.llvm_type())

    return V8I32(arr, offset), codegen


# ------------------------------------------------------------------------------------------------ constants

def _make_splat(vt: Vec, scalar_ty):
    @intrinsic
    def splat(typingctx, x):
        if not isinstance(x, (types.Integer, types.Float)):
            return None

        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[0], sig.args[0], scalar_ty)
            return _splat(builder, v, vt.llvm_type())

        return vt(x), codegen

    return splat


splat8 = _make_splat(V32I8, types.int8)
splat16 = _make_splat(V16I16, types.int16)
splat32 = _make_splat(V8I32, types.int32)
splatf = _make_splat(V8F32, types.float32)


@intrinsic
def pair16(typingctx, a, b):
    """<16 x i16> = (a, b, a, b, ...): per-lane scales for two interleaved 16-weight sub-blocks."""
    if not (isinstance(a, types.Integer) and isinstance(b, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        lo = builder.zext(context.cast(builder, args[0], sig.args[0], types.int16), _i32)
        hi = builder.zext(context.cast(builder, args[1], sig.args[1], types.int16), _i32)
        v = builder.or_(lo, builder.shl(hi, ir.Constant(_i32, 16)))
        return builder.bitcast(_splat(builder, v, ir.VectorType(_i32, 8)), V16I16.llvm_type())

    return V16I16(a, b), codegen


def _make_zero(vt: Vec):
    @intrinsic
    def zero(typingctx):
        def codegen(context, builder, sig, args):
            return ir.Constant(vt.llvm_type(), None)

        return vt(), codegen

    return zero


zero16 = _make_zero(V16I16)
zero32 = _make_zero(V8I32)
zerof = _make_zero(V8F32)


# ------------------------------------------------------------------------------------------------ integer ops

def _make_binop(vt: Vec, op: str):
    @intrinsic
    def binop(typingctx, a, b):
        if a != vt or b != vt:
            return None

        def codegen(context, builder, sig, args):
            return getattr(builder, op)(args[0], args[1])

        return vt(a, b), codegen

    return binop


and8 = _make_binop(V32I8, "and_")
or8 = _make_binop(V32I8, "or_")
xor8 = _make_binop(V32I8, "xor")
sub16 = _make_binop(V16I16, "sub")
add16 = _make_binop(V16I16, "add")
add32 = _make_binop(V8I32, "add")
sub32 = _make_binop(V8I32, "sub")
mul32 = _make_binop(V8I32, "mul")
and32 = _make_binop(V8I32, "and_")
xor32 = _make_binop(V8I32, "xor")
sub8 = _make_binop(V32I8, "sub")
add8 = _make_binop(V32I8, "add")
fadd = _make_binop(V8F32, "fadd")
fmul = _make_binop(V8F32, "fmul")


@intrinsic
def load16_i8_as_i16(typingctx, arr, offset):
    """16 int8 at byte offset -> <16 x i16> sign-extended (vpmovsxbw)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = builder.load(builder.bitcast(p, ir.VectorType(_i8, 16).as_pointer()), align=1)
        return builder.sext(v, V16I16.llvm_type())

    return V16I16(arr, offset), codegen


@intrinsic(prefer_literal=True)
def scale_halves16(typingctx, sc, c):
    """<16 x i16>: lane 2c of sc in the 8 low lanes, lane 2c + 1 in the 8 high lanes (c a literal): the two
    sub-block scales of 32-byte chunk c from the 16 scales (one vpermw instead of scalar loads)."""
    if sc != V16I16 or not isinstance(c, types.IntegerLiteral):
        return None
    k = c.literal_value

    def codegen(context, builder, sig, args):
        return builder.shuffle_vector(args[0], args[0], ir.Constant(ir.VectorType(_i32, 16), [2 * k] * 8 + [2 * k + 1] * 8))

    return V16I16(sc, c), codegen


@intrinsic
def chunk_pair_scales16(typingctx, sc):
    """<16 x i16>: the 16 sub-block scales as pairs (sc[4p + h], sc[4p + 2 + h]) at lanes 4p + 2h, 4p + 2h + 1:
    one int16 pair per (chunk pair p, lane half h) for vpdpwssd (q6_k._gemm_vnni; a vpshufb)."""
    if sc != V16I16:
        return None

    def codegen(context, builder, sig, args):
        m = [4 * p + h + 2 * k for p in range(4) for h in range(2) for k in range(2)]
        return builder.shuffle_vector(args[0], args[0], ir.Constant(ir.VectorType(_i32, 16), m))

    return V16I16(sc), codegen


@intrinsic
def bcast16b(typingctx, arr, offset):
    """The 16 bytes at byte offset in both 128-bit halves (<32 x i8>, vbroadcasti128): a block's 8 scales and 8
    mins, for byte_splat16."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = builder.load(builder.bitcast(p, ir.VectorType(_i8, 16).as_pointer()), align=1)
        return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, 32), list(range(16)) * 2))

    return V32I8(arr, offset), codegen


@intrinsic
def byte_splat16(typingctx, v, k):
    """<16 x i16>, every lane byte k of v zero-extended (k < 16; v from bcast16b): one vpshufb per sub-block
    scale (its mask a constant where k is) instead of a scalar load, a move to a vector register and a
    broadcast."""
    if v != V32I8 or not isinstance(k, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        k16 = builder.trunc(context.cast(builder, args[1], sig.args[1], types.int64), _i16)
        mask = _splat(builder, builder.or_(k16, ir.Constant(_i16, 0x8000)), V16I16.llvm_type())  # bytes k, zero
        b = _call(builder, "llvm.x86.avx2.pshuf.b", V32I8.llvm_type(), [args[0], builder.bitcast(mask, V32I8.llvm_type())])
        return builder.bitcast(b, V16I16.llvm_type())

    return V16I16(v, k), codegen


@intrinsic
def ffma(typingctx, a, b, c):
    """a*b + c lane-wise with ONE rounding (llvm.fma.v8f32 -> vfmadd): ggml's _mm256_fmadd_ps."""
    if a != V8F32 or b != V8F32 or c != V8F32:
        return None

    def codegen(context, builder, sig, args):
        return _call(builder, "llvm.fma.v8f32", V8F32.llvm_type(), list(args))

    return V8F32(a, b, c), codegen


def _make_shift16(op: str):
    @intrinsic
    def shift(typingctx, a, k):
        """shift the 16-bit lanes of a byte vector (x86 has no byte shifts; callers mask afterwards)."""
        if a != V32I8 or not isinstance(k, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            v = builder.bitcast(args[0], ir.VectorType(_i16, 16))
            kk = _splat(builder, context.cast(builder, args[1], sig.args[1], types.int16), ir.VectorType(_i16, 16))
            return builder.bitcast(getattr(builder, op)(v, kk), V32I8.llvm_type())

        return V32I8(a, k), codegen

    return shift


srl16 = _make_shift16("lshr")
sll16 = _make_shift16("shl")


@intrinsic
def sra32(typingctx, a, k):
    """<8 x i32> shifted right arithmetically by k (vpsrad)."""
    if a != V8I32 or not isinstance(k, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return builder.ashr(args[0], _splat(builder, context.cast(builder, args[1], sig.args[1], types.int32),
                                            ir.VectorType(_i32, 8)))

    return V8I32(a, k), codegen


@intrinsic
def pdep64(typingctx, x, mask):
    """BMI2 pdep: the low bits of x deposited, in order, at the set bits of mask (uint64). Needs HAS_BMI2."""
    if not (isinstance(x, types.Integer) and isinstance(mask, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        a = [context.cast(builder, v, t, types.uint64) for v, t in zip(args, sig.args)]
        return _call(builder, "llvm.x86.bmi.pdep.64", _i64, a)

    return types.uint64(x, mask), codegen


@intrinsic
def sll16i(typingctx, a, k):
    """<16 x i16> shifted left by k (int16 lanes, two's complement: x * 2^k)."""
    if a != V16I16 or not isinstance(k, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        kk = _splat(builder, context.cast(builder, args[1], sig.args[1], types.int16), ir.VectorType(_i16, 16))
        return builder.shl(args[0], kk)

    return V16I16(a, k), codegen


@intrinsic
def maddubs(typingctx, u, s):
    """vpmaddubsw: unsigned bytes u x signed bytes s, adjacent pairs summed (saturating) into int16."""
    if u != V32I8 or s != V32I8:
        return None

    def codegen(context, builder, sig, args):
        return _call(builder, "llvm.x86.avx2.pmadd.ub.sw", V16I16.llvm_type(), args)

    return V16I16(u, s), codegen


@intrinsic
def dpwssd(typingctx, acc, a, b):
    """acc + vpmaddwd(a, b) in int32 (exact). With VNNI this is the vpdpwssd intrinsic, though LLVM may still
    emit vpmaddwd + vpaddd for this CPU model (it did for the 'rocketlake' that llvmlite reports here)."""
    if acc != V8I32 or a != V16I16 or b != V16I16:
        return None

    def codegen(context, builder, sig, args):
        t = V8I32.llvm_type()
        if HAS_VNNI:
            return _call(builder, "llvm.x86.avx512.vpdpwssd.256", t,
                         [args[0], builder.bitcast(args[1], t), builder.bitcast(args[2], t)])
        m = _call(builder, "llvm.x86.avx2.pmadd.wd", t, [args[1], args[2]])
        return builder.add(args[0], m)

    return V8I32(acc, a, b), codegen


def _dpbusd_ir(builder, args, vnni: bool):
    t = V8I32.llvm_type()
    if vnni:
        return _call(builder, "llvm.x86.avx512.vpdpbusd.256", t,
                     [args[0], builder.bitcast(args[1], t), builder.bitcast(args[2], t)])
    w16 = ir.VectorType(_i16, 16)
    undef = ir.Constant(V32I8.llvm_type(), ir.Undefined)
    halves = []
    for h in range(2):
        idx = ir.Constant(ir.VectorType(_i32, 16), list(range(16 * h, 16 * h + 16)))
        uu = builder.zext(builder.shuffle_vector(args[1], undef, idx), w16)
        ss = builder.sext(builder.shuffle_vector(args[2], undef, idx), w16)
        halves.append(_call(builder, "llvm.x86.avx2.pmadd.wd", t, [uu, ss]))
    ev = builder.shuffle_vector(halves[0], halves[1], ir.Constant(ir.VectorType(_i32, 8), [0, 2, 4, 6, 8, 10, 12, 14]))
    od = builder.shuffle_vector(halves[0], halves[1], ir.Constant(ir.VectorType(_i32, 8), [1, 3, 5, 7, 9, 11, 13, 15]))
    return builder.add(args[0], builder.add(ev, od))


def _make_dpbusd(vnni_flag):
    @intrinsic
    def dpbusd(typingctx, acc, u, s):
        """acc + (sum of the 4 products u8*s8 of each 4-byte group) in int32: vpdpbusd with VNNI. Without VNNI
        the same exact value from zero/sign-extended int16 vpmaddwd pairs plus a pairwise add (not
        vpmaddubsw, whose int16 saturation could differ)."""
        if acc != V8I32 or u != V32I8 or s != V32I8:
            return None

        def codegen(context, builder, sig, args):
            return _dpbusd_ir(builder, args, HAS_VNNI if vnni_flag is None else vnni_flag)

        return V8I32(acc, u, s), codegen

    return dpbusd


dpbusd = _make_dpbusd(None)
dpbusd_emulated = _make_dpbusd(False)  # the non-VNNI code path, for tests on VNNI machines


@intrinsic
def dpbssd_sign(typingctx, acc, q, a):
    """acc + (sum of the 4 products q8 x a8 of each 4-byte group), both signed, by ggml's AVX2 sign trick:
    vpmaddubsw(|q|, sign(a, q)) + vpmaddwd by ones. Exact when a != -128 (ggml's Q8 activations are rounded
    into [-127, 127]): then |pair sum| <= 2*128*127 < 2^15."""
    if acc != V8I32 or q != V32I8 or a != V32I8:
        return None

    def codegen(context, builder, sig, args):
        t = V8I32.llvm_type()
        w16 = ir.VectorType(_i16, 16)
        zero = ir.Constant(V32I8.llvm_type(), None)
        qabs = builder.select(builder.icmp_signed("<", args[1], zero), builder.sub(zero, args[1]), args[1])
        sa = _call(builder, "llvm.x86.avx2.psign.b", V32I8.llvm_type(), [args[2], args[1]])
        p = _call(builder, "llvm.x86.avx2.pmadd.ub.sw", w16, [qabs, sa])
        return builder.add(args[0], _call(builder, "llvm.x86.avx2.pmadd.wd", t, [p, ir.Constant(w16, [1] * 16)]))

    return V8I32(acc, q, a), codegen


@intrinsic
def abs8(typingctx, q):
    """|q| of signed bytes (vpabsb; q > -128)."""
    if q != V32I8:
        return None

    def codegen(context, builder, sig, args):
        zero = ir.Constant(V32I8.llvm_type(), None)
        return builder.select(builder.icmp_signed("<", args[0], zero), builder.sub(zero, args[0]), args[0])

    return V32I8(q), codegen


@intrinsic
def sign8(typingctx, a, q):
    """vpsignb: a negated where q < 0, zeroed where q == 0 (ggml's AVX2 sign trick: |q| * sign(a, q) = q * a)."""
    if a != V32I8 or q != V32I8:
        return None

    def codegen(context, builder, sig, args):
        return _call(builder, "llvm.x86.avx2.psign.b", V32I8.llvm_type(), args)

    return V32I8(a, q), codegen


@intrinsic
def lut16(typingctx, table, idx):
    """vpshufb: byte i = table[idx[i]] (idx < 16) from the 16 table bytes in each 128-bit half (bcast16b): a
    4-bit index to a byte of a 16-entry table, as ggml's IQ4_NL kernels decode kvalues_iq4nl."""
    if table != V32I8 or idx != V32I8:
        return None

    def codegen(context, builder, sig, args):
        return _call(builder, "llvm.x86.avx2.pshuf.b", V32I8.llvm_type(), args)

    return V32I8(table, idx), codegen


def _entries_ir(context, builder, sig, args, width: int):
    """<32 x i8> of the `width`-byte entries at width * index of the uint8 table args[0], indices args[1:]."""
    eltype = ir.IntType(8 * width)
    v = ir.Constant(ir.VectorType(eltype, len(args) - 1), ir.Undefined)
    for k in range(len(args) - 1):
        off = builder.mul(context.cast(builder, args[1 + k], sig.args[1 + k], types.int64), ir.Constant(_i64, width))
        p = _byte_ptr(context, builder, sig.args[0], args[0], off, types.int64)
        v = builder.insert_element(v, builder.load(builder.bitcast(p, eltype.as_pointer()), align=1),
                                   ir.Constant(_i32, k))
    return builder.bitcast(v, V32I8.llvm_type())


def _table_and_ints(table, idx):
    return _is_array(table) and table.dtype == types.uint8 and all(isinstance(i, types.Integer) for i in idx)


@intrinsic
def entries4(typingctx, table, i0, i1, i2, i3):
    """<32 x i8> = the 8 bytes at 8 * i0, 8 * i1, 8 * i2, 8 * i3 of a C-contiguous uint8 table (ggml's
    _mm256_set_epi64x of four IQ2 grid entries: 32 weights; scalar loads and inserts)."""
    if not _table_and_ints(table, (i0, i1, i2, i3)):
        return None
    return V32I8(table, i0, i1, i2, i3), lambda c, b, sig, args: _entries_ir(c, b, sig, args, 8)


@intrinsic
def entries8(typingctx, table, i0, i1, i2, i3, i4, i5, i6, i7):
    """<32 x i8> = the 4 bytes at 4 * i0 .. 4 * i7 of a C-contiguous uint8 table (ggml's _mm256_set_epi32 of
    eight IQ3 grid entries; ggml found vpgatherdd slower on Zen 4, and it was no faster here on Zen 3)."""
    if not _table_and_ints(table, (i0, i1, i2, i3, i4, i5, i6, i7)):
        return None
    return V32I8(table, i0, i1, i2, i3, i4, i5, i6, i7), lambda c, b, sig, args: _entries_ir(c, b, sig, args, 4)


@intrinsic
def shuffle16(typingctx, v, idx):
    """vpshufb of a <16 x i16>'s bytes by the byte indices idx (within each 128-bit half), as <16 x i16>: with idx
    bytes 2k, 2k + 1 repeated, every lane of a half becomes that half's word k."""
    if v != V16I16 or idx != V32I8:
        return None

    def codegen(context, builder, sig, args):
        b = _call(builder, "llvm.x86.avx2.pshuf.b", V32I8.llvm_type(), [builder.bitcast(args[0], V32I8.llvm_type()),
                                                                        args[1]])
        return builder.bitcast(b, V16I16.llvm_type())

    return V16I16(v, idx), codegen


# shuffle16's indices making every lane of a half its word k, k = 0..7 (WORD_SPLAT[32k:32k+32]: a table, no mask
# computed per sub-block)
WORD_SPLAT = np.array([[2 * k, 2 * k + 1] * 16 for k in range(8)], np.uint8).reshape(-1)


@intrinsic
def nibble_scales(typingctx, arr, offset, paired):
    """The 16 scales 2 ls + 1 of an IQ2_S (paired False) or IQ3_S (paired True, a literal) super-block from its
    4-bit ls at `offset`, word ib of each half for sub-block ib (shuffle16 with WORD_SPLAT[32ib:]), as ggml's AVX2
    kernels build them once per super-block. IQ2_S: 8 bytes, the low nibbles the low halves' (weights 0..15), the
    high nibbles the high halves'. IQ3_S: 4 bytes, sub-block ib's in byte ib // 2, nibble ib % 2, for both halves."""
    if not (_is_array(arr) and isinstance(offset, types.Integer) and isinstance(paired, types.BooleanLiteral)):
        return None
    is_paired = paired.literal_value

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        b16 = ir.VectorType(_i8, 16)
        if is_paired:
            w = builder.load(builder.bitcast(p, _i32.as_pointer()), align=1)
            lo = builder.and_(w, ir.Constant(_i32, 0x0F0F0F0F))
            hi = builder.and_(builder.lshr(w, ir.Constant(_i32, 4)), ir.Constant(_i32, 0x0F0F0F0F))
            b4 = ir.VectorType(_i8, 4)
            both = builder.shuffle_vector(builder.bitcast(lo, b4), builder.bitcast(hi, b4),
                                          ir.Constant(ir.VectorType(_i32, 8), [0, 4, 1, 5, 2, 6, 3, 7]))
            v = builder.shuffle_vector(both, both, ir.Constant(ir.VectorType(_i32, 16), list(range(8)) * 2))
        else:
            w = builder.load(builder.bitcast(p, _i64.as_pointer()), align=1)
            q = ir.VectorType(_i64, 2)
            v = builder.insert_element(ir.Constant(q, None), w, ir.Constant(_i32, 0))
            v = builder.insert_element(v, builder.lshr(w, ir.Constant(_i64, 4)), ir.Constant(_i32, 1))
            v = builder.and_(builder.bitcast(v, b16), ir.Constant(b16, [15] * 16))
        v = builder.add(builder.shl(v, ir.Constant(b16, [1] * 16)), ir.Constant(b16, [1] * 16))
        return builder.sext(v, V16I16.llvm_type())

    return V16I16(arr, offset, paired), codegen


@intrinsic
def iq1m_scales(typingctx, arr, offset):
    """IQ1_M's 16 sub-block scales 2 ls + 1 from its four scale words at `offset`, in ggml's AVX2 layout: the u64
    broadcast, shifted by 0, 6, 3, 9 per 64-bit lane (vpsrlvq), each 16-bit field & 7, times 2, plus 1. Word k of
    the low half: sub-block 2k (k < 4) or 2(k - 4) + 1, weights 0..15; the high half the same for weights 16..31:
    sub-block ib's scales are word ib // 2 + 4 (ib % 2) of each half (shuffle16)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        w = builder.load(builder.bitcast(p, _i64.as_pointer()), align=1)
        v = builder.lshr(_splat(builder, w, ir.VectorType(_i64, 4)), ir.Constant(ir.VectorType(_i64, 4), [0, 6, 3, 9]))
        w16 = ir.VectorType(_i16, 16)
        v = builder.and_(builder.bitcast(v, w16), ir.Constant(w16, [7] * 16))
        return builder.add(builder.shl(v, ir.Constant(w16, [1] * 16)), ir.Constant(w16, [1] * 16))

    return V16I16(arr, offset), codegen


@intrinsic
def bytes16(typingctx, v):
    """<16 x i16> seen as its 32 bytes (a bitcast: no instruction)."""
    if v != V16I16:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], V32I8.llvm_type())

    return V32I8(v), codegen


@intrinsic
def halves16(typingctx, lo, hi):
    """<16 x i16>: lo in the 8 low lanes, hi in the 8 high ones (per-16-weight scales of a 32-weight sub-block,
    as ggml's scale shuffles give them to vpmaddwd)."""
    if not (isinstance(lo, types.Integer) and isinstance(hi, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        w16 = ir.VectorType(_i16, 16)
        a = _splat(builder, context.cast(builder, args[0], sig.args[0], types.int16), w16)
        b = _splat(builder, context.cast(builder, args[1], sig.args[1], types.int16), w16)
        return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_i32, 16), list(range(8)) + list(range(24, 32))))

    return V16I16(lo, hi), codegen


def _make_bit_bytes(minus_where_set: bool):
    @intrinsic
    def bit_bytes(typingctx, bits):
        if not isinstance(bits, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            v8 = V32I8.llvm_type()
            b = builder.trunc(context.cast(builder, args[0], sig.args[0], types.int64), _i32)
            v = builder.bitcast(_splat(builder, b, ir.VectorType(_i32, 8)), v8)
            v = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, 32), [k // 8 for k in range(32)]))
            bit = ir.Constant(v8, [1 << (k % 8) for k in range(32)])
            minus = builder.icmp_unsigned("==", builder.and_(v, bit), bit if minus_where_set else ir.Constant(v8, None))
            return builder.or_(builder.sext(minus, v8), ir.Constant(v8, [1] * 32))

        return V32I8(bits), codegen

    return bit_bytes


# <32 x i8> of +-1 from the 32 bits of an integer, byte k from bit k, for sign8: broadcast, vpshufb to byte k / 8,
# vpand with 1 << k % 8, vpcmpeqb, or 1.
# sign_bytes: -1 where the bit is set (ggml's IQ3_S AVX2 sign expansion, vpcmpeqb with the bit);
# bit_signs: +1 where it is set (ggml's Q1_0 kernel, vpcmpeqb with zero: the bits need no inversion, so LLVM
# broadcasts them straight from memory; Q1_0's weights in units of d).
sign_bytes = _make_bit_bytes(True)
bit_signs = _make_bit_bytes(False)


@intrinsic
def bytes_to_qwords(typingctx, bits):
    """<32 x i8>: 8-byte lane e = byte e of the 32-bit `bits` sign-extended (vpmovsxbq): a 0x80 byte gives eight
    -1 bytes, a 0 byte eight 0 (ggml's IQ1_M AVX2 delta signs: _mm256_cvtepi8_epi64 of its pdep'd sign bits)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        b = builder.trunc(context.cast(builder, args[0], sig.args[0], types.int64), _i32)
        v = builder.sext(builder.bitcast(b, ir.VectorType(_i8, 4)), ir.VectorType(_i64, 4))
        return builder.bitcast(v, V32I8.llvm_type())

    return V32I8(bits), codegen


@intrinsic
def trits8(typingctx, v):
    """<32 x i8>: (v * 3) >> 8 of the unsigned bytes v: the top base-3 digit of a byte of TQ1_0's packing, by
    ggml's AVX2 sequence: a = v - 1 (saturating), c = avg(a, avg(a, 0)) (vpavgb rounds up), c >> 6 (equal for
    all 256 bytes: tests/test_iq_grid.py)."""
    if v != V32I8:
        return None

    def codegen(context, builder, sig, args):
        v8 = V32I8.llvm_type()
        a = _call(builder, "llvm.usub.sat.v32i8", v8, [args[0], ir.Constant(v8, [1] * 32)])
        b = _call(builder, "llvm.x86.avx2.pavg.b", v8, [a, ir.Constant(v8, None)])
        c = _call(builder, "llvm.x86.avx2.pavg.b", v8, [a, b])
        w16 = ir.VectorType(_i16, 16)
        c = builder.bitcast(builder.lshr(builder.bitcast(c, w16), ir.Constant(w16, [6] * 16)), v8)
        return builder.and_(c, ir.Constant(v8, [3] * 32))

    return V32I8(v), codegen


@intrinsic
def halves8(typingctx, lo, hi):
    """<32 x i8>: the low 16 bytes of lo, then the low 16 bytes of hi (vinserti128)."""
    if lo != V32I8 or hi != V32I8:
        return None

    def codegen(context, builder, sig, args):
        return builder.shuffle_vector(args[0], args[1], ir.Constant(ir.VectorType(_i32, 32),
                                                                    list(range(16)) + list(range(32, 48))))

    return V32I8(lo, hi), codegen


@intrinsic
def dwords4(typingctx, a, b, c, d):
    """<32 x i8>: 4-byte group i from a, b, c, d for i % 4 = 0, 1, 2, 3 (vpblendd)."""
    if not all(x == V32I8 for x in (a, b, c, d)):
        return None

    def codegen(context, builder, sig, args):
        w = ir.VectorType(_i32, 8)
        a, b, c, d = (builder.bitcast(x, w) for x in args)
        ab = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_i32, 8), [0, 9, 2, 11, 4, 13, 6, 15]))
        cd = builder.shuffle_vector(c, d, ir.Constant(ir.VectorType(_i32, 8), [0, 9, 2, 11, 4, 13, 6, 15]))
        r = builder.shuffle_vector(ab, cd, ir.Constant(ir.VectorType(_i32, 8), [0, 1, 10, 11, 4, 5, 14, 15]))
        return builder.bitcast(r, V32I8.llvm_type())

    return V32I8(a, b, c, d), codegen


@intrinsic
def dpbusd_u7(typingctx, acc, u, s):
    """dpbusd for u < 128 (the 4- and 5-bit quants): without VNNI vpmaddubsw + vpmaddwd by ones, as ggml's
    AVX2 kernels; exact, as |u0*s0 + u1*s1| <= 2*127*128 < 2^15 cannot saturate int16."""
    if acc != V8I32 or u != V32I8 or s != V32I8:
        return None

    def codegen(context, builder, sig, args):
        if HAS_VNNI:
            return _dpbusd_ir(builder, args, True)
        t = V8I32.llvm_type()
        w16 = ir.VectorType(_i16, 16)
        p = _call(builder, "llvm.x86.avx2.pmadd.ub.sw", w16, [args[1], args[2]])
        return builder.add(args[0], _call(builder, "llvm.x86.avx2.pmadd.wd", t, [p, ir.Constant(w16, [1] * 16)]))

    return V8I32(acc, u, s), codegen


@intrinsic
def bcast4(typingctx, arr, offset):
    """The 4 bytes at `offset` repeated 8 times (<32 x i8>): one activation group against 8 interleaved rows."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = builder.load(builder.bitcast(p, _i32.as_pointer()), align=1)
        return builder.bitcast(_splat(builder, v, ir.VectorType(_i32, 8)), V32I8.llvm_type())

    return V32I8(arr, offset), codegen


def _make_store_rows(n_rows: int):
    @intrinsic
    def store_rows(typingctx, arr, offset, stride, v0, v1, v2, v3, v4, v5, v6, v7):
        """Store rows 0..n_rows-1 of the 8x8 transpose of the 4-byte groups of v0..v7 (<32 x i8> each): row r =
        (group r of v0, group r of v1, ..., group r of v7), 32 bytes at byte offset + r * stride. In the 8-row
        interleave (q32) v_j holds elements 4j..4j+3 of rows 0..7, so row r comes out in its natural element
        order; and the other way, rows' raw quants go into the interleave (q32.repack)."""
        if not (_is_array(arr) and isinstance(offset, types.Integer) and isinstance(stride, types.Integer)
                and all(v == V32I8 for v in (v0, v1, v2, v3, v4, v5, v6, v7))):
            return None

        def codegen(context, builder, sig, args):
            w = ir.VectorType(_i32, 8)
            v = [builder.bitcast(a, w) for a in args[3:]]

            def shuf(a, b, mask):
                return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_i32, 8), mask))

            # 32-bit, then 64-bit interleaves within 128-bit halves, then the halves (vpunpck*, vperm2i128)
            lo = [shuf(v[2 * k], v[2 * k + 1], [0, 8, 1, 9, 4, 12, 5, 13]) for k in range(4)]
            hi = [shuf(v[2 * k], v[2 * k + 1], [2, 10, 3, 11, 6, 14, 7, 15]) for k in range(4)]
            q = []  # q[k][m]: rows m | m + 4 of v0..v3 (k = 0) or v4..v7 (k = 1)
            for k in range(2):
                a, b, c, d = lo[2 * k], lo[2 * k + 1], hi[2 * k], hi[2 * k + 1]
                q.append([shuf(a, b, [0, 1, 8, 9, 4, 5, 12, 13]), shuf(a, b, [2, 3, 10, 11, 6, 7, 14, 15]),
                          shuf(c, d, [0, 1, 8, 9, 4, 5, 12, 13]), shuf(c, d, [2, 3, 10, 11, 6, 7, 14, 15])])
            off = context.cast(builder, args[1], sig.args[1], types.int64)
            step = context.cast(builder, args[2], sig.args[2], types.int64)
            for r in range(n_rows):
                row = shuf(q[0][r % 4], q[1][r % 4], [0, 1, 2, 3, 8, 9, 10, 11] if r < 4 else [4, 5, 6, 7, 12, 13, 14, 15])
                o = builder.add(off, builder.mul(step, ir.Constant(_i64, r)))
                p = _byte_ptr(context, builder, sig.args[0], args[0], o, types.int64)
                builder.store(row, builder.bitcast(p, w.as_pointer()), align=1)
            return context.get_dummy_value()

        return types.none(arr, offset, stride, v0, v1, v2, v3, v4, v5, v6, v7), codegen

    return store_rows


store_rows8 = _make_store_rows(8)
store_rows4 = _make_store_rows(4)  # the first 4 rows (groups 0..3 of each v: 16-byte sources)


@intrinsic
def load16_lo(typingctx, arr, offset):
    """16 bytes at byte offset in the low half of a <32 x i8>, zeros above (a 16-byte load, never past them)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = builder.load(builder.bitcast(p, ir.VectorType(_i8, 16).as_pointer()), align=1)
        zero = ir.Constant(ir.VectorType(_i8, 16), None)
        return builder.shuffle_vector(v, zero, ir.Constant(ir.VectorType(_i32, 32), list(range(32))))

    return V32I8(arr, offset), codegen


def _f16x8(builder, p):
    """8 fp16 at pointer p -> <8 x float> (exact)."""
    h = builder.load(builder.bitcast(p, ir.VectorType(ir.HalfType(), 8).as_pointer()), align=1)
    return builder.fpext(h, V8F32.llvm_type())


def _bf16x8(builder, p):
    """8 bf16 at pointer p -> <8 x float> (exact: the bits moved into the high halves)."""
    h = builder.load(builder.bitcast(p, ir.VectorType(_i16, 8).as_pointer()), align=1)
    u = builder.shl(builder.zext(h, V8I32.llvm_type()), ir.Constant(V8I32.llvm_type(), [16] * 8))
    return builder.bitcast(u, V8F32.llvm_type())


@intrinsic
def load8_f16(typingctx, arr, offset):
    """8 fp16 at byte offset -> <8 x float> (exact)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return _f16x8(builder, _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1]))

    return V8F32(arr, offset), codegen


@intrinsic
def load8_scales(typingctx, arr, offset, bf16):
    """8 block scales at byte offset -> <8 x float>: fp16, or bf16 where `bf16` is not None, chosen when the
    function is compiled (a None argument is a type of its own), so that neither kernel branches on it."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None
    as_bf16 = not isinstance(bf16, (types.NoneType, types.Omitted))

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        return _bf16x8(builder, p) if as_bf16 else _f16x8(builder, p)

    return V8F32(arr, offset, bf16), codegen


@intrinsic
def q5_bits(typingctx, h, j):
    """The Q5 fifth bits of AVX lane j for 8 interleaved rows, as 16 or 0 in each byte: in the 8-row layout
    (q32.repack) byte 4r + k of h holds, in bit j, the fifth bit of row r's element 4j + k, so lane j's bits
    are ((h >> j) << 4) & 16 - 16-bit shifts, exact per byte for j < 8 (callers OR the result into the nibbles)."""
    if h != V32I8 or not isinstance(j, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        w16 = ir.VectorType(_i16, 16)
        v = builder.bitcast(args[0], w16)
        jj = _splat(builder, context.cast(builder, args[1], sig.args[1], types.int16), w16)
        v = builder.shl(builder.lshr(v, jj), ir.Constant(w16, [4] * 16))
        return builder.and_(builder.bitcast(v, V32I8.llvm_type()), ir.Constant(V32I8.llvm_type(), [16] * 32))

    return V32I8(h, j), codegen


# ------------------------------------------------------------------------------------------------ conversion

@intrinsic
def cvt_f32(typingctx, a):
    """int32 lanes -> float32 lanes (exact for |v| < 2^24, as C's (float)int)."""
    if a != V8I32:
        return None

    def codegen(context, builder, sig, args):
        return builder.sitofp(args[0], V8F32.llvm_type())

    return V8F32(a), codegen


@intrinsic
def hsum32(typingctx, a):
    """sum of the 8 int32 lanes (integer: order irrelevant)."""
    if a != V8I32:
        return None

    def codegen(context, builder, sig, args):
        return _call(builder, "llvm.vector.reduce.add.v8i32", _i32, args)

    return types.int32(a), codegen


@intrinsic
def hsum32x4(typingctx, a, b, c, d):
    """(float)(sum of a's 8 int32 lanes), the same of b, c, d: four horizontal sums sharing their shuffles
    (integer: the order of the additions is irrelevant) and one conversion (exact below 2^24, as (float)int)."""
    if not (a == b == c == d == V8I32):
        return None

    def codegen(context, builder, sig, args):
        def mask(*ix):
            return ir.Constant(ir.VectorType(_i32, len(ix)), list(ix))

        def pairs(x, y):  # lanes x0+x1, y0+y1, x2+x3, y2+y3, ...
            even = builder.shuffle_vector(x, y, mask(0, 8, 2, 10, 4, 12, 6, 14))
            odd = builder.shuffle_vector(x, y, mask(1, 9, 3, 11, 5, 13, 7, 15))
            return builder.add(even, odd)

        ab, cd = pairs(args[0], args[1]), pairs(args[2], args[3])
        quads = builder.add(builder.shuffle_vector(ab, cd, mask(0, 1, 8, 9, 4, 5, 12, 13)),
                            builder.shuffle_vector(ab, cd, mask(2, 3, 10, 11, 6, 7, 14, 15)))
        lo = builder.shuffle_vector(quads, quads, mask(0, 1, 2, 3))
        hi = builder.shuffle_vector(quads, quads, mask(4, 5, 6, 7))
        s = builder.sitofp(builder.add(lo, hi), ir.VectorType(ir.FloatType(), 4))
        return context.make_tuple(builder, sig.return_type, [builder.extract_element(s, ir.Constant(_i32, i))
                                                             for i in range(4)])

    return types.UniTuple(types.float32, 4)(a, b, c, d), codegen


def _make_lane(vt: Vec, scalar):
    @intrinsic
    def lane(typingctx, v, i):
        if v != vt or not isinstance(i, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            return builder.extract_element(args[0], context.cast(builder, args[1], sig.args[1], types.int32))

        return scalar(v, i), codegen

    return lane


lanef = _make_lane(V8F32, types.float32)


@intrinsic
def prefetch_span(typingctx, arr, start, nbytes):
    """Software-prefetch bytes [start, start+nbytes) of arr, one line per 64 bytes.

    The gemv kernels prefetch (into L2) a row ~4 KB ahead while computing the current one: with ~1 KB rows the
    hardware prefetcher alone left DRAM-bound matrices (e.g. the 151936-row output matrix) at ~45-65 % of the
    read bandwidth; this measured 80-105 %. Prefetches never fault, even past the end of the array."""
    if not (_is_array(arr) and isinstance(start, types.Integer) and isinstance(nbytes, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        # straight-line loop in IR: for (i = 0; i < nbytes; i += 64) prefetch(start + i)
        start_ = context.cast(builder, args[1], sig.args[1], types.int64)
        n = context.cast(builder, args[2], sig.args[2], types.int64)
        fnty = ir.FunctionType(ir.VoidType(), [_i8.as_pointer(), _i32, _i32, _i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        with cgutils.for_range_slice(builder, ir.Constant(_i64, 0), n, ir.Constant(_i64, 64), intp=_i64) as (i, _):
            p = _byte_ptr(context, builder, sig.args[0], args[0], builder.add(start_, i), types.int64)
            # locality 2 = prefetcht1 (into L2): measured better than prefetcht0 for whole-row spans
            builder.call(fn, [p, ir.Constant(_i32, 0), ir.Constant(_i32, 2), ir.Constant(_i32, 1)])
        return context.get_dummy_value()

    return types.none(arr, start, nbytes), codegen
