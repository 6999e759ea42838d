"""SwiGLU and soft-max exactly as ggml's CPU backend computes them on an AVX512 build (the fixtures' build).

Mirrors (ggml/src/ggml-cpu/):
* `ggml_v_expf` (vec.h, `__AVX512F__ && __AVX512DQ__` variant): the ARM-optimized-routines expf
  polynomial, every `_mm512_fmadd_ps`/`_mm512_fnmadd_ps` a single-rounding FMA (`fma_f32`), the final
  `_mm512_scalef_ps(j, n)` an exact scaling by 2^n rounded once, |n| > 192 lanes flushed to 0 / inf.
* `ggml_v_silu`: x / (1 + v_expf(0 - x)); `ggml_silu_f32` (the scalar tail): x / (1 + expf(-x)) with libm
  expf (numba's math.exp on a float32 calls the same glibc expf).
* `ggml_vec_swiglu_f32` (vec.cpp): 16-element chunks via ggml_v_silu(g) * u, the n % 16 tail via
  ggml_silu_f32(g) * u. SWIGLU op (ops.cpp `ggml_compute_forward_swiglu_f32`): silu(gate) * up per row.
* `ggml_vec_soft_max_f32` (vec.cpp): 16-element chunks exp'd with ggml_v_expf and summed per chunk with
  `_mm512_reduce_add_ps` (tree: 8+8, 4+4, 2+2, 1+1) into a double; the tail with expf.
* `ggml_compute_forward_soft_max_f32` (ops.cpp): row = x * scale (+ mask), max (`MAX(max, x)` scan),
  ggml_vec_soft_max_f32, then scale by (float)(1.0 / sum). No ALiBi (max_bias 0) and no sinks: the
  supported architectures use neither.

The `*_libm` variants use the generic (non-SIMD) C path everywhere (libm expf for every element); they
exist to compare against the fixtures and are not used by the model. Why ggml_v_expf: it differs from
glibc expf in ~57% of inputs (by 1-2 ulp), and with it the tiny F32 models' kq_soft_max and ffn_swiglu
sums in llama.cpp's eval-callback logs are reproduced exactly (12/12 each; libm misses 2 of 12 of
each), and the whole forward pass reproduces the greedy fixtures' logits bit for bit with ggml_v_expf,
not with a libm SwiGLU (tests/test_activations.py, tests/test_attention.py). The port was also checked bit for bit against
ggml's own vec.cpp compiled with GCC 12 -O3 -mavx512f/dq/bw/vl on this machine.
"""

from __future__ import annotations

import math

import kernels.config  # noqa: F401

import numpy as np
from numba import prange

from kernels.fp16 import f32_bits, fma_f32, jit, pjit, pow2_f32

# ggml_v_expf constants (float32 literals in vec.h)
_R = float.fromhex("0x1.8p23")
_LOG2E = float.fromhex("0x1.715476p+0")
_LN2_HI = float.fromhex("0x1.62e4p-1")
_LN2_LO = float.fromhex("0x1.7f7d1cp-20")
_C5 = float.fromhex("0x1.0e4020p-7")
_C4 = float.fromhex("0x1.573e2ep-5")
_C3 = float.fromhex("0x1.555e66p-3")
_C2 = float.fromhex("0x1.fffdb6p-2")
_C1 = float.fromhex("0x1.ffffecp-1")

# below this many elements a kernel runs on the calling thread (a prange launch costs ~10 us)
PARALLEL_MIN_ELEMENTS = 1 << 16


@jit
def v_expf(x):
    """One lane of ggml_v_expf (AVX512). x: float32 -> float32."""
    x = np.float32(x)
    r = np.float32(_R)
    z = fma_f32(x, np.float32(_LOG2E), r)
    n = z - r  # round(x / ln2) as a float
    # b = x - n*ln2 in two FMA steps (fnmadd(a, b, c) = -(a*b) + c; negating n is exact)
    b = fma_f32(-n, np.float32(_LN2_LO), fma_f32(-n, np.float32(_LN2_HI), x))
    u = b * b
    j = fma_f32(
        fma_f32(fma_f32(np.float32(_C5), b, np.float32(_C4)), u,
                fma_f32(np.float32(_C3), b, np.float32(_C2))),
        u,
        fma_f32(np.float32(_C1), b, np.float32(1.0)),
    )
    # _mm512_scalef_ps(j, n) = j * 2^n rounded once. j is in [0.7, 1.5], so j * 2^rest is exact for the
    # small |rest| needed to bring n into 2^e's normal range, and the one float multiply by 2^e rounds
    # the exact product (subnormal or overflowing results included). Branch-free so loops vectorise.
    small = abs(n) <= np.float32(192.0)  # false for NaN (ordered compare): NaN flows through j
    ni = np.int32(n) if small else np.int32(0)
    e = min(max(ni, np.int32(-126)), np.int32(127))
    res = (j * pow2_f32(ni - e)) * pow2_f32(e)
    big = abs(n) > np.float32(192.0)
    alt = np.float32(0.0) if n <= np.float32(0.0) else np.float32(np.inf)
    return alt if big else res


@jit
def libm_expf(x):
    """glibc expf (what ggml's scalar loops call)."""
    return math.exp(np.float32(x))


@jit
def v_silu(x):
    """One lane of ggml_v_silu (AVX512)."""
    x = np.float32(x)
    return x / (np.float32(1.0) + v_expf(np.float32(0.0) - x))


@jit
def silu_f32(x):
    """ggml_silu_f32: x / (1 + expf(-x)) with libm expf."""
    x = np.float32(x)
    return x / (np.float32(1.0) + math.exp(-x))


@jit
def hsum16(a, o):
    """_mm512_reduce_add_ps of the 16 float32 a[o:o+16] (GCC/clang tree: halves 8, 4, 2, 1)."""
    t0 = a[o + 0] + a[o + 8]
    t1 = a[o + 1] + a[o + 9]
    t2 = a[o + 2] + a[o + 10]
    t3 = a[o + 3] + a[o + 11]
    t4 = a[o + 4] + a[o + 12]
    t5 = a[o + 5] + a[o + 13]
    t6 = a[o + 6] + a[o + 14]
    t7 = a[o + 7] + a[o + 15]
    u0 = t0 + t4
    u1 = t1 + t5
    u2 = t2 + t6
    u3 = t3 + t7
    return (u0 + u2) + (u1 + u3)


# ----------------------------------------------------------------------------------------------
# SwiGLU


SWIGLU_CHUNK = 512  # elements computed into a private buffer at a time (see swiglu_row)


@jit
def swiglu_row(g, u, o, vec, tmp):
    """ggml_vec_swiglu_f32 over one row: o = silu(g) * u. vec: AVX512 chunks (True) or generic C.

    tmp: f32 (SWIGLU_CHUNK,) scratch. The vector part is computed into tmp and then copied to o: when o
    is g (the model's in-place swiglu) a direct loop fails LLVM's runtime overlap check and runs scalar,
    ~40x slower; tmp never overlaps, so the loop runs vectorised whatever the caller passes."""
    n = g.shape[0]
    nv = (n // 16) * 16 if vec else 0  # whole 16-lane vectors, then the scalar tail
    for k0 in range(0, nv, SWIGLU_CHUNK):
        m = min(SWIGLU_CHUNK, nv - k0)
        gs = g[k0:k0 + m]
        us = u[k0:k0 + m]
        for k in range(m):
            tmp[k] = v_silu(gs[k]) * us[k]
        os_ = o[k0:k0 + m]
        for k in range(m):
            os_[k] = tmp[k]
    for k in range(nv, n):
        o[k] = silu_f32(g[k]) * u[k]


@jit
def _swiglu_check(gate, up, out):
    T, n = gate.shape
    if up.shape[0] != T or up.shape[1] != n or out.shape[0] != T or out.shape[1] != n:
        raise ValueError("swiglu: gate, up and out must have the same shape (T, n)")


@jit
def _swiglu_serial(gate, up, out, vec):
    _swiglu_check(gate, up, out)
    tmp = np.empty(SWIGLU_CHUNK, np.float32)
    for t in range(gate.shape[0]):
        swiglu_row(gate[t], up[t], out[t], vec, tmp)


@pjit
def _swiglu_parallel(gate, up, out, vec):
    _swiglu_check(gate, up, out)
    for t in prange(gate.shape[0]):
        tmp = np.empty(SWIGLU_CHUNK, np.float32)
        swiglu_row(gate[t], up[t], out[t], vec, tmp)


def _swiglu(gate, up, out, vec):
    """A single token (and every small batch) runs the serial kernel, whose compile has no parallel region
    (a cold first run compiles the one-token graph, issue #16)."""
    if gate.shape[0] > 1 and gate.size >= PARALLEL_MIN_ELEMENTS:
        _swiglu_parallel(gate, up, out, vec)
    else:
        _swiglu_serial(gate, up, out, vec)


def swiglu(gate, up, out):
    """ggml SWIGLU (split): out = silu(gate) * up. gate, up, out: f32 (T, n_ff)."""
    _swiglu(gate, up, out, True)


def swiglu_libm(gate, up, out):
    """SWIGLU through the generic C path (libm expf for every element); for comparison only."""
    _swiglu(gate, up, out, False)


# ----------------------------------------------------------------------------------------------
# soft-max


@jit
def vec_soft_max(n, y, x, mx, vec):
    """ggml_vec_soft_max_f32: y[:n] = exp(x[:n] - mx); returns the sum as float64 (ggml_float)."""
    s = 0.0
    nv = (n // 16) * 16 if vec else 0
    for k in range(nv):  # the exps first (vectorises), then the per-vector sums in order
        y[k] = v_expf(x[k] - mx)
    for i in range(0, nv, 16):
        s += np.float64(hsum16(y, i))
    for i in range(nv, n):
        val = math.exp(x[i] - mx)
        s += np.float64(val)
        y[i] = val
    return s


@jit
def row_max(x, n):
    """ggml_vec_max_f32 (sequential MAX(max, x[i]) from -inf). Computed in 8 interleaved lanes: for
    non-NaN input the maximum is the same value (only the sign of a zero maximum could differ, and
    x - (+0) == x - (-0) for every x that matters), and the lanes let the loop run at SIMD speed."""
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = np.float32(-np.inf)
    n8 = (n // 8) * 8
    for i in range(0, n8, 8):
        v = x[i]
        m0 = m0 if m0 > v else v
        v = x[i + 1]
        m1 = m1 if m1 > v else v
        v = x[i + 2]
        m2 = m2 if m2 > v else v
        v = x[i + 3]
        m3 = m3 if m3 > v else v
        v = x[i + 4]
        m4 = m4 if m4 > v else v
        v = x[i + 5]
        m5 = m5 if m5 > v else v
        v = x[i + 6]
        m6 = m6 if m6 > v else v
        v = x[i + 7]
        m7 = m7 if m7 > v else v
    for i in range(n8, n):
        v = x[i]
        m0 = m0 if m0 > v else v
    m0 = m0 if m0 > m1 else m1
    m2 = m2 if m2 > m3 else m3
    m4 = m4 if m4 > m5 else m5
    m6 = m6 if m6 > m7 else m7
    m0 = m0 if m0 > m2 else m2
    m4 = m4 if m4 > m6 else m6
    return m0 if m0 > m4 else m4


@jit
def soft_max_row(n, dp, wp, vec):
    """The part of ggml_compute_forward_soft_max_f32 after scale+mask: wp[:n] (scaled, masked) -> dp[:n]."""
    mx = row_max(wp, n)
    s = vec_soft_max(n, dp, wp, mx, vec)
    inv = np.float32(1.0 / s)  # sum = 1.0/sum (double), ggml_vec_scale_f32 takes it as float
    for i in range(n):
        dp[i] = dp[i] * inv


@jit
def _soft_max_one(x, mask, scale, out, h, r, wp, vec):
    n = x.shape[2]
    for i in range(n):
        wp[i] = x[h, r, i] * scale
    if mask is not None:
        for i in range(n):
            wp[i] = wp[i] + mask[r, i]  # slope (1.0f) * mask + wp: exact with or without FMA
    soft_max_row(n, out[h, r], wp, vec)


@pjit
def _soft_max_ext(x, mask, scale, out, vec):
    if x.ndim != 3 or out.shape != x.shape:
        raise ValueError("soft_max_ext: x and out must have the same shape (n_head, n_rows, n)")
    H, R, n = x.shape
    if mask is not None:
        if mask.shape[0] < R or mask.shape[1] != n:
            raise ValueError("soft_max_ext: mask must be (>= n_rows, n)")
    s = np.float32(scale)
    if H * R * n >= PARALLEL_MIN_ELEMENTS and H * R > 1:
        for hr in prange(H * R):
            wp = np.empty(n, np.float32)
            _soft_max_one(x, mask, s, out, hr // R, hr % R, wp, vec)
    else:
        wp = np.empty(n, np.float32)
        for hr in range(H * R):
            _soft_max_one(x, mask, s, out, hr // R, hr % R, wp, vec)


def soft_max_ext(x, mask, scale, out):
    """ggml_soft_max_ext(x, mask, scale, max_bias=0) on an AVX512 build.

    x, out: f32 (n_head, n_rows, n); mask: f32 (>= n_rows, n) broadcast over heads (row r uses mask[r]),
    or None. scale is rounded to float32 as ggml's op_params. Rows fully masked give NaN, as in ggml.
    """
    _soft_max_ext(x, mask, scale, out, True)


def soft_max_ext_libm(x, mask, scale, out):
    """soft_max_ext through the generic C path (libm expf for every element); for comparison only."""
    _soft_max_ext(x, mask, scale, out, False)


@jit
def _max_and_sum_exp(logits, r):
    """perplexity.cpp's softmax prologue for row r: the max in float (std::max order), then the sum of libm
    expf(logit - max) accumulated in double in index order."""
    m = logits[r, 0]
    for i in range(1, logits.shape[1]):
        if logits[r, i] > m:  # std::max(max, v)
            m = logits[r, i]
    s = 0.0
    for i in range(logits.shape[1]):
        s += np.float64(libm_expf(np.float32(logits[r, i] - m)))
    return m, s


@pjit
def log_softmax_rows(logits, targets):
    """out[i] = log_softmax(logits[i])[targets[i]] as llama-perplexity computes it (float64 (rows,)): max in
    float, sum_exp = sum of libm expf(logit - max) accumulated in double in index order, then
    (logit[tok] - max) - log(sum_exp)."""
    R = logits.shape[0]
    out = np.empty(R, np.float64)
    for r in prange(R):
        m, s = _max_and_sum_exp(logits, r)
        out[r] = np.float64(np.float32(logits[r, targets[r]] - m)) - math.log(s)
    return out


@pjit
def softmax_nll_rows(logits, targets):
    """out[i] = -std::log(softmax(logits[i])[targets[i]]) as llama-perplexity's strided mode (perplexity_v2)
    computes it (float64 (rows,)): perplexity.cpp's `softmax`, max in float, sum_exp = sum of libm expf(logit -
    max) in double in index order, the probability (float)(expf(...) / sum_exp), then the float overload of
    std::log (glibc logf: numba's math.log on a float32; numpy's float32 log differs from it in the last bit)."""
    R = logits.shape[0]
    out = np.empty(R, np.float64)
    for r in prange(R):
        m, s = _max_and_sum_exp(logits, r)
        p = np.float32(np.float64(libm_expf(np.float32(logits[r, targets[r]] - m))) / s)
        out[r] = -np.float64(math.log(p))
    return out


@jit
def _nearest_int(fval):
    """ggml-quants.c / perplexity.cpp nearest_int: the magic-number rounding (half to even, |x| < 2^22)."""
    b = f32_bits(np.float32(fval + np.float32(12582912.0)))
    return np.int32(b & np.uint32(0x007FFFFF)) - np.int32(0x00400000)


@pjit
def base_log_probs(logits, targets, out):
    """llama-perplexity's --kl-divergence-base record of each row (perplexity.cpp `log_softmax(n_vocab, logits,
    log_prob, tok)`): out (R, nv) uint16 = [scale, min_log_prob as two float32][n_vocab 16-bit levels][pad],
    levels = nearest_int((logit - min) / scale) over the top 16 nats; returns the rows' nll (R,) float64 computed
    in float as there: max + log_sum_exp - logit[tok]."""
    R, V = logits.shape
    nll = np.empty(R, np.float64)
    for r in prange(R):
        mx = logits[r, 0]
        mn = logits[r, 0]
        for i in range(1, V):
            v = logits[r, i]
            if mx < v:  # std::max
                mx = v
            if v < mn:  # std::min
                mn = v
        if mn < np.float32(mx - np.float32(16.0)):
            mn = np.float32(mx - np.float32(16.0))
        s = 0.0
        for i in range(V):
            s += np.float64(libm_expf(np.float32(logits[r, i] - mx)))
        lse = np.float32(math.log(s))
        min_log_prob = np.float32(np.float32(mn - mx) - lse)
        scale = np.float32(np.float32(mx - mn) / np.float32(65535.0))
        hdr = np.empty(2, np.float32)
        hdr[0] = scale
        hdr[1] = min_log_prob
        h16 = hdr.view(np.uint16)
        for k in range(4):
            out[r, k] = h16[k]
        for i in range(4 + V, out.shape[1]):
            out[r, i] = 0
        if scale != 0:
            inv = np.float32(np.float32(1.0) / scale)
            for i in range(V):
                v = logits[r, i]
                out[r, 4 + i] = np.uint16(_nearest_int(np.float32(inv * np.float32(v - mn)))) if v > mn else 0
        else:
            for i in range(V):
                out[r, 4 + i] = 0
        nll[r] = np.float64(np.float32(np.float32(mx + lse) - logits[r, targets[r]]))
    return nll


@pjit
def kld_rows(logits, base, targets, nll, nll_base, kld, p_diff, same_top):
    """llama-perplexity --kl-divergence per row (perplexity.cpp `log_softmax(n_vocab, logits, base_log_prob, tok,
    kld)`): nll, nll_base, p_diff (R,) float32, kld (R,) float64, same_top (R,) bool (the two argmaxes agree)."""
    R, V = logits.shape
    for r in prange(R):
        mx = logits[r, 0]
        imax = 0
        for i in range(1, V):
            if logits[r, i] > mx:
                mx = logits[r, i]
                imax = i
        s = 0.0
        for i in range(V):
            s += np.float64(libm_expf(np.float32(logits[r, i] - mx)))
        lse = np.float32(math.log(s))
        hdr = np.empty(4, np.uint16)
        for k in range(4):
            hdr[k] = base[r, k]
        d = hdr.view(np.float32)
        scale = d[0]
        min_log_prob = d[1]
        t = targets[r]
        n = np.float32(np.float32(mx + lse) - logits[r, t])
        nb = np.float32(-np.float32(np.float32(scale * np.float32(base[r, 4 + t])) + min_log_prob))
        nll[r] = n
        nll_base[r] = nb
        mx = np.float32(mx + lse)
        acc = 0.0
        imax_base = -1
        pmax = np.float32(0.0)
        for i in range(V):
            plb = np.float32(np.float32(scale * np.float32(base[r, 4 + i])) + min_log_prob)
            if i == 0 or plb > pmax:
                pmax = plb
                imax_base = i
            if plb > np.float32(-16.0):
                pb = libm_expf(plb)
                acc += np.float64(np.float32(pb * np.float32(np.float32(plb - logits[r, i]) + mx)))
        kld[r] = acc
        same_top[r] = imax == imax_base
        p_diff[r] = np.float32(libm_expf(np.float32(-n)) - libm_expf(np.float32(-nb)))
