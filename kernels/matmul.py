"""ggml's MUL_MAT and GET_ROWS for GGUF weights, computed the way ggml-cpu does (ggml-cpu/ggml-cpu.c
ggml_compute_forward_mul_mat, ops.cpp get_rows).

    w = Weight(ggml_type, data, ne0, ne1, name)   # data: raw GGUF bytes (ne1 rows x row_bytes), uint8
    matmul(w, x, out)                             # out[t, n] = vec_dot(w row n, x row t converted)
    w.get_rows(ids, out)                          # out[i] = dequantized row ids[i]

matmul converts the activations x (T, K) float32 to the weight type's vec_dot_type exactly like ggml
(kernels/quants/activations.py), then every output is one ggml_vec_dot_<type>_<vec_type> (generic C order of
the float scale arithmetic, integer dot products): T == 1 runs the gemv kernel, T > 1 the gemm kernel; both
parallelise over weight rows (numba prange, thread count from kernels.config.set_num_threads) and produce
bit-identical rows, independent of the thread count.
"""

from __future__ import annotations

import numpy as np

from synapse_cli.errors import ModelError

from .ggml_type import type_name
from .quants import get_format, readonly
from .quants.activations import quantize_activations

__all__ = ["Weight", "matmul", "UnsupportedTypeError"]


class UnsupportedTypeError(ModelError):
    """A tensor's ggml type has no matmul / dequantize kernel."""


class Weight:
    """A 2-D GGUF weight ready for matmul: K = ne0 (inner, contiguous), N = ne1 (rows).

    Keeps a read-only view of the raw bytes (for get_rows) and the format's packed form for the kernels
    (which may be the same arrays; never a float expansion)."""

    __slots__ = ("ggml_type", "ne0", "ne1", "name", "fmt", "raw", "packed")

    def __init__(self, ggml_type: int, data: np.ndarray, ne0: int, ne1: int, name: str = ""):
        fmt = get_format(ggml_type)
        label = name or "<unnamed>"
        if fmt is None:
            raise UnsupportedTypeError(
                f"tensor '{label}': ggml type {type_name(ggml_type)} ({int(ggml_type)}) has no matmul kernel")
        ne0, ne1 = int(ne0), int(ne1)
        if ne0 <= 0 or ne1 <= 0 or ne0 % fmt.block_size:
            raise ValueError(f"tensor '{label}': shape [{ne0}, {ne1}] invalid for {fmt.name} "
                             f"(ne0 must be a positive multiple of {fmt.block_size})")
        row_bytes = fmt.row_bytes(ne0)
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8:
            raise ValueError(f"tensor '{label}': data must be a uint8 numpy array of raw GGUF bytes")
        if data.size != ne1 * row_bytes:
            raise ValueError(f"tensor '{label}': {data.size} bytes, expected {ne1} rows x {row_bytes} bytes "
                             f"= {ne1 * row_bytes} for {fmt.name} [{ne0}, {ne1}]")
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        self.ggml_type = fmt.ggml_type
        self.ne0, self.ne1, self.name = ne0, ne1, name
        self.fmt = fmt
        self.raw = readonly(data.reshape(ne1, row_bytes))  # (N, row_bytes)
        self.packed = fmt.pack(self.raw, ne0)

    @property
    def shape(self) -> tuple[int, int]:
        """numpy-style (N, K)."""
        return self.ne1, self.ne0

    def __repr__(self) -> str:
        return f"Weight({self.name!r}, {self.fmt.name}, ne=[{self.ne0}, {self.ne1}])"

    def get_rows(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """ids (n,) int32/int64 -> out (n, K) float32: dequantized rows (ggml GET_ROWS)."""
        label = self.name or "<unnamed>"
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"tensor '{label}': get_rows ids must be a 1-D integer array")
        ids = ids.astype(np.int64, copy=False)
        if ids.size and (ids.min() < 0 or ids.max() >= self.ne1):
            raise ValueError(f"tensor '{label}': row id out of range [0, {self.ne1})")
        _check_out(out, (ids.shape[0], self.ne0), label)
        self.fmt.dequantize_rows(self.raw, ids, out)
        return out


def _check_out(out, shape, label):
    if (not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != shape
            or not out.flags.c_contiguous or not out.flags.writeable):
        got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise ValueError(f"tensor '{label}': out must be a writable C-contiguous float32 array of shape {shape}, "
                         f"got {got}")


def matmul(w: Weight, x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out (T, N) = ggml mul_mat(w, x) for x (T, K) float32 (1-D x / out are taken as T = 1)."""
    label = w.name or "<unnamed>"
    if not isinstance(x, np.ndarray):
        raise ValueError(f"tensor '{label}': x must be a numpy float32 array")
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    if x2.ndim != 2 or x2.shape[1] != w.ne0 or x.dtype != np.float32:
        raise ValueError(f"tensor '{label}': x must be float32 of shape (T, {w.ne0}), got {x.dtype} {x.shape}")
    if not x2.flags.c_contiguous:
        raise ValueError(f"tensor '{label}': x must be C-contiguous")
    T = x2.shape[0]
    out2 = out.reshape(1, -1) if isinstance(out, np.ndarray) and out.ndim == 1 and x.ndim == 1 else out
    _check_out(out2, (T, w.ne1), label)
    if T == 0:
        return out
    a = quantize_activations(w.fmt.vec_dot_type, x2)
    if T == 1:
        w.fmt.gemv(w.packed, a, out2)
    else:
        w.fmt.gemm(w.packed, a, out2)
    return out
