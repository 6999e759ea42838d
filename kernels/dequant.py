"""Dequantize a whole GGUF tensor to float32, bit-exact with ggml's dequantize_row_<type> (ggml-quants.c) and
gguf-py's gguf.quants.dequantize. The per-format code lives in kernels/quants/<format>.py."""

from __future__ import annotations

from math import gcd

import numpy as np

from .ggml_type import type_name
from .matmul import UnsupportedTypeError
from .quants import get_format, readonly

__all__ = ["dequantize", "UnsupportedTypeError"]


def dequantize(ggml_type: int, data: np.ndarray, n_elements: int) -> np.ndarray:
    """data: raw bytes (uint8) of a tensor of `n_elements` elements -> float32 (n_elements,)."""
    fmt = get_format(ggml_type)
    if fmt is None:
        raise UnsupportedTypeError(f"ggml type {type_name(ggml_type)} ({int(ggml_type)}) has no dequantizer")
    n_elements = int(n_elements)
    if n_elements < 0 or n_elements % fmt.block_size:
        raise ValueError(f"{n_elements} elements is not a whole number of {fmt.name} blocks of {fmt.block_size}")
    n_blocks = n_elements // fmt.block_size
    nbytes = n_blocks * fmt.type_size
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.size < nbytes:
        raise ValueError(f"{fmt.name}: need {nbytes} bytes (uint8) for {n_elements} elements, got "
                         f"{data.size} ({data.dtype})")
    out = np.empty(n_elements, np.float32)
    if n_blocks == 0:
        return out
    # the blocks as rows of g blocks (the kernels take rows; any split gives the same values)
    g = gcd(n_blocks, 64)
    rows = n_blocks // g
    raw = readonly(np.ascontiguousarray(data.reshape(-1)[:nbytes]).reshape(rows, g * fmt.type_size))
    fmt.dequantize_rows(raw, np.arange(rows, dtype=np.int64), out.reshape(rows, g * fmt.block_size))
    return out
