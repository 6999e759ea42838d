"""The random numbers of llama.cpp's samplers: std::mt19937 and libstdc++'s distributions, ported exactly.

llama.cpp seeds one `std::mt19937` per sampler that draws (dist, xtc, mirostat, adaptive-p) and draws through
`std::uniform_real_distribution<double|float>` and `std::discrete_distribution<int>`. The same seed must
give the same tokens, so the engine and the distributions follow libstdc++ (GCC 12, bits/random.tcc)
operation by operation:

- `generate_canonical<T, digits>`: ceil(digits / 32) engine calls, `sum += T(u) * tmp; tmp *= 2^32`, then
  `sum / tmp`, and a result >= 1 replaced by nextafter(1, 0);
- `discrete_distribution`: probabilities widened to double, normalised by their sequential sum, cumulated
  (the last set to 1.0), then `lower_bound` of one canonical double; fewer than two weights draw nothing.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

_N, _M = 624, 397
_MATRIX_A, _UPPER, _LOWER = 0x9908B0DF, 0x80000000, 0x7FFFFFFF
_TWO32 = 4294967296.0


class MT19937:
    """std::mt19937: the 32-bit Mersenne Twister, seeded as the standard says (`seed(s)`)."""

    def __init__(self, seed: int = 5489):
        self.seed(seed)

    def seed(self, seed: int) -> None:
        mt = [0] * _N
        mt[0] = seed & 0xFFFFFFFF
        for i in range(1, _N):
            mt[i] = (1812433253 * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i) & 0xFFFFFFFF
        self.mt, self.index = mt, _N

    def _twist(self) -> None:
        mt = self.mt
        for i in range(_N):
            y = (mt[i] & _UPPER) | (mt[(i + 1) % _N] & _LOWER)
            mt[i] = mt[(i + _M) % _N] ^ (y >> 1) ^ (_MATRIX_A if y & 1 else 0)
        self.index = 0

    def __call__(self) -> int:
        if self.index >= _N:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        return y

    def copy(self) -> "MT19937":
        other = MT19937.__new__(MT19937)
        other.mt, other.index = list(self.mt), self.index
        return other


def canonical_double(rng: MT19937) -> float:
    """generate_canonical<double, 53>: two draws, (u0 + u1 * 2^32) / 2^64 (the sum rounds to double)."""
    s = float(rng())
    s += float(rng()) * _TWO32
    r = s / (_TWO32 * _TWO32)
    return math.nextafter(1.0, 0.0) if r >= 1.0 else r


def canonical_float(rng: MT19937) -> np.float32:
    """generate_canonical<float, 24>: one draw rounded to float, divided by 2^32 in float."""
    r = np.float32(rng()) / np.float32(_TWO32)
    return np.nextafter(np.float32(1), np.float32(0)) if r >= np.float32(1) else r


def uniform_real_double(rng: MT19937) -> float:
    """std::uniform_real_distribution<double>(0, 1)(rng): canonical * (1 - 0) + 0."""
    return canonical_double(rng)


def uniform_real_float(rng: MT19937) -> np.float32:
    """std::uniform_real_distribution<float>(0, 1)(rng)."""
    return canonical_float(rng)


def discrete_distribution(probs, rng: MT19937) -> int:
    """std::discrete_distribution<int>(probs.begin(), probs.end())(rng) for float weights (llama_sample_dist)."""
    w = [float(p) for p in probs]
    if len(w) < 2:  # libstdc++ keeps no table and draws nothing
        return 0
    total = 0.0
    for x in w:
        total += x
    cum, run = [], 0.0
    for x in w:
        run += x / total
        cum.append(run)
    cum[-1] = 1.0
    return bisect.bisect_left(cum, canonical_double(rng))


def uniform_int(rng: MT19937, a: int, b: int) -> int:
    """std::uniform_int_distribution<size_t>(a, b)(rng) of libstdc++ (GCC 12) for a 32-bit engine: a range below
    2^32 takes Lemire's nearly divisionless method with 64-bit products (`_S_nd`), as llama-perplexity's task
    selection draws."""
    urange = b - a
    if urange >= 0xFFFFFFFF:
        raise ValueError("uniform_int: ranges of 2^32 values or more are not ported")
    erange = urange + 1
    product = rng() * erange
    low = product & 0xFFFFFFFF
    if low < erange:
        threshold = (-erange & 0xFFFFFFFF) % erange
        while low < threshold:
            product = rng() * erange
            low = product & 0xFFFFFFFF
    return a + (product >> 32)
