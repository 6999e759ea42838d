"""The 1-bit i-quants IQ1_S and IQ1_M: 256-weight super-blocks of eight 32-weight sub-blocks of four grid entries
(iq1s_grid, kernels/quants/iq_tables.py: 8 weights of -1, 0 or 1 an entry, 11-bit indices), each entry shifted by
a delta of +-1/8, and 3-bit scales ls (weight scale 2 ls + 1).

Super-block layouts (sub-block ib, entry l):
    IQ1_S (50 bytes)   d fp16 at [0:2); [2+4ib+l] low 8 index bits; u16 qh at 34+2ib: bits 3l..3l+2 = index bits
                       8..10 of entry l, bits 12..14 = ls of the sub-block, bit 15 = its delta's sign
    IQ1_M (56 bytes)   [4ib+l] low 8 index bits; byte qh[2ib + l/2] at 32: its low nibble for entries 0, 2 and its
                       high nibble for entries 1, 3: bits 0..2 = index bits 8..10, bit 3 = the entry's delta's sign;
                       four u16 sc at 48: bits 6(ib%2)+3h.. = ls of weights 16h..16h+15 of sub-block ib (in word
                       ib/2), bits 12..15 of the four words = the fp16 d
    weight = (d * (2 ls + 1)) * (grid value + delta), delta = +-0.125   (ggml-quants.c dequantize_row_iq1_s / _m)

Products (vec_dot_type Q8_K), as llama.cpp's x86 build runs them (no repack, no tinyBLAS; every integer sum is
exact, the float operations per output are ggml's). Per super-block, with the scales on each lane: gl = 8 int32
lanes of the grid values times the activations (lane j: weights 4j..4j+3 of each sub-block), dl = the same of the
deltas' signs; d = dx * y.d:

    one token, and batches below     AVX2 ggml_vec_dot_iq1_<s|m>_q8_K:
    kquants.TILED_MIN_BATCH tokens   IQ1_S: A = fma(d, (float)gl, A), a1 = fma(d, (float)sum(dl), a1) (GCC contracts
                                            `accum1 += d * sumi1`); out = hsum_float_8(A) + 0.125f * a1
                                     IQ1_M: A = fma(d, (float)gl, A), A2 = fma(d, (float)dl, A2);
                                            out = hsum_float_8(A) + 0.125f * hsum_float_8(A2)                  VEC
    batches from there on            the tiled matmul (ggml-cpu/tiled, codes 8 * grid + delta sign): s1 = 8 sum(gl)
                                     + sum(dl), acc = fma((dx * 0.125f) * (float)s1, y.d, acc)            TILED

AVX2: one token reads the rows as stored (as ggml's kernels: vpmaddubsw of |grid| with the activations signed by
the grid, and of ones with the activations signed by the deltas, then vpmaddwd by the scales). A batch decodes each
row once per pass of tokens (q32.pass_tokens), iq_grid.ROW_GROUP rows a work item, into signed grid values, delta
signs (IQ1_M) or delta scales (IQ1_S, whose delta sums come from the bsums) and scales, and runs four tokens a time
over the item's rows against activations + 128 (the bias's share subtracted per super-block, exact). Without AVX2 the
same sums run on scalars (_mm_scalar). No repack: the weights stay the file's blocks.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, jit, pjit, work_chunks
from ..fp16 import fma_f32
from ..ggml_type import QK_K, GGMLType
from . import q32
from .iq4 import hsum_float_8
from .iq_grid import ROW_GROUP, TILED, VEC, biased, hsum8v, tokens4
from .iq_tables import IQ1S_GRID
from .kquants import TILED_MIN_BATCH
from ._bits import f16_to_f32, read_u16
from ._simd import (HAS_AVX2, HAS_BMI2, abs8, add16, add32, and32, bytes16, bytes_to_qwords, cvt_f32, dpwssd,
                    entries4, ffma, halves16, hsum32, hsum32x4, iq1m_scales, load16x16, load32, load8_i16_as_i32, load8x32,
                    load_u32, maddubs, mul32, or8, pdep64, sign8, sll16i, splat16, splat32, splat8, splatf, sra32,
                    store32, store8x32, shuffle16, sub32, WORD_SPLAT, xor32, zero16, zero32, zerof)
from .base import BlockFormat, register_as_stored

QK = 32
# the kernels' TYPE argument: the ggml type id
IQ1_S, IQ1_M = int(GGMLType.IQ1_S), int(GGMLType.IQ1_M)
TYPES = (IQ1_S, IQ1_M)
GRID = IQ1S_GRID  # (2048 * 8,) uint8: int8 -1, 0, 1
DELTA_SIGNS = np.array([1] * 8 + [0xFF] * 8, np.uint8)  # entries4's table: entry 0 = eight +1, entry 1 = eight -1
DELTA = np.float32(0.125)  # IQ1S_DELTA, IQ1M_DELTA


@ijit
def _bytes(TYPE):
    """Bytes per super-block."""
    return 50 if TYPE == IQ1_S else 56


# ----------------------------------------------------------------------------------------- block fields

@ijit
def _d(row, o, TYPE):
    """The super-block's d (IQ1_M: the fp16 in the top nibbles of its four scale words)."""
    if TYPE == IQ1_S:
        return f16_to_f32(read_u16(row, o))
    return f16_to_f32((read_u16(row, o + 48) >> 12) | ((read_u16(row, o + 50) >> 8) & 0x00F0)
                      | ((read_u16(row, o + 52) >> 4) & 0x0F00) | (read_u16(row, o + 54) & 0xF000))


@ijit
def _index(row, o, TYPE, ib, e):
    """Grid index of entry e of sub-block ib."""
    if TYPE == IQ1_S:
        return np.int64(row[o + 2 + 4 * ib + e]) | ((np.int64(read_u16(row, o + 34 + 2 * ib)) >> (3 * e)) & 7) << 8
    return np.int64(row[o + 4 * ib + e]) | ((np.int64(row[o + 32 + 2 * ib + e // 2]) << (8 - 4 * (e % 2))) & 0x700)


@ijit
def _neg(row, o, TYPE, ib, e):
    """1 where entry e of sub-block ib has the delta -1/8, 0 where +1/8."""
    if TYPE == IQ1_S:
        return np.int64(read_u16(row, o + 34 + 2 * ib) >> 15)
    return np.int64((row[o + 32 + 2 * ib + e // 2] >> (3 + 4 * (e % 2))) & 1)


@ijit
def _ls(row, o, TYPE, ib, h):
    """The scale 2 ls + 1 of weights 16h..16h+15 of sub-block ib."""
    if TYPE == IQ1_S:
        return np.int32(2 * ((read_u16(row, o + 34 + 2 * ib) >> 12) & 7) + 1)
    return np.int32(2 * ((read_u16(row, o + 48 + 2 * (ib // 2)) >> (6 * (ib % 2) + 3 * h)) & 7) + 1)


# ----------------------------------------------------------------------------------------- dequantize

@jit
def _dequantize(raw, ids, out, TYPE, grid):
    """out[i] = row ids[i]: (d * (2 ls + 1)) * (grid value + delta)."""
    BYTES = _bytes(TYPE)
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for sb in range(out.shape[1] // QK_K):
            o = sb * BYTES
            d = _d(row, o, TYPE)
            for ib in range(8):
                for e in range(4):
                    dl = np.float32(d * np.float32(_ls(row, o, TYPE, ib, e // 2)))
                    delta = -DELTA if _neg(row, o, TYPE, ib, e) else DELTA
                    g = _index(row, o, TYPE, ib, e) * 8
                    for j in range(8):
                        v = np.float32(np.int8(grid[g + j])) + delta
                        out[i, QK_K * sb + QK * ib + 8 * e + j] = np.float32(dl * v)


def _dequantizer(TYPE):
    def dequantize_rows(raw, ids, out):
        _dequantize(raw, ids, out, TYPE, GRID)

    return dequantize_rows


# ----------------------------------------------------------------------------------------- scalar kernels

@jit
def _lanes_scalar(row, o, TYPE, ib, grid, qa, t, e0, gl, dl):
    """gl[j], dl[j] += (2 ls + 1) * lane j's 4-product sums of sub-block ib (grid values, delta signs) with the
    activations qa[t, e0:e0+32]."""
    for j in range(8):
        e = j // 2
        g = _index(row, o, TYPE, ib, e) * 8
        sign = np.int32(-1) if _neg(row, o, TYPE, ib, e) else np.int32(1)
        sg = np.int32(0)
        sd = np.int32(0)
        for k in range(4 * j, 4 * j + 4):
            q = np.int32(qa[t, e0 + k])
            sg += np.int32(np.int8(grid[g + k % 8])) * q
            sd += sign * q
        ls = _ls(row, o, TYPE, ib, j // 4)
        gl[j] += ls * sg
        dl[j] += ls * sd


@pjit
def _mm_scalar(raw, TYPE, MODE, qa, yd, grid, out):
    """out (T, N) in the float sequence MODE (module docstring) from the raw rows, lane by lane."""
    T, K = qa.shape
    N = out.shape[1]
    BYTES = _bytes(TYPE)
    for n in prange(N):
        row = raw[n]
        A = np.zeros(8, np.float32)
        A2 = np.zeros(8, np.float32)
        gl = np.zeros(8, np.int32)
        dl = np.zeros(8, np.int32)
        for t in range(T):
            A[:] = 0
            A2[:] = 0
            s = np.float32(0)
            for sb in range(K // QK_K):
                o = sb * BYTES
                gl[:] = 0
                dl[:] = 0
                for ib in range(8):
                    _lanes_scalar(row, o, TYPE, ib, grid, qa, t, QK_K * sb + QK * ib, gl, dl)
                dx = _d(row, o, TYPE)
                if MODE == TILED:
                    s1 = np.float32(8 * gl.sum() + dl.sum())
                    s = fma_f32(np.float32(np.float32(dx * DELTA) * s1), yd[t, sb], s)
                else:
                    d = np.float32(dx * yd[t, sb])
                    for j in range(8):
                        A[j] = fma_f32(d, np.float32(gl[j]), A[j])
                        A2[j] = fma_f32(d, np.float32(dl[j]), A2[j])
                    s = fma_f32(d, np.float32(dl.sum()), s)
            if MODE == TILED:
                out[t, n] = s
            elif TYPE == IQ1_S:
                out[t, n] = np.float32(hsum_float_8(A) + np.float32(DELTA * s))
            else:
                out[t, n] = np.float32(hsum_float_8(A) + np.float32(DELTA * hsum_float_8(A2)))


# ----------------------------------------------------------------------------------------- AVX2 kernels

@ijit
def _grid32(row, o, TYPE, ib):
    """Sub-block ib's 32 grid values (<32 x i8>). With BMI2 its four 11-bit indices come from two pdeps into the
    16-bit fields of one word, as ggml's kernels build them (fewer scalar operations)."""
    if not HAS_BMI2:
        return entries4(GRID, _index(row, o, TYPE, ib, 0), _index(row, o, TYPE, ib, 1), _index(row, o, TYPE, ib, 2),
                        _index(row, o, TYPE, ib, 3))
    if TYPE == IQ1_S:
        p = (pdep64(load_u32(row, o + 2 + 4 * ib), 0x00FF00FF00FF00FF)
             | pdep64(read_u16(row, o + 34 + 2 * ib), 0x0700070007000700))
    else:
        p = (pdep64(load_u32(row, o + 4 * ib), 0x00FF00FF00FF00FF)
             | pdep64(read_u16(row, o + 32 + 2 * ib) & 0x7777, 0x0F000F000F000F00))
    return entries4(GRID, p & 0xFFFF, (p >> 16) & 0xFFFF, (p >> 32) & 0xFFFF, p >> 48)


@ijit
def _delta32(row, o, TYPE, ib):
    """Sub-block ib's 32 delta signs (<32 x i8> of +-1). IQ1_M with BMI2: bit 3 of each entry's nibble pdep'd to
    bit 7 of byte e, sign-extended to the entry's 8 bytes, or 1 (ggml's kernel, whose vpsignb needs only the
    signs), then exact +-1 for the batch kernel's vpmaddubsw."""
    if TYPE == IQ1_S:
        return splat8(np.int8(1 - 2 * _neg(row, o, TYPE, ib, 0)))
    if HAS_BMI2:
        ones = splat8(1)  # (0x81 | 1 is -127: sign8 makes it -1)
        return sign8(ones, or8(bytes_to_qwords(pdep64(read_u16(row, o + 32 + 2 * ib) & 0x8888, 0xF0F0F0F0)), ones))
    return entries4(DELTA_SIGNS, _neg(row, o, TYPE, ib, 0), _neg(row, o, TYPE, ib, 1), _neg(row, o, TYPE, ib, 2),
                    _neg(row, o, TYPE, ib, 3))


@ijit
def _scales16(row, o, TYPE, ib, sc):
    """Sub-block ib's 2 ls + 1 for vpmaddwd: the low 16 weights' in the low lanes, the high ones' above (IQ1_M: from
    its super-block's _all_scales sc, as ggml's kernel)."""
    if TYPE == IQ1_M:
        return shuffle16(sc, load32(WORD_SPLAT, 32 * (ib // 2 + 4 * (ib % 2))))
    return halves16(_ls(row, o, TYPE, ib, 0), _ls(row, o, TYPE, ib, 1))


@ijit
def _all_scales(row, o, TYPE):
    """IQ1_M: the super-block's 16 scales (iq1m_scales); IQ1_S: unused."""
    return iq1m_scales(row, o + 48) if TYPE == IQ1_M else zero16()


@ijit
def _delta_scales(row, sb):
    """IQ1_S: super-block sb's 8 sub-blocks' delta scales +-(2 ls + 1), the sign the delta's, as int32 lanes."""
    h = load8_i16_as_i32(row, _bytes(IQ1_S) * sb + 34)  # the 8 qh words, sign-extended: bit 15 -> the int32 sign
    ls = and32(sra32(h, 12), splat32(7))
    ls = add32(add32(ls, ls), splat32(1))
    neg = sra32(h, 31)
    return sub32(xor32(ls, neg), neg)


@ijit
def _bsums16(bsums, t, sb):
    """Token t's 16 bsums (int16 sums of 16 activations) of super-block sb."""
    return load16x16(bsums, 2 * (t * bsums.shape[1] + 16 * sb))


@ijit
def _delta_sum(row, TYPE, bsums, t, sb):
    """IQ1_S: super-block sb's delta-sign sum with token t, (2 ls + 1) * sign * (the sub-block's two bsums) over
    its sub-blocks: ggml's scalar sumi1, here in vectors (IQ1_S needs only this total, never its lanes). IQ1_M: 0
    (its delta lanes are vectors)."""
    if TYPE == IQ1_M:
        return np.int32(0)
    bs = dpwssd(zero32(), _bsums16(bsums, t, sb), splat16(1))  # per sub-block
    return hsum32(mul32(bs, _delta_scales(row, sb)))


@ijit
def _step(TYPE, MODE, dx, yd, gl, dl, dsum, A, A2, s):
    """One super-block's float step (module docstring) from its lanes gl and its delta lanes dl (IQ1_M) or their
    total dsum (IQ1_S)."""
    if MODE == TILED:
        s1 = np.float32(8 * hsum32(gl) + (dsum if TYPE == IQ1_S else hsum32(dl)))
        return A, A2, fma_f32(np.float32(np.float32(dx * DELTA) * s1), yd, s)
    d = np.float32(dx * yd)
    A = ffma(splatf(d), cvt_f32(gl), A)
    if TYPE == IQ1_S:
        return A, A2, fma_f32(d, np.float32(dsum), s)
    return A, ffma(splatf(d), cvt_f32(dl), A2), s


@ijit
def _finish(TYPE, MODE, A, A2, s):
    """The output from the accumulators."""
    if MODE == TILED:
        return s
    if TYPE == IQ1_S:
        return np.float32(hsum8v(A) + np.float32(DELTA * s))
    return np.float32(hsum8v(A) + np.float32(DELTA * hsum8v(A2)))


@ijit
def _row_one(row, TYPE, MODE, qa, t, yd, bsums):
    """One row with token t, straight from its blocks."""
    K = qa.shape[1]
    BYTES = _bytes(TYPE)
    ones = splat8(1)
    A = zerof()
    A2 = zerof()
    s = np.float32(0)
    for sb in range(K // QK_K):
        o = sb * BYTES
        gl = zero32()
        dl = zero32()
        sc = _all_scales(row, o, TYPE)
        for ib in range(8):
            q = load32(qa, t * K + QK_K * sb + QK * ib)
            g = _grid32(row, o, TYPE, ib)
            scales = _scales16(row, o, TYPE, ib, sc)
            gl = dpwssd(gl, maddubs(abs8(g), sign8(q, g)), scales)
            if TYPE == IQ1_M:
                dl = dpwssd(dl, maddubs(ones, sign8(q, _delta32(row, o, TYPE, ib))), scales)
        A, A2, s = _step(TYPE, MODE, _d(row, o, TYPE), yd[t, sb], gl, dl, _delta_sum(row, TYPE, bsums, t, sb), A, A2,
                         s)
    return _finish(TYPE, MODE, A, A2, s)


@ijit
def _decode_row(row, TYPE, K, dq, corr, dx, r):
    """The row's sub-block b into dq at 64b: its grid values times their scales 2 ls + 1, then its delta signs
    times theirs (bytes in -15..15: vpsignb of the scale bytes by the +-1/0 values); per super-block the lanes' bias
    corrections into corr (64 bytes each: 128 * the lane sums of the scaled grid values, then of the scaled delta
    signs, which the biased activations add) and its d into dx. IQ1_S keeps no delta signs: its delta sum comes
    from the bsums, and corr's second half holds its delta scales as int16 pairs, one per bsum (_delta_scales: the
    value in both halves of each int32 lane, for vpmaddwd with the 16 bsums). r: the row's slot in the buffers
    (_slots)."""
    BYTES = _bytes(TYPE)
    pq, pc, px = _slots(K, r)
    ones = splat8(1)
    ones16 = splat16(1)
    b128 = splat32(128)
    for sb in range(K // QK_K):
        o = sb * BYTES
        dx[px + sb] = _d(row, o, TYPE)
        cg = zero32()
        cd = zero32()
        sc = _all_scales(row, o, TYPE)
        for ib in range(8):
            p = pq + 64 * (8 * sb + ib)
            scales = _scales16(row, o, TYPE, ib, sc)  # (values <= 15: the same byte in both halves of each word)
            sbytes = or8(bytes16(scales), bytes16(sll16i(scales, 8)))
            g = sign8(sbytes, _grid32(row, o, TYPE, ib))
            store32(dq, p, g)
            cg = dpwssd(cg, maddubs(ones, g), ones16)
            if TYPE == IQ1_M:
                delta = sign8(sbytes, _delta32(row, o, TYPE, ib))
                store32(dq, p + 32, delta)
                cd = dpwssd(cd, maddubs(ones, delta), ones16)
        store8x32(corr, pc + 64 * sb, mul32(cg, b128))
        if TYPE == IQ1_M:
            store8x32(corr, pc + 64 * sb + 32, mul32(cd, b128))
        else:
            ds = _delta_scales(row, sb)
            store8x32(corr, pc + 64 * sb + 32, add32(and32(ds, splat32(0xFFFF)), mul32(ds, splat32(1 << 16))))


@ijit
def _slots(K, r):
    """Byte offsets of slot r (a row of the item) in the decoded-rows buffer dq and in corr, its index in dx."""
    return 2 * K * r, K // QK_K * 64 * r, K // QK_K * r


@ijit
def _row_tokens(dq, corr, dx, r, TYPE, MODE, qb, yd, bsums, t, t1, n, out):
    """The row decoded in slot r with tokens t..t+3 (past t1 - 1: t1 - 1 again): each decoded sub-block loaded
    once for the four. qb: the activations + 128 (unsigned), the +128's share subtracted per super-block (corr).
    The vpmaddubsw pair sums of four sub-blocks are added in int16 before one vpmaddwd by ones (|sum| <= 4 * 2 *
    255 * 15 < 2^15: exact, the same lanes as ggml's per-sub-block vpmaddwd by the scales)."""
    K = qb.shape[1]
    pq, pc, px = _slots(K, r)
    ones = splat16(1)
    u, v, x = tokens4(t, t1)
    z = zerof()
    A0, A1, A2, A3 = z, z, z, z
    B0, B1, B2, B3 = z, z, z, z
    s0 = s1 = s2 = s3 = np.float32(0)
    for s in range(K // QK_K):
        g0 = zero32()
        g1 = zero32()
        g2 = zero32()
        g3 = zero32()
        d0 = zero32()
        d1 = zero32()
        d2 = zero32()
        d3 = zero32()
        for h in range(2):
            z16 = zero16()
            e0, e1, e2, e3 = z16, z16, z16, z16
            f0, f1, f2, f3 = z16, z16, z16, z16
            for ib in range(4 * h, 4 * h + 4):
                b = 8 * s + ib
                g = load32(dq, pq + 64 * b)
                q0 = load32(qb, t * K + QK * b)
                q1 = load32(qb, u * K + QK * b)
                q2 = load32(qb, v * K + QK * b)
                q3 = load32(qb, x * K + QK * b)
                e0 = add16(e0, maddubs(q0, g))
                e1 = add16(e1, maddubs(q1, g))
                e2 = add16(e2, maddubs(q2, g))
                e3 = add16(e3, maddubs(q3, g))
                if TYPE == IQ1_M:
                    delta = load32(dq, pq + 64 * b + 32)
                    f0 = add16(f0, maddubs(q0, delta))
                    f1 = add16(f1, maddubs(q1, delta))
                    f2 = add16(f2, maddubs(q2, delta))
                    f3 = add16(f3, maddubs(q3, delta))
            g0 = dpwssd(g0, e0, ones)
            g1 = dpwssd(g1, e1, ones)
            g2 = dpwssd(g2, e2, ones)
            g3 = dpwssd(g3, e3, ones)
            if TYPE == IQ1_M:
                d0 = dpwssd(d0, f0, ones)
                d1 = dpwssd(d1, f1, ones)
                d2 = dpwssd(d2, f2, ones)
                d3 = dpwssd(d3, f3, ones)
        cg = load8x32(corr, pc + 64 * s)
        cd = load8x32(corr, pc + 64 * s + 32)
        if TYPE == IQ1_S:  # the four tokens' delta sums n (exact integers) with one set of shuffles
            ds = load16x16(corr, pc + 64 * s + 32)
            n0, n1, n2, n3 = hsum32x4(dpwssd(zero32(), _bsums16(bsums, t, s), ds),
                                      dpwssd(zero32(), _bsums16(bsums, u, s), ds),
                                      dpwssd(zero32(), _bsums16(bsums, v, s), ds),
                                      dpwssd(zero32(), _bsums16(bsums, x, s), ds))
        else:
            n0 = n1 = n2 = n3 = np.float32(0)
        A0, B0, s0 = _step(TYPE, MODE, dx[px + s], yd[t, s], sub32(g0, cg), sub32(d0, cd), n0, A0, B0, s0)
        A1, B1, s1 = _step(TYPE, MODE, dx[px + s], yd[u, s], sub32(g1, cg), sub32(d1, cd), n1, A1, B1, s1)
        A2, B2, s2 = _step(TYPE, MODE, dx[px + s], yd[v, s], sub32(g2, cg), sub32(d2, cd), n2, A2, B2, s2)
        A3, B3, s3 = _step(TYPE, MODE, dx[px + s], yd[x, s], sub32(g3, cg), sub32(d3, cd), n3, A3, B3, s3)
    out[t, n] = _finish(TYPE, MODE, A0, B0, s0)
    out[u, n] = _finish(TYPE, MODE, A1, B1, s1)
    out[v, n] = _finish(TYPE, MODE, A2, B2, s2)
    out[x, n] = _finish(TYPE, MODE, A3, B3, s3)


def _mm_avx2_of(TYPE: int):
    """The AVX2 kernel of one type, TYPE a constant of its closure (so its branches fold: iq_grid._mm_avx2_of)."""

    @pjit
    def mm(raw, MODE, qa, yd, bsums, out, nt):
        """out (T, N) in the float sequence MODE, in nt chunks in parallel (any nt: the same bits). One token:
        rows straight from their blocks; a batch: work items of ROW_GROUP rows x one pass of tokens (passes outermost),
        each row decoded once per item, then four tokens at a time with each of its rows."""
        T, K = qa.shape
        N = raw.shape[0]
        if T == 1:
            for c in prange(nt):
                for n in range(c * N // nt, (c + 1) * N // nt):
                    out[0, n] = _row_one(raw[n], TYPE, MODE, qa, 0, yd, bsums)
            return
        qb = biased(qa)
        tp = q32.pass_tokens(T, K)
        n_pass = (T + tp - 1) // tp
        n_groups = (N + ROW_GROUP - 1) // ROW_GROUP
        n_items = n_groups * n_pass
        for c in prange(nt):
            dq = np.empty(ROW_GROUP * 2 * K, np.uint8)
            corr = np.empty(ROW_GROUP * K // QK_K * 64, np.uint8)
            dx = np.empty(ROW_GROUP * K // QK_K, np.float32)
            for item in range(c * n_items // nt, (c + 1) * n_items // nt):
                n0 = (item % n_groups) * ROW_GROUP
                nr = min(ROW_GROUP, N - n0)
                t0 = (item // n_groups) * tp
                t1 = min(T, t0 + tp)
                for r in range(nr):
                    _decode_row(raw[n0 + r], TYPE, K, dq, corr, dx, r)
                for t in range(t0, t1, 4):
                    for r in range(nr):
                        _row_tokens(dq, corr, dx, r, TYPE, MODE, qb, yd, bsums, t, t1, n0 + r, out)

    return mm


_MM_AVX2 = {t: _mm_avx2_of(t) for t in TYPES}


def run(TYPE: int, raw: np.ndarray, a, out: np.ndarray, mode: int) -> None:
    """out (T, N) = raw's rows times the Q8_K activations a, in the float sequence mode."""
    if HAS_AVX2:
        _MM_AVX2[TYPE](raw, mode, a.qs, a.d, a.bsums, out, work_chunks())
    else:
        _mm_scalar(raw, TYPE, mode, a.qs, a.d, GRID, out)


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


for _t in (GGMLType.IQ1_S, GGMLType.IQ1_M):
    _register(_t)
