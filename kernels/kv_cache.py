"""KV-cache cell types beyond F16/F32: how ggml's CPU backend writes them (SET_ROWS) and reads them in
flash attention (ggml-cpu/ops.cpp `ggml_compute_forward_flash_attn_ext_f16_one_chunk`).

    type   cell row per KV head (D values)          written by (ggml type traits' from_float)
    bf16   D bf16 values (uint16)                  GGML_FP32_TO_BF16 (round to nearest even)
    q8_0   D/32 blocks of 34 bytes                 x86 quantize_row_q8_0 (as the activations)
    q4_0   D/32 blocks of 18 bytes                 quantize_row_q4_0_ref   (ggml-quants.c; ggml-base is
    q4_1   D/32 blocks of 20 bytes                 quantize_row_q4_1_ref    built without FMA, so no
    q5_0   D/32 blocks of 22 bytes                 quantize_row_q5_0_ref    contraction: x*id, then + 8.5,
    q5_1   D/32 blocks of 24 bytes                 quantize_row_q5_1_ref    truncated to int8)
    iq4_nl D/32 blocks of 18 bytes                 quantize_row_iq4_nl_ref  (one search pass over the
                                                   non-linear grid KVALUES_IQ4NL, weights x^2; no FMA)

Reading, flash attention: K's vec_dot_type converts the query row (bf16 -> BF16; q8_0, q4_0, q5_0, iq4_nl ->
Q8_0; q4_1, q5_1 -> Q8_1, x86 quantizers) and K's vec_dot gives each score (ggml_vec_dot_bf16 with AVX512_BF16;
the AVX2 `ggml_vec_dot_{q8_0,q4_0,q5_0}_q8_0` / `{q4_1,q5_1}_q8_1`: 8 int32 lanes of 4 elements, acc =
fma(dx*dy, lane, acc), hsum_float_8, + fma(m, s) for the offset formats; `ggml_vec_dot_iq4_nl_q8_0` the same
with two accumulators, even and odd blocks, added before hsum_float_8); V rows are converted to F32 (to_float = the
dequantize_row_* of ggml-quants.c) and accumulated in F32.
"""

from __future__ import annotations

import kernels.config  # noqa: F401  (NUMBA_CACHE_DIR before numba)

import numpy as np
from numba import prange

from kernels.fp16 import fma_f32, jit, pjit
from kernels.quants._bits import bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16, read_u16
from kernels.quants.vec_dot_type import q8_0_row, q8_1_row
from kernels.quants.floats import _dpbf16_step, _reduce_add16_arr
from kernels.quants.iq4 import KVALUES_IQ4NL  # ggml-common.h kvalues_iq4nl: the 16 levels of IQ4_NL

# cache type name -> (code, bytes per 32 values); f16/f32 are the plain float caches
KV_TYPES = {"f32": (0, 128), "f16": (1, 64), "bf16": (2, 64), "q8_0": (3, 34), "q4_0": (4, 18),
            "q4_1": (5, 20), "q5_0": (6, 22), "q5_1": (7, 24), "iq4_nl": (8, 18)}
F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL = range(9)
QUANTIZED = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
BLOCK_BYTES = (34, 18, 20, 22, 24, 18)  # Q8_0 .. IQ4_NL


def cell_array(type_name: str, n_ctx: int, n_head_kv: int, head_dim: int) -> np.ndarray:
    """A zeroed cache buffer: (n_ctx, n_head_kv, head_dim) float32 / uint16 (f16, bf16 bits), or
    (n_ctx, n_head_kv, head_dim / 32 * block bytes) uint8 for the block types."""
    code, bb = KV_TYPES[type_name]
    if code == F32:
        return np.zeros((n_ctx, n_head_kv, head_dim), np.float32)
    if code in (F16, BF16):
        return np.zeros((n_ctx, n_head_kv, head_dim), np.uint16)
    return np.zeros((n_ctx, n_head_kv, head_dim // 32 * bb), np.uint8)


# ------------------------------------------------------------------------------------------- writing

@jit
def _amax_max(x, o):
    amax = np.float32(0.0)
    mx = np.float32(0.0)
    for j in range(32):
        v = x[o + j]
        if amax < abs(v):
            amax = abs(v)
            mx = v
    return mx


@jit
def _min_max(x, o):
    mn = np.float32(3.4028235e38)
    mx = np.float32(-3.4028235e38)
    for j in range(32):
        v = x[o + j]
        if v < mn:
            mn = v
        if v > mx:
            mx = v
    return mn, mx


@jit
def _put16(dst, o, h):
    dst[o] = h & 0xFF
    dst[o + 1] = h >> 8


@jit
def _put_q5_pair(dst, o, j, xi0, xi1, qh):
    """Q5_0 / Q5_1 values j and j + 16 (0..31): low nibbles into byte o + j, fifth bits into bits j and j + 16
    of qh, returned."""
    dst[o + j] = np.uint8((xi0 & 0x0F) | ((xi1 & 0x0F) << 4))
    qh |= np.uint32((xi0 & 0x10) >> 4) << np.uint32(j)
    qh |= np.uint32((xi1 & 0x10) >> 4) << np.uint32(j + 16)
    return qh


@jit
def _put32(dst, o, u):
    """uint32 u at bytes o..o+3, little-endian (the memcpy of qh)."""
    for i in range(4):
        dst[o + i] = np.uint8((u >> np.uint32(8 * i)) & np.uint32(0xFF))


@jit
def _trunc_i8(v):
    """C's (int8_t) conversion of a float in range: truncation toward zero."""
    return np.int32(np.trunc(v))


@jit
def _best_index_iq4nl(x):
    """ggml-quants.c best_index_int8(16, kvalues_iq4nl, x): the nearest level (bisection; ties go up)."""
    val = KVALUES_IQ4NL
    if x <= np.float32(val[0]):
        return 0
    if x >= np.float32(val[15]):
        return 15
    ml = 0
    mu = 15
    while mu - ml > 1:
        mav = (ml + mu) // 2
        if x < np.float32(val[mav]):
            mu = mav
        else:
            ml = mav
    return mu - 1 if np.float32(x - np.float32(val[mu - 1])) < np.float32(np.float32(val[mu]) - x) else mu


@jit
def _quantize_iq4_nl_block(x, o, dst, q, L):
    """quantize_row_iq4_nl_impl(32, 32, ..., quant_weights NULL, ntry -1) for x[o:o+32] into dst[q:q+18]; L
    (1, 32) int8 keeps its levels (stale for an all-zero block, as ggml's stack array)."""
    amax = np.float32(0.0)
    mx = np.float32(0.0)
    for j in range(32):
        ax = abs(x[o + j])
        if ax > amax:
            amax = ax
            mx = x[o + j]
    d = np.float32(0.0)
    if not amax < np.float32(1e-15):  # GROUP_MAX_EPS
        d = np.float32(mx / np.float32(KVALUES_IQ4NL[0]))
        idv = np.float32(np.float32(1.0) / d)
        sumqx = np.float32(0.0)
        sumq2 = np.float32(0.0)
        for j in range(32):
            xj = x[o + j]
            lv = _best_index_iq4nl(np.float32(idv * xj))
            L[0, j] = lv
            qv = np.float32(KVALUES_IQ4NL[lv])
            w = np.float32(xj * xj)
            sumqx = np.float32(sumqx + np.float32(np.float32(w * qv) * xj))
            sumq2 = np.float32(sumq2 + np.float32(np.float32(w * qv) * qv))
        d = np.float32(sumqx / sumq2) if sumq2 > 0 else np.float32(0.0)
    _put16(dst, q, f32_to_f16(d))
    for j in range(16):
        dst[q + 2 + j] = np.uint8(np.int32(L[0, j]) | (np.int32(L[0, 16 + j]) << 4))


@jit
def quantize_row(code, x, dst, tmp_qs, tmp_d16, tmp_d):
    """x (D,) float32 -> dst (D/32 * bytes,) uint8 blocks of the cache type `code` (module docstring)."""
    D = x.shape[0]
    bb = BLOCK_BYTES[code - Q8_0]
    for b in range(D // 32):
        o = 32 * b
        q = b * bb
        if code == Q8_0:
            for j in range(32):
                tmp_qs[0, j] = 0
            xs = x[o:o + 32].reshape(1, 32)
            q8_0_row(xs, 0, tmp_qs, tmp_d16, tmp_d)
            _put16(dst, q, tmp_d16[0, 0])
            for j in range(32):
                dst[q + 2 + j] = np.uint8(np.int32(tmp_qs[0, j]) & 0xFF)
        elif code == IQ4_NL:
            _quantize_iq4_nl_block(x, o, dst, q, tmp_qs)
        elif code == Q4_0 or code == Q5_0:
            mx = _amax_max(x, o)
            d = np.float32(mx / np.float32(-8.0 if code == Q4_0 else -16.0))
            idv = np.float32(np.float32(1.0) / d) if d != 0.0 else np.float32(0.0)
            _put16(dst, q, f32_to_f16(d))
            qh = np.uint32(0)
            for j in range(16):
                x0 = np.float32(x[o + j] * idv)
                x1 = np.float32(x[o + 16 + j] * idv)
                if code == Q4_0:
                    xi0 = min(15, _trunc_i8(np.float32(x0 + np.float32(8.5))))
                    xi1 = min(15, _trunc_i8(np.float32(x1 + np.float32(8.5))))
                    dst[q + 2 + j] = np.uint8(xi0 | (xi1 << 4))
                else:
                    xi0 = min(31, _trunc_i8(np.float32(x0 + np.float32(16.5))))
                    xi1 = min(31, _trunc_i8(np.float32(x1 + np.float32(16.5))))
                    qh = _put_q5_pair(dst, q + 6, j, xi0, xi1, qh)
            if code == Q5_0:
                _put32(dst, q + 2, qh)
        else:  # Q4_1, Q5_1
            mn, mx = _min_max(x, o)
            d = np.float32(np.float32(mx - mn) / np.float32(15.0 if code == Q4_1 else 31.0))
            idv = np.float32(np.float32(1.0) / d) if d != 0.0 else np.float32(0.0)
            _put16(dst, q, f32_to_f16(d))
            _put16(dst, q + 2, f32_to_f16(mn))
            qh = np.uint32(0)
            for j in range(16):
                x0 = np.float32(np.float32(x[o + j] - mn) * idv)
                x1 = np.float32(np.float32(x[o + 16 + j] - mn) * idv)
                if code == Q4_1:
                    xi0 = min(15, _trunc_i8(np.float32(x0 + np.float32(0.5))))
                    xi1 = min(15, _trunc_i8(np.float32(x1 + np.float32(0.5))))
                    dst[q + 4 + j] = np.uint8(xi0 | (xi1 << 4))
                else:
                    xi0 = _trunc_i8(np.float32(x0 + np.float32(0.5))) & 0xFF
                    xi1 = _trunc_i8(np.float32(x1 + np.float32(0.5))) & 0xFF
                    qh = _put_q5_pair(dst, q + 8, j, xi0, xi1, qh)
            if code == Q5_1:
                _put32(dst, q + 4, qh)


@jit
def _store_float(code, cache, x, cells):
    T, G, D = x.shape
    for t in range(T):
        c = cells[t]
        for g in range(G):
            for d in range(D):
                if code == F32:
                    cache[c, g, d] = x[t, g, d]
                elif code == F16:
                    cache[c, g, d] = f32_to_f16(x[t, g, d])
                else:
                    cache[c, g, d] = f32_to_bf16(x[t, g, d])


@jit
def _store_quantized(code, cache, x, cells):
    T, G, D = x.shape
    tmp_qs = np.empty((1, 32), np.int8)
    tmp_d16 = np.empty((1, 1), np.uint16)
    tmp_d = np.empty((1, 1), np.float32)
    for t in range(T):
        c = cells[t]
        for g in range(G):
            quantize_row(code, x[t, g], cache[c, g], tmp_qs, tmp_d16, tmp_d)


def store(code, cache, x, cells):
    """SET_ROWS: x (T, Hkv, D) float32 into cells of a cache buffer of type `code` (cell_array). One kernel per
    kind of cell (float, quantized), so that a float cache does not compile the quantizers (the cold first run)."""
    if code in (F32, F16, BF16):
        _store_float(code, cache, x, cells)
    else:
        _store_quantized(code, cache, x, cells)


# ------------------------------------------------------------------------------------------- reading

@jit
def dequantize_row(code, src, out):
    """One cell row of a cache buffer -> out (D,) float32 (ggml's to_float)."""
    D = out.shape[0]
    if code == F32:
        for d in range(D):
            out[d] = src[d]
        return
    if code == F16:
        for d in range(D):
            out[d] = f16_to_f32(src[d])
        return
    if code == BF16:
        for d in range(D):
            out[d] = bf16_to_f32(src[d])
        return
    bb = BLOCK_BYTES[code - Q8_0]
    for b in range(D // 32):
        q = b * bb
        dd = f16_to_f32(read_u16(src, q))
        if code == Q8_0:
            for j in range(32):
                out[32 * b + j] = np.float32(np.float32(np.int8(src[q + 2 + j])) * dd)
        elif code == Q4_0:
            for j in range(16):
                out[32 * b + j] = np.float32(np.float32(np.int32(src[q + 2 + j] & 15) - 8) * dd)
                out[32 * b + 16 + j] = np.float32(np.float32(np.int32(src[q + 2 + j] >> 4) - 8) * dd)
        elif code == IQ4_NL:
            for j in range(16):
                out[32 * b + j] = np.float32(dd * np.float32(KVALUES_IQ4NL[np.int32(src[q + 2 + j] & 15)]))
                out[32 * b + 16 + j] = np.float32(dd * np.float32(KVALUES_IQ4NL[np.int32(src[q + 2 + j] >> 4)]))
        elif code == Q4_1:
            m = f16_to_f32(read_u16(src, q + 2))
            for j in range(16):
                out[32 * b + j] = np.float32(np.float32(np.float32(src[q + 4 + j] & 15) * dd) + m)
                out[32 * b + 16 + j] = np.float32(np.float32(np.float32(src[q + 4 + j] >> 4) * dd) + m)
        else:  # Q5_0, Q5_1
            o = 2 if code == Q5_0 else 4
            qh = np.uint32(src[q + o]) | (np.uint32(src[q + o + 1]) << 8) | (np.uint32(src[q + o + 2]) << 16) \
                | (np.uint32(src[q + o + 3]) << 24)
            m = f16_to_f32(read_u16(src, q + 2)) if code == Q5_1 else np.float32(0.0)
            for j in range(16):
                h0 = np.int32((qh >> np.uint32(j)) & np.uint32(1)) << 4
                h1 = np.int32((qh >> np.uint32(j + 16)) & np.uint32(1)) << 4
                x0 = np.int32(src[q + o + 4 + j] & 15) | h0
                x1 = np.int32(src[q + o + 4 + j] >> 4) | h1
                if code == Q5_0:
                    out[32 * b + j] = np.float32(np.float32(x0 - 16) * dd)
                    out[32 * b + 16 + j] = np.float32(np.float32(x1 - 16) * dd)
                else:
                    out[32 * b + j] = np.float32(np.float32(np.float32(x0) * dd) + m)
                    out[32 * b + 16 + j] = np.float32(np.float32(np.float32(x1) * dd) + m)


@pjit
def to_f32(code, cache, n, out):
    """The first n cells of a cache buffer as float32 out (n, Hkv, D)."""
    for c in prange(n):
        for g in range(cache.shape[1]):
            dequantize_row(code, cache[c, g], out[c, g])


# ------------------------------------------------------------------------------------- K . Q scores

@jit
def prepare_query(code, q, qq, qd, qs, q16):
    """The query row q (D,) in K's vec_dot_type: qq (D,) int8 and qd/qs (D/32,) float32 (Q8_0: d; Q8_1: d
    and s = fp16(d * sum)), or q16 (D,) BF16 bits."""
    D = q.shape[0]
    if code == BF16:
        for d in range(D):
            q16[d] = f32_to_bf16(q[d])
        return
    x = q.reshape(1, D)
    qq2 = qq.reshape(1, D)
    d16 = np.empty((1, D // 32), np.uint16)
    d2 = qd.reshape(1, D // 32)
    if code == Q4_1 or code == Q5_1:
        s16 = np.empty((1, D // 32), np.uint16)
        q8_1_row(x, 0, qq2, d16, d2, s16, qs.reshape(1, D // 32))
    else:
        q8_0_row(x, 0, qq2, d16, d2)


@jit
def _hsum8(a):
    return np.float32(np.float32(np.float32(a[4] + a[0]) + np.float32(a[6] + a[2]))
                      + np.float32(np.float32(a[5] + a[1]) + np.float32(a[7] + a[3])))


@jit
def _score_iq4_nl(krow, qq, qd, acc2, acc):
    """ggml_vec_dot_iq4_nl_q8_0 (AVX2): blocks in pairs, 8 int32 lanes of 4 elements each, acc1 (even blocks,
    `acc`) and acc2 (odd, `acc2`[:8]) = fma(dy*dx, lane, acc); hsum_float_8(acc1 + acc2); an odd last block
    scalar: + d * (sumi1 + sumi2)."""
    nb = qq.shape[0] // 32
    acc[:] = 0
    for lane in range(8):
        acc2[lane] = 0
    ib = 0
    while ib + 1 < nb:
        for k in range(2):
            b = ib + k
            dd = np.float32(qd[b] * f16_to_f32(read_u16(krow, 18 * b)))
            for lane in range(8):
                s = np.int32(0)
                for i in range(4):
                    e = 4 * lane + i
                    byte = krow[18 * b + 2 + (e % 16)]
                    nib = np.int32(byte & 15) if e < 16 else np.int32(byte >> 4)
                    w = np.int32(KVALUES_IQ4NL[nib])
                    s += w * np.int32(qq[32 * b + e])
                if k == 0:
                    acc[lane] = fma_f32(dd, np.float32(s), acc[lane])
                else:
                    acc2[lane] = fma_f32(dd, np.float32(s), acc2[lane])
        ib += 2
    for lane in range(8):
        acc[lane] = np.float32(acc[lane] + acc2[lane])
    sumf = _hsum8(acc)
    for b in range(ib, nb):
        dd = np.float32(qd[b] * f16_to_f32(read_u16(krow, 18 * b)))
        si = np.int32(0)
        for j in range(16):
            byte = krow[18 * b + 2 + j]
            si += np.int32(qq[32 * b + j]) * np.int32(KVALUES_IQ4NL[np.int32(byte & 15)])
            si += np.int32(qq[32 * b + 16 + j]) * np.int32(KVALUES_IQ4NL[np.int32(byte >> 4)])
        sumf = np.float32(sumf + np.float32(dd * np.float32(si)))
    return sumf


@jit
def score(code, krow, qq, qd, qs, q16, c1, c2, acc):
    """K's vec_dot of one cell row krow with the prepared query (prepare_query); c1, c2 (16,), acc (8,)
    float32 scratch."""
    D = qq.shape[0]
    if code == BF16:
        c1[:] = 0
        c2[:] = 0
        npart = D & ~63
        for i in range(0, npart, 64):
            _dpbf16_step(c1, krow, i, q16, i)
            _dpbf16_step(c2, krow, i + 32, q16, i + 32)
        s = np.float64(_reduce_add16_arr(c1)) + np.float64(_reduce_add16_arr(c2))
        for i in range(npart, D):
            s += np.float64(np.float32(bf16_to_f32(krow[i]) * bf16_to_f32(q16[i])))
        return np.float32(s)
    bb = BLOCK_BYTES[code - Q8_0]
    if code == IQ4_NL:
        return _score_iq4_nl(krow, qq, qd, c1, acc)
    acc[:] = 0
    summs = np.float32(0.0)
    for b in range(D // 32):
        q = b * bb
        dx = f16_to_f32(read_u16(krow, q))
        dd = np.float32(dx * qd[b])
        o = 2
        if code == Q4_1 or code == Q5_1:
            o = 4
        qh = np.uint32(0)
        if code == Q5_0 or code == Q5_1:
            qh = np.uint32(krow[q + o]) | (np.uint32(krow[q + o + 1]) << 8) | (np.uint32(krow[q + o + 2]) << 16) \
                | (np.uint32(krow[q + o + 3]) << 24)
            o += 4
        for lane in range(8):
            s = np.int32(0)
            for i in range(4):
                e = 4 * lane + i
                if code == Q8_0:
                    w = np.int32(np.int8(krow[q + 2 + e]))
                else:
                    byte = krow[q + o + (e % 16)]
                    w = np.int32(byte & 15) if e < 16 else np.int32(byte >> 4)
                    if code == Q5_0 or code == Q5_1:
                        w |= np.int32((qh >> np.uint32(e)) & np.uint32(1)) << 4
                    if code == Q4_0:
                        w -= 8
                    elif code == Q5_0:
                        w -= 16
                s += w * np.int32(qq[32 * b + e])
            acc[lane] = fma_f32(dd, np.float32(s), acc[lane])
        if code == Q4_1 or code == Q5_1:
            summs = fma_f32(f16_to_f32(read_u16(krow, q + 2)), qs[b], summs)
    r = _hsum8(acc)
    if code == Q4_1 or code == Q5_1:
        return np.float32(r + summs)
    return r


# ------------------------------------------------------------------------------ Hadamard rotation
# llama.cpp rotates Q and K (quantized K cache) and V and the attention output (quantized V cache) by an
# orthonormal Walsh-Hadamard matrix before they meet the cache (src/llama-kv-cache.cpp attn_rot_k/v;
# llama_mul_mat_hadamard), which ggml-cpu computes as a fast transform (ops.cpp ggml_compute_forward_fwht):
# per row of n: x * (1/sqrtf(n)), then butterflies u + v, u - v for len = 1, 2, 4, .. n/2 (its SIMD passes
# compute u - v as fma(v, -1, u), the same value).


def rot_size_k(head_dim: int) -> int:
    """attn_inp_k_rot's size (build_input_k_rot): the largest power of two >= 64 that divides head_dim."""
    n = 64
    while head_dim % (2 * n) == 0:
        n *= 2
    return n


ROT_SIZE_V = 64  # build_input_v_rot: always 64


@pjit
def fwht_rows(x, n):
    """In place: every run of n consecutive values of x (C-contiguous float32, size a multiple of n)."""
    flat = x.reshape(-1)
    scale = np.float32(np.float32(1.0) / np.float32(np.sqrt(np.float32(n))))
    for r in prange(flat.shape[0] // n):
        o = r * n
        for j in range(n):
            flat[o + j] = np.float32(flat[o + j] * scale)
        ln = 1
        while ln < n:
            for i in range(0, n, 2 * ln):
                for j in range(ln):
                    u = flat[o + i + j]
                    v = flat[o + i + ln + j]
                    flat[o + i + j] = np.float32(u + v)
                    flat[o + i + ln + j] = np.float32(u - v)
            ln *= 2
