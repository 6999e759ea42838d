"""Compile, in a second process, kernels that tests compile later in the session (conftest starts it).

numba compiles on one core; a cold test session (CI's clean clone) spends most of its time there while the other
core idles. This script calls the kernels most tests reach - the attention kernel for both cache types (about a
minute each), and every weight type's products (one token, a batch in synapse's and in llama.cpp's orders,
get_rows) through kernels.matmul - so their machine code is in the shared kernel cache (NUMBA_CACHE_DIR) by the
time a test asks for it (6 min of compiling on its own). It runs at a low priority, computes nothing the tests
use, and with a warm cache only loads what is there.

    python tests/precompile.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def attention_kernels() -> None:
    from kernels.attention import attention, kv_store

    G, H, D, n_ctx, n_kv, T = 2, 4, 64, 512, 70, 3
    for dt in (np.float32, np.uint16):  # the F16 one is the first test_attention compiles itself
        kc, vc = np.zeros((n_ctx, G, D), dt), np.zeros((G, D, n_ctx), dt)
        kv_store(kc, vc, np.ones((n_kv, G, D), np.float32), np.ones((n_kv, G, D), np.float32),
                 np.arange(n_kv, dtype=np.int32))
        kv_pos = np.arange(n_ctx, dtype=np.int32)
        kv_pos[n_kv:] = -1
        q = np.ones((T, H, D), np.float32)
        attention(q, kc, vc, n_kv, kv_pos, np.arange(n_kv - T, n_kv, dtype=np.int32), 0.125,
                  np.empty((T, H * D), np.float32))


def weight_products() -> None:
    from kernels.ggml_type import BLOCK_GEOMETRY, GGMLType
    from kernels.matmul import Weight, matmul
    from kernels.order import Order

    for t in (GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0, GGMLType.Q4_K,
              GGMLType.Q6_K, GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q5_K, GGMLType.F16, GGMLType.BF16,
              GGMLType.F32, GGMLType.IQ4_NL, GGMLType.IQ4_XS, GGMLType.IQ2_XXS, GGMLType.IQ2_XS, GGMLType.IQ2_S,
              GGMLType.IQ3_XXS, GGMLType.IQ3_S, GGMLType.IQ1_S, GGMLType.IQ1_M,
              GGMLType.TQ1_0, GGMLType.TQ2_0, GGMLType.Q1_0, GGMLType.Q2_0):
        qk, size = BLOCK_GEOMETRY[t]
        K, N = 256, 8
        w = Weight(t, np.zeros(N * K // qk * size, np.uint8), K, N, t.name)
        for T, order in ((1, Order.SINGLE), (3, Order.SINGLE), (8, Order.LLAMA)):  # decode, prefill, llama's batch
            matmul(w, np.ones((T, K), np.float32), np.empty((T, N), np.float32), order)
        w.get_rows(np.array([1, 2]), np.empty((2, K), np.float32))


if __name__ == "__main__":
    os.nice(10)  # the tests' own parallel kernels come first
    attention_kernels()
    weight_products()
