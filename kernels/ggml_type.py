"""ggml's tensor types: ids, names and block geometry (ggml/include/ggml.h, gguf-py constants).

Pure data, no numba: the GGUF reader and `inspect-gguf` use this table to list files whose types
we cannot compute, and importing it never compiles a kernel.
"""

from __future__ import annotations

from enum import IntEnum

QK_K = 256  # super-block size of the K-quants


class GGMLType(IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41
    Q2_0 = 42


# type -> (elements per block, bytes per block); byte counts written as the block's fields
BLOCK_GEOMETRY: dict[GGMLType, tuple[int, int]] = {
    GGMLType.F32: (1, 4),
    GGMLType.F16: (1, 2),
    GGMLType.Q4_0: (32, 2 + 16),
    GGMLType.Q4_1: (32, 2 + 2 + 16),
    GGMLType.Q5_0: (32, 2 + 4 + 16),
    GGMLType.Q5_1: (32, 2 + 2 + 4 + 16),
    GGMLType.Q8_0: (32, 2 + 32),
    GGMLType.Q8_1: (32, 2 + 2 + 32),
    GGMLType.Q2_K: (QK_K, 2 + 2 + QK_K // 16 + QK_K // 4),
    GGMLType.Q3_K: (QK_K, 2 + QK_K // 4 + QK_K // 8 + 12),
    GGMLType.Q4_K: (QK_K, 2 + 2 + QK_K // 2 + 12),
    GGMLType.Q5_K: (QK_K, 2 + 2 + QK_K // 2 + QK_K // 8 + 12),
    GGMLType.Q6_K: (QK_K, 2 + QK_K // 2 + QK_K // 4 + QK_K // 16),
    GGMLType.Q8_K: (QK_K, 4 + QK_K + QK_K // 8),
    GGMLType.IQ2_XXS: (QK_K, 2 + QK_K // 4),
    GGMLType.IQ2_XS: (QK_K, 2 + QK_K // 4 + QK_K // 32),
    GGMLType.IQ3_XXS: (QK_K, 2 + QK_K // 4 + QK_K // 8),
    GGMLType.IQ1_S: (QK_K, 2 + QK_K // 8 + QK_K // 16),
    GGMLType.IQ4_NL: (32, 2 + 16),
    GGMLType.IQ3_S: (QK_K, 2 + QK_K // 4 + QK_K // 8 + QK_K // 32 + 4),
    GGMLType.IQ2_S: (QK_K, 2 + QK_K // 4 + QK_K // 16),
    GGMLType.IQ4_XS: (QK_K, 2 + 2 + QK_K // 2 + QK_K // 64),
    GGMLType.I8: (1, 1),
    GGMLType.I16: (1, 2),
    GGMLType.I32: (1, 4),
    GGMLType.I64: (1, 8),
    GGMLType.F64: (1, 8),
    GGMLType.IQ1_M: (QK_K, QK_K // 8 + QK_K // 16 + QK_K // 32),
    GGMLType.BF16: (1, 2),
    GGMLType.TQ1_0: (QK_K, 2 + 4 * 13),
    GGMLType.TQ2_0: (QK_K, 2 + 64),
    GGMLType.MXFP4: (32, 1 + 16),
    GGMLType.NVFP4: (64, 4 + 32),
    GGMLType.Q1_0: (128, 2 + 16),
    GGMLType.Q2_0: (64, 2 + 16),
}


def type_name(type_id: int) -> str:
    try:
        return GGMLType(type_id).name
    except ValueError:
        return f"type{type_id}"


def row_bytes(ggml_type: GGMLType, n_per_row: int) -> int:
    """Bytes of one row of `n_per_row` elements (which must be a whole number of blocks)."""
    blck, size = BLOCK_GEOMETRY[ggml_type]
    if n_per_row % blck:
        raise ValueError(f"row of {n_per_row} elements is not a multiple of {ggml_type.name}'s block {blck}")
    return n_per_row // blck * size
