"""Q4_0: 32 weights per block, 4-bit quants with offset 8 and one fp16 scale (ggml-common.h block_q4_0).

Block (18 bytes):
    [0:2)   d   fp16
    [2:18)  qs  16 bytes: byte j = hhhh llll
                 w[j]      = (llll - 8) * d      j in 0..15
                 w[j + 16] = (hhhh - 8) * d

Dequantizer: ggml-quants.c dequantize_row_q4_0. Dot: ggml_vec_dot_q4_0_q8_0_generic (the portable path):
    sumf += sumi * dx * dy   (i.e. (sumi*dx)*dy) per block;
the fast path follows x86 llama.cpp, which repacks Q4_0 (ggml_gemv/gemm_q4_0_8x8_q8_0, arch/x86/repack.cpp):
    sumf = fma((float)sumi, dx * dy, sumf) per block (q32 mode 6), for one token or many.
"""

from __future__ import annotations

from numba import prange

from ..config import pjit
from ..ggml_type import GGMLType
from . import block32, q32
from ._simd import HAS_AVX2
from .base import BlockFormat, llama_repacks, register

LAYOUT = block32.Q4_0  # byte offsets, quant offset, dot order (block32.py)
dequantize_rows = block32.dequantizer(LAYOUT)
SCALAR = block32.scalar_path(LAYOUT)  # (pack, mm) of the portable path, tested on every machine


# fast path: q32 family kernels on rows repacked in groups of 8 (layout and constants in q32.py):
# GB=144 bytes per group-block, QH=-1, QS=16, HAS_M=False, SUB=8, MODE=SUMI_FMA (llama.cpp's repacked q4_0_8x8
# kernels), Q8=False; a weight llama.cpp does not repack (base.llama_repacks) follows its AVX2
# ggml_vec_dot_q4_0_q8_0 and, for batches, tinyBLAS_Q0 (the same order): MODE=LANES in groups of q32.XG rows.

XS = q32.XS  # x86 lane order: groups of q32.XG rows, layout constants of 8-row groups times XS


def _pack_fast(raw, K):
    if llama_repacks(GGMLType.Q4_0, raw.shape[0]):
        return q32.pack(raw, *LAYOUT.raw, 144, -1, 16, False)
    return q32.pack(raw, *LAYOUT.raw, 144 * XS, -1, 16 * XS, False, q32.XG) + ("vec_dot",)


@pjit
def _gemv(w, qa, yd, ys, asum, out):
    for g in prange(w.shape[0]):
        q32.gemv_group(w, g, 144, -1, 16, False, 8, q32.SUMI_FMA, False, qa, yd, ys, asum, out, q32.GEMV_PF)


@pjit
def _gemm(w, qa, yd, ys, asum, out):
    for tile in prange(q32.n_tiles(out.shape[1], qa.shape[0], qa.shape[1], q32.SUMI_FMA)):
        q32.gemm_tile(w, tile, 144, -1, 16, False, 8, q32.SUMI_FMA, False, qa, yd, ys, asum, out)


@pjit
def _gemv_x86(w, qa, yd, ys, asum, out):
    for g in prange(w.shape[0]):
        q32.gemv_group(w, g, 144 * XS, -1, 16 * XS, False, 8, q32.LANES, False, qa, yd, ys, asum, out, q32.GEMV_PF)


@pjit
def _gemm_x86(w, qa, yd, ys, asum, out):
    for tile in prange(q32.n_tiles(out.shape[1], qa.shape[0], qa.shape[1], q32.LANES)):
        q32.gemm_tile(w, tile, 144 * XS, -1, 16 * XS, False, 8, q32.LANES, False, qa, yd, ys, asum, out)


def _mm_fast(packed, a, out):
    if len(packed) > 1:  # not repacked by llama.cpp
        q32.matmul_fast(_gemv_x86, _gemm_x86, 8, packed, a, out, lanes=True)
    else:
        q32.matmul_fast(_gemv, _gemm, 8, packed, a, out)


_pack, _mm = (_pack_fast, _mm_fast) if HAS_AVX2 else SCALAR
FORMAT = register(BlockFormat(GGMLType.Q4_0, block32.QK, LAYOUT.block_bytes, GGMLType.Q8_0, dequantize_rows, _pack, _mm, _mm))
