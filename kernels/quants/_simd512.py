"""512-bit SIMD building blocks (AVX512F+BW, `HAS_AVX512`): V64I8 / V32I16 / V16I32 / V16F32 values and the
zmm pieces of the K-quant and 32-weight gemm kernels (load64, bcast32x2, srl16x2, maddubs_z, dpwssd_z, fold16,
scale expanders, prefetchw, or16_mask for the Q5 fifth bits; as16z, load32x16z, unpack_nibbles64 for the
token-lane Q4_K gemm). The 256-bit blocks and the vector types are in `_simd`."""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import config
from ._simd import (_FEATURES, HAS_AVX2, V16I16, V32I8, V8I32, Vec, _byte_ptr, _call, _i8, _i16, _i32, _i64, _is_array,
                    _make_lane, _make_load, _make_store, _make_zero, _splat, _wide)

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


def _bcast64(context, builder, sig, args, elem):
    """<64 x i8>: the integer of type `elem` at byte offset args[1] of array args[0], repeated to 64 bytes (one
    broadcast load); for intrinsics whose first two arguments are (arr, offset)."""
    _wide(builder)
    p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
    v = builder.load(builder.bitcast(p, elem.as_pointer()), align=1)
    return builder.bitcast(_splat(builder, v, ir.VectorType(elem, 512 // elem.width)), V64I8.llvm_type())


@intrinsic
def bcast4z(typingctx, arr, offset):
    """The 4 bytes at `offset` repeated 16 times (<64 x i8>, vpbroadcastd / an embedded {1to16} broadcast)."""
    if not (_is_array(arr) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return _bcast64(context, builder, sig, args, _i32)

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
store16xf32 = _make_store(V16F32)  # 16 float32 (64 bytes)
store64 = _make_store(V64I8)  # 64 bytes


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


store8x32 = _make_store(V8I32)  # 8 int32


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
def pair_lo16z(typingctx, a, b):
    """<32 x i16>: per 32-bit lane i, the int16 pair (low half of a[i], low half of b[i]) - two vectors of sums
    that fit int16 as one vpdpwssd operand (vpslld + vpblendmw: off the multiply ports on Zen 4, where vpshldd
    measured one cycle more)."""
    if a != V16I32 or b != V16I32:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        w = V32I16.llvm_type()
        hi = builder.bitcast(builder.shl(args[1], ir.Constant(V16I32.llvm_type(), [16] * 16)), w)
        mask = ir.Constant(ir.VectorType(ir.IntType(1), 32), [i % 2 for i in range(32)])
        return builder.select(mask, hi, builder.bitcast(args[0], w))

    return V32I16(a, b), codegen


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


@intrinsic
def store_diff_t16_nt(typingctx, dst, doff, dstride, a, m, aoff, astride):
    """A 16 x 16 float32 tile stored transposed by streaming stores (vmovntps, which bypass the caches): row i of
    the tile is a - m at byte aoff + i * astride (a and m laid out alike), column j goes to the 64-byte aligned
    line at byte doff + j * dstride of dst (base.streams_out). The gemm kernels with tokens in the lanes write
    their (rows, tokens) sums to out (tokens, rows) so, a line per token. Transposed by four perfect shuffles
    (out[2i], out[2i+1] = interleaved low / high halves of rows i and i + 8)."""
    if not (_is_array(dst) and _is_array(a) and _is_array(m) and all(
            isinstance(x, types.Integer) for x in (doff, dstride, aoff, astride))):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        ft = V16F32.llvm_type().as_pointer()
        i64 = ir.IntType(64)

        def ptr(k, off, stride, i):  # byte off + i * stride of the array argument k
            o = builder.add(context.cast(builder, args[off], sig.args[off], types.int64),
                            builder.mul(context.cast(builder, args[stride], sig.args[stride], types.int64),
                                        ir.Constant(i64, i)))
            return builder.bitcast(_byte_ptr(context, builder, sig.args[k], args[k], o, types.int64), ft)

        rows = [builder.fsub(builder.load(ptr(3, 5, 6, i), align=1), builder.load(ptr(4, 5, 6, i), align=1))
                for i in range(16)]
        lo = [j // 2 + (16 if j % 2 else 0) for j in range(16)]
        hi = [8 + j // 2 + (16 if j % 2 else 0) for j in range(16)]
        for _ in range(4):
            rows = [v for i in range(8) for v in (_shuf(builder, rows[i], rows[i + 8], lo),
                                                  _shuf(builder, rows[i], rows[i + 8], hi))]
        for j in range(16):
            st = builder.store(rows[j], ptr(0, 1, 2, j), align=64)
            st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(_i32, 1)]))
        return context.get_dummy_value()

    return types.none(dst, doff, dstride, a, m, aoff, astride), codegen


# pieces of the single-token Q4_K dot on zmm (q4_k_gemm512.row_dot_z)

V4F32 = Vec("f", 32, 4)


def _make_scales8_pair(c):
    @intrinsic
    def scales(typingctx, arr, offset):
        """<32 x i16> [byte 2c x16 | byte 2c+1 x16] of the 8 unsigned bytes at offset (one broadcast load; the
        four pairs of a block share it, each then one in-lane vpshufb)."""
        if not (_is_array(arr) and isinstance(offset, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            v = _bcast64(context, builder, sig, args, _i64)
            # byte i: word i % 16 of half i // 32, low byte = scale byte 2c + i // 32 (every 128-bit lane holds
            # all 8), high byte zero (mask bit 7)
            mask = ir.Constant(V64I8.llvm_type(), [(2 * c + i // 32) if i % 2 == 0 else 0x80 for i in range(64)])
            # inline asm: as a shuffle (or llvm.x86.avx512.pshuf.b.512, which LLVM folds back into one) it
            # becomes vpermt2b with a zero vector, two port-5 uops on Intel; vpshufb is one (side by side on a
            # Xeon: 19-20 -> 17 cycles a block in L2, benchmarks/RESULTS.md)
            t = V64I8.llvm_type()
            s = builder.asm(ir.FunctionType(t, [t, t]), "vpshufb $2, $1, $0", "=v,v,v", [v, mask], False)
            return builder.bitcast(s, V32I16.llvm_type())

        return V32I16(arr, offset), codegen

    return scales


scales8_pair0, scales8_pair1, scales8_pair2, scales8_pair3 = (_make_scales8_pair(c) for c in range(4))


@intrinsic
def d_dmin_y(typingctx, arr, offset, dy):
    """<4 x float> [fp32(d * dy), fp32(dmin * dy), 0, 0] for the fp16 pair (d, dmin) at offset."""
    if not (_is_array(arr) and isinstance(offset, types.Integer) and isinstance(dy, types.Float)):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        h = builder.load(builder.bitcast(p, ir.VectorType(ir.HalfType(), 2).as_pointer()), align=1)
        f = builder.fpext(h, ir.VectorType(ir.FloatType(), 2))
        f4 = builder.shuffle_vector(f, ir.Constant(f.type, None), ir.Constant(ir.VectorType(_i32, 4), [0, 1, 2, 3]))
        y = _splat(builder, context.cast(builder, args[2], sig.args[2], types.float32), V4F32.llvm_type())
        return builder.fmul(f4, y)

    return V4F32(arr, offset, dy), codegen


@intrinsic
def fma_i_m(typingctx, acc, vi, vm, dd):
    """acc + [(float)sum(vi), (float)sum(vm), 0, 0] * dd, each lane one fused multiply-add (as fma_f32): the
    super-block's acc = fma(I, d, acc) and accm = fma(M, dmin, accm) side by side. vi and vm <8 x i32>: lanes of
    the integer sums I and M, reduced together (integers: any order)."""
    if not (acc == V4F32 and vi == V8I32 and vm == V8I32 and dd == V4F32):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)

        def mask(*ix):
            return ir.Constant(ir.VectorType(_i32, len(ix)), list(ix))

        def pairs(a, b, lo, hi):  # lanes a[lo] + a[hi] (b: the second source's lanes follow a's)
            return builder.add(builder.shuffle_vector(a, b, mask(*lo)), builder.shuffle_vector(a, b, mask(*hi)))

        i4 = pairs(args[1], args[1], (0, 1, 2, 3), (4, 5, 6, 7))
        m4 = pairs(args[2], args[2], (0, 1, 2, 3), (4, 5, 6, 7))
        t = pairs(i4, m4, (0, 2, 4, 6), (1, 3, 5, 7))  # [i0+i1, i2+i3, m0+m1, m2+m3]
        u = pairs(t, t, (0, 2, 0, 2), (1, 3, 1, 3))  # [I, M, I, M]
        f = builder.sitofp(u, V4F32.llvm_type())
        return _call(builder, "llvm.fma.v4f32", V4F32.llvm_type(), [f, args[3], args[0]])

    return V4F32(acc, vi, vm, dd), codegen


zero4f = _make_zero(V4F32)


@intrinsic
def lane0_minus_lane1(typingctx, a):
    """a[0] - a[1] (float32)."""
    if a != V4F32:
        return None

    def codegen(context, builder, sig, args):
        return builder.fsub(builder.extract_element(args[0], ir.Constant(_i32, 0)),
                            builder.extract_element(args[0], ir.Constant(_i32, 1)))

    return types.float32(a), codegen
