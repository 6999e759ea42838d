"""The samplers of src/llama-sampler.cpp, one class each, with llama.cpp's names, state and arithmetic.

Each sampler has `name` (as llama.cpp prints it in the sampler chain; a "?" prefix marks one its
parameters switch off, which llama.cpp builds as an empty sampler), `apply(cur)` on a `TokenDataArray`,
`accept(token)` (every prompt and generated token, as common_sampler_accept) and `reset()` (reseeds the
random engine from the original seed, as llama_sampler_reset).
"""

from __future__ import annotations

import math
import secrets
from collections import deque

import numpy as np
from numba import njit

from .rng import MT19937, discrete_distribution, uniform_real_double, uniform_real_float
from .stdsort import std_sort
from .token_data import TokenDataArray, muladd32, partial_sort, partial_sort_inplace, softmax, temp_impl, top_k_impl

DEFAULT_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: draw a random seed
F32 = np.float32


def rng_seed(seed: int) -> int:
    """get_rng_seed: LLAMA_DEFAULT_SEED asks std::random_device for one."""
    return secrets.randbits(32) if seed == DEFAULT_SEED else seed


def c_int(x) -> int:
    """A C `int(float)` conversion as x86 does it: truncation, INT_MIN for NaN and out-of-range values."""
    x = float(x)
    if math.isnan(x) or not -2147483648.0 <= x < 2147483648.0:
        return -2147483648
    return int(x)


class Sampler:
    name = "?"

    def apply(self, cur: TokenDataArray) -> None:
        pass

    def accept(self, token: int) -> None:
        pass

    def reset(self) -> None:
        pass


class Empty(Sampler):
    """llama_sampler_init_empty: what llama.cpp builds for a switched-off sampler."""

    def __init__(self, name: str):
        self.name = name


class _Seeded(Sampler):
    def __init__(self, seed: int):
        self.seed = seed
        self.seed_cur = rng_seed(seed)
        self.rng = MT19937(self.seed_cur)

    def reset(self) -> None:
        self.seed_cur = rng_seed(self.seed)
        self.rng.seed(self.seed_cur)


# --- dist ---------------------------------------------------------------------------------------------

@njit(cache=True)
def _dist_select(logit, p, is_sorted, rnd):
    """llama_sampler_dist_apply after the draw: float probabilities summed in double, the first index whose
    running sum reaches sum * rnd, probabilities normalised."""
    n = logit.size
    max_l = logit[0]
    if not is_sorted:
        for i in range(1, n):
            if max_l < logit[i]:
                max_l = logit[i]
    sum_cum = 0.0
    for i in range(n):
        e = np.float32(math.exp(logit[i] - max_l))
        p[i] = e
        sum_cum += np.float64(e)
    sum_tgt = sum_cum * rnd
    sum_run = 0.0
    selected = -1
    for i in range(n):
        if selected < 0:
            sum_run += np.float64(p[i])
            if sum_run >= sum_tgt:
                selected = i
        p[i] = np.float32(np.float64(p[i]) / sum_cum)
    return selected if selected >= 0 else n - 1


class Dist(_Seeded):
    name = "dist"

    def apply(self, cur):
        if cur.size == 0:
            cur.selected = -1
            return
        cur.selected = 0
        rnd = uniform_real_double(self.rng)
        if cur.size == 1:  # one draw regardless, as the backend sampler does
            cur.p[0] = 1.0
            return
        cur.selected = int(_dist_select(cur.logit, cur.p, cur.sorted, rnd))


# --- truncation samplers ------------------------------------------------------------------------------

class TopK(Sampler):
    name = "top-k"

    def __init__(self, k: int):
        self.k = k

    def apply(self, cur):
        top_k_impl(cur, self.k)


class TopP(Sampler):
    name = "top-p"

    def __init__(self, p: float, min_keep: int):
        self.p, self.min_keep = F32(p), min_keep

    def apply(self, cur):
        if self.p >= 1.0:
            return
        softmax(cur, False)
        k = cur.size
        pdata = None  # None: cur itself; else positions into cur (buf_sort)
        if not cur.sorted and cur.size > 1024:  # adaptive top-k sorting
            k = min(256, cur.size)
            pdata = partial_sort(cur, k)
        elif not cur.sorted:
            partial_sort_inplace(cur, k)
        probs = cur.p
        cum_sum = F32(0.0)
        last_idx = cur.size
        for i in range(cur.size):
            cum_sum = F32(cum_sum + (probs[i] if pdata is None else probs[pdata[i]]))
            if cum_sum >= self.p and i + 1 >= self.min_keep:
                last_idx = i + 1
                break
            if not cur.sorted and i == k - 1:  # beyond the heuristic: sort everything
                k = cur.size
                pdata = partial_sort(cur, k)
        if not cur.sorted:
            cur.take(pdata[:last_idx])
            cur.sorted = True
        cur.resize(last_idx)


class MinP(Sampler):
    name = "min-p"

    def __init__(self, p: float, min_keep: int):
        self.p, self.min_keep = F32(p), min_keep

    def apply(self, cur):
        if self.p <= 0.0 or cur.size == 0:
            return
        applied = False
        if not cur.sorted:
            max_logit = max(F32(-3.4028234663852886e38), cur.logit.max())
            min_logit = F32(max_logit + _logf(self.p))  # min logit for p_i >= p * p_max
            keep = np.nonzero(cur.logit >= min_logit)[0]
            if keep.size and keep.size >= self.min_keep:
                cur.take(keep)
                applied = True
        if not applied:
            if not cur.sorted:
                partial_sort_inplace(cur, cur.size)
            min_logit = F32(cur.logit[0] + _logf(self.p))
            i = 1
            while i < cur.size:
                if cur.logit[i] < min_logit and i >= self.min_keep:
                    break
                i += 1
            cur.resize(i)


@njit(cache=True)
def _logf(x):
    return np.float32(math.log(np.float32(x)))


@njit(cache=True)
def _typical_scores(p):
    """Entropy (`entropy += -p * logf(p)`) and |-logf(p) - entropy| per candidate."""
    entropy = np.float32(0.0)
    for i in range(p.size):
        entropy = muladd32(-p[i], np.float32(math.log(p[i])), entropy)
    shifted = np.empty(p.size, np.float32)
    for i in range(p.size):
        shifted[i] = abs(-np.float32(math.log(p[i])) - entropy)
    return shifted


class Typical(Sampler):
    name = "typical"

    def __init__(self, p: float, min_keep: int):
        self.p, self.min_keep = F32(p), min_keep

    def apply(self, cur):
        if self.p >= 1.0:
            return
        softmax(cur, True)
        shifted = _typical_scores(cur.p)
        indices = np.arange(cur.size, dtype=np.int64)
        std_sort(indices, 0, cur.size, shifted, False)
        cum_sum = F32(0.0)
        last_idx = cur.size
        for i in range(cur.size):
            cum_sum = F32(cum_sum + cur.p[indices[i]])
            if cum_sum > self.p and (self.min_keep == 0 or i >= self.min_keep - 1):
                last_idx = i + 1
                break
        cur.take(indices[:last_idx])
        cur.sorted = False


class TopNSigma(Sampler):
    name = "top-n-sigma"

    def __init__(self, n: float):
        self.n = F32(n)

    def apply(self, cur):
        if self.n <= 0.0 or cur.size <= 1:
            return
        _top_n_sigma(cur.logit, self.n)


@njit(cache=True)
def _top_n_sigma(logit, n):
    mx = logit[0]
    logits_sum = np.float32(0.0)
    valid = 0
    for i in range(logit.size):
        if logit[i] != -np.inf:
            if mx < logit[i]:
                mx = logit[i]
            logits_sum += logit[i]
            valid += 1
    mean = logits_sum / np.float32(valid) if valid > 0 else np.float32(0.0)
    acc = np.float32(0.0)
    for i in range(logit.size):
        if logit[i] != -np.inf:
            d = np.float64(logit[i] - mean)
            acc = np.float32(np.float64(acc) + d * d)  # acc += pow(x - mean, 2): double pow, float sum
    std = np.float32(math.sqrt(np.float64(acc / np.float32(valid)))) if valid > 0 else np.float32(0.0)
    bound = muladd32(-n, std, mx)  # max - n * std
    for i in range(logit.size):
        if logit[i] < bound:
            logit[i] = -np.inf


class XTC(_Seeded):
    name = "xtc"

    def __init__(self, probability: float, threshold: float, min_keep: int, seed: int):
        super().__init__(seed)
        self.probability, self.threshold, self.min_keep = F32(probability), F32(threshold), min_keep

    def apply(self, cur):
        if self.probability <= 0.0 or self.threshold > 0.5 or cur.size < 2:
            return
        chance = uniform_real_float(self.rng)
        if chance > self.probability:
            return
        softmax(cur, True)
        pos_last = 0
        for i in range(cur.size):
            if cur.p[i] >= self.threshold:
                pos_last = i
            else:
                break
        if cur.size - pos_last >= self.min_keep and pos_last > 0:
            cur.drop_front(pos_last)


# --- temperature --------------------------------------------------------------------------------------

class Temp(Sampler):
    name = "temp"

    def __init__(self, temp: float):
        self.temp = F32(temp)

    def apply(self, cur):
        temp_impl(cur, self.temp)


@njit(cache=True)
def _entropy(p):
    entropy = np.float32(0.0)
    for i in range(p.size):
        if p[i] > 0.0:
            entropy = muladd32(-p[i], np.float32(math.log(p[i])), entropy)  # entropy -= prob * logf(prob)
    return entropy


@njit(cache=True)
def _renormalise_double(logit, p):
    max_l = np.float64(logit[0])
    cum = 0.0
    for i in range(logit.size):
        e = math.exp(np.float64(logit[i]) - max_l)
        p[i] = np.float32(e)
        cum += e
    for i in range(logit.size):
        p[i] = np.float32(np.float64(p[i]) / cum)


class TempExt(Sampler):
    name = "temp-ext"

    def __init__(self, temp: float, delta: float, exponent: float):
        self.temp, self.delta, self.exponent = F32(temp), F32(delta), F32(exponent)

    def apply(self, cur):
        if self.delta > 0:
            min_temp = max(F32(0.0), F32(self.temp - self.delta))
            max_temp = F32(self.temp + self.delta)
            if cur.size <= 1:
                return
            max_entropy = -_logf(F32(F32(1.0) / F32(cur.size)))
            softmax(cur, True)
            entropy = _entropy(cur.p)
            normalized = F32(entropy / max_entropy)
            dyn_temp = muladd32(F32(max_temp - min_temp), _powf(normalized, self.exponent), min_temp)
            temp_impl(cur, dyn_temp)
            _renormalise_double(cur.logit, cur.p)
        else:
            temp_impl(cur, self.temp)


@njit(cache=True)
def _powf(x, y):
    return np.float32(math.pow(np.float32(x), np.float32(y)))


@njit(cache=True)
def _log2f(x):
    return np.float32(math.log2(np.float32(x)))


# --- mirostat -----------------------------------------------------------------------------------------

class Mirostat(_Seeded):
    name = "mirostat"

    def __init__(self, n_vocab: int, seed: int, tau: float, eta: float, m: int):
        super().__init__(seed)
        self.n_vocab, self.tau, self.eta, self.m = n_vocab, F32(tau), F32(eta), m
        self.mu = F32(F32(2.0) * self.tau)

    def apply(self, cur):
        softmax(cur, True)
        sum_ti_bi = F32(0.0)
        sum_ti_sq = F32(0.0)
        i = 0
        while i < self.m - 1 and i < cur.size - 1:
            t_i = _logf(F32(F32(i + 2) / F32(i + 1)))
            b_i = _logf(F32(cur.p[i] / cur.p[i + 1]))
            sum_ti_bi = muladd32(t_i, b_i, sum_ti_bi)
            sum_ti_sq = muladd32(t_i, t_i, sum_ti_sq)
            i += 1
        with np.errstate(all="ignore"):
            s_hat = F32(sum_ti_bi / sum_ti_sq)
            epsilon_hat = F32(s_hat - F32(1))
            num = F32(epsilon_hat * _powf(F32(2), self.mu))
            den = F32(F32(1) - _powf(F32(self.n_vocab), -epsilon_hat))
            k = _powf(F32(num / den), F32(F32(1) / s_hat))
        top_k_impl(cur, max(c_int(k), 1))
        softmax(cur, True)
        idx = discrete_distribution(cur.p, self.rng)
        cur.selected = idx
        self._update(cur.p[idx])

    def _update(self, p):
        observed_surprise = -_log2f(p)
        e = F32(observed_surprise - self.tau)
        self.mu = muladd32(-self.eta, e, self.mu)  # mu - eta * e

    def reset(self):
        self.mu = F32(F32(2.0) * self.tau)
        super().reset()


@njit(cache=True)
def _first_surprise_over(p, mu):
    """std::find_if(-log2f(p) > mu): the number of candidates before the first too surprising one."""
    for i in range(p.size):
        if -np.float32(math.log2(p[i])) > mu:
            return i
    return p.size


class MirostatV2(Mirostat):
    name = "mirostat-v2"

    def __init__(self, seed: int, tau: float, eta: float):
        super().__init__(0, seed, tau, eta, 0)

    def apply(self, cur):
        softmax(cur, True)
        cur.resize(max(_first_surprise_over(cur.p, self.mu), 1))
        softmax(cur, True)
        idx = discrete_distribution(cur.p, self.rng)
        cur.selected = idx
        self._update(cur.p[idx])


# --- penalties, DRY, logit bias ------------------------------------------------------------------------

class Penalties(Sampler):
    name = "penalties"

    def __init__(self, n_vocab: int, last_n: int, repeat: float, freq: float, present: float):
        self.n_vocab, self.last_n = n_vocab, last_n
        self.repeat, self.freq, self.present = F32(repeat), F32(freq), F32(present)
        self.prev: deque[int] = deque(maxlen=last_n)
        self.token_count: dict[int, int] = {}

    def accept(self, token):
        if self.last_n == 0:
            return
        self.token_count[token] = self.token_count.get(token, 0) + 1
        if len(self.prev) >= self.last_n:
            old = self.prev[0]
            self.token_count[old] -= 1
            if self.token_count[old] == 0:
                del self.token_count[old]
        self.prev.append(token)

    def apply(self, cur):
        if self.token_count:
            keys = np.fromiter(self.token_count.keys(), np.int64)
            counts = np.fromiter(self.token_count.values(), np.int64)
            order = np.argsort(keys)
            keys, counts = keys[order], counts[order]
            pos = np.searchsorted(keys, cur.ids)
            pos[pos >= keys.size] = 0
            hit = np.nonzero(keys[pos] == cur.ids)[0]
            if hit.size:
                c = counts[pos[hit]]
                lg = cur.logit[hit]
                lg = np.where(lg <= 0, lg * self.repeat, lg / self.repeat).astype(np.float32)
                # logit -= count * freq + (count > 0) * present: one fused multiply-add, then the subtraction
                sub = (c.astype(np.float64) * np.float64(self.freq) + np.float64(self.present)).astype(np.float32)
                cur.logit[hit] = lg - sub
        cur.sorted = False

    def reset(self):
        self.prev.clear()
        self.token_count.clear()


class LogitBias(Sampler):
    name = "logit-bias"

    def __init__(self, biases: list[tuple[int, float]]):
        self.biases = [(int(t), F32(b)) for t, b in biases]

    def apply(self, cur):
        to_search = []
        for tok, bias in self.biases:  # entries still at index == id first
            if 0 <= tok < cur.size and cur.ids[tok] == tok:
                cur.logit[tok] += bias
            else:
                to_search.append((tok, bias))
        done = set()
        for tok, bias in to_search:  # then the first matching entry per candidate
            if tok in done:
                continue
            done.add(tok)
            cur.logit[cur.ids == tok] += bias


class Dry(Sampler):
    """DRY ("don't repeat yourself"), ported from llama.cpp's port of koboldcpp's."""
    name = "dry"
    MAX_CHAR_LEN, MAX_SEQ_LEN = 40, 20

    def __init__(self, vocab_pieces: list[bytes], tokenize, multiplier: float, base: float, allowed_length: int,
                 penalty_last_n: int, breakers: list[bytes]):
        self.multiplier, self.base = F32(multiplier), F32(base)
        self.allowed_length, self.penalty_last_n = allowed_length, penalty_last_n
        self.last_tokens: deque[int] = deque(maxlen=penalty_last_n)
        self.breakers: dict[int, list[list[int]]] = {}
        for b in breakers:
            if b:
                self._overlapping_sequences(vocab_pieces, tokenize, b[: self.MAX_CHAR_LEN])

    def _overlapping_sequences(self, pieces, tokenize, s: bytes) -> None:
        """get_overlapping_token_sequences: tokens containing `s` (empty tail), or ending in a prefix of it
        (the tokenized rest of `s` as tail)."""
        for token_id, word in enumerate(pieces):
            if s in word:
                self.breakers.setdefault(token_id, []).append([])
                continue
            pos = word.find(s[:1])
            while pos != -1:
                i = 1
                match = True
                while i < len(s) and i + pos < len(word):
                    if word[pos + i] != s[i]:
                        match = False
                        break
                    i += 1
                if match:
                    tail = list(tokenize(s[i:]))[: self.MAX_SEQ_LEN]
                    seqs = self.breakers.setdefault(token_id, [])
                    if tail not in seqs:
                        seqs.append(tail)
                pos = word.find(s[:1], pos + 1)

    def accept(self, token):
        if self.multiplier == 0.0 or self.base < 1.0 or self.penalty_last_n == 0:
            return
        self.last_tokens.append(token)

    def reset(self):
        self.last_tokens.clear()

    def apply(self, cur):
        if self.multiplier == 0.0 or self.base < 1.0 or self.penalty_last_n == 0:
            return
        last_n_repeat = min(len(self.last_tokens), self.penalty_last_n)
        if last_n_repeat <= self.allowed_length:
            return
        toks = list(self.last_tokens)

        def rat(i):  # the i-th token from the end
            return toks[len(toks) - 1 - i]

        # 1. restart sequences limit the repetition length
        rep_limit = last_n_repeat
        for i in range(last_n_repeat):
            seqs = self.breakers.get(rat(i))
            if not seqs:
                continue
            longest = -1
            for tail in seqs:
                n = len(tail)
                if n > longest and n <= i and all(tail[o] == rat(i - o - 1) for o in range(n)):
                    longest = n
            if longest >= 0:
                rep_limit = i - longest
                break
        if rep_limit < self.allowed_length:
            return
        # 2. Z-algorithm over the reversed context: repeat_count[last - k] = length of the suffix repeated at k
        repeat = [0] * last_n_repeat
        last = last_n_repeat - 1
        rt = lt = 0
        for k in range(1, last_n_repeat):
            if k > rt:
                n = 0
                while n + k < last_n_repeat and rat(n) == rat(n + k):
                    n += 1
                repeat[last - k] = min(n, rep_limit)
                if n > 0:
                    lt, rt = k, k + n - 1
            else:
                p = k - lt
                right_part_len = rt - k + 1
                if repeat[last - p] < right_part_len:
                    repeat[last - k] = min(repeat[last - p], rep_limit)
                else:
                    i = rt + 1
                    while i < last_n_repeat and rat(i) == rat(i - k):
                        i += 1
                    repeat[last - k] = min(i - k, rep_limit)
                    lt, rt = k, i - 1
        # 3. the longest repeat each next token would extend
        max_repeat: dict[int, int] = {}
        for i in range(last_n_repeat - 1):
            n = repeat[i]
            if n >= self.allowed_length:
                tok = rat(last_n_repeat - 2 - i)
                if max_repeat.get(tok, -1) < n:
                    max_repeat[tok] = n
        # 4. penalties, exponent clamped against float overflow
        max_exponent = 0
        if self.base > F32(1.000001):
            max_exponent = c_int(F32(F32(88.7228391) / _logf(self.base)))
        for tok, n in max_repeat.items():
            if any(len(t) == 0 for t in self.breakers.get(tok, [])):
                continue  # a single-token sequence breaker is never penalised
            exp = n - self.allowed_length
            if max_exponent > 0 and exp > max_exponent:
                exp = max_exponent
            penalty = F32(float(self.multiplier) * math.pow(float(self.base), exp))
            cur.logit[cur.ids == tok] -= penalty
        cur.sorted = False


# --- adaptive-p ---------------------------------------------------------------------------------------

class AdaptiveP(_Seeded):
    name = "adaptive-p"
    WIDTH, PEAK, SHARPNESS = F32(0.3), F32(5.0), F32(10.0)

    def __init__(self, target: float, decay: float, seed: int):
        super().__init__(seed)
        self.target = F32(target)
        self.decay = F32(min(max(F32(decay), F32(0.0)), F32(0.99)))
        self._reset_ema()

    def _reset_ema(self):
        self.weighted_sum = F32(self.target / F32(F32(1.0) - self.decay))
        self.total_weight = F32(F32(1.0) / F32(F32(1.0) - self.decay))
        self.original_probs = np.zeros(0, np.float32)
        self.pending_id, self.pending_idx = None, -1

    def apply(self, cur):
        softmax(cur, False)
        if self.target < 0.0:
            cur.selected = discrete_distribution(cur.p, self.rng)
            return
        self.original_probs = cur.p.copy()
        target = min(max(self.target, F32(0.0)), F32(1.0))
        adapted = target if self.total_weight == 0.0 else \
            muladd32(F32(2.0), target, -F32(self.weighted_sum / self.total_weight))
        adapted = min(max(F32(adapted), F32(0.0)), F32(1.0))
        inv_width = F32(F32(1.0) / self.WIDTH)
        live = cur.logit != -np.inf
        dist = np.abs((cur.p - adapted) * inv_width).astype(np.float32)
        newl = (self.PEAK - (self.SHARPNESS * dist * dist) / (F32(1.0) + dist)).astype(np.float32)
        cur.logit[live] = newl[live]
        softmax(cur, False)
        idx = discrete_distribution(cur.p, self.rng)
        cur.selected = idx
        self.pending_id, self.pending_idx = int(cur.ids[idx]), idx

    def accept(self, token):
        if self.pending_id == token:
            self.weighted_sum = muladd32(self.decay, self.weighted_sum, self.original_probs[self.pending_idx])
            self.total_weight = muladd32(self.decay, self.total_weight, F32(1.0))
        self.pending_id, self.pending_idx = None, -1

    def reset(self):
        self._reset_ema()
        super().reset()
