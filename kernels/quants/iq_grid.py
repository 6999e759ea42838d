"""The grid i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S: 256-weight super-blocks of eight 32-weight
sub-blocks, whose weights are grid entries (kernels/quants/iq_tables.py: 8 magnitudes an entry for IQ2, 4 for IQ3)
with one sign bit each and a 4-bit scale ls per sub-block (IQ2_XS, IQ2_S: per 16 weights).

Super-block layouts (d fp16 at [0:2); sub-block ib; "signs7" = 4 x 7 sign bits, each 7 signs of 8 weights
completed by ksigns_iq2xs to an even count):
    IQ2_XXS (66 bytes)   [2+8ib, +4) 4 grid indices (entries of 8 weights); u32 at 2+8ib+4: signs7, ls in bits 28..31
    IQ2_XS  (74 bytes)   u16 at 2+8ib+2l: bits 0..8 = index of entry l, bits 9..15 = its 7 signs;
                         [66+ib] = ls of weights 0..15 (low nibble) and 16..31 (high nibble)
    IQ2_S   (82 bytes)   [2+4ib, +4) low 8 index bits; [34+4ib, +4) the 32 sign bits; [66+ib] bits 2l..2l+1 = index
                         bits 8..9 of entry l; [74+ib] = ls of weights 0..15 / 16..31 (low / high nibble)
    IQ3_XXS (98 bytes)   [2+8ib, +8) 8 grid indices (entries of 4 weights); u32 at 66+4ib: signs7, ls in bits 28..31
    IQ3_S   (110 bytes)  [2+8ib, +8) low 8 index bits; [66+ib] bit l = index bit 8 of entry l; [74+4ib, +4) the 32
                         sign bits; [106+ib/2] nibble ib%2 = ls
    weight = db * grid magnitude * sign, db = (d * (0.5 + ls)) * 0.25 (IQ2), (d * (0.5 + ls)) * 0.5 (IQ3_XXS),
             d * (1 + 2 ls) (IQ3_S)    (ggml-quants.c dequantize_row_iq2_xxs .. _iq3_s)

Products (vec_dot_type Q8_K), as llama.cpp's x86 build runs them (no repack, no tinyBLAS; every integer sum is
exact, the float operations per output are ggml's):

    one token, and batches below     AVX2 ggml_vec_dot_<type>_q8_K: 8 int32 lanes, lane j = sum over sub-blocks of
    kquants.TILED_MIN_BATCH tokens   (2 ls + 1) * (weights 4j..4j+3 x their activations, the signs on the
                                     activations); acc = fma(dx * y.d, (float)lane, acc) per super-block;
                                     MUL * hsum_float_8(acc), MUL = 0.125f (IQ2), 0.25f (IQ3_XXS), none (IQ3_S)  VEC
    batches from there on            the tiled matmul (ggml-cpu/tiled, as for the K-quants): per super-block
                                     s1 = the exact sum of all its lanes, acc = fma(d0 * (float)s1, y.d, acc),
                                     d0 = dx * MUL                                                           TILED

AVX2: a sub-block's 32 magnitudes are its 8 IQ3 entries or 4 IQ2 entries loaded into one vector (as ggml's),
its 32 signs go on the activations (vpsignb), then vpmaddubsw and vpmaddwd by the scales (as ggml's kernels;
|pair sums| <= 2 * 62 * 127 < 2^15). One token reads the rows as stored; a batch decodes each row once per pass of
tokens (q32.pass_tokens), ROW_GROUP rows a work item, into signed weights and runs four tokens a time over the
item's rows, against activations + 128
(vpmaddubsw's unsigned operand; the bias's share subtracted per super-block, exact). Without AVX2 the
same operations run on scalars (_mm_scalar). No repack: the weights stay the file's blocks.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, jit, pjit, work_chunks
from ..fp16 import fma_f32
from ..ggml_type import QK_K, GGMLType
from . import q32
from .iq4 import hsum_float_8
from .iq_tables import IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KEVEN_SIGNS, KSIGNS
from .kquants import TILED_MIN_BATCH
from ._bits import f16_to_f32, read_u16
from ._simd import (HAS_AVX2, HAS_BMI2, WORD_SPLAT, cvt_f32, dpwssd, entries4, entries8, ffma, halves16, hsum32, lanef,
                    load16x16, load32, load8x32, load_u32, maddubs, mul32, nibble_scales, pdep64, shuffle16, sign8,
                    sign_bytes, splat32, splat8, splatf, store16x16, store32, store8x32, sub32, zero16, zero32, zerof)
from .base import BlockFormat, register_as_stored

QK = 32
# the kernels' TYPE argument: the ggml type id
IQ2_XXS, IQ2_XS, IQ3_XXS, IQ3_S, IQ2_S = (int(GGMLType.IQ2_XXS), int(GGMLType.IQ2_XS), int(GGMLType.IQ3_XXS),
                                          int(GGMLType.IQ3_S), int(GGMLType.IQ2_S))
GRIDS = {IQ2_XXS: IQ2XXS_GRID, IQ2_XS: IQ2XS_GRID, IQ2_S: IQ2S_GRID, IQ3_XXS: IQ3XXS_GRID, IQ3_S: IQ3S_GRID}

# float sequence per output (module docstring)
VEC = 0
TILED = 1


@ijit
def _bytes(TYPE):
    """Bytes per super-block."""
    if TYPE == IQ2_XXS:
        return 66
    if TYPE == IQ2_XS:
        return 74
    if TYPE == IQ2_S:
        return 82
    return 98 if TYPE == IQ3_XXS else 110


@ijit
def _width(TYPE):
    """Weights per grid entry."""
    return 4 if TYPE == IQ3_XXS or TYPE == IQ3_S else 8


@ijit
def _mul(TYPE):
    """The factor of MUL * hsum and of d0 (the types' grids hold 8x or 4x the weights' unit)."""
    if TYPE == IQ3_XXS:
        return np.float32(0.25)
    return np.float32(1.0) if TYPE == IQ3_S else np.float32(0.125)


# ----------------------------------------------------------------------------------------- block fields

@ijit
def _signs7(aux):
    """The 32 sign bits of four 7-bit sign fields (ksigns_iq2xs)."""
    return (np.uint32(KSIGNS[aux & 127]) | (np.uint32(KSIGNS[(aux >> 7) & 127]) << 8)
            | (np.uint32(KSIGNS[(aux >> 14) & 127]) << 16) | (np.uint32(KSIGNS[(aux >> 21) & 127]) << 24))


@ijit
def _signs(row, o, TYPE, ib):
    """The 32 sign bits of sub-block ib of the super-block at byte o (bit k: weight k negative)."""
    if TYPE == IQ2_XXS:
        return _signs7(load_u32(row, o + 2 + 8 * ib + 4))
    if TYPE == IQ2_XS:
        s = np.uint32(0)
        for ll in range(4):
            s |= np.uint32(KSIGNS[read_u16(row, o + 2 + 8 * ib + 2 * ll) >> 9]) << (8 * ll)
        return s
    if TYPE == IQ2_S:
        return load_u32(row, o + 34 + 4 * ib)
    if TYPE == IQ3_XXS:
        return _signs7(load_u32(row, o + 66 + 4 * ib))
    return load_u32(row, o + 74 + 4 * ib)


@ijit
def _sign_vec(row, o, TYPE, ib):
    """Sub-block ib's 32 signs as +-1 bytes (<32 x i8>): 7-bit sign fields by four 8-byte keven_signs_q2xs entries
    (as ggml's AVX2 kernels), 32 stored sign bits by sign_bytes."""
    if TYPE == IQ2_XXS or TYPE == IQ3_XXS:
        aux = load_u32(row, o + (2 + 8 * ib + 4 if TYPE == IQ2_XXS else 66 + 4 * ib))
        return entries4(KEVEN_SIGNS, aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127)
    if TYPE == IQ2_XS:
        return entries4(KEVEN_SIGNS, read_u16(row, o + 2 + 8 * ib) >> 9, read_u16(row, o + 4 + 8 * ib) >> 9,
                        read_u16(row, o + 6 + 8 * ib) >> 9, read_u16(row, o + 8 + 8 * ib) >> 9)
    return sign_bytes(_signs(row, o, TYPE, ib))


@ijit
def _ls(row, o, TYPE, ib, h):
    """The 4-bit scale of weights 16h..16h+15 of sub-block ib."""
    if TYPE == IQ2_XXS:
        return np.int32(load_u32(row, o + 2 + 8 * ib + 4) >> 28)
    if TYPE == IQ2_XS:
        return np.int32((row[o + 66 + ib] >> (4 * h)) & 15)
    if TYPE == IQ2_S:
        return np.int32((row[o + 74 + ib] >> (4 * h)) & 15)
    if TYPE == IQ3_XXS:
        return np.int32(load_u32(row, o + 66 + 4 * ib) >> 28)
    return np.int32((row[o + 106 + ib // 2] >> (4 * (ib % 2))) & 15)


@ijit
def _index(row, o, TYPE, ib, e):
    """Grid index of entry e of sub-block ib."""
    if TYPE == IQ2_XXS or TYPE == IQ3_XXS:
        return np.int64(row[o + 2 + 8 * ib + e])
    if TYPE == IQ2_XS:
        return np.int64(read_u16(row, o + 2 + 8 * ib + 2 * e) & 511)
    if TYPE == IQ2_S:
        return np.int64(row[o + 2 + 4 * ib + e]) | ((np.int64(row[o + 66 + ib]) << (8 - 2 * e)) & 0x300)
    return np.int64(row[o + 2 + 8 * ib + e]) | ((np.int64(row[o + 66 + ib]) >> e) & 1) << 8


# ----------------------------------------------------------------------------------------- dequantize

@jit
def _db(TYPE, d, ls):
    """The weights' scale, in ggml's float order."""
    if TYPE == IQ3_S:
        return np.float32(d * np.float32(1 + 2 * ls))
    half = np.float32(d * np.float32(np.float32(0.5) + np.float32(ls)))
    return np.float32(half * (np.float32(0.5) if TYPE == IQ3_XXS else np.float32(0.25)))


@jit
def _dequantize(raw, ids, out, TYPE, grid):
    """out[i] = row ids[i]: (db * magnitude) * (+-1)."""
    BYTES = _bytes(TYPE)
    W = _width(TYPE)
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for sb in range(out.shape[1] // QK_K):
            o = sb * BYTES
            d = f16_to_f32(read_u16(row, o))
            for ib in range(8):
                signs = _signs(row, o, TYPE, ib)
                e0 = QK_K * sb + QK * ib
                for h in range(2):
                    db = _db(TYPE, d, _ls(row, o, TYPE, ib, h))
                    for k in range(16 * h, 16 * h + 16):
                        v = np.float32(db * np.float32(grid[_index(row, o, TYPE, ib, k // W) * W + k % W]))
                        out[i, e0 + k] = -v if (signs >> k) & 1 else v


def _dequantizer(TYPE):
    grid = GRIDS[TYPE]

    def dequantize_rows(raw, ids, out):
        _dequantize(raw, ids, out, TYPE, grid)

    return dequantize_rows


# ----------------------------------------------------------------------------------------- scalar kernels

@jit
def _lanes_scalar(row, o, TYPE, ib, grid, qa, t, e0, acc):
    """acc[j] += (2 ls + 1) * lane j's 4-product sum of sub-block ib with the activations qa[t, e0:e0+32]."""
    W = _width(TYPE)
    signs = _signs(row, o, TYPE, ib)
    for j in range(8):
        s = np.int32(0)
        for k in range(4 * j, 4 * j + 4):
            v = np.int32(grid[_index(row, o, TYPE, ib, k // W) * W + k % W])
            if (signs >> k) & 1:
                v = -v
            s += v * np.int32(qa[t, e0 + k])
        acc[j] += (2 * _ls(row, o, TYPE, ib, j // 4) + 1) * s


@pjit
def _mm_scalar(raw, TYPE, MODE, qa, yd, grid, out):
    """out (T, N) in the float sequence MODE (module docstring) from the raw rows, lane by lane."""
    T, K = qa.shape
    N = out.shape[1]
    BYTES = _bytes(TYPE)
    MUL = _mul(TYPE)
    for n in prange(N):
        row = raw[n]
        A = np.zeros(8, np.float32)
        acc = np.zeros(8, np.int32)
        for t in range(T):
            A[:] = 0
            s = np.float32(0)
            for sb in range(K // QK_K):
                o = sb * BYTES
                acc[:] = 0
                for ib in range(8):
                    _lanes_scalar(row, o, TYPE, ib, grid, qa, t, QK_K * sb + QK * ib, acc)
                dx = f16_to_f32(read_u16(row, o))
                if MODE == TILED:
                    s = fma_f32(np.float32(np.float32(dx * MUL) * np.float32(acc.sum())), yd[t, sb], s)
                else:
                    d = np.float32(dx * yd[t, sb])
                    for j in range(8):
                        A[j] = fma_f32(d, np.float32(acc[j]), A[j])
            out[t, n] = s if MODE == TILED else np.float32(MUL * hsum_float_8(A))


# ----------------------------------------------------------------------------------------- AVX2 kernels

@ijit
def _packed4(row, o, TYPE, ib, g):
    """IQ2_S, IQ3_S with BMI2: the grid indices of entries 4g..4g+3 of sub-block ib in the four 16-bit fields of a
    word, by two pdeps (the low index bytes spread, the high bits deposited above them)."""
    if TYPE == IQ2_S:
        return (pdep64(load_u32(row, o + 2 + 4 * ib), 0x00FF00FF00FF00FF)
                | pdep64(row[o + 66 + ib], 0x0300030003000300))
    return (pdep64(load_u32(row, o + 2 + 8 * ib + 4 * g), 0x00FF00FF00FF00FF)
            | pdep64(row[o + 66 + ib] >> (4 * g), 0x0100010001000100))


@ijit
def _magnitudes(row, o, TYPE, ib, grid):
    """Sub-block ib's 32 magnitudes (<32 x i8>)."""
    if HAS_BMI2 and TYPE == IQ2_S:
        p = _packed4(row, o, TYPE, ib, 0)
        return entries4(grid, p & 0xFFFF, (p >> 16) & 0xFFFF, (p >> 32) & 0xFFFF, p >> 48)
    if HAS_BMI2 and TYPE == IQ3_S:
        p = _packed4(row, o, TYPE, ib, 0)
        r = _packed4(row, o, TYPE, ib, 1)
        return entries8(grid, p & 0xFFFF, (p >> 16) & 0xFFFF, (p >> 32) & 0xFFFF, p >> 48,
                        r & 0xFFFF, (r >> 16) & 0xFFFF, (r >> 32) & 0xFFFF, r >> 48)
    if TYPE == IQ3_XXS or TYPE == IQ3_S:
        return entries8(grid, _index(row, o, TYPE, ib, 0), _index(row, o, TYPE, ib, 1), _index(row, o, TYPE, ib, 2),
                        _index(row, o, TYPE, ib, 3), _index(row, o, TYPE, ib, 4), _index(row, o, TYPE, ib, 5),
                        _index(row, o, TYPE, ib, 6), _index(row, o, TYPE, ib, 7))
    return entries4(grid, _index(row, o, TYPE, ib, 0), _index(row, o, TYPE, ib, 1), _index(row, o, TYPE, ib, 2),
                    _index(row, o, TYPE, ib, 3))


@ijit
def _all_scales(row, o, TYPE):
    """IQ2_XS, IQ2_S, IQ3_S: the super-block's 16 scales 2 ls + 1 in one vector (nibble_scales, as ggml's AVX2
    kernels make them once per super-block; IQ2_XS's nibbles are laid out as IQ2_S's); the others: unused."""
    if TYPE == IQ2_XS:
        return nibble_scales(row, o + 66, False)
    if TYPE == IQ2_S:
        return nibble_scales(row, o + 74, False)
    if TYPE == IQ3_S:
        return nibble_scales(row, o + 106, True)
    return zero16()


@ijit
def _scales16(row, o, TYPE, ib, sc):
    """Sub-block ib's 2 ls + 1 for vpmaddwd: the low 16 weights' in the low lanes, the high ones' above (IQ2_S,
    IQ3_S, IQ2_XS: shuffled out of the super-block's _all_scales sc)."""
    if TYPE == IQ2_XS or TYPE == IQ2_S or TYPE == IQ3_S:
        return shuffle16(sc, load32(WORD_SPLAT, 32 * ib))
    return halves16(2 * _ls(row, o, TYPE, ib, 0) + 1, 2 * _ls(row, o, TYPE, ib, 1) + 1)


@ijit
def _sub_lanes(row, o, TYPE, ib, grid, qa, oa, sc, acc):
    """acc + the scaled lanes of sub-block ib with the 32 activations at byte oa of qa."""
    sa = sign8(load32(qa, oa), _sign_vec(row, o, TYPE, ib))
    return dpwssd(acc, maddubs(_magnitudes(row, o, TYPE, ib, grid), sa), _scales16(row, o, TYPE, ib, sc))


@ijit
def hsum8v(A):
    """hsum_float_8 of a <8 x float>."""
    return np.float32(np.float32(np.float32(lanef(A, 4) + lanef(A, 0)) + np.float32(lanef(A, 6) + lanef(A, 2)))
                      + np.float32(np.float32(lanef(A, 5) + lanef(A, 1)) + np.float32(lanef(A, 7) + lanef(A, 3))))


@ijit
def _step(TYPE, MODE, dx, yd, lanes, A, s):
    """One super-block's float step: VEC's fma(dx * y.d, (float)lane, A), TILED's fma(d0 * (float)s1, y.d, s)."""
    if MODE == TILED:
        return A, fma_f32(np.float32(np.float32(dx * _mul(TYPE)) * np.float32(hsum32(lanes))), yd, s)
    return ffma(splatf(np.float32(dx * yd)), cvt_f32(lanes), A), s


@ijit
def _finish(TYPE, MODE, A, s):
    """The output from the lane accumulators A (VEC) or the scalar s (TILED)."""
    return s if MODE == TILED else np.float32(_mul(TYPE) * hsum8v(A))


@ijit
def _row_one(row, TYPE, MODE, grid, qa, t, yd):
    """One row with token t, straight from its blocks."""
    K = qa.shape[1]
    BYTES = _bytes(TYPE)
    A = zerof()
    s = np.float32(0)
    for sb in range(K // QK_K):
        o = sb * BYTES
        acc = zero32()
        sc = _all_scales(row, o, TYPE)
        for ib in range(8):
            acc = _sub_lanes(row, o, TYPE, ib, grid, qa, t * K + QK_K * sb + QK * ib, sc, acc)
        A, s = _step(TYPE, MODE, f16_to_f32(read_u16(row, o)), yd[t, sb], acc, A, s)
    return _finish(TYPE, MODE, A, s)


@ijit
def _decode_row(row, TYPE, grid, K, dq, corr, dx, r):
    """The row's sub-block b into dq at 64b: its signed weights, then its vpmaddwd scales (_scales16); per
    super-block the lanes' bias correction into corr (32 bytes each: 128 * the scaled lane sums of the weights,
    which the biased activations add) and its d into dx; all in the buffers' slot r (_slots)."""
    BYTES = _bytes(TYPE)
    ones = splat8(1)
    pq, pc, px = _slots(K, r)
    for sb in range(K // QK_K):
        o = sb * BYTES
        dx[px + sb] = f16_to_f32(read_u16(row, o))
        c = zero32()
        sc = _all_scales(row, o, TYPE)
        for ib in range(8):
            p = pq + 64 * (8 * sb + ib)
            w = sign8(_magnitudes(row, o, TYPE, ib, grid), _sign_vec(row, o, TYPE, ib))
            scales = _scales16(row, o, TYPE, ib, sc)
            store32(dq, p, w)
            store16x16(dq, p + 32, scales)
            c = dpwssd(c, maddubs(ones, w), scales)
        store8x32(corr, pc + 32 * sb, mul32(c, splat32(128)))


# Rows of a batch work item (here, in iq1.py and tq.py): each row is decoded once per pass of tokens, then four
# tokens at a time run over all of the item's rows, their activations loaded from L1 for every row after the
# first. One row an item read each token's activations from L3 again for every row (1.5 KB a token at K = 1536):
# 1.2-1.5x slower than four rows; eight rows are 3-10 % faster than four at K = 1536, the same at K = 8960.
ROW_GROUP = 8


@ijit
def tokens4(t, t1):
    """The three tokens after t in a group of four, the last token t1 - 1 repeated past the end."""
    return min(t + 1, t1 - 1), min(t + 2, t1 - 1), min(t + 3, t1 - 1)


@ijit
def _slots(K, r):
    """Byte offsets of slot r (a row of the item) in the decoded-rows buffer dq and in corr, its index in dx."""
    return 2 * K * r, K // QK_K * 32 * r, K // QK_K * r


@ijit
def _row_tokens(dq, corr, dx, r, TYPE, MODE, qb, yd, t, t1, n, out):
    """The row decoded in slot r with tokens t..t+3 (past t1 - 1: t1 - 1 again): each decoded sub-block loaded
    once for the four. qb: the activations + 128 (unsigned), so that one vpmaddubsw with the signed weights gives
    the products (as ggml's tiled matmul's ACTBIAS; |pair sums| <= 2 * 255 * 62 < 2^15), the +128's share
    subtracted per super-block (corr)."""
    K = qb.shape[1]
    pq, pc, px = _slots(K, r)
    u, v, x = tokens4(t, t1)
    z = zerof()
    A0, A1, A2, A3 = z, z, z, z
    s0 = s1 = s2 = s3 = np.float32(0)
    for s in range(K // QK_K):
        a0 = zero32()
        a1 = zero32()
        a2 = zero32()
        a3 = zero32()
        for ib in range(8):
            b = 8 * s + ib
            w = load32(dq, pq + 64 * b)
            scales = load16x16(dq, pq + 64 * b + 32)
            a0 = dpwssd(a0, maddubs(load32(qb, t * K + QK * b), w), scales)
            a1 = dpwssd(a1, maddubs(load32(qb, u * K + QK * b), w), scales)
            a2 = dpwssd(a2, maddubs(load32(qb, v * K + QK * b), w), scales)
            a3 = dpwssd(a3, maddubs(load32(qb, x * K + QK * b), w), scales)
        c = load8x32(corr, pc + 32 * s)
        A0, s0 = _step(TYPE, MODE, dx[px + s], yd[t, s], sub32(a0, c), A0, s0)
        A1, s1 = _step(TYPE, MODE, dx[px + s], yd[u, s], sub32(a1, c), A1, s1)
        A2, s2 = _step(TYPE, MODE, dx[px + s], yd[v, s], sub32(a2, c), A2, s2)
        A3, s3 = _step(TYPE, MODE, dx[px + s], yd[x, s], sub32(a3, c), A3, s3)
    out[t, n] = _finish(TYPE, MODE, A0, s0)
    out[u, n] = _finish(TYPE, MODE, A1, s1)
    out[v, n] = _finish(TYPE, MODE, A2, s2)
    out[x, n] = _finish(TYPE, MODE, A3, s3)


@jit
def biased(qa):
    """qa + 128 as uint8 (T, K)."""
    qb = np.empty(qa.shape, np.uint8)
    for t in range(qa.shape[0]):
        for k in range(qa.shape[1]):
            qb[t, k] = np.uint8(np.int32(qa[t, k]) + 128)
    return qb


def _mm_avx2_of(TYPE: int):
    """The AVX2 kernel of one type: TYPE a constant of its closure, so that the type's branches fold away when
    the helpers are inlined (compiled once per type, and only for the types a model has). With TYPE an
    argument, the branches kept numba's array reference counts (atomic, around every inlined helper) in the
    inner loop: 5 ms for a one-token 8960 x 1280 IQ3_XXS product."""

    @pjit
    def mm(raw, MODE, qa, yd, grid, out, nt):
        """out (T, N) in the float sequence MODE, in nt chunks in parallel (any nt: the same bits). One token:
        rows straight from their blocks; a batch: work items of ROW_GROUP rows x one pass of tokens whose
        activations stay in L2 (passes outermost, so that consecutive items share them), each row decoded once
        per item, then four tokens at a time with each of the item's rows."""
        T, K = qa.shape
        N = raw.shape[0]
        if T == 1:
            for c in prange(nt):
                for n in range(c * N // nt, (c + 1) * N // nt):
                    out[0, n] = _row_one(raw[n], TYPE, MODE, grid, qa, 0, yd)
            return
        qb = biased(qa)
        tp = q32.pass_tokens(T, K)
        n_pass = (T + tp - 1) // tp
        n_groups = (N + ROW_GROUP - 1) // ROW_GROUP
        n_items = n_groups * n_pass
        for c in prange(nt):
            dq = np.empty(ROW_GROUP * 2 * K, np.uint8)
            corr = np.empty(ROW_GROUP * K // QK_K * 32, np.uint8)
            dx = np.empty(ROW_GROUP * K // QK_K, np.float32)
            for item in range(c * n_items // nt, (c + 1) * n_items // nt):
                n0 = (item % n_groups) * ROW_GROUP
                nr = min(ROW_GROUP, N - n0)
                t0 = (item // n_groups) * tp
                t1 = min(T, t0 + tp)
                for r in range(nr):
                    _decode_row(raw[n0 + r], TYPE, grid, K, dq, corr, dx, r)
                for t in range(t0, t1, 4):
                    for r in range(nr):
                        _row_tokens(dq, corr, dx, r, TYPE, MODE, qb, yd, t, t1, n0 + r, out)

    return mm


_MM_AVX2 = {t: _mm_avx2_of(t) for t in GRIDS}


def run(TYPE: int, raw: np.ndarray, a, out: np.ndarray, mode: int) -> None:
    """out (T, N) = raw's rows times the Q8_K activations a, in the float sequence mode."""
    if HAS_AVX2:
        _MM_AVX2[TYPE](raw, mode, a.qs, a.d, GRIDS[TYPE], out, work_chunks())
    else:
        _mm_scalar(raw, TYPE, mode, a.qs, a.d, GRIDS[TYPE], out)


# ----------------------------------------------------------------------------------------- formats

def _register(ggml_type: GGMLType) -> BlockFormat:
    TYPE = int(ggml_type)

    def mm(raw, a, out):
        """Every row in the single-token order."""
        run(TYPE, raw, a, out, VEC)

    def mm_llama(raw, a, out):
        """A batch in llama.cpp's batch order: the tiled matmul from TILED_MIN_BATCH tokens."""
        run(TYPE, raw, a, out, TILED if a.qs.shape[0] >= TILED_MIN_BATCH else VEC)

    return register_as_stored(ggml_type, GGMLType.Q8_K, _dequantizer(TYPE), mm, mm_llama)


for _t in (GGMLType.IQ2_XXS, GGMLType.IQ2_XS, GGMLType.IQ2_S, GGMLType.IQ3_XXS, GGMLType.IQ3_S):
    _register(_t)
