"""The ternary formats TQ1_0 and TQ2_0 (TriLM / BitNet b1.58 weights): 256 weights of -1, 0 or 1 a super-block
and one fp16 scale d; stored as u = weight + 1 in 0..2.

Super-block layouts (weight w; "digit n of byte b" = ((b * 3^n mod 256) * 3) >> 8, the base-3 packing of
ggml-quants.c quantize_row_tq1_0_ref):
    TQ1_0 (54 bytes)   w < 160: digit w/32 of byte w%32; w < 240: digit (w-160)/16 of byte 32 + (w-160)%16;
                       w >= 240: digit (w-240)/4 of byte 48 + (w-240)%4; d fp16 at [52:54)
    TQ2_0 (66 bytes)   bits 2l..2l+1 of byte 32j + m are weight 128j + 32l + m; d fp16 at [64:66)
    weight = (float)(u - 1) * d              (ggml-quants.c dequantize_row_tq1_0 / _tq2_0)

Products (vec_dot_type Q8_K): llama.cpp runs AVX2 ggml_vec_dot_tq{1,2}_0_q8_K for every batch size (no repack, no
tiled matmul, no tinyBLAS for these types), so both orders are the one below. Per super-block, 8 int32 lanes: lane
k = sum over the eight 32-weight chunks c of u * q over weights 32c + 4k .. 32c + 4k + 3, minus the activations'
bsums of weights 32k .. 32k + 31 (ggml's vpmaddubsw sums, then the bsums subtracted in 16 bits and vpmaddwd by
ones; exact: |16-bit sums| < 2^13). Then sumf = fma((float)lane, y.d * d, sumf) (GCC contracts ggml's
_mm256_add_ps(_mm256_mul_ps(...), sumf)); out = hsum_float_8(sumf).

AVX2: TQ2_0's chunks are shifts and masks of its bytes; TQ1_0's are digits of bytes times 3^n (_chunks: ggml's
adds and shifts, trits8), in registers. One token reads the rows as stored; a batch decodes each row once
per pass of tokens into u bytes, iq_grid.ROW_GROUP rows a work item, and runs four tokens a time over them. Without AVX2 the same sums run on scalars.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, jit, pjit, work_chunks
from ..fp16 import fma_f32
from ..ggml_type import QK_K, GGMLType
from . import q32
from .iq4 import hsum_float_8
from .iq_grid import ROW_GROUP, hsum8v, tokens4
from ._bits import f16_to_f32, read_u16
from ._simd import (HAS_AVX2, add16, add8, and8, bcast16b, bcast4, cvt_f32, dpwssd, dwords4, ffma, halves8, load16x16,
                    load32, maddubs, sll16, splat16, splat8, splatf, srl16, store32, sub16, trits8, zero16, zero32,
                    zerof)
from .base import BlockFormat, register_as_stored

TQ1_0, TQ2_0 = int(GGMLType.TQ1_0), int(GGMLType.TQ2_0)
TYPES = (TQ1_0, TQ2_0)


@ijit
def _bytes(TYPE):
    """Bytes per super-block."""
    return 54 if TYPE == TQ1_0 else 66


@ijit
def _d(row, o, TYPE):
    return f16_to_f32(read_u16(row, o + (52 if TYPE == TQ1_0 else 64)))


@ijit
def _digit(b, n):
    """Digit n of the byte b's base-3 packing."""
    return ((np.int32(b) * np.int32(3 ** n)) & 255) * 3 >> 8


@ijit
def _u(row, o, TYPE, w):
    """Weight w's u = weight + 1."""
    if TYPE == TQ2_0:
        return np.int32((row[o + 32 * (w // 128) + w % 32] >> (2 * ((w % 128) // 32))) & 3)
    if w < 160:
        return _digit(row[o + w % 32], w // 32)
    if w < 240:
        return _digit(row[o + 32 + (w - 160) % 16], (w - 160) // 16)
    return _digit(row[o + 48 + (w - 240) % 4], (w - 240) // 4)


# ----------------------------------------------------------------------------------------- dequantize

@jit
def _dequantize(raw, ids, out, TYPE):
    """out[i] = row ids[i]: (float)(u - 1) * d."""
    BYTES = _bytes(TYPE)
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for sb in range(out.shape[1] // QK_K):
            o = sb * BYTES
            d = _d(row, o, TYPE)
            for w in range(QK_K):
                out[i, QK_K * sb + w] = np.float32(np.float32(_u(row, o, TYPE, w) - 1) * d)


def _dequantizer(TYPE):
    def dequantize_rows(raw, ids, out):
        _dequantize(raw, ids, out, TYPE)

    return dequantize_rows


# ----------------------------------------------------------------------------------------- scalar kernels

@pjit
def _mm_scalar(raw, TYPE, qa, yd, bsums, out):
    """out (T, N) from the raw rows, lane by lane (module docstring)."""
    T, K = qa.shape
    N = out.shape[1]
    BYTES = _bytes(TYPE)
    for n in prange(N):
        row = raw[n]
        A = np.zeros(8, np.float32)
        for t in range(T):
            A[:] = 0
            for sb in range(K // QK_K):
                o = sb * BYTES
                d = np.float32(yd[t, sb] * _d(row, o, TYPE))
                for k in range(8):
                    lane = -np.int32(bsums[t, 16 * sb + 2 * k]) - np.int32(bsums[t, 16 * sb + 2 * k + 1])
                    for c in range(8):
                        for w in range(32 * c + 4 * k, 32 * c + 4 * k + 4):
                            lane += _u(row, o, TYPE, w) * np.int32(qa[t, QK_K * sb + w])
                    A[k] = fma_f32(np.float32(lane), d, A[k])
            out[t, n] = hsum_float_8(A)


# ----------------------------------------------------------------------------------------- AVX2 kernels

@ijit
def _times3(v):
    """Bytes times 3 mod 256 (ggml: two byte adds; x86 has no byte multiply)."""
    return add8(v, add8(v, v))


@ijit
def _times9(v):
    """Bytes times 9 mod 256 (ggml: v << 3 within each byte, plus v)."""
    return add8(and8(sll16(v, 3), splat8(np.int8(-8))), v)


@ijit
def _chunks(row, o, TYPE):
    """The super-block's eight 32-weight chunks of u bytes (<32 x i8> each), in registers. TQ2_0: shifts and masks
    of its bytes. TQ1_0, ggml's AVX2 sequence: the bytes times 3^n by adds and shifts, then their top base-3 digits
    (trits8); chunk 5 = bytes 32..47 times 1 and 3, chunk 6 times 9 and 27, chunk 7 times 81 and the 4 qh bytes
    times 1, 3, 9, 27."""
    if TYPE == TQ2_0:
        m = splat8(3)
        a = load32(row, o)
        b = load32(row, o + 32)
        return (and8(a, m), and8(srl16(a, 2), m), and8(srl16(a, 4), m), and8(srl16(a, 6), m),
                and8(b, m), and8(srl16(b, 2), m), and8(srl16(b, 4), m), and8(srl16(b, 6), m))
    b = load32(row, o)
    b3 = _times3(b)
    b9 = _times9(b)
    h = bcast16b(row, o + 32)
    h3 = _times3(h)
    h9 = _times9(h)
    q = bcast4(row, o + 48)
    q3 = _times3(q)
    return (trits8(b), trits8(b3), trits8(b9), trits8(_times9(b3)), trits8(_times9(b9)), trits8(halves8(h, h3)),
            trits8(halves8(h9, _times9(h3))), trits8(halves8(_times9(h9), dwords4(q, q3, _times9(q), _times9(q3)))))


@ijit
def _lanes(chunks, qa, oa, bsums, ob):
    """The super-block's 8 int32 lanes with the 256 activations at byte oa of qa (bsums at int16 ob): the chunks'
    vpmaddubsw pair sums added in int16, minus the bsums, then vpmaddwd by ones (ggml's order of the same exact sums:
    |int16 sum| <= 8 * 2 * 3 * 127 + 16 * 127 < 2^13, a hostile TQ2_0 code 3 included)."""
    w0, w1, w2, w3, w4, w5, w6, w7 = chunks
    s = add16(maddubs(w0, load32(qa, oa)), maddubs(w1, load32(qa, oa + 32)))
    s = add16(s, add16(maddubs(w2, load32(qa, oa + 64)), maddubs(w3, load32(qa, oa + 96))))
    s = add16(s, add16(maddubs(w4, load32(qa, oa + 128)), maddubs(w5, load32(qa, oa + 160))))
    s = add16(s, add16(maddubs(w6, load32(qa, oa + 192)), maddubs(w7, load32(qa, oa + 224))))
    return dpwssd(zero32(), sub16(s, load16x16(bsums, 2 * ob)), splat16(1))


@ijit
def _row_one(row, TYPE, qa, t, yd, bsums):
    """One row with token t, straight from its blocks."""
    K = qa.shape[1]
    BYTES = _bytes(TYPE)
    A = zerof()
    for sb in range(K // QK_K):
        o = sb * BYTES
        e = t * K + QK_K * sb
        lanes = _lanes(_chunks(row, o, TYPE), qa, e, bsums, e // 16)
        A = ffma(cvt_f32(lanes), splatf(np.float32(yd[t, sb] * _d(row, o, TYPE))), A)
    return hsum8v(A)


@ijit
def _decode_row(row, TYPE, K, dq, dx, r):
    """The row's u bytes into dq (K), its d per super-block into dx, both in slot r (a row of the work item)."""
    BYTES = _bytes(TYPE)
    for sb in range(K // QK_K):
        o = sb * BYTES
        dx[K // QK_K * r + sb] = _d(row, o, TYPE)
        w0, w1, w2, w3, w4, w5, w6, w7 = _chunks(row, o, TYPE)
        e = K * r + QK_K * sb
        store32(dq, e, w0)
        store32(dq, e + 32, w1)
        store32(dq, e + 64, w2)
        store32(dq, e + 96, w3)
        store32(dq, e + 128, w4)
        store32(dq, e + 160, w5)
        store32(dq, e + 192, w6)
        store32(dq, e + 224, w7)


@ijit
def _row_tokens(dq, dx, r, qa, yd, bsums, t, t1, n, out):
    """The row decoded in slot r with tokens t..t+3 (past t1 - 1: t1 - 1 again); int16 sums as _lanes."""
    K = qa.shape[1]
    pq = K * r
    px = K // QK_K * r
    ones = splat16(1)
    u, v, x = tokens4(t, t1)
    z = zerof()
    A0, A1, A2, A3 = z, z, z, z
    for s in range(K // QK_K):
        a0 = zero16()
        a1 = zero16()
        a2 = zero16()
        a3 = zero16()
        for c in range(8):
            e = QK_K * s + 32 * c
            w = load32(dq, pq + e)
            a0 = add16(a0, maddubs(w, load32(qa, t * K + e)))
            a1 = add16(a1, maddubs(w, load32(qa, u * K + e)))
            a2 = add16(a2, maddubs(w, load32(qa, v * K + e)))
            a3 = add16(a3, maddubs(w, load32(qa, x * K + e)))
        l0 = dpwssd(zero32(), sub16(a0, load16x16(bsums, 2 * ((t * K + QK_K * s) // 16))), ones)
        l1 = dpwssd(zero32(), sub16(a1, load16x16(bsums, 2 * ((u * K + QK_K * s) // 16))), ones)
        l2 = dpwssd(zero32(), sub16(a2, load16x16(bsums, 2 * ((v * K + QK_K * s) // 16))), ones)
        l3 = dpwssd(zero32(), sub16(a3, load16x16(bsums, 2 * ((x * K + QK_K * s) // 16))), ones)
        A0 = ffma(cvt_f32(l0), splatf(np.float32(yd[t, s] * dx[px + s])), A0)
        A1 = ffma(cvt_f32(l1), splatf(np.float32(yd[u, s] * dx[px + s])), A1)
        A2 = ffma(cvt_f32(l2), splatf(np.float32(yd[v, s] * dx[px + s])), A2)
        A3 = ffma(cvt_f32(l3), splatf(np.float32(yd[x, s] * dx[px + s])), A3)
    out[t, n] = hsum8v(A0)
    out[u, n] = hsum8v(A1)
    out[v, n] = hsum8v(A2)
    out[x, n] = hsum8v(A3)


def _mm_avx2_of(TYPE: int):
    """The AVX2 kernel of one type, TYPE a constant of its closure (so its branches fold: iq_grid._mm_avx2_of)."""

    @pjit
    def mm(raw, qa, yd, bsums, out, nt):
        """out (T, N) in nt chunks in parallel (any nt: the same bits). One token: rows straight from their
        blocks; a batch: work items of ROW_GROUP rows x one pass of tokens (passes outermost), each row decoded
        once per item, then four tokens at a time with each of the item's rows (iq_grid.ROW_GROUP)."""
        T, K = qa.shape
        N = raw.shape[0]
        if T == 1:
            for c in prange(nt):
                for n in range(c * N // nt, (c + 1) * N // nt):
                    out[0, n] = _row_one(raw[n], TYPE, qa, 0, yd, bsums)
            return
        tp = q32.pass_tokens(T, K)
        n_pass = (T + tp - 1) // tp
        n_groups = (N + ROW_GROUP - 1) // ROW_GROUP
        n_items = n_groups * n_pass
        for c in prange(nt):
            dq = np.empty(ROW_GROUP * K, np.uint8)
            dx = np.empty(ROW_GROUP * K // QK_K, np.float32)
            for item in range(c * n_items // nt, (c + 1) * n_items // nt):
                n0 = (item % n_groups) * ROW_GROUP
                nr = min(ROW_GROUP, N - n0)
                t0 = (item // n_groups) * tp
                t1 = min(T, t0 + tp)
                for r in range(nr):
                    _decode_row(raw[n0 + r], TYPE, K, dq, dx, r)
                for t in range(t0, t1, 4):
                    for r in range(nr):
                        _row_tokens(dq, dx, r, qa, yd, bsums, t, t1, n0 + r, out)

    return mm


_MM_AVX2 = {t: _mm_avx2_of(t) for t in TYPES}


def run(TYPE: int, raw: np.ndarray, a, out: np.ndarray) -> None:
    """out (T, N) = raw's rows times the Q8_K activations a."""
    if HAS_AVX2:
        _MM_AVX2[TYPE](raw, a.qs, a.d, a.bsums, out, work_chunks())
    else:
        _mm_scalar(raw, TYPE, a.qs, a.d, a.bsums, out)


# ----------------------------------------------------------------------------------------- formats

def _register(ggml_type: GGMLType) -> BlockFormat:
    TYPE = int(ggml_type)

    def mm(raw, a, out):
        """Every row in ggml_vec_dot's order (llama.cpp's for any batch)."""
        run(TYPE, raw, a, out)

    return register_as_stored(ggml_type, GGMLType.Q8_K, _dequantizer(TYPE), mm)


for _t in (GGMLType.TQ1_0, GGMLType.TQ2_0):
    _register(_t)
