"""Rotary position embedding (RoPE) exactly as ggml's CPU backend computes it, incl. YaRN and freq factors.

Mirrors:
* `ggml_rope_yarn_corr_dims` / `ggml_rope_yarn_corr_dim` (ggml/src/ggml.c), in float32 with libm logf.
* `ggml_compute_forward_rope_flt<float>` (ggml/src/ggml-cpu/ops.cpp) for the NORMAL and NEOX modes:
  - `theta_scale = powf(freq_base, -2.0f/n_dims)`;
  - `ggml_rope_cache_init`: theta starts at (float)pos and is multiplied by theta_scale after every pair
    (a cumulative float product, not powf per pair); pair i uses theta / freq_factors[i];
  - `rope_yarn`: theta_interp = freq_scale * theta_extrap; when ext_factor != 0 the ramp
    `rope_yarn_ramp(corr_dims, i0) * ext_factor` mixes interpolation and extrapolation and the magnitude
    becomes attn_factor * (1 + 0.1 * logf(1 / freq_scale)); cos/sin (libm cosf/sinf) times that magnitude;
  - `rotate_pairs`: NORMAL rotates (2i, 2i+1), NEOX rotates (i, i + n_dims/2); dims >= n_dims copied.
* FMA contraction. ggml is compiled with GCC/clang defaults (-ffp-contract=fast / on) and -march=native,
  so `a*b - c*d` / `a*b + c*d` become fma(a, b, -(c*d)) / fma(a, b, c*d) (both compilers fuse the left
  product) and `1.0f + 0.1f*logf(..)` becomes fma(0.1f, logf(..), 1.0f). `contract=True` reproduces that
  (checked bit-exact against GCC 12 -O3 -march=x86-64+AVX512 on this machine, and against the fixtures'
  final logits: see tests/test_norm_rope.py and tests/test_attention.py). The unfused arithmetic is kept as
  `contract=False` for comparison.

Every float parameter is rounded to float32 first, as ggml stores them in op_params.

`rope_cache` + `rope_qk_cached` split rope_qk in two so a forward pass builds the cos/sin cache once per
batch instead of once per layer (same bits).
"""

from __future__ import annotations

import math

import kernels.config  # noqa: F401

import numpy as np
from numba import prange

from kernels.fp16 import fma_f32, jit, pjit

# below this many elements a kernel runs on the calling thread (a prange launch costs ~10 us)
PARALLEL_MIN_ELEMENTS = 1 << 15

CONTRACT = True  # the arithmetic of a GCC/clang -O3 -march=native build (see module docstring)


@jit
def _corr_dim(n_dims, n_ctx_orig, n_rot, base):
    # n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base)), all float32
    d = (np.float32(n_rot) * np.float32(2.0)) * np.float32(math.pi)
    q = np.float32(n_ctx_orig) / d
    return (np.float32(n_dims) * np.float32(math.log(q))) / (np.float32(2.0) * np.float32(math.log(np.float32(base))))


@jit
def rope_yarn_corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow):
    """ggml_rope_yarn_corr_dims -> (start, end) float32: the pair range over which YaRN ramps."""
    start = np.floor(_corr_dim(n_dims, n_ctx_orig, np.float32(beta_fast), np.float32(freq_base)))
    end = np.ceil(_corr_dim(n_dims, n_ctx_orig, np.float32(beta_slow), np.float32(freq_base)))
    lo = np.float32(0.0) if np.float32(0.0) > start else start  # MAX(0, start)
    top = np.float32(n_dims - 1)
    hi = top if top < end else end  # MIN(n_dims - 1, end)
    return lo, hi


@jit
def rope_yarn_ramp(low, high, i0):
    y = (np.float32(i0 // 2) - low) / (np.float32(0.001) if np.float32(0.001) > high - low else high - low)
    v = np.float32(0.0) if np.float32(0.0) > y else y
    v = np.float32(1.0) if np.float32(1.0) < v else v
    return np.float32(1.0) - v


@jit
def rope_cache_init(p, n_dims, freq_scale, ext_factor, attn_factor, corr0, corr1, theta_scale,
                    freq_factors, cache, contract):
    """ggml_rope_cache_init for one position: cache[2i] = cos, cache[2i+1] = sin of pair i (f32 (n_dims,))."""
    theta = np.float32(p)
    for i0 in range(0, n_dims, 2):
        if freq_factors is not None:
            theta_extrap = theta / freq_factors[i0 // 2]
        else:
            theta_extrap = theta  # theta / 1.0f
        theta_interp = freq_scale * theta_extrap
        th = theta_interp
        mscale = attn_factor
        if ext_factor != np.float32(0.0):
            ramp_mix = rope_yarn_ramp(corr0, corr1, i0) * ext_factor
            lg = np.float32(math.log(np.float32(1.0) / freq_scale))
            if contract:
                th = fma_f32(theta_interp, np.float32(1.0) - ramp_mix, theta_extrap * ramp_mix)
                mscale = mscale * fma_f32(np.float32(0.1), lg, np.float32(1.0))
            else:
                th = theta_interp * (np.float32(1.0) - ramp_mix) + theta_extrap * ramp_mix
                mscale = mscale * (np.float32(1.0) + np.float32(0.1) * lg)
        cache[i0] = np.float32(math.cos(th)) * mscale
        cache[i0 + 1] = np.float32(math.sin(th)) * mscale
        theta = theta * theta_scale


@jit
def rope_rotate_row(src, dst, n_dims, neox, cache, contract):
    """rotate_pairs for one head row (f32 (head_dim,)); dims >= n_dims copied. src may be dst."""
    half = n_dims // 2
    for i0 in range(0, n_dims, 2):
        c = cache[i0]
        s = cache[i0 + 1]
        if neox:
            a = i0 // 2
            b = a + half
        else:
            a = i0
            b = i0 + 1
        x0 = src[a]
        x1 = src[b]
        if contract:
            dst[a] = fma_f32(x0, c, -(x1 * s))
            dst[b] = fma_f32(x0, s, x1 * c)
        else:
            dst[a] = x0 * c - x1 * s
            dst[b] = x0 * s + x1 * c
    for i in range(n_dims, src.shape[0]):
        dst[i] = src[i]


@jit
def _rope_params(n_dims, freq_base, freq_scale, ext_factor, attn_factor, corr_dims):
    fb = np.float32(freq_base)
    theta_scale = np.float32(math.pow(fb, np.float32(-2.0) / np.float32(n_dims)))
    return (theta_scale, np.float32(freq_scale), np.float32(ext_factor), np.float32(attn_factor),
            np.float32(corr_dims[0]), np.float32(corr_dims[1]))


@jit
def _check_rope(x, pos, out, n_dims, freq_factors):
    T, H, D = x.shape
    if out.shape[0] != T or out.shape[1] != H or out.shape[2] != D:
        raise ValueError("rope: x and out must have the same shape (T, n_head, head_dim)")
    if pos.shape[0] != T:
        raise ValueError("rope: pos must be (T,)")
    if n_dims <= 0 or n_dims % 2 != 0 or n_dims > D:
        raise ValueError("rope: n_dims must be even and in 1..head_dim")
    if freq_factors is not None:
        if freq_factors.shape[0] < n_dims // 2:
            raise ValueError("rope: freq_factors must have n_dims/2 entries")


@jit
def _rotate_heads(x, out, t, n_dims, neox, cache, contract):
    """rope_rotate_row for every head of token t (x, out: (T, n_head, head_dim)); cache: that token's cos/sin."""
    for h in range(x.shape[1]):
        rope_rotate_row(x[t, h], out[t, h], n_dims, neox, cache, contract)


@jit
def _rope_tokens(x, k, pos, out, k_out, t0, t1, n_dims, neox, prm, freq_factors, contract):
    """Tokens t0..t1-1: each position's cos/sin cache, then every head of x (and of k, unless None) rotated
    with it."""
    theta_scale, fs, ef, af, c0, c1 = prm
    cache = np.empty(n_dims, np.float32)
    for t in range(t0, t1):
        rope_cache_init(pos[t], n_dims, fs, ef, af, c0, c1, theta_scale, freq_factors, cache, contract)
        _rotate_heads(x, out, t, n_dims, neox, cache, contract)
        if k is not None:
            _rotate_heads(k, k_out, t, n_dims, neox, cache, contract)


@pjit
def rope_ext(x, pos, out, n_dims, neox, freq_base, freq_scale, ext_factor, attn_factor, corr_dims,
             freq_factors, contract):
    """rope with the FMA-contraction choice explicit (see module docstring); `rope` uses CONTRACT."""
    _check_rope(x, pos, out, n_dims, freq_factors)
    T = x.shape[0]
    prm = _rope_params(n_dims, freq_base, freq_scale, ext_factor, attn_factor, corr_dims)
    if T > 1 and x.size >= PARALLEL_MIN_ELEMENTS:
        for t in prange(T):
            _rope_tokens(x, None, pos, out, None, t, t + 1, n_dims, neox, prm, freq_factors, contract)
    else:
        _rope_tokens(x, None, pos, out, None, 0, T, n_dims, neox, prm, freq_factors, contract)


def rope(x, pos, out, n_dims, neox, freq_base, freq_scale, ext_factor, attn_factor, corr_dims, freq_factors):
    """ggml_rope_ext for NORMAL (neox=False) and NEOX (neox=True) modes, forward.

    x, out: f32 (T, n_head, head_dim) (out may be x); pos: int32 (T,); corr_dims: (start, end) from
    rope_yarn_corr_dims; freq_factors: f32 (>= n_dims/2,) or None (llama3 `rope_freqs`)."""
    rope_ext(x, pos, out, n_dims, neox, freq_base, freq_scale, ext_factor, attn_factor, corr_dims,
             freq_factors, CONTRACT)


@jit
def _rope_qk_check(q, k, pos, q_out, k_out, n_dims, freq_factors):
    _check_rope(q, pos, q_out, n_dims, freq_factors)
    _check_rope(k, pos, k_out, n_dims, freq_factors)


@jit
def _rope_qk_serial(q, k, pos, q_out, k_out, n_dims, neox, freq_base, freq_scale, ext_factor, attn_factor,
                    corr_dims, freq_factors):
    _rope_qk_check(q, k, pos, q_out, k_out, n_dims, freq_factors)
    prm = _rope_params(n_dims, freq_base, freq_scale, ext_factor, attn_factor, corr_dims)
    _rope_tokens(q, k, pos, q_out, k_out, 0, q.shape[0], n_dims, neox, prm, freq_factors, CONTRACT)


@pjit
def _rope_qk_parallel(q, k, pos, q_out, k_out, n_dims, neox, freq_base, freq_scale, ext_factor, attn_factor,
                      corr_dims, freq_factors):
    _rope_qk_check(q, k, pos, q_out, k_out, n_dims, freq_factors)
    prm = _rope_params(n_dims, freq_base, freq_scale, ext_factor, attn_factor, corr_dims)
    for t in prange(q.shape[0]):
        _rope_tokens(q, k, pos, q_out, k_out, t, t + 1, n_dims, neox, prm, freq_factors, CONTRACT)


@jit
def rope_cache_one(pos, n_dims, freq_base, freq_scale, ext_factor, attn_factor, corr_dims, freq_factors):
    """rope_cache for one token (pos (1,) int32), serial: its (cos, sin) pairs, f32 (n_dims,). A decoded token's
    blocks (kernels/layer.py) make it once for all layers."""
    theta_scale, fs, ef, af, c0, c1 = _rope_params(n_dims, freq_base, freq_scale, ext_factor, attn_factor, corr_dims)
    cache = np.empty(n_dims, np.float32)
    rope_cache_init(pos[0], n_dims, fs, ef, af, c0, c1, theta_scale, freq_factors, cache, CONTRACT)
    return cache


@jit
def rope_qk_one(q, k, pos, q_out, k_out, n_dims, neox, freq_factors, cache):
    """_rope_qk_serial for one token with its rope_cache_one (the same bits: the cache holds what it computes)."""
    _rope_qk_check(q, k, pos, q_out, k_out, n_dims, freq_factors)
    _rotate_heads(q, q_out, 0, n_dims, neox, cache, CONTRACT)
    _rotate_heads(k, k_out, 0, n_dims, neox, cache, CONTRACT)


def rope_qk(q, k, pos, q_out, k_out, n_dims, neox, freq_base, freq_scale, ext_factor, attn_factor,
            corr_dims, freq_factors):
    """rope on Q and K of the same tokens with one cos/sin cache per token (= rope(q), rope(k)). A single
    token (and every small batch) runs the serial kernel, whose compile has no parallel region (a cold first
    run compiles the one-token graph, issue #16)."""
    kernel = _rope_qk_parallel if q.shape[0] > 1 and q.size >= PARALLEL_MIN_ELEMENTS else _rope_qk_serial
    kernel(q, k, pos, q_out, k_out, n_dims, neox, freq_base, freq_scale, ext_factor, attn_factor, corr_dims,
           freq_factors)


# ----------------------------------------------------------------------------------------------
# the cos/sin cache computed once per batch and reused by every layer (the same positions and
# parameters in every layer): ggml rebuilds it per ROPE node, with identical values, and its libm
# cosf/sinf calls are most of a single token's rope cost (~1.3 of ~1.8 us with 64 rotated dims)


@pjit
def rope_cache(pos, n_dims, freq_base, freq_scale, ext_factor, attn_factor, corr_dims, freq_factors, cache):
    """cache: f32 (T, n_dims) filled with ggml_rope_cache_init's (cos, sin) pairs of each token's position
    (pos: int32 (T,)); pass it to `rope_qk_cached` in every layer. Same values as `rope` computes inside."""
    T = pos.shape[0]
    if cache.shape[0] != T or cache.shape[1] != n_dims:
        raise ValueError("rope_cache: cache must be (T, n_dims)")
    if n_dims <= 0 or n_dims % 2 != 0:
        raise ValueError("rope_cache: n_dims must be even and positive")
    if freq_factors is not None:
        if freq_factors.shape[0] < n_dims // 2:
            raise ValueError("rope: freq_factors must have n_dims/2 entries")
    theta_scale, fs, ef, af, c0, c1 = _rope_params(n_dims, freq_base, freq_scale, ext_factor, attn_factor,
                                                   corr_dims)
    if T > 1 and T * n_dims >= PARALLEL_MIN_ELEMENTS // 8:
        for t in prange(T):
            rope_cache_init(pos[t], n_dims, fs, ef, af, c0, c1, theta_scale, freq_factors, cache[t], CONTRACT)
    else:
        for t in range(T):
            rope_cache_init(pos[t], n_dims, fs, ef, af, c0, c1, theta_scale, freq_factors, cache[t], CONTRACT)


@pjit
def rope_qk_cached(q, k, cache, q_out, k_out, n_dims, neox):
    """rope_qk with the cos/sin cache of `rope_cache` (bit-identical to rope_qk with the same parameters).

    q, q_out: f32 (T, n_head, head_dim); k, k_out: f32 (T, n_head_kv, head_dim); cache: f32 (T, n_dims)."""
    T, H, D = q.shape
    if (q_out.shape[0] != T or q_out.shape[1] != H or q_out.shape[2] != D or k.shape[0] != T
            or k_out.shape[0] != T or k_out.shape[1] != k.shape[1] or k_out.shape[2] != k.shape[2]
            or k.shape[2] != D):
        raise ValueError("rope_qk_cached: q/q_out (T, n_head, head_dim) and k/k_out (T, n_head_kv, head_dim)")
    if cache.shape[0] != T or cache.shape[1] != n_dims or n_dims <= 0 or n_dims % 2 != 0 or n_dims > D:
        raise ValueError("rope_qk_cached: cache must be (T, n_dims) with n_dims even and <= head_dim")
    if T > 1 and q.size >= PARALLEL_MIN_ELEMENTS:
        for t in prange(T):
            _rotate_heads(q, q_out, t, n_dims, neox, cache[t], CONTRACT)
            _rotate_heads(k, k_out, t, n_dims, neox, cache[t], CONTRACT)
    else:
        for t in range(T):
            _rotate_heads(q, q_out, t, n_dims, neox, cache[t], CONTRACT)
            _rotate_heads(k, k_out, t, n_dims, neox, cache[t], CONTRACT)
