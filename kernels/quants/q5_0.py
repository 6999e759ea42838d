"""Q5_0: 32 weights per block, 5-bit quants with offset 16 and one fp16 scale (ggml-common.h block_q5_0).

Block (22 bytes):
    [0:2)   d   fp16
    [2:6)   qh  uint32 little endian: bit j = 5th bit of weight j (j in 0..31)
    [6:22)  qs  16 bytes: byte j = hhhh llll
                 w[j]      = ((llll | bit j      << 4) - 16) * d
                 w[j + 16] = ((hhhh | bit (j+16) << 4) - 16) * d

Dequantizer: dequantize_row_q5_0. Dot: ggml_vec_dot_q5_0_q8_0_generic: sumf += (dx*dy) * sumi.
"""

from __future__ import annotations

from numba import prange

from ..config import pjit
from ..ggml_type import GGMLType
from . import block32, q32
from ._simd import HAS_AVX2
from .base import BlockFormat, register

LAYOUT = block32.Q5_0  # byte offsets, quant offset, dot order (block32.py)
dequantize_rows = block32.dequantizer(LAYOUT)
SCALAR = block32.scalar_path(LAYOUT)  # (pack, mm) of the portable path, tested on every machine


# fast path: q32 family kernels on rows repacked in groups of 8 (layout and constants in q32.py):
# GB=176 bytes per group-block, QH=16, QS=48, HAS_M=False, SUB=16, MODE=LANES (x86 order), Q8=False

XS = q32.XS  # x86 order: groups of q32.XG rows, layout constants of 8-row groups times XS


def _pack_fast(raw, K):
    return q32.pack(raw, *LAYOUT.raw, 176 * XS, 16 * XS, 48 * XS, False, q32.XG)


@pjit
def _gemv(w, qa, yd, ys, asum, out):
    for g in prange(w.shape[0]):
        q32.gemv_group(w, g, 176 * XS, 16 * XS, 48 * XS, False, 16, q32.LANES, False, qa, yd, ys, asum, out, q32.GEMV_PF)


@pjit
def _gemm(w, qa, yd, ys, asum, out):
    for tile in prange(q32.n_tiles(out.shape[1], qa.shape[0], qa.shape[1], q32.LANES)):
        q32.gemm_tile(w, tile, 176 * XS, 16 * XS, 48 * XS, False, 16, q32.LANES, False, qa, yd, ys, asum, out)


def _mm_fast(packed, a, out):
    q32.matmul_fast(_gemv, _gemm, 16, packed, a, out, lanes=True)


_pack, _mm = (_pack_fast, _mm_fast) if HAS_AVX2 else SCALAR
FORMAT = register(BlockFormat(GGMLType.Q5_0, block32.QK, LAYOUT.block_bytes, GGMLType.Q8_0, dequantize_rows, _pack, _mm, _mm))
