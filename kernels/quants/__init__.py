"""ggml block formats: one module per format (or family), registered in FORMATS by ggml type id.

    floats  F32, F16, BF16        q4_0, q4_1, q5_0, q5_1, q8_0   (32-weight blocks, Q8_0/Q8_1 activations)
    q2_k, q3_k, q4_k, q5_k, q6_k  (256-weight super-blocks, Q8_K activations)
    iq_grid                       IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (super-blocks of grid entries, Q8_K)
    iq1                           IQ1_S, IQ1_M (super-blocks of ternary grid entries shifted by +-1/8, Q8_K)
    tq                            TQ1_0, TQ2_0 (super-blocks of ternary weights, Q8_K)
    lowbit                        Q1_0, Q2_0 (128- / 64-weight blocks of 1- / 2-bit weights, Q8_0 activations)
    iq4                           IQ4_NL (32-weight blocks, Q8_0 activations), IQ4_XS (super-blocks, Q8_K)
    fp4                           MXFP4 (IQ4_NL's kernels), NVFP4 (64-weight blocks of 4-bit floats, Q8_0)
    vec_dot_type                  float32 -> Q8_0 / Q8_1 / Q8_K / F16 / BF16 as ggml-cpu's from_float

Importing this package compiles nothing (kernels are compiled, or loaded from the numba cache, on first call).
"""

from __future__ import annotations

from . import (floats, fp4, iq1, iq4, iq_grid, lowbit, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0,  # noqa: F401
               q5_1, q5_k, q6_k, q8_0, tq)  # (register)
from .base import FORMATS, BlockFormat, readonly

__all__ = ["FORMATS", "BlockFormat", "get_format", "readonly"]


def get_format(ggml_type: int) -> BlockFormat | None:
    return FORMATS.get(int(ggml_type))
