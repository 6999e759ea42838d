"""llama_token_data_array and the helpers every sampler of src/llama-sampler.cpp shares.

A candidate list is three parallel arrays, `ids` (int32), `logit` and `p` (float32), each `size` long, plus
llama.cpp's `sorted` flag (descending logits) and the `selected` index a final sampler sets. Shrinking the
list (`size = k`) is slicing; reordering applies one permutation to all three arrays, which is what moving
the structs does.

Float arithmetic follows the C++ statement by statement in float32 (numba's `math.exp/log/pow` on float32
call the C library's expf/logf/powf, as llama.cpp does). `a * b + c` is two roundings, the product's and the
sum's (`muladd32`): libllama's sources are compiled without -march (GGML_NATIVE only reaches ggml's CPU
backend), so GCC has no FMA instruction to contract them into - its libllama.so holds none, and the
dynamic-temperature sampler's entropy sum matches it this way only (tests/test_sampling.py).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .stdsort import std_partial_sort, std_sort


class TokenDataArray:
    def __init__(self, ids: np.ndarray, logit: np.ndarray, p: np.ndarray | None = None, is_sorted: bool = False):
        self.ids = ids                                                          # [size] int32
        self.logit = logit                                                      # [size] float32
        self.p = np.zeros(len(ids), np.float32) if p is None else p             # [size] float32
        self.sorted = is_sorted
        self.selected = -1

    @classmethod
    def from_logits(cls, logits: np.ndarray) -> "TokenDataArray":
        """common_sampler::set_logits: every vocabulary entry, id = index, p = 0."""
        return cls(np.arange(len(logits), dtype=np.int32), np.array(logits, dtype=np.float32, copy=True))

    @property
    def size(self) -> int:
        return len(self.ids)

    def resize(self, n: int) -> None:
        self.ids, self.logit, self.p = self.ids[:n], self.logit[:n], self.p[:n]

    def drop_front(self, n: int) -> None:
        """`cur_p->data += n; cur_p->size -= n` (XTC)."""
        self.ids, self.logit, self.p = self.ids[n:], self.logit[n:], self.p[n:]

    def take(self, perm: np.ndarray) -> None:
        """Reorder (and cut) the records by positions `perm`."""
        self.ids, self.logit, self.p = self.ids[perm], self.logit[perm], self.p[perm]


@njit(cache=True)
def muladd32(a, b, c):
    """float a * b + c as libllama computes it: the product rounded to float, then the sum."""
    return np.float32(np.float32(np.float64(a) * np.float64(b)) + np.float32(c))


@njit(cache=True)
def _bucket_partial_sort(logit, npartial):
    """llama_token_data_array_partial_sort: the positions of the top `npartial` logits, sorted descending,
    followed by the rest of the last bucket (unsorted); returns (perm [nhave], npartial)."""
    nbuckets = 128
    scale = np.float32(nbuckets / 20.0)       # bucket_scale = nbuckets / (10 - -10)
    inter = np.float32(10.0) * scale          # bucket_inter = -bucket_low * bucket_scale
    n = logit.size
    bucket = np.empty(n, np.int64)
    histo = np.zeros(nbuckets, np.int64)
    for i in range(n):
        ib = int(muladd32(scale, logit[i], inter))  # bucket_scale * val + bucket_inter
        ib = max(0, min(nbuckets - 1, ib))
        bucket[i] = ib
        histo[ib] += 1
    nhave = 0
    ib = nbuckets - 1
    while ib >= 0:
        nhave += histo[ib]
        if nhave >= npartial:
            break
        ib -= 1
    if ib < 0:  # (npartial > n cannot happen: callers clamp)
        ib = 0
    start = np.zeros(nbuckets, np.int64)
    pos = 0
    for j in range(nbuckets - 1, ib - 1, -1):
        start[j] = pos
        pos += histo[j]
    perm = np.empty(nhave, np.int64)
    for i in range(n):
        j = bucket[i]
        if j >= ib:
            perm[start[j]] = i
            start[j] += 1
    first = 0
    ndone = 0
    for j in range(nbuckets - 1, ib, -1):
        std_sort(perm, first, first + histo[j], logit, True)
        first += histo[j]
        ndone += histo[j]
    std_partial_sort(perm, first, first + npartial - ndone, first + histo[ib], logit, True)
    return perm


def partial_sort(cur: TokenDataArray, npartial: int) -> np.ndarray:
    """llama_token_data_array_partial_sort (writes to a buffer, leaves `cur` alone): positions, sorted first
    `npartial`."""
    return _bucket_partial_sort(cur.logit, npartial)


def partial_sort_inplace(cur: TokenDataArray, npartial: int) -> None:
    """llama_token_data_array_partial_sort_inplace: keep the top `npartial`, sorted."""
    if npartial <= 128:
        perm = np.arange(cur.size, dtype=np.int64)
        std_partial_sort(perm, 0, npartial, cur.size, cur.logit, True)
        cur.take(perm[:npartial])
    else:
        cur.take(_bucket_partial_sort(cur.logit, npartial)[:npartial])
    cur.sorted = True


@njit(cache=True)
def _softmax(logit, p, is_sorted):
    max_l = logit[0]
    if not is_sorted:
        for i in range(1, logit.size):
            if max_l < logit[i]:  # std::max(max_l, x)
                max_l = logit[i]
    cum_sum = np.float32(0.0)
    for i in range(logit.size):
        e = np.float32(math.exp(logit[i] - max_l))
        p[i] = e
        cum_sum += e
    for i in range(logit.size):
        p[i] = p[i] / cum_sum


def softmax(cur: TokenDataArray, do_sort: bool) -> None:
    """llama_sampler_softmax_impl."""
    assert cur.size > 0
    if do_sort and not cur.sorted:
        partial_sort_inplace(cur, cur.size)
    _softmax(cur.logit, cur.p, cur.sorted)


def temp_impl(cur: TokenDataArray, temp: float) -> None:
    """llama_sampler_temp_impl: divide by the temperature; temp <= 0 keeps the first maximum only."""
    if cur.size == 0:
        return
    if temp <= 0.0:
        keep = int(np.argmax(cur.logit))  # the first maximum (strict > scan)
        mx = cur.logit[keep]
        cur.logit[:] = -np.inf
        cur.logit[keep] = mx
        return
    cur.logit /= np.float32(temp)


def top_k_impl(cur: TokenDataArray, k: int) -> None:
    """llama_sampler_top_k_impl."""
    if k <= 0:
        return
    k = min(k, cur.size)
    if not cur.sorted:
        partial_sort_inplace(cur, k)
    cur.resize(k)
