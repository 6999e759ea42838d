"""Float weight types F32, F16, BF16 (one element per "block").

Layouts: F32 = IEEE binary32 little endian; F16 = IEEE binary16 (sign 1 | exp 5 | mantissa 10);
BF16 = the high 16 bits of a binary32 (sign 1 | exp 8 | mantissa 7).

Activations: F32 as is; F16/BF16 weights get their activations rounded to F16/BF16 first (vec_dot_type).
Dot, F32 and F16: ggml's x86 (AVX512) order, as llama.cpp on this kind of machine computes it: every token
in ggml_vec_dot_f32/f16's (4 x 16 FMA lanes, the GGML_F32x16_REDUCE tree), and with llama_order llama.cpp's
batches (T >= 2) in llamafile tinyBLAS's (one 16-lane FMA accumulator, _mm512_reduce_add_ps).
Dot, BF16: ggml_vec_dot_bf16's scalar path: ggml_float (double) sum of float32 products in index order,
returned as float. (Products of two fp16 or two bf16 values are exact in float32.)
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._vec import fma16, lane16, load16, zero16
from ..attention import _dot_lanes, _tail_add
from ..config import jit, pjit
from ..ggml_type import GGMLType
from ._bits import bf16_to_f32, f16_to_f32
from .base import BlockFormat, register


@pjit
def _dequantize_f32(w, ids, out):
    for i in prange(ids.shape[0]):
        out[i, :] = w[ids[i]]


@pjit
def _dequantize_f16(w, ids, out):
    for i in prange(ids.shape[0]):
        row = w[ids[i]]
        for k in range(out.shape[1]):
            out[i, k] = f16_to_f32(row[k])


@pjit
def _dequantize_bf16(w, ids, out):
    for i in prange(ids.shape[0]):
        row = w[ids[i]]
        for k in range(out.shape[1]):
            out[i, k] = bf16_to_f32(row[k])


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


@pjit
def _gemm_bf16(w, x, out):
    """4 rows per step: four independent double accumulators (each row's sum still in index order)."""
    N, K = w.shape
    T = x.shape[0]
    for g in prange((N + 3) // 4):
        n0 = 4 * g
        n1 = min(n0 + 1, N - 1)
        n2 = min(n0 + 2, N - 1)
        n3 = min(n0 + 3, N - 1)
        for t in range(T):
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            s3 = 0.0
            for k in range(K):
                xv = x[t, k]
                s0 += np.float64(np.float32(bf16_to_f32(w[n0, k]) * xv))
                s1 += np.float64(np.float32(bf16_to_f32(w[n1, k]) * xv))
                s2 += np.float64(np.float32(bf16_to_f32(w[n2, k]) * xv))
                s3 += np.float64(np.float32(bf16_to_f32(w[n3, k]) * xv))
            out[t, n0] = np.float32(s0)
            if n0 + 1 < N:
                out[t, n0 + 1] = np.float32(s1)
            if n0 + 2 < N:
                out[t, n0 + 2] = np.float32(s2)
            if n0 + 3 < N:
                out[t, n0 + 3] = np.float32(s3)


def _dq_f32(raw, ids, out):
    _dequantize_f32(raw.view(np.float32), ids, out)


def _dq_f16(raw, ids, out):
    _dequantize_f16(raw.view(np.uint16), ids, out)


def _dq_bf16(raw, ids, out):
    _dequantize_bf16(raw.view(np.uint16), ids, out)


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
    _gemm_bf16(packed[0], a.x, out)


F32 = register(BlockFormat(GGMLType.F32, 1, 4, GGMLType.F32, _dq_f32, _pack_f32, _mm_f32, _mm_f32, _mm_llama_f32))
F16 = register(BlockFormat(GGMLType.F16, 1, 2, GGMLType.F16, _dq_f16, _pack_16, _mm_f16, _mm_f16, _mm_llama_f16))
BF16 = register(BlockFormat(GGMLType.BF16, 1, 2, GGMLType.BF16, _dq_bf16, _pack_16, _mm_bf16, _mm_bf16))
