"""Q8_0: 32 weights per block, 8-bit signed quants and one fp16 scale (ggml-common.h block_q8_0).

Block (34 bytes):
    [0:2)   d   fp16 scale
    [2:34)  qs  int8 x 32             w[j] = qs[j] * d

Dequantizer: ggml-quants.c dequantize_row_q8_0. Dot: ggml-cpu/quants.c ggml_vec_dot_q8_0_q8_0_generic
(activations quantized to Q8_0):  sumf += sumi * (dx * dy)  per block, blocks in order.
"""

from __future__ import annotations

from numba import prange

from ..config import pjit
from ..ggml_type import GGMLType
from . import block32, q32
from ._simd import HAS_AVX2
from .base import BlockFormat, register

LAYOUT = block32.Q8_0  # byte offsets, quant offset, dot order (block32.py)
dequantize_rows = block32.dequantizer(LAYOUT)
SCALAR = block32.scalar_path(LAYOUT)  # (pack, mm) of the portable path, tested on every machine


# fast path: q32 family kernels on rows repacked in groups of 8 (layout and constants in q32.py):
# GB=272 bytes per group-block, QH=-1, QS=16, HAS_M=False, SUB=q32.Q8_SUB, MODE=LANES (x86 order), Q8=True

XS = q32.XS  # x86 order: groups of q32.XG rows, layout constants of 8-row groups times XS


def _pack_fast(raw, K):
    return q32.pack(raw, *LAYOUT.raw, 272 * XS, -1, 16 * XS, True, q32.XG)


@pjit
def _gemv(w, qa, yd, ys, asum, out):
    for g in prange(w.shape[0]):
        q32.gemv_group(w, g, 272 * XS, -1, 16 * XS, False, q32.Q8_SUB, q32.LANES, True, qa, yd, ys, asum, out, q32.GEMV_PF)


@pjit
def _gemm(w, qa, yd, ys, asum, out):
    for tile in prange(q32.n_tiles(out.shape[1], qa.shape[0], qa.shape[1], q32.LANES)):
        q32.gemm_tile(w, tile, 272 * XS, -1, 16 * XS, False, q32.Q8_SUB, q32.LANES, True, qa, yd, ys, asum, out)


def _mm_fast(packed, a, out):
    q32.matmul_fast(_gemv, _gemm, q32.Q8_SUB, packed, a, out, lanes=True)


_pack, _mm = (_pack_fast, _mm_fast) if HAS_AVX2 else SCALAR
FORMAT = register(BlockFormat(GGMLType.Q8_0, block32.QK, LAYOUT.block_bytes, GGMLType.Q8_0, dequantize_rows, _pack, _mm, _mm))
