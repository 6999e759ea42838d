"""Float weight types F32, F16, BF16 (one element per "block").

Layouts: F32 = IEEE binary32 little endian; F16 = IEEE binary16 (sign 1 | exp 5 | mantissa 10);
BF16 = the high 16 bits of a binary32 (sign 1 | exp 8 | mantissa 7).

Activations: F32 as is; F16/BF16 weights get their activations rounded to F16/BF16 first (vec_dot_type).
Dot, F32 and F16: ggml's x86 (AVX512) order, as llama.cpp on this kind of machine computes it: every token
in ggml_vec_dot_f32/f16's (4 x 16 FMA lanes, the GGML_F32x16_REDUCE tree), and with llama_order llama.cpp's
batches (T >= 2) in llamafile tinyBLAS's (one 16-lane FMA accumulator, _mm512_reduce_add_ps).
Dot, BF16: the AVX512_BF16 ggml_vec_dot_bf16 (vdpbf16ps), and with llama_order llama.cpp's batches in
tinyBLAS's (see the BF16 section). (Products of two fp16 or two bf16 values are exact in float32.)
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._vec import fma16, lane16, load16, zero16
from ..attention import _dot_lanes, _tail_add
from ..config import jit, pjit
from ..fp16 import fma_f32
from ..ggml_type import GGMLType
from ._bits import bf16_to_f32, f16_to_f32
from .base import BlockFormat, register


@jit
def _dequantize_f32(w, ids, out):
    for i in range(ids.shape[0]):
        out[i, :] = w[ids[i]]


@jit
def _dequantize_16(w, ids, out, bf16):
    for i in range(ids.shape[0]):
        row = w[ids[i]]
        for k in range(out.shape[1]):
            out[i, k] = bf16_to_f32(row[k]) if bf16 else f16_to_f32(row[k])


@jit
def _reduce_add16(v):
    """_mm512_reduce_add_ps of a <16 x float> (GCC/clang tree: halves 8, 4, 2, 1)."""
    h = np.empty(8, np.float32)
    for l in range(8):
        h[l] = lane16(v, l) + lane16(v, l + 8)
    for l in range(4):
        h[l] = h[l] + h[l + 4]
    return np.float32((h[0] + h[2]) + (h[1] + h[3]))


@jit
def _vec_dot_row(w, n, x, t, F16):
    """ggml_vec_dot_f16 / ggml_vec_dot_f32 (AVX512): 4 accumulators x 16 lanes of FMAs over 64-element steps,
    reduced (acc0 + acc2) + (acc1 + acc3), then _mm512_reduce_add_ps; leftovers as attention._tail_add."""
    K = w.shape[1]
    npart = K & ~63
    v = _dot_lanes(w, n * K, x, t * K, npart)
    r = _reduce_add16(v)
    if npart < K:
        r = _tail_add(r, w[n], x[t], npart, K, F16)
    return r


@jit
def _tinyblas_row(w, n, x, t):
    """llamafile's tinyBLAS (AVX512, K % 16 == 0): one 16-lane FMA accumulator over the K/16 steps, then
    _mm512_reduce_add_ps."""
    K = w.shape[1]
    acc = zero16()
    for k in range(0, K, 16):
        acc = fma16(load16(w, n * K + k), load16(x, t * K + k), acc)
    return _reduce_add16(acc)


@pjit
def _gemm_x86(w, x, out, F16, TINYBLAS):
    """out (T, N): every (row, token) in ggml_vec_dot's order, or tinyBLAS's (llama.cpp's batches)."""
    N = w.shape[0]
    T = x.shape[0]
    for g in prange((N + 3) // 4):
        for n in range(4 * g, min(N, 4 * g + 4)):
            for t in range(T):
                out[t, n] = _tinyblas_row(w, n, x, t) if TINYBLAS else _vec_dot_row(w, n, x, t, F16)


# BF16: the fixtures' x86 build has AVX512_BF16, so ggml_vec_dot_bf16 runs vdpbf16ps (vec.cpp) and llama.cpp's
# batches run tinyBLAS<32, __m512, __m512bh> (llamafile/sgemm.cpp, K % 32 == 0). vdpbf16ps, per float lane l of 16
# over a 32-element step (Intel SDM): acc += a[2l+1] * b[2l+1], then acc += a[2l] * b[2l], each an FMA rounded
# to nearest even, bf16 inputs read with denormals as zero, denormal results flushed to zero.
_FLT_MIN = np.float32(1.17549435e-38)


@jit
def _bf16_daz(h):
    """bf16 bits -> float32, a denormal (exponent 0) read as zero."""
    if (h & 0x7F80) == 0:
        return np.float32(0.0)
    return bf16_to_f32(h)


@jit
def _dpbf16_step(acc, w, wo, x, xo):
    """acc (16,) f32 = vdpbf16ps(acc, w[wo:wo+32], x[xo:xo+32]) (bf16 bits)."""
    for l in range(16):
        a = fma_f32(_bf16_daz(w[wo + 2 * l + 1]), _bf16_daz(x[xo + 2 * l + 1]), acc[l])
        if abs(a) < _FLT_MIN:
            a = np.float32(a * np.float32(0.0))
        a = fma_f32(_bf16_daz(w[wo + 2 * l]), _bf16_daz(x[xo + 2 * l]), a)
        if abs(a) < _FLT_MIN:
            a = np.float32(a * np.float32(0.0))
        acc[l] = a


@jit
def _reduce_add16_arr(acc):
    """_mm512_reduce_add_ps of a (16,) float32 array (halves 8, 4, 2, 1)."""
    h = np.empty(8, np.float32)
    for l in range(8):
        h[l] = acc[l] + acc[l + 8]
    for l in range(4):
        h[l] = h[l] + h[l + 4]
    return np.float32((h[0] + h[2]) + (h[1] + h[3]))


@jit
def _vec_dot_bf16_row(w, n, xh, t, c1, c2):
    """ggml_vec_dot_bf16 (AVX512_BF16): two vdpbf16ps accumulators over 64-element steps, their
    _mm512_reduce_add_ps summed in double, leftovers added in double; c1, c2 (16,) f32 scratch."""
    K = w.shape[1]
    c1[:] = 0
    c2[:] = 0
    npart = K & ~63
    for i in range(0, npart, 64):
        _dpbf16_step(c1, w[n], i, xh[t], i)
        _dpbf16_step(c2, w[n], i + 32, xh[t], i + 32)
    s = 0.0
    s += np.float64(_reduce_add16_arr(c1))
    s += np.float64(_reduce_add16_arr(c2))
    for i in range(npart, K):
        s += np.float64(np.float32(bf16_to_f32(w[n, i]) * bf16_to_f32(xh[t, i])))
    return np.float32(s)


@jit
def _tinyblas_bf16_row(w, n, xh, t, c1):
    """tinyBLAS<32, __m512, __m512bh> (K % 32 == 0): one vdpbf16ps accumulator, then _mm512_reduce_add_ps."""
    c1[:] = 0
    for k in range(0, w.shape[1], 32):
        _dpbf16_step(c1, w[n], k, xh[t], k)
    return _reduce_add16_arr(c1)


@pjit
def _gemm_bf16(w, xh, out, TINYBLAS):
    """out (T, N): every (row, token) in ggml_vec_dot_bf16's order, or tinyBLAS's (llama.cpp's batches)."""
    N = w.shape[0]
    T = xh.shape[0]
    for g in prange((N + 3) // 4):
        c1 = np.empty(16, np.float32)
        c2 = np.empty(16, np.float32)
        for n in range(4 * g, min(N, 4 * g + 4)):
            for t in range(T):
                if TINYBLAS:
                    out[t, n] = _tinyblas_bf16_row(w, n, xh, t, c1)
                else:
                    out[t, n] = _vec_dot_bf16_row(w, n, xh, t, c1, c2)


def _dq_f32(raw, ids, out):
    _dequantize_f32(raw.view(np.float32), ids, out)


def _dq_f16(raw, ids, out):
    _dequantize_16(raw.view(np.uint16), ids, out, False)


def _dq_bf16(raw, ids, out):
    _dequantize_16(raw.view(np.uint16), ids, out, True)


def _pack_f32(raw, K):
    return (raw.view(np.float32),)


def _pack_16(raw, K):
    return (raw.view(np.uint16),)


def _mm_f32(packed, a, out):
    _gemm_x86(packed[0], a.x, out, False, False)


def _mm_f16(packed, a, out):
    _gemm_x86(packed[0], a.x, out, True, False)


def _mm_llama_f32(packed, a, out):
    _gemm_x86(packed[0], a.x, out, False, a.x.shape[1] % 16 == 0)


def _mm_llama_f16(packed, a, out):
    _gemm_x86(packed[0], a.x, out, True, a.x.shape[1] % 16 == 0)


def _mm_bf16(packed, a, out):
    _gemm_bf16(packed[0], a.h, out, False)


def _mm_llama_bf16(packed, a, out):
    _gemm_bf16(packed[0], a.h, out, a.h.shape[1] % 32 == 0)


F32 = register(BlockFormat(GGMLType.F32, 1, 4, GGMLType.F32, _dq_f32, _pack_f32, _mm_f32, _mm_f32, _mm_llama_f32))
F16 = register(BlockFormat(GGMLType.F16, 1, 2, GGMLType.F16, _dq_f16, _pack_16, _mm_f16, _mm_f16, _mm_llama_f16))
BF16 = register(BlockFormat(GGMLType.BF16, 1, 2, GGMLType.BF16, _dq_bf16, _pack_16, _mm_bf16, _mm_bf16,
                            _mm_llama_bf16))
