"""MXFP4 and NVFP4: 4-bit E2M1 floats, as indices into ggml's doubled level table kvalues_fp4 (ggml-common.h),
with power-of-two (MXFP4) or UE4M3 (NVFP4) block scales that absorb the doubling (ggml-impl.h).

MXFP4 block (17 bytes, 32 weights; IQ4_NL's layout with a one-byte scale):
    [0:1)   e   E8M0 exponent: d = 2^(e - 128)        (ggml_e8m0_to_fp32_half)
    [1:17)  qs  byte j = hhhh llll:  w[j] = d * kvalues[llll],  w[j + 16] = d * kvalues[hhhh]   (j < 16)

NVFP4 block (36 bytes, 64 weights = 4 sub-blocks of 16):
    [0:4)   d   sub-block s's UE4M3 scale byte (ggml_ue4m3_to_fp32, which halves it)
    [4:36)  qs  sub-block s's 8 bytes at 4 + 8s: byte j = hhhh llll:  w[16s + j] = d_s * kvalues[llll],
                w[16s + j + 8] = d_s * kvalues[hhhh]   (j < 8)

Dequantizers: ggml-quants.c dequantize_row_mxfp4 / _nvfp4. Products, as llama.cpp's x86 build runs them (both
take Q8_0 activations; neither has tinyBLAS, so llama.cpp's batches run the single-token kernels too):

    MXFP4, rows a multiple of 8    repacked (mxfp4_8x8: arch/x86/repack.cpp gemv/gemm_q4_b32_8x8_q8_0_lut_avx,
                                   IQ4_NL's kernels with this table and these scales), one token or many:
                                   sumf = fma((float)sumi, dx * dy, sumf) per block: iq4.py's SUMI_FMA
    MXFP4, other row counts        AVX2 ggml_vec_dot_mxfp4_q8_0: IQ4_NL's vec_dot (two accumulators, an odd last
                                   block added unfused): iq4.py's PAIRS
    NVFP4                          AVX2 ggml_vec_dot_nvfp4_q8_0: per block, two halves of 32 weights (sub-blocks
                                   0-1 with y block 2b, 2-3 with 2b + 1); half h's 8 int32 lanes (lane j = its
                                   elements 4j..4j+3, lanes 0-3 sub-block 2h, 4-7 sub-block 2h + 1) go
                                   acc[j] = fma(d_sub * dy, (float)lane j, acc[j]); then hsum_float_8(acc)

MXFP4 runs iq4.py's kernels: its repack writes IQ4_NL's 8-row group-blocks (144 bytes) with the 8 rows' scales
as bf16 (a power of two down to 2^-128, exact in bf16, not in fp16). NVFP4's AVX2 group-block (8 rows, 320
bytes): [0:64) sub-block s's 8 scales as fp16 at 16s (exact: multiples of 2^-10 below 2^8); [64:192) and
[192:320) halves 0 and 1 as IQ4_NL's 4 chunks (iq4._lane's layout: chunk k's byte 4r + i holds, in its low
nibble, row r's element 4k + i of the half and, in its high nibble, element 16 + 4k + i), so that lane j of a
half is iq4._lane(j). Without AVX2 the same operations run on scalars from the raw rows.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..config import ijit, jit, pjit, work_chunks
from ..fp16 import fma_f32
from ..ggml_type import BLOCK_GEOMETRY, GGMLType
from . import iq4, q32
from ._bits import e8m0_to_f32_half, f32_bits, f32_to_f16, ue4m3_to_f32_half
from ._simd import HAS_AVX2, bcast16b, cvt_f32, ffma, fmul, load8_f16, splat16, splat8, splatf, zerof
from .base import BlockFormat, empty_aligned, llama_repacks, register, run_repack

# ggml-common.h kvalues_fp4: the E2M1 values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, times 2)
KVALUES_FP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)

MXFP4_BYTES = iq4.MXFP4_BYTES  # 17
NVFP4_BYTES = BLOCK_GEOMETRY[GGMLType.NVFP4][1]  # 36
QK = 32
QK_NV = 64
G = 8  # rows per interleaved group
NV_GB = 320  # bytes per NVFP4 group-block
NV_Q = 64  # offset of the quants in an NVFP4 group-block


# ----------------------------------------------------------------------------------------- dequantize

@jit
def dequantize_mxfp4(raw, ids, out):
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(out.shape[1] // QK):
            o = b * MXFP4_BYTES
            d = e8m0_to_f32_half(row[o])
            for j in range(16):
                q = row[o + 1 + j]
                out[i, QK * b + j] = np.float32(np.float32(KVALUES_FP4[q & 15]) * d)
                out[i, QK * b + j + 16] = np.float32(np.float32(KVALUES_FP4[q >> 4]) * d)


@jit
def dequantize_nvfp4(raw, ids, out):
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(out.shape[1] // QK_NV):
            o = b * NVFP4_BYTES
            for s in range(4):
                d = ue4m3_to_f32_half(row[o + s])
                for j in range(8):
                    q = row[o + 4 + 8 * s + j]
                    out[i, QK_NV * b + 16 * s + j] = np.float32(np.float32(KVALUES_FP4[q & 15]) * d)
                    out[i, QK_NV * b + 16 * s + j + 8] = np.float32(np.float32(KVALUES_FP4[q >> 4]) * d)


# ----------------------------------------------------------------------------------------- MXFP4

@pjit
def _repack_mxfp4(raw, out):
    """raw (N, nb*17) -> out (ceil(N/8), nb*144) in iq4.py's IQ4_NL group-block layout, the scales as bf16;
    rows past N repeat row N-1."""
    N = raw.shape[0]
    nb = raw.shape[1] // MXFP4_BYTES
    for g in prange(out.shape[0]):
        for r in range(G):
            row = raw[min(G * g + r, N - 1)]
            for b in range(nb):
                o = b * MXFP4_BYTES
                q = b * iq4.NL_GB
                h = f32_bits(e8m0_to_f32_half(row[o])) >> np.uint32(16)
                out[g, q + 2 * r] = np.uint8(h & np.uint32(255))
                out[g, q + 2 * r + 1] = np.uint8(h >> np.uint32(8))
                for c in range(4):
                    for k in range(4):
                        out[g, q + 16 + 32 * c + 4 * r + k] = row[o + 1 + 4 * c + k]


def _pack_mxfp4(raw, K):
    """(interleaved rows or the raw rows, single-token mode, batch mode of llama.cpp)."""
    modes = (iq4.SUMI_FMA, iq4.SUMI_FMA) if llama_repacks(GGMLType.MXFP4, raw.shape[0]) else (iq4.PAIRS, iq4.PAIRS)
    if not HAS_AVX2:
        return (raw,) + modes
    out = empty_aligned(((raw.shape[0] + G - 1) // G, raw.shape[1] // MXFP4_BYTES * iq4.NL_GB), np.uint8)
    run_repack(_repack_mxfp4, raw, out)
    return (out,) + modes


def _mm_mxfp4(packed, a, out):
    """Every batch in the single-token order, which is also llama.cpp's (no tinyBLAS for MXFP4)."""
    if HAS_AVX2:
        iq4._mm_avx2(packed[0], packed[1], a.qs, a.d, KVALUES_FP4, True, out, work_chunks())
    else:
        iq4._mm_scalar(packed[0], packed[1], a.qs, a.d, KVALUES_FP4, True, out)


@jit
def gemv_mxfp4(w0, w1, w2, n_w, x, o0, o1, o2, nt, pf):
    """The fused one-token product of repacked MXFP4 weights (kernels/quants/gemv1.py's entry signature; pf
    unused): iq4.py's, with this table and the bf16 scales."""
    iq4._gemv_many(iq4.SUMI_FMA, w0, w1, w2, n_w, x, o0, o1, o2, nt, KVALUES_FP4, True)


# ----------------------------------------------------------------------------------------- NVFP4

@jit
def _nv_quant(row, o, e):
    """The 4-bit index of element e (< 64) of the NVFP4 block at byte o of a raw row."""
    q = np.int32(row[o + 4 + 8 * (e // 16) + e % 8])
    return q & 15 if e % 16 < 8 else q >> 4


@pjit
def _mm_nv_scalar(raw, qa, yd, out):
    """out (T, N) from the raw rows, lane by lane, in vec_dot's order (module docstring)."""
    T, K = qa.shape
    N = out.shape[1]
    for n in prange(N):
        row = raw[n]
        A = np.zeros(8, np.float32)
        for t in range(T):
            A[:] = 0
            for b in range(K // QK_NV):
                o = b * NVFP4_BYTES
                for h in range(2):
                    dy = yd[t, 2 * b + h]
                    s0 = np.float32(ue4m3_to_f32_half(row[o + 2 * h]) * dy)
                    s1 = np.float32(ue4m3_to_f32_half(row[o + 2 * h + 1]) * dy)
                    for j in range(8):
                        L = 0
                        for k in range(4):
                            e = 32 * h + 4 * j + k
                            L += np.int32(KVALUES_FP4[_nv_quant(row, o, e)]) * np.int32(qa[t, QK_NV * b + e])
                        A[j] = fma_f32(s0 if j < 4 else s1, np.float32(L), A[j])
            out[t, n] = iq4.hsum_float_8(A)


@pjit
def _repack_nvfp4(raw, out):
    """raw (N, nb*36) -> out (ceil(N/8), nb*320) in the layout above; rows past N repeat row N-1."""
    N = raw.shape[0]
    nb = raw.shape[1] // NVFP4_BYTES
    for g in prange(out.shape[0]):
        for r in range(G):
            row = raw[min(G * g + r, N - 1)]
            for b in range(nb):
                o = b * NVFP4_BYTES
                q = b * NV_GB
                for s in range(4):
                    h = f32_to_f16(ue4m3_to_f32_half(row[o + s]))
                    out[g, q + 16 * s + 2 * r] = np.uint8(h & 255)
                    out[g, q + 16 * s + 2 * r + 1] = np.uint8(h >> 8)
                for half in range(2):
                    for k in range(4):
                        for i in range(4):
                            e = 32 * half + 4 * k + i
                            out[g, q + NV_Q + 128 * half + 32 * k + 4 * r + i] = np.uint8(
                                _nv_quant(row, o, e) | (_nv_quant(row, o, e + 16) << 4))


@ijit
def _fma_half(d0, d1, w, o, qa, oa, lut, m0f, ones, A):
    """A[j] = fma(d0 (lanes 0-3) or d1 (lanes 4-7), (float)lane j, A[j]) of the half whose chunks start at o."""
    return (ffma(d0, cvt_f32(iq4._lane(w, o, 0, qa, oa, lut, m0f, ones)), A[0]),
            ffma(d0, cvt_f32(iq4._lane(w, o, 1, qa, oa, lut, m0f, ones)), A[1]),
            ffma(d0, cvt_f32(iq4._lane(w, o, 2, qa, oa, lut, m0f, ones)), A[2]),
            ffma(d0, cvt_f32(iq4._lane(w, o, 3, qa, oa, lut, m0f, ones)), A[3]),
            ffma(d1, cvt_f32(iq4._lane(w, o, 4, qa, oa, lut, m0f, ones)), A[4]),
            ffma(d1, cvt_f32(iq4._lane(w, o, 5, qa, oa, lut, m0f, ones)), A[5]),
            ffma(d1, cvt_f32(iq4._lane(w, o, 6, qa, oa, lut, m0f, ones)), A[6]),
            ffma(d1, cvt_f32(iq4._lane(w, o, 7, qa, oa, lut, m0f, ones)), A[7]))


@jit
def _rows_nv(w, go, qa, t, yd, lut):
    """The 8 rows of the NVFP4 group at byte go with token t: <8 x float>, lane r = row r."""
    K = qa.shape[1]
    m0f = splat8(15)
    ones = splat16(1)
    z = zerof()
    A = (z, z, z, z, z, z, z, z)
    for b in range(K // QK_NV):
        o = go + b * NV_GB
        for h in range(2):
            dy = splatf(yd[t, 2 * b + h])
            A = _fma_half(fmul(load8_f16(w, o + 32 * h), dy), fmul(load8_f16(w, o + 32 * h + 16), dy), w,
                          o + NV_Q + 128 * h, qa, t * K + QK_NV * b + QK * h, lut, m0f, ones, A)
    return iq4._hsum8v(A[0], A[1], A[2], A[3], A[4], A[5], A[6], A[7])


@pjit
def _mm_nv_avx2(w, qa, yd, table, out, nt):
    """out (T, N): work items of one 8-row group x one pass of tokens (q32.pass_tokens), in nt chunks."""
    T, K = qa.shape
    lut = bcast16b(table, 0)
    tp = q32.pass_tokens(T, K)
    n_pass = (T + tp - 1) // tp
    n_items = w.shape[0] * n_pass
    for c in prange(nt):
        for item in range(c * n_items // nt, (c + 1) * n_items // nt):
            g = item // n_pass
            t0 = (item % n_pass) * tp
            for t in range(t0, min(T, t0 + tp)):
                iq4._store8(out, t, g, _rows_nv(w, g * w.shape[1], qa, t, yd, lut))


def _pack_nvfp4(raw, K):
    if not HAS_AVX2:
        return (raw,)
    out = empty_aligned(((raw.shape[0] + G - 1) // G, raw.shape[1] // NVFP4_BYTES * NV_GB), np.uint8)
    run_repack(_repack_nvfp4, raw, out)
    return (out,)


def _mm_nvfp4(packed, a, out):
    """Every batch token by token in vec_dot's order, which is also llama.cpp's."""
    if HAS_AVX2:
        _mm_nv_avx2(packed[0], a.qs, a.d, KVALUES_FP4, out, work_chunks())
    else:
        _mm_nv_scalar(packed[0], a.qs, a.d, out)


# ----------------------------------------------------------------------------------------- formats

FORMAT_MXFP4 = register(BlockFormat(GGMLType.MXFP4, QK, MXFP4_BYTES, GGMLType.Q8_0, dequantize_mxfp4, _pack_mxfp4,
                                    _mm_mxfp4, _mm_mxfp4, _mm_mxfp4))
FORMAT_NVFP4 = register(BlockFormat(GGMLType.NVFP4, QK_NV, NVFP4_BYTES, GGMLType.Q8_0, dequantize_nvfp4,
                                    _pack_nvfp4, _mm_nvfp4, _mm_nvfp4, _mm_nvfp4))
