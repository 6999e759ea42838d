"""Whose float order the rows of a batch follow (no numba here: the CLI imports it at start-up).

llama.cpp computes a row differently by batch size: its products and attention have single-token and batched
kernels (kernels/matmul.py, kernels/flash_attn.py, kernels/attention.py), so its logits depend on how a prompt is
split into batches. synapse picks one of three orders per context.
"""

from __future__ import annotations

import enum


class Order(enum.IntEnum):
    """A bool passes for the first two (False: SINGLE, True: LLAMA)."""

    SINGLE = 0  # llama.cpp's single-token kernels for every row: a prompt in any split equals token by token
    LLAMA = 1  # llama.cpp's own choice for this batch: its logits depend on how a prompt is split
    BATCHED = 2  # llama.cpp's kernels of large batches (64+ rows) for every row: batch-invariant as SINGLE,
    # and equal to llama.cpp where all its batches are large (perplexity)
