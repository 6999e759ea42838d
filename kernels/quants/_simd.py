"""SIMD building blocks for the dot kernels: LLVM vector values as numba types, plus a few x86 instructions.

numba does not reliably auto-vectorise the quantized dot products (the K-quants' 8-lane accumulation order,
which we must keep, defeats the vectoriser: a straightforward loop ran at ~0.6 GB/s), so the hot loops are
written with explicit 256-bit vectors that LLVM keeps in registers:

    types      V32I8 (<32 x i8>), V16I16, V8I32, V8F32
    memory     load32 / load16x16 / load8x32 / load8xf32 / store8xf32 (any C-contiguous array, byte offset,
               unaligned), load8_u8_as_i32, load8_i16_as_i32, load8_f16, bcast4, prefetch_span
    integer    and8, or8, srl16/sll16 (16-bit lane shifts of byte vectors; callers mask), sub16, add32, sub32,
               mul32, splat*, pair16, qh_lo/qh_hi (Q5 bit expansion), hsum32
    x86        maddubs (vpmaddubsw: u8 x s8 adjacent pairs -> int16, saturating), dpwssd (acc + vpmaddwd),
               dpbusd (acc + 4-byte-group u8 x s8 sums; vpdpbusd with VNNI, an exact emulation without)
    float      cvt_f32, fadd, fmul (lane-wise IEEE float32, never fused), ffma (fused), lanef

The integer identities used by the kernels are exact (ranges checked in each format module), so integer sums
equal ggml's; float operations are lane-wise in ggml's order. The x86 instructions need AVX2 (`HAS_AVX2`);
without it the format modules select their scalar kernels. The features are those numba compiles for
(NUMBA_CPU_NAME / NUMBA_CPU_FEATURES honoured); SYNAPSE_NO_SIMD=1 forces the scalar kernels.

512-bit section (end of file, `HAS_AVX512`: AVX512F+BW): V64I8 / V32I16 / V16I32 values and the zmm pieces of
the K-quant gemm kernels (load64, bcast32x2, srl16x2, maddubs_z, dpwssd_z, fold16, scale expanders, prefetchw,
or16_mask for the Q5 fifth bits;
as16z, load32x16z, unpack_nibbles64 for the token-lane Q4_K gemm).
"""

from __future__ import annotations

import os

from llvmlite import ir

from .. import config  # (first: NUMBA_CACHE_DIR before numba)
import llvmlite.binding as llvm  # noqa: E402
from numba import types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic, models, register_model  # noqa: E402


def _host_features() -> set[str]:
    spec = os.environ.get("NUMBA_CPU_FEATURES")
    if spec is None:
        if os.environ.get("NUMBA_CPU_NAME", "host") not in ("host", ""):
            return set()  # a portable (generic) build was asked for: no ISA assumptions
        return {k for k, v in llvm.get_host_cpu_features().items() if v}
    return {f[1:] for f in spec.split(",") if f.startswith("+")}


_FEATURES = _host_features()
HAS_AVX2 = "avx2" in _FEATURES and not config.NO_SIMD
# AVX-VNNI or AVX512-VNNI(+VL): vpdpwssd / vpdpbusd on ymm registers
HAS_VNNI = HAS_AVX2 and ("avxvnni" in _FEATURES or {"avx512vnni", "avx512vl"} <= _FEATURES)


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


load32 = _make_load(V32I8)      # 32 bytes
load16x16 = _make_load(V16I16)  # 16 int16 (32 bytes)
load8x32 = _make_load(V8I32)    # 8 int32 (32 bytes)
load8xf32 = _make_load(V8F32)   # 8 float32 (32 bytes)


@intrinsic
def store8xf32(typingctx, arr, offset, v):
    """store 8 float32 at byte offset `offset`."""
    if not (_is_array(arr) and isinstance(offset, types.Integer) and v == V8F32):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        builder.store(args[2], builder.bitcast(p, V8F32.llvm_type().as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(arr, offset, v), codegen


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
sub16 = _make_binop(V16I16, "sub")
add32 = _make_binop(V8I32, "add")
sub32 = _make_binop(V8I32, "sub")
mul32 = _make_binop(V8I32, "mul")
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
def bcast4(typingctx, arr, offset):
    """The 4 bytes at `offset` repeated 8 times (<32 x i8>): one activation group against 8 interleaved rows."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = builder.load(builder.bitcast(p, _i32.as_pointer()), align=1)
        return builder.bitcast(_splat(builder, v, ir.VectorType(_i32, 8)), V32I8.llvm_type())

    return V32I8(arr, offset), codegen


@intrinsic
def load8_f16(typingctx, arr, offset):
    """8 fp16 at byte offset -> <8 x float> (exact)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        h = builder.load(builder.bitcast(p, ir.VectorType(ir.HalfType(), 8).as_pointer()), align=1)
        return builder.fpext(h, V8F32.llvm_type())

    return V8F32(arr, offset), codegen


def _make_qh_expand(shift_base: int):
    @intrinsic
    def expand(typingctx, v, j):
        """Q5 high bits of chunk j for 8 interleaved rows: byte j of each 4-byte lane holds the bits of that
        row's elements (low nibble: 4j..4j+3, high nibble: 16+4j..16+4j+3); returns 16 in byte k of lane r
        when the bit for element k of the chunk (low or high half, per variant) is set, else 0."""
        if v != V32I8 or not isinstance(j, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            v32 = builder.bitcast(args[0], ir.VectorType(_i32, 8))
            sh = builder.mul(context.cast(builder, args[1], sig.args[1], types.int32), ir.Constant(_i32, 8))
            v32 = builder.lshr(v32, _splat(builder, sh, ir.VectorType(_i32, 8)))
            b = builder.bitcast(v32, V32I8.llvm_type())
            rep = builder.shuffle_vector(b, b, ir.Constant(ir.VectorType(_i32, 32), [4 * (k // 4) for k in range(32)]))
            bits = builder.and_(rep, ir.Constant(V32I8.llvm_type(), [1 << (shift_base + k % 4) for k in range(32)]))
            nz = builder.icmp_unsigned("!=", bits, ir.Constant(V32I8.llvm_type(), None))
            return builder.select(nz, ir.Constant(V32I8.llvm_type(), [16] * 32), ir.Constant(V32I8.llvm_type(), None))

        return V32I8(v, j), codegen

    return expand


qh_lo = _make_qh_expand(0)
qh_hi = _make_qh_expand(4)


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




# ------------------------------------------------------------------------------------------------ 512-bit (gemm)
# zmm building blocks for the K-quant gemm kernels (AVX512BW; vpdpwssd with AVX512_VNNI, else vpmaddwd + add).
# LLVM splits vectors wider than the CPU model's preferred width (256 bits on this 'rocketlake'-like model)
# unless the function says otherwise, so every intrinsic below marks its caller "min-legal-vector-width"="512"
# (merged into callers on inlining, as clang does for its 512-bit intrinsics).

# SYNAPSE_NO_AVX512=1 keeps the 256-bit kernels (A/B measurements; tests of the AVX2 paths), compiled into
# their own numba cache (kernels/config.py)
HAS_AVX512 = HAS_AVX2 and {"avx512f", "avx512bw"} <= _FEATURES and not config.NO_AVX512
HAS_VNNI512 = HAS_AVX512 and "avx512vnni" in _FEATURES
if HAS_VNNI512:
    llvm.initialize_native_asmparser()  # dpwssd_z's inline asm (numba only sets up the asm printer)

V64I8 = Vec("i", 8, 64)
V32I16 = Vec("i", 16, 32)
V16I32 = Vec("i", 32, 16)


def _wide(builder):
    """Let LLVM keep this function's 512-bit vectors in zmm registers."""
    # llvmlite's FunctionAttributes only accepts enum attributes: add the string attribute to the set itself
    set.add(builder.function.attributes, '"min-legal-vector-width"="512"')


load64 = _make_load(V64I8)  # 64 bytes


@intrinsic
def bcast32x2(typingctx, arr, offset):
    """The 32 bytes at `offset` in both 256-bit halves of a 64-byte vector (vbroadcasti64x4)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = builder.load(builder.bitcast(p, V32I8.llvm_type().as_pointer()), align=1)
        return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, 64), [i % 32 for i in range(64)]))

    return V64I8(arr, offset), codegen


@intrinsic
def srl16x2(typingctx, v, k0, k1):
    """Logical right shift of the 16-bit lanes of a 64-byte vector: low 256 bits by k0, high by k1 (callers
    mask afterwards; constant shifts after inlining)."""
    if v != V64I8 or not (isinstance(k0, types.Integer) and isinstance(k1, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        w = ir.VectorType(_i16, 32)
        a = builder.bitcast(args[0], w)
        s0 = _splat(builder, context.cast(builder, args[1], sig.args[1], types.int16), w)
        s1 = _splat(builder, context.cast(builder, args[2], sig.args[2], types.int16), w)
        k = builder.shuffle_vector(s0, s1, ir.Constant(ir.VectorType(_i32, 32), [0] * 16 + [32] * 16))
        return builder.bitcast(builder.lshr(a, k), V64I8.llvm_type())

    return V64I8(v, k0, k1), codegen


def _make_wide_binop(vt: Vec, op: str):
    @intrinsic
    def binop(typingctx, a, b):
        if a != vt or b != vt:
            return None

        def codegen(context, builder, sig, args):
            _wide(builder)
            return getattr(builder, op)(args[0], args[1])

        return vt(a, b), codegen

    return binop


and64 = _make_wide_binop(V64I8, "and_")
add32z = _make_wide_binop(V16I32, "add")


@intrinsic
def splat8z(typingctx, x):
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return _splat(builder, context.cast(builder, args[0], sig.args[0], types.int8), V64I8.llvm_type())

    return V64I8(x), codegen


@intrinsic
def zero16x32(typingctx):
    def codegen(context, builder, sig, args):
        return ir.Constant(V16I32.llvm_type(), None)

    return V16I32(), codegen


@intrinsic
def maddubs_z(typingctx, u, s):
    """vpmaddubsw zmm: unsigned bytes u x signed bytes s, adjacent pairs summed (saturating) into int16."""
    if u != V64I8 or s != V64I8:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return _call(builder, "llvm.x86.avx512.pmaddubs.w.512", V32I16.llvm_type(), args)

    return V32I16(u, s), codegen


@intrinsic
def dpwssd_z(typingctx, acc, a, b):
    """acc + vpmaddwd(a, b) on zmm, int32 (exact): vpdpwssd with AVX512_VNNI, else vpmaddwd + vpaddd."""
    if acc != V16I32 or a != V32I16 or b != V32I16:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        t = V16I32.llvm_type()
        if HAS_VNNI512:
            # inline asm: LLVM's machine combiner otherwise splits chained vpdpwssd into vpmaddwd + vpaddd
            # (a latency tuning for this CPU model), one more port-0/5 uop per instruction in the gemm loops
            return builder.asm(ir.FunctionType(t, [t, t, t]), "vpdpwssd $3, $2, $0", "=v,0,v,v",
                               [args[0], builder.bitcast(args[1], t), builder.bitcast(args[2], t)], False)
        m = _call(builder, "llvm.x86.avx512.pmaddw.d.512", t, [args[1], args[2]])
        return builder.add(args[0], m)

    return V16I32(acc, a, b), codegen


@intrinsic
def fold16(typingctx, a):
    """<8 x i32> = low 256 bits + high 256 bits of a <16 x i32>."""
    if a != V16I32:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        und = ir.Constant(V16I32.llvm_type(), ir.Undefined)
        lo = builder.shuffle_vector(args[0], und, ir.Constant(ir.VectorType(_i32, 8), list(range(8))))
        hi = builder.shuffle_vector(args[0], und, ir.Constant(ir.VectorType(_i32, 8), list(range(8, 16))))
        return builder.add(lo, hi)

    return V8I32(a), codegen




def _make_expand_z(nbytes, signed, mask):
    @intrinsic
    def expand(typingctx, arr, offset):
        if not (_is_array(arr) and isinstance(offset, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            _wide(builder)
            p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            v = builder.load(builder.bitcast(p, ir.VectorType(_i8, nbytes).as_pointer()), align=1)
            v = (builder.sext if signed else builder.zext)(v, ir.VectorType(_i16, nbytes))
            return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, 32), mask))

        return V32I16(arr, offset), codegen

    return expand


# the 2 unsigned bytes at offset, each over 16 int16 lanes: Q4_K/Q5_K sub-block scales [sc(2c) x16 | sc(2c+1) x16]
scales2x16 = _make_expand_z(2, False, [0] * 16 + [1] * 16)
# the 4 signed bytes at offset as (b0, b1) x8 then (b2, b3) x8: Q6_K scale pairs of two 32-element groups


@intrinsic
def bcast_pair16(typingctx, arr, offset):
    """<16 x i16> = (b0, b1) x8 for the 2 unsigned bytes at offset (pair16 from memory, no scalar code)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = builder.zext(builder.load(builder.bitcast(p, ir.VectorType(_i8, 2).as_pointer()), align=1),
                         ir.VectorType(_i16, 2))
        return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, 16), [0, 1] * 8))

    return V16I16(arr, offset), codegen


@intrinsic
def prefetchw(typingctx, arr, offset):
    """Prefetch the cache line holding byte `offset` of arr with intent to write (the gemm kernels' output rows:
    their read-for-ownership misses then overlap the tile's compute instead of stalling its final stores)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        fnty = ir.FunctionType(ir.VoidType(), [_i8.as_pointer(), _i32, _i32, _i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [p, ir.Constant(_i32, 1), ir.Constant(_i32, 3), ir.Constant(_i32, 1)])
        return context.get_dummy_value()

    return types.none(arr, offset), codegen


def _make_perm32_store(flip: bool):
    @intrinsic
    def perm_store(typingctx, dst, doff, src, soff):
        """dst[doff + p] = src[soff + PERM[p]] (^ 0x80 if flipping) for the 32 bytes of one K-quant group, PERM
        = kquants' lane-order permutation, as one vector shuffle (vpermb / vpshufb) instead of 32 scalar moves."""
        if not (_is_array(dst) and _is_array(src) and isinstance(doff, types.Integer)
                and isinstance(soff, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            perm = [16 * s + 8 * k + l for l in range(8) for s in range(2) for k in range(2)]
            ps = _byte_ptr(context, builder, sig.args[2], args[2], args[3], sig.args[3])
            v = builder.load(builder.bitcast(ps, V32I8.llvm_type().as_pointer()), align=1)
            v = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, 32), perm))
            if flip:
                v = builder.xor(v, ir.Constant(V32I8.llvm_type(), [0x80] * 32))
            pd = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            builder.store(v, builder.bitcast(pd, V32I8.llvm_type().as_pointer()), align=1)
            return context.get_dummy_value()

        return types.none(dst, doff, src, soff), codegen

    return perm_store


perm32_store = _make_perm32_store(False)       # Q8_K quants in kquants.PERM order


# 512-bit pieces of the x86-order gemv/gemm of the 32-weight formats (q32.rows16_x86_z): one zmm holds one AVX
# lane of 16 interleaved rows; the wide intrinsics that need no memory operand above work on them too.
V16F32 = Vec("f", 32, 16)


@intrinsic
def bcast4z(typingctx, arr, offset):
    """The 4 bytes at `offset` repeated 16 times (<64 x i8>, vpbroadcastd / an embedded {1to16} broadcast)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = builder.load(builder.bitcast(p, _i32.as_pointer()), align=1)
        return builder.bitcast(_splat(builder, v, ir.VectorType(_i32, 16)), V64I8.llvm_type())

    return V64I8(arr, offset), codegen


@intrinsic
def splat32z(typingctx, x):
    """<16 x i32> = x."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return _splat(builder, context.cast(builder, args[0], sig.args[0], types.int32), V16I32.llvm_type())

    return V16I32(x), codegen


@intrinsic
def splatfz(typingctx, x):
    """<16 x float> = x."""
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return _splat(builder, context.cast(builder, args[0], sig.args[0], types.float32), V16F32.llvm_type())

    return V16F32(x), codegen


@intrinsic
def load16_f16(typingctx, arr, offset):
    """16 fp16 at byte offset -> <16 x float> (exact, vcvtph2ps zmm)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        h = builder.load(builder.bitcast(p, ir.VectorType(ir.HalfType(), 16).as_pointer()), align=1)
        return builder.fpext(h, V16F32.llvm_type())

    return V16F32(arr, offset), codegen


@intrinsic
def dpbusd_z(typingctx, acc, u, s):
    """acc + 4-byte-group u8 x s8 sums, zmm (vpdpbusd; callers check HAS_VNNI512)."""
    if acc != V16I32 or u != V64I8 or s != V64I8:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        t = V16I32.llvm_type()
        return _call(builder, "llvm.x86.avx512.vpdpbusd.512", t,
                     [args[0], builder.bitcast(args[1], t), builder.bitcast(args[2], t)])

    return V16I32(acc, u, s), codegen


@intrinsic
def cvt_f32z(typingctx, a):
    """<16 x i32> -> <16 x float> (exact below 2^24)."""
    if a != V16I32:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return builder.sitofp(args[0], V16F32.llvm_type())

    return V16F32(a), codegen


@intrinsic
def ffma_z(typingctx, a, b, c):
    """a*b + c on 16 float lanes, one rounding (vfmadd zmm)."""
    if a != V16F32 or b != V16F32 or c != V16F32:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return _call(builder, "llvm.fma.v16f32", V16F32.llvm_type(), list(args))

    return V16F32(a, b, c), codegen


fadd_z = _make_wide_binop(V16F32, "fadd")
fmul_z = _make_wide_binop(V16F32, "fmul")
zero16f = _make_zero(V16F32)
lanef_z = _make_lane(V16F32, types.float32)


@intrinsic
def or16_mask(typingctx, q, arr, offset):
    """q | 16 in the bytes whose bit is set in the 64-bit mask at byte `offset` of arr (bit i <-> byte i):
    the Q5 fifth bits of one AVX lane of 16 rows, stored as a mask at repack time (kmovq + a masked vpord)."""
    if not (q == V64I8 and _is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        p = _byte_ptr(context, builder, sig.args[1], args[1], args[2], sig.args[2])
        m = builder.bitcast(builder.load(builder.bitcast(p, _i64.as_pointer()), align=1),
                            ir.VectorType(ir.IntType(1), 64))
        return builder.select(m, builder.or_(args[0], ir.Constant(V64I8.llvm_type(), [16] * 64)), args[0])

    return V64I8(q, arr, offset), codegen


# zmm pieces of the x86-order Q6_K gemm (q6_k._gemm_z): two rows per zmm, row n in the low half.

@intrinsic
def cat8x2(typingctx, lo, hi):
    """<64 x i8> = lo (low 256 bits), hi (high 256 bits)."""
    if lo != V32I8 or hi != V32I8:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return builder.shuffle_vector(args[0], args[1], ir.Constant(ir.VectorType(_i32, 64), list(range(64))))

    return V64I8(lo, hi), codegen


@intrinsic
def cat16x2(typingctx, lo, hi):
    """<32 x i16> = lo (low 256 bits), hi (high 256 bits)."""
    if lo != V16I16 or hi != V16I16:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        return builder.shuffle_vector(args[0], args[1], ir.Constant(ir.VectorType(_i32, 32), list(range(32))))

    return V32I16(lo, hi), codegen


@intrinsic
def bcast16x16x2(typingctx, arr, offset):
    """<32 x i16>: the 16 int16 at byte offset `offset` in both halves (vbroadcasti64x4)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = builder.load(builder.bitcast(p, V16I16.llvm_type().as_pointer()), align=1)
        return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, 32), [i % 16 for i in range(32)]))

    return V32I16(arr, offset), codegen


@intrinsic
def splat2f(typingctx, a, b):
    """<16 x float>: a in the 8 low lanes, b in the 8 high lanes."""
    if not (isinstance(a, types.Float) and isinstance(b, types.Float)):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        v8 = ir.VectorType(ir.FloatType(), 8)
        lo = _splat(builder, context.cast(builder, args[0], sig.args[0], types.float32), v8)
        hi = _splat(builder, context.cast(builder, args[1], sig.args[1], types.float32), v8)
        return builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_i32, 16), list(range(16))))

    return V16F32(a, b), codegen


load16xf32 = _make_load(V16F32)  # 16 float32 (64 bytes)


@intrinsic
def store16xf32(typingctx, arr, offset, v):
    """Store 16 float32 at byte offset (unaligned)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer) and v == V16F32):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        builder.store(args[2], builder.bitcast(p, V16F32.llvm_type().as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(arr, offset, v), codegen


def _shuf(builder, a, b, mask):
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_i32, len(mask)), mask))


@intrinsic
def hsum8x2_rows(typingctx, x0, x1, x2, x3, x4, x5, x6, x7):
    """<16 x float>, lane r = hsum_float_8 of row r: x_p holds rows 2p (lanes 0-7) and 2p+1 (lanes 8-15), 8
    float lanes each. Per row the adds of ggml's hsum_float_8, same operands in the same order -
    ((l4 + l0) + (l6 + l2)) + ((l5 + l1) + (l7 + l3)) - done for 16 rows by 7 vector adds and shuffles
    (a transposition), so a gemm tile writes 16 outputs with one store instead of 16 scalar reductions."""
    if not all(x == V16F32 for x in (x0, x1, x2, x3, x4, x5, x6, x7)):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        lo = [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27]   # lanes 0-3 of each row (4 rows)
        hi = [i + 4 for i in lo]                                            # lanes 4-7
        # u = [l4 + l0, l5 + l1, l6 + l2, l7 + l3] per row; U_k rows: (x_2k a, x_2k b, x_2k+1 a, x_2k+1 b)
        U = [builder.fadd(_shuf(builder, args[2 * k], args[2 * k + 1], hi),
                          _shuf(builder, args[2 * k], args[2 * k + 1], lo)) for k in range(4)]
        m0 = [4 * c + j + (16 - 2 if j >= 2 else 0) for c in range(4) for j in range(4)]   # u0, u1 of a, b
        m2 = [i + 2 for i in m0]                                                            # u2, u3
        # per 4 lanes [a: u0 + u2, u1 + u3, b: u0 + u2, u1 + u3]
        V = [builder.fadd(_shuf(builder, U[2 * k], U[2 * k + 1], m0),
                          _shuf(builder, U[2 * k], U[2 * k + 1], m2)) for k in range(2)]
        e = [4 * c + (0, 2, 16, 18)[j] for c in range(4) for j in range(4)]               # (u0 + u2) terms
        o = [i + 1 for i in e]                                                              # (u1 + u3) terms
        S = builder.fadd(_shuf(builder, V[0], V[1], e), _shuf(builder, V[0], V[1], o))
        # S lane 4c + i = row c + 4i
        return _shuf(builder, S, S, [4 * (r % 4) + r // 4 for r in range(16)])

    return V16F32(x0, x1, x2, x3, x4, x5, x6, x7), codegen


@intrinsic
def store8x32(typingctx, arr, offset, v):
    """store 8 int32 at byte offset `offset`."""
    if not (_is_array(arr) and isinstance(offset, types.Integer) and v == V8I32):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        builder.store(args[2], builder.bitcast(p, V8I32.llvm_type().as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(arr, offset, v), codegen


@intrinsic
def sums8x8(typingctx, arr, offset):
    """<8 x i32>: lane k = the sum of the 8 int32 at byte offset + 32k (eight vectors reduced at once by a
    shuffle-and-add tree; integer sums, so the order is free)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        t = V8I32.llvm_type()
        base = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = [builder.load(builder.bitcast(builder.gep(base, [ir.Constant(_i64, 32 * k)]), t.as_pointer()), align=1)
             for k in range(8)]

        def pair(a, b, lo, hi):
            return builder.add(builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_i32, 8), lo)),
                               builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_i32, 8), hi)))

        # level 1: lanes (a0+a1, b0+b1, a2+a3, b2+b3, ...); level 2: 4 partial sums of 4 vectors; level 3: totals
        p = [pair(v[2 * i], v[2 * i + 1], [0, 8, 2, 10, 4, 12, 6, 14], [1, 9, 3, 11, 5, 13, 7, 15]) for i in range(4)]
        q = [pair(p[2 * i], p[2 * i + 1], [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]) for i in range(2)]
        return pair(q[0], q[1], [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15])

    return V8I32(arr, offset), codegen


# pieces of the token-lane Q4_K gemm (q4_k._gemm_vnni): 16 tokens per zmm, weights broadcast 4 bytes at a time

@intrinsic
def as16z(typingctx, v):
    """<16 x i32> reinterpreted as <32 x i16> (no instruction)."""
    if v != V16I32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], V32I16.llvm_type())

    return V32I16(v), codegen


load32x16z = _make_load(V32I16)  # 32 int16 (64 bytes)


@intrinsic
def unpack_nibbles64(typingctx, dst, doff, src, soff):
    """dst[doff + i] = src[soff + i] & 15 and dst[doff + 32 + i] = src[soff + i] >> 4 for i < 32: a 32-byte
    chunk of packed 4-bit quants as 64 bytes (low nibbles, then high)."""
    if not (_is_array(dst) and _is_array(src) and isinstance(doff, types.Integer)
            and isinstance(soff, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        t = V32I8.llvm_type()
        ps = _byte_ptr(context, builder, sig.args[2], args[2], args[3], sig.args[3])
        v = builder.load(builder.bitcast(ps, t.as_pointer()), align=1)
        lo = builder.and_(v, ir.Constant(t, [15] * 32))
        hi = builder.lshr(v, ir.Constant(t, [4] * 32))
        pd = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        builder.store(lo, builder.bitcast(pd, t.as_pointer()), align=1)
        builder.store(hi, builder.bitcast(builder.gep(pd, [ir.Constant(_i64, 32)]), t.as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(dst, doff, src, soff), codegen
