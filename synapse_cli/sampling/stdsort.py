"""libstdc++'s std::sort and std::partial_sort (GCC 12, bits/stl_algo.h, stl_heap.h), ported step for step.

llama.cpp's samplers sort `llama_token_data` by logit with these two algorithms. Neither is stable, so the
order of equal logits, and with it which token a seeded draw lands on, is whatever libstdc++'s introsort
or heap select leaves. To give the same tokens, the same algorithm runs here: on a permutation `perm`
(int64) of positions into a float32 `key`, compared with `key[a] > key[b]` (descending, as llama.cpp's
`a.logit > b.logit`) or `key[a] < key[b]` (ascending, typical sampling's shifted scores). Moving
permutation entries moves records exactly as moving the structs does.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_THRESHOLD = 16  # _S_threshold


@njit(cache=True, inline="always")
def _comp(key, desc, a, b):
    return key[a] > key[b] if desc else key[a] < key[b]


@njit(cache=True)
def _push_heap(perm, first, hole, top, value, key, desc):
    parent = (hole - 1) // 2
    while hole > top and _comp(key, desc, perm[first + parent], value):
        perm[first + hole] = perm[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    perm[first + hole] = value


@njit(cache=True)
def _adjust_heap(perm, first, hole, length, value, key, desc):
    top = hole
    second = hole
    while second < (length - 1) // 2:
        second = 2 * (second + 1)
        if _comp(key, desc, perm[first + second], perm[first + second - 1]):
            second -= 1
        perm[first + hole] = perm[first + second]
        hole = second
    if (length & 1) == 0 and second == (length - 2) // 2:
        second = 2 * (second + 1)
        perm[first + hole] = perm[first + second - 1]
        hole = second - 1
    _push_heap(perm, first, hole, top, value, key, desc)


@njit(cache=True)
def _make_heap(perm, first, last, key, desc):
    length = last - first
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        _adjust_heap(perm, first, parent, length, perm[first + parent], key, desc)
        if parent == 0:
            return
        parent -= 1


@njit(cache=True)
def _pop_heap(perm, first, last, result, key, desc):
    value = perm[result]
    perm[result] = perm[first]
    _adjust_heap(perm, first, 0, last - first, value, key, desc)


@njit(cache=True)
def _partial_sort(perm, first, middle, last, key, desc):
    """__partial_sort = __heap_select + __sort_heap."""
    _make_heap(perm, first, middle, key, desc)
    for i in range(middle, last):
        if _comp(key, desc, perm[i], perm[first]):
            _pop_heap(perm, first, middle, i, key, desc)
    end = middle
    while end - first > 1:
        end -= 1
        _pop_heap(perm, first, end, end, key, desc)


@njit(cache=True)
def _unguarded_linear_insert(perm, last, key, desc):
    val = perm[last]
    nxt = last - 1
    while _comp(key, desc, val, perm[nxt]):
        perm[last] = perm[nxt]
        last = nxt
        nxt -= 1
    perm[last] = val


@njit(cache=True)
def _insertion_sort(perm, first, last, key, desc):
    if first == last:
        return
    for i in range(first + 1, last):
        if _comp(key, desc, perm[i], perm[first]):
            val = perm[i]
            for j in range(i, first, -1):  # move_backward
                perm[j] = perm[j - 1]
            perm[first] = val
        else:
            _unguarded_linear_insert(perm, i, key, desc)


@njit(cache=True)
def _move_median_to_first(perm, result, a, b, c, key, desc):
    pa, pb, pc = perm[a], perm[b], perm[c]
    if _comp(key, desc, pa, pb):
        if _comp(key, desc, pb, pc):
            swap = b
        elif _comp(key, desc, pa, pc):
            swap = c
        else:
            swap = a
    elif _comp(key, desc, pa, pc):
        swap = a
    elif _comp(key, desc, pb, pc):
        swap = c
    else:
        swap = b
    perm[result], perm[swap] = perm[swap], perm[result]


@njit(cache=True)
def _unguarded_partition(perm, first, last, pivot, key, desc):
    while True:
        while _comp(key, desc, perm[first], perm[pivot]):
            first += 1
        last -= 1
        while _comp(key, desc, perm[pivot], perm[last]):
            last -= 1
        if not first < last:
            return first
        perm[first], perm[last] = perm[last], perm[first]
        first += 1


@njit(cache=True)
def _introsort_loop(perm, first, last, depth, key, desc):
    # the recursion on the right part, iteration on the left, as libstdc++ (an explicit stack here)
    stack = np.empty((128, 3), np.int64)
    sp = 0
    stack[0, 0], stack[0, 1], stack[0, 2] = first, last, depth
    sp = 1
    while sp > 0:
        sp -= 1
        first, last, depth = stack[sp, 0], stack[sp, 1], stack[sp, 2]
        while last - first > _THRESHOLD:
            if depth == 0:
                _partial_sort(perm, first, last, last, key, desc)
                break
            depth -= 1
            mid = first + (last - first) // 2
            _move_median_to_first(perm, first, first + 1, mid, last - 1, key, desc)
            cut = _unguarded_partition(perm, first + 1, last, first, key, desc)
            # libstdc++ recurses into [cut, last) *before* continuing with [first, cut): finish the right part
            # first by pushing the left part under it
            stack[sp, 0], stack[sp, 1], stack[sp, 2] = first, cut, depth
            sp += 1
            first = cut
        # (the right part's loop ended; the left part pops next)


@njit(cache=True)
def std_sort(perm, first, last, key, desc):
    """std::sort(perm + first, perm + last, comp)."""
    if first == last:
        return
    n = last - first
    lg = 63
    while not (n >> lg) & 1:
        lg -= 1
    _introsort_loop(perm, first, last, 2 * lg, key, desc)
    if last - first > _THRESHOLD:
        _insertion_sort(perm, first, first + _THRESHOLD, key, desc)
        for i in range(first + _THRESHOLD, last):
            _unguarded_linear_insert(perm, i, key, desc)
    else:
        _insertion_sort(perm, first, last, key, desc)


@njit(cache=True)
def std_partial_sort(perm, first, middle, last, key, desc):
    """std::partial_sort(perm + first, perm + middle, perm + last, comp)."""
    _partial_sort(perm, first, middle, last, key, desc)
