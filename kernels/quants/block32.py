"""The 32-weight block formats' common arithmetic: one layout record per format (as gguf-py's quants.py describes
every format over one geometry), and the two kernels every such format shares in ggml's portable C:

    dequantize_row_<type> (ggml-quants.c)            w = (float)q * d (+ m)
    ggml_vec_dot_<type>_q8_<0|1>_generic (quants.c)  sumi = sum of q * a over the block (int32), then per block
                                                     sumf += (dx * dy) * sumi (+ mx * sy),  Q4_0: (sumi * dx) * dy

where q is the signed quant: Q8_0's int8, or the 4-bit nibble with the fifth bit of Q5_* on top, minus OFF (8 for
Q4_0, 16 for Q5_0). Element j (j < 16) is byte j's low nibble, element j + 16 its high nibble; Q5's fifth bits
are the uint32 at QH, bit j for element j. The portable path (gemm_scalar) runs on a CPU without AVX2 and under
SYNAPSE_NO_SIMD=1, and is tested against the reference on every machine; the fast paths are q32.py's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import prange

from ..config import jit, pjit
from ..ggml_type import BLOCK_GEOMETRY, GGMLType
from ._bits import f16_to_f32, read_u16, read_u32

QK = 32


class Layout(NamedTuple):
    """Byte offsets inside one block (-1: the format has no such field)."""
    block_bytes: int  # (ggml_type.BLOCK_GEOMETRY's) d (fp16) at 0
    qs: int           # the 16 nibble bytes, or Q8_0's 32 int8
    qh: int           # Q5_*: uint32 of fifth bits
    m: int            # Q4_1, Q5_1: fp16 minimum
    off: int          # subtracted from the unsigned quant (Q4_0: 8, Q5_0: 16)
    q8: bool          # 8-bit signed quants (Q8_0)
    sumi_dx: bool     # Q4_0's dot order: (sumi * dx) * dy

    @property
    def raw(self) -> tuple[int, int, int, int]:
        """(block bytes, qs, qh, m): what q32.repack reads."""
        return self.block_bytes, self.qs, self.qh, self.m


Q4_0 = Layout(BLOCK_GEOMETRY[GGMLType.Q4_0][1], 2, -1, -1, 8, False, True)
Q4_1 = Layout(BLOCK_GEOMETRY[GGMLType.Q4_1][1], 4, -1, 2, 0, False, False)
Q5_0 = Layout(BLOCK_GEOMETRY[GGMLType.Q5_0][1], 6, 2, -1, 16, False, False)
Q5_1 = Layout(BLOCK_GEOMETRY[GGMLType.Q5_1][1], 8, 4, 2, 0, False, False)
Q8_0 = Layout(BLOCK_GEOMETRY[GGMLType.Q8_0][1], 2, -1, -1, 0, True, False)


@jit
def _quants(row, o, j, qh, QS, OFF, Q8):
    """Signed quants of elements j and j + 16 (j < 16) of the block at byte o; qh: its fifth bits (0 without)."""
    if Q8:
        return np.int32(np.int8(row[o + QS + j])), np.int32(np.int8(row[o + QS + 16 + j]))
    q = row[o + QS + j]
    lo = np.int32(q & 0xF) | (np.int32((qh >> np.uint32(j)) & np.uint32(1)) << 4)
    hi = np.int32(q >> 4) | (np.int32((qh >> np.uint32(j + 16)) & np.uint32(1)) << 4)
    return lo - np.int32(OFF), hi - np.int32(OFF)


@jit
def _dequantize_rows(raw, ids, out, BB, QS, QH, M, OFF, Q8):
    K = out.shape[1]
    for i in range(ids.shape[0]):
        row = raw[ids[i]]
        for b in range(K // QK):
            o = b * BB
            d = f16_to_f32(read_u16(row, o))
            m = f16_to_f32(read_u16(row, o + M)) if M >= 0 else np.float32(-0.0)  # x + -0.0 == x, bit for bit
            qh = read_u32(row, o + QH) if QH >= 0 else np.uint32(0)
            for j in range(QK // 2):
                lo, hi = _quants(row, o, j, qh, QS, OFF, Q8)
                out[i, b * QK + j] = np.float32(lo) * d + m
                out[i, b * QK + j + 16] = np.float32(hi) * d + m


@jit
def _dot(row, qs, yd, ys, BB, QS, QH, M, OFF, Q8, SUMI_DX):
    """One weight row (row_bytes,) against one activation row: qs (K,) int8, yd / ys (K/32,) its scales / sums."""
    sumf = np.float32(0.0)
    for b in range(yd.shape[0]):
        o = b * BB
        sumi = np.int32(0)
        qh = read_u32(row, o + QH) if QH >= 0 else np.uint32(0)
        for j in range(QK // 2):
            lo, hi = _quants(row, o, j, qh, QS, OFF, Q8)
            sumi = np.int32(sumi + lo * np.int32(qs[b * QK + j]))
            sumi = np.int32(sumi + hi * np.int32(qs[b * QK + j + 16]))
        dx = f16_to_f32(read_u16(row, o))
        if SUMI_DX:
            p = np.float32(np.float32(sumi) * dx) * yd[b]
        else:
            p = np.float32(dx * yd[b]) * np.float32(sumi)
        if M >= 0:
            p = p + np.float32(f16_to_f32(read_u16(row, o + M)) * ys[b])
        sumf = sumf + p
    return sumf


@pjit
def _gemm_scalar(raw, qs, yd, ys, out, BB, QS, QH, M, OFF, Q8, SUMI_DX):
    for n in prange(raw.shape[0]):
        for t in range(qs.shape[0]):
            out[t, n] = _dot(raw[n], qs[t], yd[t], ys[t], BB, QS, QH, M, OFF, Q8, SUMI_DX)


def dequantizer(layout: Layout):
    """The format's dequantize_rows(raw (n_rows, row_bytes) uint8, ids (m,) int64, out (m, K) float32)."""
    def dequantize_rows(raw, ids, out):
        _dequantize_rows(raw, ids, out, *layout[:6])
    return dequantize_rows


def scalar_path(layout: Layout):
    """(pack, mm) of the portable path: the rows as stored, ggml's generic dot for every (row, token)."""
    def pack(raw, K):
        return (raw,)

    def mm(packed, a, out):
        _gemm_scalar(packed[0], a.qs, a.d, a.s if a.s is not None else a.d, out, *layout)
    return pack, mm
