"""Self-attention over the KV cache, as llama.cpp's non-flash-attention graph on ggml's CPU backend (AVX512).

Mirrors src/llama-graph.cpp `build_attn_mha` with flash attention off:
    kq          = mul_mat(K view, Q)                       (n_head, T, n_kv_pad), raw dot products
    kq_soft_max = soft_max_ext(kq, kq_mask, kq_scale)      (n_head, T, n_kv_pad)
    kqv         = mul_mat(V^T view, kq_soft_max)           -> permute -> (T, n_head * head_dim)
with the KV cache of src/llama-kv-cache.cpp:
* n_kv_pad = min(n_ctx, max(256, roundup(n_kv, 256))) cells are read (`get_n_kv`); cells never written
  hold zeros (the buffer is cleared at creation); the mask (-inf) hides cells that are empty
  (kv_pos < 0), at or beyond n_kv, or in the future (kv_pos > q_pos).
* GQA: query head h reads KV head h // (n_head / n_head_kv) (ggml mul_mat broadcast r2).
* F16 cache (uint16 storage): K/V stored with ggml_cpu_fp32_to_fp16 (set_rows, round to nearest even);
  the matmuls' F32 operand is converted to F16 first (Q for kq, the soft-max probabilities for kqv).

Which summation order ggml uses (ggml-cpu.c `ggml_compute_forward_mul_mat`, llamafile/sgemm.cpp):
* llamafile_sgemm (tinyBLAS, AVX512: one 16-lane FMA accumulator per output over k/16 chunks, then
  _mm512_reduce_add_ps) when the batch has >= 2 tokens (`n < 2` returns false) and the operand types
  fit: F16 cache -> kq and kqv (F16 x F16 after converting the F32 operand); F32 cache -> kqv only
  (kq's Q operand is a non-contiguous permuted view and already F32, so neither sgemm attempt applies).
* otherwise ggml_vec_dot_f16 / ggml_vec_dot_f32 (AVX512 without AVX512-FP16: 4 accumulators x 16 lanes
  over steps of 64, reduced acc0+acc2, acc1+acc3, then +, then _mm512_reduce_add_ps; F16 leftovers summed
  in double, F32 leftovers added in float (partly FMA'd, as GCC 12 compiles it) -- leftovers only exist
  when head_dim or n_kv_pad is not a multiple of 64, which no supported model has).
So, exactly like llama.cpp, a token's attention output is NOT bit-identical between a multi-token batch
and a single-token decode (F16 cache: kq and kqv; F32 cache: kqv); the difference is ulp-level. Within
either path the result does not depend on the batch split, on other tokens, or on the thread count.

Cache layout (llama.cpp's buffers, v_trans = true):
    k_cache: (n_ctx, n_head_kv, head_dim)   one row of n_head_kv*head_dim per cell
    v_cache: (n_head_kv, head_dim, n_ctx)   V transposed: per (KV head, dim) a row over cells
both uint16 (F16 bits) or both float32. Zero-initialise them (np.zeros), as llama.cpp clears its buffer.

Each dot product keeps ggml's lanes. The ggml_vec_dot order (every single-token decode, and every token
of a batch when batch_paths is False) runs on explicit 16-lane vectors (kernels/_vec.py) when head_dim
and the computed cells are multiples of 64 and the arrays are C-contiguous (all supported models): the
cache is read in place (F16 -> F32 by vcvtph2ps), the 4 accumulators x 16 lanes of 16 dot products are
reduced together with shuffles (same pairs added as _mm512_reduce_add_ps), and three query heads of a
KV head share each loaded block. A decode stays on the calling thread unless it is long
(DECODE_PARALLEL_MIN_FLOPS; then split over KV heads). Otherwise (other shapes, or the tinyBLAS order
of a batch with batch_paths) scalar loops arranged for the auto-vectoriser: a single token reads the
cache directly, a batch first copies its KV head's cells to float32 windows (K transposed, V by cell)
shared by the item's tokens and GQA heads. Batches are split over (KV head, block of tokens) items
with prange. Padding
cells past n_kv are masked (probability exactly 0) and add exact zeros to every sum, so only
roundup(n_kv, 64) cells are computed unless the kq / kq_soft_max traces are requested (then all
n_kv_pad, as ggml).
"""

from __future__ import annotations

import kernels.config  # noqa: F401

import numpy as np
from numba import prange, types
from numba.extending import overload

from kernels._vec import add16, fma16, fold1, fold2, fold4, fold8, load16, store16, zero16
from kernels.activations import soft_max_row
from kernels.fp16 import f16_bits_to_f32_hw, f32_to_f16_bits_hw, fma_f32, jit, pjit, round_f16_scalar

N_KV_PAD = 256  # llama_kv_cache::get_n_kv: max(n_pad, 256)
TOKENS_PER_ITEM = 16  # tokens per parallel work item in a batch
CELL_BLOCK = 64  # cells whose kq dot products are computed side by side
PARALLEL_MIN_FLOPS = 1 << 18  # below this much work the kernel stays on the calling thread
# a single token is split over its query heads only above this much work (kq + kqv flops): a parallel
# launch costs ~10 us, much more when the other cores are busy, and small decodes take a few us
DECODE_PARALLEL_MIN_FLOPS = 1 << 24


# ----------------------------------------------------------------------------------------------
# cache-type dispatch (resolved at compile time: numba compiles one version per cache dtype)


def cache_is_f16(cache):  # pragma: no cover - replaced by the overload inside jitted code
    raise NotImplementedError


def _by_cache_type(cache, f16_impl, f32_impl):
    """The overload's implementation for an F16 (uint16) or F32 cache array."""
    if isinstance(cache, types.Array) and cache.dtype == types.uint16:
        return f16_impl
    if isinstance(cache, types.Array) and cache.dtype == types.float32:
        return f32_impl
    raise TypeError("KV cache must be a uint16 (F16) or float32 array")


@overload(cache_is_f16)
def _ov_cache_is_f16(cache):
    return _by_cache_type(cache, lambda cache: True, lambda cache: False)


def cache_load(v):  # pragma: no cover
    raise NotImplementedError


@overload(cache_load)
def _ov_cache_load(v):
    if v == types.uint16:
        return lambda v: f16_bits_to_f32_hw(v)
    if v == types.float32:
        return lambda v: v
    raise TypeError("KV cache element must be uint16 or float32")


def cache_value(cache, x):  # pragma: no cover
    raise NotImplementedError


@overload(cache_value)
def _ov_cache_value(cache, x):
    return _by_cache_type(cache, lambda cache, x: f32_to_f16_bits_hw(np.float32(x)), lambda cache, x: np.float32(x))


def round_operand(cache, x):  # pragma: no cover
    raise NotImplementedError


@overload(round_operand)
def _ov_round_operand(cache, x):
    # the F32 operand of a matmul against the cache, as ggml converts it (vec_dot_type)
    return _by_cache_type(cache, lambda cache, x: round_f16_scalar(np.float32(x)), lambda cache, x: np.float32(x))


# ----------------------------------------------------------------------------------------------
# lane reductions (element-wise over the trailing axis of acc, i.e. over many dot products at once)


@jit
def _hsum16_rows(acc, n):
    """acc[0, :n] = _mm512_reduce_add_ps over lanes acc[0:16, j] (tree 8, 4, 2, 1) for every j."""
    for l in range(8):
        for j in range(n):
            acc[l, j] = acc[l, j] + acc[l + 8, j]
    for l in range(4):
        for j in range(n):
            acc[l, j] = acc[l, j] + acc[l + 4, j]
    for l in range(2):
        for j in range(n):
            acc[l, j] = acc[l, j] + acc[l + 2, j]
    for j in range(n):
        acc[0, j] = acc[0, j] + acc[1, j]


@jit
def _reduce_vec_rows(acc, n):
    """GGML_F32x16_REDUCE for 4 accumulators held as acc[0:64, j]: (x0+x2) + (x1+x3), then the tree."""
    for l in range(16):
        for j in range(n):
            acc[l, j] = acc[l, j] + acc[l + 32, j]
            acc[l + 16, j] = acc[l + 16, j] + acc[l + 48, j]
    for l in range(16):
        for j in range(n):
            acc[l, j] = acc[l, j] + acc[l + 16, j]
    _hsum16_rows(acc, n)


@jit
def _reduce_vec_lanes(a):
    """GGML_F32x16_REDUCE of one dot product's 4 x 16 lanes a[0:64] -> float32."""
    for l in range(16):
        a[l] = (a[l] + a[l + 32]) + (a[l + 16] + a[l + 48])
    for l in range(8):
        a[l] = a[l] + a[l + 8]
    for l in range(4):
        a[l] = a[l] + a[l + 4]
    return (a[0] + a[2]) + (a[1] + a[3])


@jit
def _tail_add(s, x, y, i0, n, f16):
    """ggml_vec_dot leftovers (elements i0..n-1 of x . y; x may be cache storage) added to the SIMD sum s."""
    if f16:  # ggml_float sumf += (ggml_float)(x*y)
        sd = np.float64(s)
        for i in range(i0, n):
            sd += np.float64(cache_load(x[i]) * y[i])
        return np.float32(sd)
    # float sumf += x*y as GCC 12 -O3 compiles it (disassembled): products of whole 8-blocks are
    # vmulps'd and added one by one, the last (n - i0) % 8 are vfmadd231ss'd (compiler dependent)
    n8 = i0 + ((n - i0) // 8) * 8
    for i in range(i0, n8):
        s = s + cache_load(x[i]) * y[i]
    for i in range(n8, n):
        s = fma_f32(cache_load(x[i]), y[i], s)
    return s


# ----------------------------------------------------------------------------------------------
# single-token path (T == 1, always ggml_vec_dot order), straight from the cache


@jit
def _kq_row_direct(k_cache, g, qv, n, out_row, a4):
    """out_row[c] = K[c] . qv for c < n, ggml_vec_dot order; cells in groups of 4 (independent chains).
    a4: f32 (4, 64) scratch. Slices keep the inner loops' index plain, so they vectorise."""
    D = qv.shape[0]
    f16 = cache_is_f16(k_cache)
    npart = D & ~63
    for c0 in range(0, n, 4):
        nb = min(4, n - c0)
        for j in range(nb):
            krow = k_cache[c0 + j, g]
            a = a4[j]
            for l in range(64):
                a[l] = np.float32(0.0)
            for s in range(0, npart, 64):
                ks = krow[s:s + 64]
                qs = qv[s:s + 64]
                for l in range(64):
                    a[l] = fma_f32(cache_load(ks[l]), qs[l], a[l])
        for j in range(nb):
            r = _reduce_vec_lanes(a4[j])
            if npart < D:
                r = _tail_add(r, k_cache[c0 + j, g], qv, npart, D, f16)
            out_row[c0 + j] = r


@jit
def _kqv_row_direct(v_cache, g, pa, n, res, a4):
    """res[d] = sum_c pa[c] * V[c, d], ggml_vec_dot order over the cells, 4 dims at a time."""
    D = res.shape[0]
    f16 = cache_is_f16(v_cache)
    npart = n & ~63
    for d0 in range(0, D, 4):
        nr = min(4, D - d0)
        for r in range(nr):
            for l in range(64):
                a4[r, l] = np.float32(0.0)
        for s in range(0, npart, 64):
            ps = pa[s:s + 64]
            for r in range(nr):
                vs = v_cache[g, d0 + r, s:s + 64]
                a = a4[r]
                for l in range(64):
                    a[l] = fma_f32(cache_load(vs[l]), ps[l], a[l])
        for r in range(nr):
            x = _reduce_vec_lanes(a4[r])
            if npart < n:
                x = _tail_add(x, v_cache[g, d0 + r], pa, npart, n, f16)
            res[d0 + r] = x


# ----------------------------------------------------------------------------------------------
# vec_dot path with explicit 16-lane vectors (head_dim and the computed cells multiples of 64, C-contiguous
# cache): every token of a decode, and every token of a batch when batch_paths is off. Same sums as the
# scalar functions above: per dot product 4 accumulators x 16 lanes, then (acc0+acc2)+(acc1+acc3) and the
# reduce tree, done for 16 dot products at once (kernels/_vec.py fold*), cache F16 -> F32 by vcvtph2ps.


@jit
def _dot_lanes(A, a, B, b, n):
    """ggml_vec_dot_f16/f32 over n (% 64 == 0) elements of flat A from a and B from b, up to the lane
    tree: (acc0 + acc2) + (acc1 + acc3) as 16 lanes."""
    s0 = zero16()
    s1 = zero16()
    s2 = zero16()
    s3 = zero16()
    for i in range(0, n, 64):
        s0 = fma16(load16(A, a + i), load16(B, b + i), s0)
        s1 = fma16(load16(A, a + i + 16), load16(B, b + i + 16), s1)
        s2 = fma16(load16(A, a + i + 32), load16(B, b + i + 32), s2)
        s3 = fma16(load16(A, a + i + 48), load16(B, b + i + 48), s3)
    return add16(add16(s0, s2), add16(s1, s3))


def make_dots16(lanes, decorator=jit):
    """dots16(A, a, stride, B, b, n): 16 ggml_vec_dot results, lane i the dot of row a + i*stride of flat A with
    B[b:b+n], each row's 16 lane sums lanes(A, a + i*stride, B, b, n) reduced together by `_mm512_reduce_add_ps`'s
    tree (kernels/_vec.py fold8..fold1). decorator: jit, or ijit to inline it into a hot loop."""
    @decorator
    def dots16(A, a, stride, B, b, n):
        f0 = fold8(lanes(A, a, B, b, n), lanes(A, a + stride, B, b, n))
        f1 = fold8(lanes(A, a + 2 * stride, B, b, n), lanes(A, a + 3 * stride, B, b, n))
        f2 = fold8(lanes(A, a + 4 * stride, B, b, n), lanes(A, a + 5 * stride, B, b, n))
        f3 = fold8(lanes(A, a + 6 * stride, B, b, n), lanes(A, a + 7 * stride, B, b, n))
        f4 = fold8(lanes(A, a + 8 * stride, B, b, n), lanes(A, a + 9 * stride, B, b, n))
        f5 = fold8(lanes(A, a + 10 * stride, B, b, n), lanes(A, a + 11 * stride, B, b, n))
        f6 = fold8(lanes(A, a + 12 * stride, B, b, n), lanes(A, a + 13 * stride, B, b, n))
        f7 = fold8(lanes(A, a + 14 * stride, B, b, n), lanes(A, a + 15 * stride, B, b, n))
        return fold1(fold2(fold4(f0, f1), fold4(f2, f3)), fold2(fold4(f4, f5), fold4(f6, f7)))

    return dots16


_dots16 = make_dots16(_dot_lanes)  # 16 ggml_vec_dot results, reduced together


@jit
def _dot_lanes3(A, a, B, b0, b1, b2, n):
    """_dot_lanes of one row of A against three vectors of B (offsets b0, b1, b2): each A block is loaded
    (and converted from F16) once for the three query heads that share it."""
    s0 = zero16()
    s1 = zero16()
    s2 = zero16()
    s3 = zero16()
    t0 = zero16()
    t1 = zero16()
    t2 = zero16()
    t3 = zero16()
    u0 = zero16()
    u1 = zero16()
    u2 = zero16()
    u3 = zero16()
    for i in range(0, n, 64):
        x0 = load16(A, a + i)
        x1 = load16(A, a + i + 16)
        x2 = load16(A, a + i + 32)
        x3 = load16(A, a + i + 48)
        s0 = fma16(x0, load16(B, b0 + i), s0)
        s1 = fma16(x1, load16(B, b0 + i + 16), s1)
        s2 = fma16(x2, load16(B, b0 + i + 32), s2)
        s3 = fma16(x3, load16(B, b0 + i + 48), s3)
        t0 = fma16(x0, load16(B, b1 + i), t0)
        t1 = fma16(x1, load16(B, b1 + i + 16), t1)
        t2 = fma16(x2, load16(B, b1 + i + 32), t2)
        t3 = fma16(x3, load16(B, b1 + i + 48), t3)
        u0 = fma16(x0, load16(B, b2 + i), u0)
        u1 = fma16(x1, load16(B, b2 + i + 16), u1)
        u2 = fma16(x2, load16(B, b2 + i + 32), u2)
        u3 = fma16(x3, load16(B, b2 + i + 48), u3)
    return (add16(add16(s0, s2), add16(s1, s3)), add16(add16(t0, t2), add16(t1, t3)),
            add16(add16(u0, u2), add16(u1, u3)))


@jit
def _tree16(buf, o):
    """_dots16's reduction of the 16 lane vectors at buf[o + 16 i] (i = cell): fold8 of cells (0, 1), (2, 3)..,
    fold4 of those pairs, fold2, fold1 - the same tree."""
    q0 = fold4(fold8(load16(buf, o), load16(buf, o + 16)), fold8(load16(buf, o + 32), load16(buf, o + 48)))
    q1 = fold4(fold8(load16(buf, o + 64), load16(buf, o + 80)), fold8(load16(buf, o + 96), load16(buf, o + 112)))
    q2 = fold4(fold8(load16(buf, o + 128), load16(buf, o + 144)), fold8(load16(buf, o + 160), load16(buf, o + 176)))
    q3 = fold4(fold8(load16(buf, o + 192), load16(buf, o + 208)), fold8(load16(buf, o + 224), load16(buf, o + 240)))
    return fold1(fold2(q0, q1), fold2(q2, q3))


@jit
def _dots16x3(A, a, stride, B, b0, b1, b2, n, buf):
    """_dots16 for three B vectors at once (three query heads of one KV head): the 16 rows' lane vectors go to
    buf (>= 768 float32 scratch) and are reduced there. One loop rather than nested helpers returning vector
    tuples: numba left those as calls, which cost a third of the scores' time (2-core Zen 4)."""
    for i in range(16):
        x, y, z = _dot_lanes3(A, a + i * stride, B, b0, b1, b2, n)
        store16(buf, 16 * i, x)
        store16(buf, 256 + 16 * i, y)
        store16(buf, 512 + 16 * i, z)
    return _tree16(buf, 0), _tree16(buf, 256), _tree16(buf, 512)


@jit
def _dots16_heads(A, a, stride, B, b_step, n, n_heads, n3, out, o, o_step, buf):
    """_dots16 of rows a + i*stride (i < 16) of flat A with each of n_heads vectors of flat B (head j's at
    j*b_step, n long), stored at out[o + j*o_step:][:16]; heads below n3 (a multiple of 3) go three at a time
    (_dots16x3: each block of A loaded, and converted from F16, once for the three; buf its scratch)."""
    for j in range(0, n3, 3):
        r0, r1, r2 = _dots16x3(A, a, stride, B, j * b_step, (j + 1) * b_step, (j + 2) * b_step, n, buf)
        store16(out, o + j * o_step, r0)
        store16(out, o + (j + 1) * o_step, r1)
        store16(out, o + (j + 2) * o_step, r2)
    for j in range(n3, n_heads):
        store16(out, o + j * o_step, _dots16(A, a, stride, B, j * b_step, n))


@jit
def _token_mask(kv_pos, n_kv, qp, n_eff, mk):
    """mk[c] = the kq_mask value of cell c for a query at position qp: 0, or -inf (empty, >= n_kv, future)."""
    for c in range(n_eff):
        mk[c] = np.float32(-np.inf) if (c >= n_kv or kv_pos[c] < 0 or kv_pos[c] > qp) else np.float32(0.0)


@jit
def _group_fast(q, k_cache, v_cache, t, g, scale, n_eff, mk, out, kq_out, kq_soft_max_out, want_kq, want_sm,
                qv, wp, pa, dp, buf):
    """The query heads of KV head g for token t (vec_dot order). Scratch: qv (gqa, D), wp/pa (gqa, n_eff),
    dp (n_eff,), buf (768,). Query heads go three at a time so each cache block is loaded and converted (vcvtph2ps,
    2 uops per 16 values) once for them: measured ~8% faster for kq, ~40% for kqv than one at a time."""
    n_ctx, G, D = k_cache.shape
    H = q.shape[1]
    gqa = H // G
    h0 = g * gqa
    n3 = (gqa // 3) * 3
    for j in range(gqa):
        for d in range(D):
            qv[j, d] = round_operand(k_cache, q[t, h0 + j, d])
    # kq: 16 cells at a time (K row stride G*D elements), head j's scores in row j of wp
    for c0 in range(0, n_eff, 16):
        _dots16_heads(k_cache, (c0 * G + g) * D, G * D, qv, D, D, gqa, n3, wp, c0, n_eff, buf)
    for j in range(gqa):
        h = h0 + j
        w = wp[j]
        if want_kq:
            for c in range(n_eff):
                kq_out[h, t, c] = w[c]
        for c in range(n_eff):  # ggml_vec_scale_f32 by kq_scale, then += mask
            w[c] = w[c] * scale + mk[c]
        soft_max_row(n_eff, dp, w, True)
        if want_sm:
            for c in range(n_eff):
                kq_soft_max_out[h, t, c] = dp[c]
        pj = pa[j]
        for c in range(n_eff):
            pj[c] = round_operand(v_cache, dp[c])
    # kqv: 16 head dims at a time (V^T row stride n_ctx) over the cells; out is (T, H, D) in memory
    for d0 in range(0, D, 16):
        _dots16_heads(v_cache, (g * D + d0) * n_ctx, n_ctx, pa, n_eff, n_eff, gqa, n3, out, (t * H + h0) * D + d0, D,
                      buf)


@jit
def _fast_ok(q, k_cache, v_cache, out, n_eff):
    D = k_cache.shape[2]
    return (D % 64 == 0 and n_eff % 64 == 0 and k_cache.flags.c_contiguous and v_cache.flags.c_contiguous
            and q.flags.c_contiguous and out.flags.c_contiguous)


@jit
def _fast_item(q, k_cache, v_cache, n_kv, kv_pos, q_pos, scale, out, kq_out, kq_soft_max_out, want_kq, want_sm,
               n_eff, g0, g1, t0, t1):
    """KV heads g0..g1-1 for tokens t0..t1-1 on the vectorised vec_dot path (one set of scratch arrays)."""
    T, H, D = q.shape
    gqa = H // k_cache.shape[1]
    mk = np.empty(n_eff, np.float32)
    qv = np.empty((gqa, D), np.float32)
    wp = np.empty((gqa, n_eff), np.float32)
    pa = np.empty((gqa, n_eff), np.float32)
    dp = np.empty(n_eff, np.float32)
    buf = np.empty(768, np.float32)
    for t in range(t0, t1):
        _token_mask(kv_pos, n_kv, q_pos[t], n_eff, mk)
        for g in range(g0, g1):
            _group_fast(q, k_cache, v_cache, t, g, scale, n_eff, mk, out, kq_out, kq_soft_max_out, want_kq,
                        want_sm, qv, wp, pa, dp, buf)


# ----------------------------------------------------------------------------------------------
# batch path (T >= 2): the KV head's cells are first copied to float32 windows laid out so that many
# dot products run side by side (cost amortised over the item's tokens and GQA heads)


@jit
def _load_windows(k_cache, v_cache, g, n, kt, vw):
    """kt[d, c] = K[c, g, d] and vw[c, d] = V[c, g, d] (exact F16 -> F32) for cells c < n."""
    D = kt.shape[0]
    for c in range(n):
        krow = k_cache[c, g]
        for d in range(D):
            kt[d, c] = cache_load(krow[d])
    for d in range(D):
        vrow = v_cache[g, d, :n]
        for c in range(n):
            vw[c, d] = cache_load(vrow[c])


@jit
def _lane_fmas(kt, qv, c0, cb, W, end, acc):
    """acc[l, j] (l < W, j < cb) = the fma chain from 0 over k[s + l] * q[s + l], s = 0, W, .. below end, of
    cell c0 + j of the window kt (D, n): W lanes of one dot product per cell."""
    for l in range(W):
        for j in range(cb):
            acc[l, j] = np.float32(0.0)
    for s in range(0, end, W):
        for l in range(W):
            qq = qv[s + l]
            krow = kt[s + l, c0:c0 + cb]
            arow = acc[l]
            for j in range(cb):
                arow[j] = fma_f32(krow[j], qq, arow[j])


@jit
def _kq_row_window(kt, qv, n, gemm, f16, out_row, acc):
    """out_row[c] = K[c] . qv for c < n from the window kt (D, n), in tinyBLAS (gemm) or vec_dot order:
    lane l of a block of cells is one contiguous loop."""
    D = qv.shape[0]
    for c0 in range(0, n, CELL_BLOCK):
        cb = min(CELL_BLOCK, n - c0)
        if gemm:  # tinyBLAS: lane l of cell c accumulates fma over k[16m + l] * q[16m + l]
            _lane_fmas(kt, qv, c0, cb, 16, D, acc)
            _hsum16_rows(acc, cb)
            for j in range(cb):
                out_row[c0 + j] = acc[0, j]
        else:  # ggml_vec_dot: 64 lanes (4 accumulators) over steps of 64
            npart = D & ~63
            _lane_fmas(kt, qv, c0, cb, 64, npart, acc)
            _reduce_vec_rows(acc, cb)
            for j in range(cb):
                r = acc[0, j]
                if npart < D:
                    r = _tail_add(r, kt[:, c0 + j], qv, npart, D, f16)
                out_row[c0 + j] = r


@jit
def _cell_lane_fmas(vw, pa, W, end, D, accv):
    """accv[l, d] (l < W, d < D) = the fma chain from 0 over V[c, d] * p[c] for the cells c < end with
    c mod W == l, from the window vw (n, D): W lanes of each head dim's sum over the cells."""
    for l in range(W):
        for d in range(D):
            accv[l, d] = np.float32(0.0)
    for c in range(end):
        p = pa[c]
        vr = vw[c]
        ar = accv[c & (W - 1)]
        for d in range(D):
            ar[d] = fma_f32(vr[d], p, ar[d])


@jit
def _kqv_row_window(vw, pa, n, gemm, f16, res, accv):
    """res[d] = sum_c pa[c] * V[c, d] for every d from the window vw (n, D), tinyBLAS (gemm) or vec_dot
    order over the cells, all head dims in one contiguous loop."""
    D = res.shape[0]
    if gemm:  # lane (c mod 16) of each output dim
        _cell_lane_fmas(vw, pa, 16, n, D, accv)
        _hsum16_rows(accv, D)
        for d in range(D):
            res[d] = accv[0, d]
    else:  # lane (c mod 64) = accumulator (c mod 64) // 16, lane c mod 16
        npart = n & ~63
        _cell_lane_fmas(vw, pa, 64, npart, D, accv)
        _reduce_vec_rows(accv, D)
        for d in range(D):
            x = accv[0, d]
            if npart < n:
                x = _tail_add(x, vw[:, d], pa, npart, n, f16)
            res[d] = x


# ----------------------------------------------------------------------------------------------
# KV store


@jit
def kv_store(k_cache, v_cache, k, v, cells):
    """Write K and V of T tokens into cache cells (ggml SET_ROWS; F32 -> F16 rounds to nearest even).

    k_cache: (n_ctx, n_head_kv, hd); v_cache: (n_head_kv, hd, n_ctx); k, v: f32 (T, n_head_kv, hd);
    cells: int32 (T,) cell index of each token."""
    n_ctx, G, D = k_cache.shape
    T = k.shape[0]
    if k.shape[1] != G or k.shape[2] != D or v.shape[0] != T or v.shape[1] != G or v.shape[2] != D:
        raise ValueError("kv_store: k and v must be (T, n_head_kv, head_dim) matching the cache")
    if v_cache.shape[0] != G or v_cache.shape[1] != D or v_cache.shape[2] != n_ctx:
        raise ValueError("kv_store: v_cache must be (n_head_kv, head_dim, n_ctx)")
    if cells.shape[0] != T:
        raise ValueError("kv_store: cells must be (T,)")
    for t in range(T):
        c = cells[t]
        if c < 0 or c >= n_ctx:
            raise ValueError("kv_store: cell index out of range")
        for g in range(G):  # K row: contiguous (vectorises)
            kr = k_cache[c, g]
            ks = k[t, g]
            for d in range(D):
                kr[d] = cache_value(k_cache, ks[d])
        for g in range(G):  # V: one element per (g, d) row
            for d in range(D):
                v_cache[g, d, c] = cache_value(v_cache, v[t, g, d])


# ----------------------------------------------------------------------------------------------
# attention


@jit
def n_kv_padded(n_kv, n_ctx):
    """Cells of the KV view llama.cpp attends over: min(n_ctx, max(256, roundup(n_kv, 256)))."""
    p = ((n_kv + N_KV_PAD - 1) // N_KV_PAD) * N_KV_PAD
    if p < N_KV_PAD:
        p = N_KV_PAD
    return p if p < n_ctx else n_ctx


@jit
def _attention_item(q, k_cache, v_cache, n_kv, kv_pos, q_pos, scale, out, kq_out, kq_soft_max_out,
                    want_kq, want_sm, g, t0, t1, n_eff, kq_gemm, kqv_gemm, kq_in):
    """The query heads of KV head g for tokens t0..t1-1 (kq_in (H, T, >= n_eff): the kq products given, for a
    quantized K cache; else of size 0)."""
    T, H, D = q.shape
    G = k_cache.shape[1]
    gqa = H // G
    given = kq_in.size > 0
    if not given and not kq_gemm and not kqv_gemm and _fast_ok(q, k_cache, v_cache, out, n_eff):
        _fast_item(q, k_cache, v_cache, n_kv, kv_pos, q_pos, scale, out, kq_out, kq_soft_max_out, want_kq,
                   want_sm, n_eff, g, g + 1, t0, t1)
        return
    f16 = cache_is_f16(k_cache)
    batch = T >= 2
    qv = np.empty(D, np.float32)
    wp = np.empty(n_eff, np.float32)
    dp = np.empty(n_eff, np.float32)
    pa = np.empty(n_eff, np.float32)
    res = np.empty(D, np.float32)
    if batch:
        kt = np.empty((D, n_eff), np.float32)
        vw = np.empty((n_eff, D), np.float32)
        _load_windows(k_cache, v_cache, g, n_eff, kt, vw)
        acc = np.empty((64, CELL_BLOCK), np.float32)
        accv = np.empty((64, D), np.float32)
    else:
        kt = np.empty((0, 0), np.float32)
        vw = np.empty((0, 0), np.float32)
        acc = np.empty((4, 64), np.float32)
        accv = acc
    for t in range(t0, t1):
        qp = q_pos[t]
        for h in range(g * gqa, (g + 1) * gqa):
            if given:
                for c in range(n_eff):
                    wp[c] = kq_in[h, t, c]
            else:
                for d in range(D):
                    qv[d] = round_operand(k_cache, q[t, h, d])
                if batch:
                    _kq_row_window(kt, qv, n_eff, kq_gemm, f16, wp, acc)
                else:
                    _kq_row_direct(k_cache, g, qv, n_eff, wp, acc)
            if want_kq:
                for c in range(n_eff):
                    kq_out[h, t, c] = wp[c]
            # ggml_vec_scale_f32 by kq_scale, then += 1.0f * mask (0 or -inf)
            for c in range(n_eff):
                w = wp[c] * scale
                if c >= n_kv or kv_pos[c] < 0 or kv_pos[c] > qp:
                    wp[c] = w + np.float32(-np.inf)
                else:
                    wp[c] = w + np.float32(0.0)
            soft_max_row(n_eff, dp, wp, True)
            if want_sm:
                for c in range(n_eff):
                    kq_soft_max_out[h, t, c] = dp[c]
            for c in range(n_eff):
                pa[c] = round_operand(v_cache, dp[c])
            if batch:
                _kqv_row_window(vw, pa, n_eff, kqv_gemm, f16, res, accv)
            else:
                _kqv_row_direct(v_cache, g, pa, n_eff, res, acc)
            for d in range(D):  # kqv permuted to (T, n_head * hd)
                out[t, h * D + d] = res[d]


@pjit
def _attention(q, k_cache, v_cache, n_kv, kv_pos, q_pos, kq_scale, out, kq_out, kq_soft_max_out, batch_paths,
               kq_in):
    T, H, D = q.shape
    want_kq = kq_out.size > 0  # an absent trace is an empty array (one compiled version, not four)
    want_sm = kq_soft_max_out.size > 0
    n_ctx, G, Dk = k_cache.shape
    if Dk != D or G <= 0 or H % G != 0:
        raise ValueError("attention: k_cache must be (n_ctx, n_head_kv, head_dim) with n_head % n_head_kv == 0")
    if v_cache.shape[0] != G or v_cache.shape[1] != D or v_cache.shape[2] != n_ctx:
        raise ValueError("attention: v_cache must be (n_head_kv, head_dim, n_ctx)")
    if n_kv < 1 or n_kv > n_ctx or kv_pos.shape[0] < n_kv:
        raise ValueError("attention: need 1 <= n_kv <= n_ctx and kv_pos of at least n_kv cells")
    if q_pos.shape[0] != T or out.shape[0] != T or out.shape[1] != H * D:
        raise ValueError("attention: q_pos must be (T,) and out (T, n_head*head_dim)")
    n_pad = n_kv_padded(n_kv, n_ctx)
    if want_kq:
        if kq_out.shape[0] != H or kq_out.shape[1] != T or kq_out.shape[2] != n_pad:
            raise ValueError("attention: kq_out must be (n_head, T, n_kv_padded)")
    if want_sm:
        if kq_soft_max_out.shape[0] != H or kq_soft_max_out.shape[1] != T or kq_soft_max_out.shape[2] != n_pad:
            raise ValueError("attention: kq_soft_max_out must be (n_head, T, n_kv_padded)")
    # cells actually computed: whole 64-cell steps past n_kv are masked zeros (no-ops in every sum)
    n_eff = n_pad
    if not want_kq and not want_sm and n_pad % 64 == 0:
        n_eff = ((n_kv + 63) // 64) * 64
    f16 = cache_is_f16(k_cache)
    if kq_in.size > 0 and (kq_in.shape[0] != H or kq_in.shape[1] != T or kq_in.shape[2] < n_eff):
        raise ValueError("attention: kq_in must be (n_head, T, n_kv_padded)")
    kq_gemm = batch_paths and T >= 2 and f16 and D % 16 == 0 and n_pad % 4 == 0 and kq_in.size == 0
    kqv_gemm = batch_paths and T >= 2 and n_pad % 16 == 0 and D % 4 == 0
    scale = np.float32(kq_scale)
    if T == 1 and kq_in.size == 0 and _fast_ok(q, k_cache, v_cache, out, n_eff):
        if G > 1 and H * n_eff * D * 4 >= DECODE_PARALLEL_MIN_FLOPS:
            for g in prange(G):
                _fast_item(q, k_cache, v_cache, n_kv, kv_pos, q_pos, scale, out, kq_out, kq_soft_max_out,
                           want_kq, want_sm, n_eff, g, g + 1, 0, 1)
        else:
            _fast_item(q, k_cache, v_cache, n_kv, kv_pos, q_pos, scale, out, kq_out, kq_soft_max_out,
                       want_kq, want_sm, n_eff, 0, G, 0, 1)
        return
    n_tb = (T + TOKENS_PER_ITEM - 1) // TOKENS_PER_ITEM
    n_items = G * n_tb
    if n_items > 1 and T * H * n_eff * D * 2 >= PARALLEL_MIN_FLOPS:
        for it in prange(n_items):
            g = it % G
            t0 = (it // G) * TOKENS_PER_ITEM
            t1 = min(T, t0 + TOKENS_PER_ITEM)
            _attention_item(q, k_cache, v_cache, n_kv, kv_pos, q_pos, scale, out, kq_out, kq_soft_max_out,
                            want_kq, want_sm, g, t0, t1, n_eff, kq_gemm, kqv_gemm, kq_in)
    else:
        for it in range(n_items):
            g = it % G
            t0 = (it // G) * TOKENS_PER_ITEM
            t1 = min(T, t0 + TOKENS_PER_ITEM)
            _attention_item(q, k_cache, v_cache, n_kv, kv_pos, q_pos, scale, out, kq_out, kq_soft_max_out,
                            want_kq, want_sm, g, t0, t1, n_eff, kq_gemm, kqv_gemm, kq_in)


def attention(q, k_cache, v_cache, n_kv, kv_pos, q_pos, kq_scale, out, kq_out=None, kq_soft_max_out=None,
              batch_paths=True, kq_in=None):
    """Causal self-attention of T query tokens over the first n_kv cache cells (llama.cpp, no flash attn).

    q: f32 (T, n_head, hd) (after RoPE and any temperature scaling); k_cache (n_ctx, n_head_kv, hd) and
    v_cache (n_head_kv, hd, n_ctx), both uint16 (F16) or both float32; n_kv: cells 0..n_kv-1 may be in
    use; kv_pos: int32 (>= n_kv,) position held by each cell, < 0 for an empty cell; q_pos: int32 (T,);
    kq_scale: e.g. 1/sqrt(hd) (rounded to float32); out: f32 (T, n_head*hd).
    kq_out / kq_soft_max_out: optional f32 (n_head, T, n_kv_padded(n_kv, n_ctx)) traces of the
    `kq-<il>` / `kq_soft_max-<il>` nodes (kq raw, before scale and mask); they cost nothing when None.
    batch_paths: True follows llama.cpp exactly (batches of >= 2 tokens sum in tinyBLAS order, single
    tokens in ggml_vec_dot order, so a token's result depends on its batch); False uses the single-token
    order for every batch, which makes prefill in any split bit-identical to token-by-token decoding.
    kq_in: f32 (n_head, T, n_kv_padded) the kq products computed elsewhere (a quantized K cache: the model's
    quantized products, Context.kq_product); k_cache then only gives its shape and V's type."""
    # one compiled kernel per cache type: an absent trace is passed as an empty array (and this wrapper is not
    # jitted: a jitted one re-optimises the whole kernel per signature, ~8 s of LLVM each)
    empty = np.empty((0, 0, 0), np.float32)
    kq = empty if kq_out is None else kq_out
    sm = empty if kq_soft_max_out is None else kq_soft_max_out
    _attention(q, k_cache, v_cache, n_kv, kv_pos, q_pos, kq_scale, out, kq, sm, batch_paths,
               empty if kq_in is None else kq_in)
