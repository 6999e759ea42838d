"""RMS norm and the element-wise ops around it (norm weight, residual add, bias add), as ggml's CPU backend.

Mirrors (ggml/src/ggml-cpu/ops.cpp):
* `ggml_compute_forward_rms_norm_f32`: per row, sum of x*x (the product rounded to float, then widened)
  accumulated in a double (ggml_float) in index order; mean = (float)(sum / n);
  scale = 1.0f / sqrtf(mean + eps); y = x * scale (`ggml_vec_scale_f32`).
* the RMS_NORM + MUL fusion ggml-cpu.c applies (`ggml_compute_forward_rms_norm_mul_fused`):
  y = x * scale * w, evaluated left to right, so bit-identical to RMS_NORM followed by MUL.
* MUL / ADD (`binary_op`): one float32 multiply / add per element, the second operand's rows broadcast.

Arrays are (T, n) float32, one row per token; `out` may alias `x` / `a` (every element is read before it
is written). Rows are spread over threads (prange) only when there is enough work to pay for it.
"""

from __future__ import annotations

import math

import kernels.config  # noqa: F401

import numpy as np
from numba import prange

from kernels.fp16 import jit, pjit


# below this many elements a kernel runs on the calling thread (a prange launch costs ~10 us)
PARALLEL_MIN_ELEMENTS = 1 << 16


@jit
def sum_squares(x):
    """sum of x*x over a row as ggml's rms_norm: float32 products widened to double, index order."""
    s = 0.0
    for i in range(x.shape[0]):
        p = x[i] * x[i]  # float32 product, then widened (ggml_float)(x*x)
        s += np.float64(p)
    return s


@jit
def rms_norm_row(x, eps, y):
    """y = x / sqrt(mean(x^2) + eps) exactly as ggml (eps: float32)."""
    n = x.shape[0]
    mean = np.float32(sum_squares(x) / n)
    scale = np.float32(1.0) / np.float32(math.sqrt(mean + eps))  # sqrtf: correctly rounded either way
    for i in range(n):
        y[i] = x[i] * scale


@jit
def rms_norm_mul_row(x, eps, w, y):
    """Fused RMS_NORM + MUL: y = x * scale * w (left to right, as ggml's fused kernel and the unfused pair)."""
    _norm_mul_from_sum(x, sum_squares(x), eps, w, y)


@jit
def _norm_mul_from_sum(x, s, eps, w, y):
    """rms_norm_mul_row with the row's sum_squares s given."""
    n = x.shape[0]
    mean = np.float32(s / n)
    scale = np.float32(1.0) / np.float32(math.sqrt(mean + eps))  # sqrtf: correctly rounded either way
    for i in range(n):
        y[i] = (x[i] * scale) * w[i]


ROWS_AT_ONCE = 8  # rows whose sums of squares run side by side in a batch (_sums_of_squares8)


@jit
def _sums_of_squares8(x, t0):
    """sum_squares of rows t0..t0+7, each in its own index order as sum_squares, the eight chains side by side:
    one double add's latency (3-4 cycles) then serves eight rows instead of one."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    for i in range(x.shape[1]):
        s0 += np.float64(x[t0, i] * x[t0, i])
        s1 += np.float64(x[t0 + 1, i] * x[t0 + 1, i])
        s2 += np.float64(x[t0 + 2, i] * x[t0 + 2, i])
        s3 += np.float64(x[t0 + 3, i] * x[t0 + 3, i])
        s4 += np.float64(x[t0 + 4, i] * x[t0 + 4, i])
        s5 += np.float64(x[t0 + 5, i] * x[t0 + 5, i])
        s6 += np.float64(x[t0 + 6, i] * x[t0 + 6, i])
        s7 += np.float64(x[t0 + 7, i] * x[t0 + 7, i])
    return s0, s1, s2, s3, s4, s5, s6, s7


@jit
def _rms_norm_mul_rows8(x, eps, w, out, t0):
    """rms_norm_mul_row for rows t0..t0+7 (their sums side by side), or the rows from t0 to the end where fewer."""
    if t0 + ROWS_AT_ONCE > x.shape[0]:
        for t in range(t0, x.shape[0]):
            rms_norm_mul_row(x[t], eps, w, out[t])
        return
    sums = _sums_of_squares8(x, t0)
    for r in range(ROWS_AT_ONCE):
        _norm_mul_from_sum(x[t0 + r], sums[r], eps, w, out[t0 + r])


@jit
def _check_same(a, out, what):
    if a.shape[0] != out.shape[0] or a.shape[1] != out.shape[1]:
        raise ValueError(what)


@pjit
def rms_norm(x, eps, out):
    """ggml_rms_norm(x, eps). x, out: f32 (T, n)."""
    _check_same(x, out, "rms_norm: x and out must have the same shape (T, n)")
    T, n = x.shape
    e = np.float32(eps)
    if T > 1 and T * n >= PARALLEL_MIN_ELEMENTS:
        for t in prange(T):
            rms_norm_row(x[t], e, out[t])
    else:
        for t in range(T):
            rms_norm_row(x[t], e, out[t])


@jit
def _rms_norm_mul_check(x, w, out):
    _check_same(x, out, "rms_norm_mul: x and out must have the same shape (T, n)")
    if w.shape[0] != x.shape[1]:
        raise ValueError("rms_norm_mul: w must be (n,)")


@jit
def _rms_norm_mul_serial(x, eps, w, out):
    _rms_norm_mul_check(x, w, out)
    for t in range(x.shape[0]):
        rms_norm_mul_row(x[t], np.float32(eps), w, out[t])


@pjit
def _rms_norm_mul_parallel(x, eps, w, out):
    _rms_norm_mul_check(x, w, out)
    for g in prange((x.shape[0] + ROWS_AT_ONCE - 1) // ROWS_AT_ONCE):
        _rms_norm_mul_rows8(x, np.float32(eps), w, out, g * ROWS_AT_ONCE)


def rms_norm_mul(x, eps, w, out):
    """ggml_mul(ggml_rms_norm(x, eps), w) (fused; same bits as rms_norm then mul_rows). w: f32 (n,).

    A single token (and every small batch) runs the serial kernel, whose compile has no parallel region
    (half the time: a cold first run, issue #16)."""
    if x.shape[0] > 1 and x.size >= PARALLEL_MIN_ELEMENTS:
        _rms_norm_mul_parallel(x, eps, w, out)
    else:
        _rms_norm_mul_serial(x, eps, w, out)


@jit
def _add_rms_norm_mul_serial(a, b, s, eps, w, out):
    _check_same(a, s, "add_rms_norm_mul: a and s must have the same shape (T, n)")
    _check_same(b, s, "add_rms_norm_mul: b and s must have the same shape (T, n)")
    _rms_norm_mul_check(s, w, out)
    for t in range(s.shape[0]):
        for i in range(s.shape[1]):
            s[t, i] = a[t, i] + b[t, i]
        rms_norm_mul_row(s[t], np.float32(eps), w, out[t])


def add_rms_norm_mul(a, b, s, eps, w, out):
    """s = ggml_add(a, b) (the residual stream), out = rms_norm_mul(s, eps, w): the ADD that ends a block and
    the norm that starts the next, in one call for a single token (and every small batch) - decoding makes
    ~60 such pairs a token. Same bits as add then rms_norm_mul. a, b, s, out: f32 (T, n); w: f32 (n,)."""
    if s.shape[0] > 1 and s.size >= PARALLEL_MIN_ELEMENTS:
        add(a, b, s)
        _rms_norm_mul_parallel(s, eps, w, out)
    else:
        _add_rms_norm_mul_serial(a, b, s, eps, w, out)


@pjit
def mul_rows(x, w, out):
    """ggml_mul(x, w) with w one row broadcast over x's rows. x, out: f32 (T, n); w: f32 (n,)."""
    _check_same(x, out, "mul_rows: x and out must have the same shape (T, n)")
    T, n = x.shape
    if w.shape[0] != n:
        raise ValueError("mul_rows: w must be (n,)")
    if T > 1 and T * n >= PARALLEL_MIN_ELEMENTS:
        for t in prange(T):
            for i in range(n):
                out[t, i] = x[t, i] * w[i]
    else:
        for t in range(T):
            for i in range(n):
                out[t, i] = x[t, i] * w[i]


@jit
def add(a, b, out):
    """ggml_add(a, b). a, out: f32 (T, n); b: f32 (T, n), or (n,) / (1, n) broadcast over rows (a bias).

    b must be C-contiguous (it is reshaped to rows). Serial: a 512-token batch of 1536 features takes ~0.12
    ms, and a parallel region would double the compile of a cold first run's add (issue #16)."""
    _check_same(a, out, "add: a and out must have the same shape (T, n)")
    T, n = a.shape
    if b.shape[b.ndim - 1] != n:
        raise ValueError("add: b's last dimension must be n")
    b2 = b.reshape((-1, n))
    nb = b2.shape[0]
    if nb != 1 and nb != T:
        raise ValueError("add: b must have 1 or T rows")
    for t in range(T):
        bt = t if nb > 1 else 0
        for i in range(n):
            out[t, i] = a[t, i] + b2[bt, i]
