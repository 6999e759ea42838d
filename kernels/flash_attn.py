"""Flash attention (ggml FLASH_ATTN_EXT) as ggml's CPU backend computes it, one query row at a time.

ggml-cpu/ops.cpp `ggml_compute_forward_flash_attn_ext_f16_one_chunk`, the path llama.cpp takes for a batch of
fewer than `ggml_fa_tile_config::Q` (64) query rows whose KV view holds fewer than 512 cells, F16 K and V
(llama.cpp's default cache; with an F32 cache its graph casts the K and V views to F16 first). Per query row
(token t, head h, KV head h // (H / Hkv)):

    Q_q = fp16(q)                                        K's vec_dot_type
    S = 0, M = -inf, VKQ = 0 (fp16 accumulator)
    for every KV cell c the mask does not hide:
        s = ggml_vec_dot_f16(K[c], Q_q) * scale          (+ mask value 0)
        if s > M:  M, ms = s, expf(M_old - M);  VKQ = fp16(VKQ * ms)         ggml_vec_scale_f16
        else:      vs = expf(s - M)                      (ms = 1, or vs = 1 on a new maximum)
        VKQ = fp16(fma(V[c], vs, VKQ))                   ggml_vec_mad_f16 (AVX512: _mm512_fmadd_ps)
        S = fma(S, ms, vs)                               (GCC contracts `S = S*ms + vs`)
    out = float(VKQ) * (S == 0 ? 0 : 1/S)                ggml_vec_scale_f32

A build for a CPU with AVX512-FP16 compiles ggml's F16 vector ops to FP16 arithmetic: the first D & ~127
dimensions of VKQ take fp16(VKQ * fp16(ms)) and an FP16 fma(V[c], fp16(vs), VKQ), one FP16 rounding each; the rest
(all of them for D = 64) the float code above (kernels/_vec.py F16_ARITH; synapse follows the CPU it runs on).

Every row is independent of the others and of the thread count, so a prompt in any batch split equals
token-by-token decoding: the default (batch-invariant) mode runs this path for every row (Order.SINGLE), or the
tiled kernel, whose rows are independent too (Order.BATCHED). Its threads share whole heads; one token over a
long view whose heads do not share evenly runs the same computations in three phases (_one_token_phases).

llama.cpp's batch order (`flash_attn_ext(..., Order.LLAMA)`) also takes ggml's two other paths:
- tiled (`ggml_compute_forward_flash_attn_ext_tiled`), batches of >= FA_TILE_Q query rows: Q stays F32; per KV
  tile of 64 cells, kq[j] = fma chain over the head dimension of K[j]·Q (simd_gemm), * scale, + mask; the
  tile's maximum; on a new maximum M: ms = expf(M_old - M), VKQ *= ms, S *= ms; S += (double) the sum of
  ggml_vec_soft_max_f32 over the tile (AVX512 expf, 16-lane sums in double); VKQ[d] = fma chain over the tile
  of V[j][d] * p[j] (F32 accumulator); out = VKQ * (1/S). Each row's result is independent of which rows
  share its tile.
- split-KV (one query row, KV views of >= FA_SPLIT_KV_MIN cells): the cells are cut into n_threads chunks of
  ceil(n_kv / n_threads); each chunk runs the one-row kernel without the final division (M, S, float(VKQ));
  ggml_flash_attn_ext_reduce_partials combines them in chunk order: M' = max, a = expf(M - M'), b = expf(M_c
  - M'), VKQ = fma(VKQ, a, VKQ_c * b), S = fma(S, a, S_c * b) (GCC's contraction, read off its code). The
  result depends on the thread count, as llama.cpp's does.
"""

from __future__ import annotations

import kernels.config  # noqa: F401  (NUMBA_CACHE_DIR before numba)

import functools
import math

import numpy as np
from numba import prange

from kernels._vec import (
    HAS_AVX512, add16, expf16_matches_libm, f16_arith_dims, fma16, load16, mul16, online_soft_max16, splat16, store16,
    vec_mad_f16_16, vec_scale_f16_16, zero16,
)
from kernels.activations import row_max, vec_soft_max
from kernels.order import Order
from kernels.attention import _dot_lanes, _dots16, _dots16_heads
from kernels.config import ijit
from kernels.flash_attn_rows import one_row_tile_items, one_row_tiles, rows_kernel_applies
from kernels.fp16 import (
    f16_bits_to_f32_hw, f32_to_f16_bits_hw, fma_f16_arith, fma_f32, jit, mul_f16_arith, pjit, round_f16_scalar,
)
from kernels.kv_cache import BF16, F16, prepare_query, score
from kernels.quants.floats import _reduce_add16

FA_TILE_Q = 64  # ggml_fa_tile_config::Q: batches with this many query rows take ggml's tiled kernel
FA_TILE_KV = 64  # ggml_fa_tile_config::KV: cells per tile of that kernel
FA_SPLIT_KV_MIN = 512  # one query row over a KV view of this many cells takes ggml's split-KV kernel
# below this much work (kq + kqv flops over the cells a query sees) the one-row and tiled kernels stay on the
# calling thread: a parallel launch costs ~5 us (2-core Zen 4: one token of SmolLM2's 9 heads breaks even at
# ~60 cells, benchmarks/RESULTS.md)
ONE_ROW_PARALLEL_MIN_FLOPS = 1 << 17
# expf16 gives this C library's expf (checked once a process, ~0.2 s; the batch kernel's prompts check it anyway):
# the one-row kernel's soft-max then runs 16 cells at a time. Compiled kernels freeze the value (numba's cache
# does not see it): one machine and C library per cache folder.
VEC_EXPF = expf16_matches_libm()


@ijit
def _soft_max_step(s, scale, M):
    """The one-row kernel's online soft-max for a raw score s against the running maximum M: (a new maximum?,
    the maximum, ms, vs) with s = s * scale + 0 (the mask) and, on a new maximum, ms = expf(M - s), vs = 1,
    otherwise ms = 1, vs = expf(s - M)."""
    s = np.float32(np.float32(s * scale) + np.float32(0.0))
    if s > M:
        return True, s, np.float32(math.exp(np.float32(M - s))), np.float32(1.0)
    return False, M, np.float32(1.0), np.float32(math.exp(np.float32(s - M)))


@ijit
def _vkq_f16_scale(vkq, ms):
    """VKQ = fp16(VKQ * ms): ggml_vec_scale_f16 on the F16 accumulator (vkq (D,) F16 bits); in FP16 arithmetic
    (VKQ * fp16(ms)) for the first f16_arith_dims dimensions."""
    na = f16_arith_dims(vkq.shape[0])
    for d in range(vkq.shape[0]):
        y = f16_bits_to_f32_hw(vkq[d])
        vkq[d] = f32_to_f16_bits_hw(mul_f16_arith(y, ms) if d < na else np.float32(y * ms))


@ijit
def _vkq_f16_mad(vkq, v16, c, g, vs):
    """VKQ = fp16(fma(V[c], vs, VKQ)): ggml_vec_mad_f16 (AVX512: _mm512_fmadd_ps, or the scalar loop contracted to
    an fma) of cell c, KV head g; an FP16 fma with fp16(vs) for the first f16_arith_dims dimensions."""
    na = f16_arith_dims(vkq.shape[0])
    for d in range(vkq.shape[0]):
        x = f16_bits_to_f32_hw(v16[c, g, d])
        y = f16_bits_to_f32_hw(vkq[d])
        vkq[d] = f32_to_f16_bits_hw(fma_f16_arith(x, vs, y) if d < na else fma_f32(x, vs, y))


@jit
def _row_chunk(q, k16, v16, kv_pos, qp, scale, t, h, g, c0, c1, qq, vkq, vkq32):
    """ggml's one-row kernel over cells c0..c1-1: returns (M, S) and leaves float(VKQ) in vkq32 (D,)."""
    D = q.shape[2]
    Hkv = k16.shape[1]
    for d in range(D):
        qq[d] = round_f16_scalar(q[t, h, d])
        vkq[d] = 0
    S = np.float32(0.0)
    M = np.float32(-np.inf)
    for c in range(c0, c1):
        p = kv_pos[c]
        if p < 0 or p > qp:  # masked: -inf, skipped
            continue
        new_max, M, ms, vs = _soft_max_step(_reduce_add16(_dot_lanes(k16, (c * Hkv + g) * D, qq, 0, D)), scale, M)
        if new_max:
            _vkq_f16_scale(vkq, ms)
        _vkq_f16_mad(vkq, v16, c, g, vs)
        S = fma_f32(S, ms, vs)
    for d in range(D):
        vkq32[d] = f16_bits_to_f32_hw(vkq[d])
    return M, S


@jit
def _n_eff(kv_pos, n_kv, qp):
    """Cells to compute for a query at position qp: up to the last visible one, rounded up to 16 (<= n_kv)."""
    last = -1
    for c in range(n_kv):
        if 0 <= kv_pos[c] <= qp:
            last = c
    return min(n_kv, (last + 16) // 16 * 16)


@jit
def _visible_cells(kv_pos, n_eff, qp, vis):
    """vis[:nv] = the cells below n_eff a query at position qp sees (masked cells, -inf, are skipped); nv."""
    nv = 0
    for c in range(n_eff):
        p = kv_pos[c]
        if 0 <= p <= qp:
            vis[nv] = c
            nv += 1
    return nv


@jit
def _soft_max_row(sc, o, vis, nv, scale, ms_out, vs_out):
    """One head's online soft-max in ggml's order, scalar, over its raw scores sc[o + c] of the visible cells
    vis[:nv]: the running maximum, ms and vs of every cell (ms_out[i], vs_out[i]; the expf calls are
    independent of each other here, off the accumulator's chain); returns 1/S (0 where S == 0)."""
    M = np.float32(-np.inf)
    S = np.float32(0.0)
    for i in range(nv):
        s = np.float32(np.float32(sc[o + vis[i]] * scale) + np.float32(0.0))
        if s > M:
            ms = np.float32(math.exp(np.float32(M - s)))
            vs = np.float32(1.0)
            M = s
        else:
            ms = np.float32(1.0)
            vs = np.float32(math.exp(np.float32(s - M)))
        ms_out[i] = ms
        vs_out[i] = vs
        S = fma_f32(S, ms, vs)
    return np.float32(0.0) if S == 0.0 else np.float32(np.float32(1.0) / S)


@jit
def _soft_max_row16(sc, o, vis, nv, scale, ms_out, vs_out, xs):
    """_soft_max_row with its expf calls 16 cells at a time (`online_soft_max16`: the running maximum by a prefix
    scan, glibc's expf on 16 lanes; the same ms, vs and maximum per cell); S = fma(S, ms, vs) in cell order, a
    block behind (its latency chain overlaps the next block's work: 4.3 -> 3.8 ns a head and cell on a Zen 3).
    ms_out, vs_out need room for nv rounded up to 16; xs (>= that + 16,) is scratch: the visible cells' raw
    scores, then the last block's lane mask."""
    n16 = (nv + 15) // 16 * 16
    for i in range(nv):
        xs[i] = sc[o + vis[i]]
    for i in range(16):  # lanes of the last block past nv: hidden
        xs[n16 + i] = 1 if n16 - 16 + i < nv else 0
    vscale = splat16(scale)
    M = np.float32(-np.inf)
    S = np.float32(0.0)
    for c in range(0, n16, 16):
        x = add16(mul16(load16(xs, c), vscale), zero16())  # s * scale + 0 (the mask)
        ms, vs, M = online_soft_max16(x, splat16(np.float32(1.0)) if c + 16 <= nv else load16(xs, n16), M)
        store16(ms_out, c, ms)
        store16(vs_out, c, vs)
        for i in range(max(0, c - 16), c):  # the previous block's cells (all visible)
            S = fma_f32(S, ms_out[i], vs_out[i])
    for i in range(max(0, n16 - 16), nv):
        S = fma_f32(S, ms_out[i], vs_out[i])
    return np.float32(0.0) if S == 0.0 else np.float32(np.float32(1.0) / S)


@ijit
def _soft_max(sc, o, vis, nv, scale, ms_out, vs_out, xs):
    """One head's online soft-max (_soft_max_row), 16 cells at a time where expf16 is this C library's expf."""
    if VEC_EXPF:  # a global constant: numba compiles one of the two
        return _soft_max_row16(sc, o, vis, nv, scale, ms_out, vs_out, xs)
    return _soft_max_row(sc, o, vis, nv, scale, ms_out, vs_out)


@jit
def _group_one_row(q, k16, v16, kv_pos, qp, scale, t, g, j0, j1, n_eff, qv, sc, vis, msv, vsv, sinv, buf, xs,
                   out):
    """_row_chunk over all cells for query heads j0..j1-1 of KV head g at token t, vectorised: the scores of 16
    cells by 16-lane dot products reduced together (the same lanes and tree as ggml_vec_dot_f16); then per head
    the online softmax in ggml's order over the visible cells (_soft_max: its expf calls off the accumulator's
    chain), and VKQ as F16 values in float32 registers, two slabs of 64 dimensions at a time (eight
    independent 16-lane chains, _vkq_slabs2) over all cells. Same bits as _row_chunk, for any head range.
    Scratch: qv (>= n, D), sc (>= n * n_eff,) flat, head j's scores at (j - j0) * n_eff; vis (>= n_eff,) the
    visible cells; msv, vsv (>= n, >= n_eff + 16) ms and vs of each visible cell per head; sinv (>= n,) 1/S per
    head; buf (768,) the scores' reduction scratch; xs (>= n_eff + 32,) the soft-max's. out must be
    C-contiguous."""
    n_kv, G, D = k16.shape
    H = q.shape[1]
    h0 = g * (H // G) + j0
    n = j1 - j0
    for j in range(n):
        for d in range(D):
            qv[j, d] = round_f16_scalar(q[t, h0 + j, d])
    n16 = n_eff // 16 * 16
    for c0 in range(0, n16, 16):  # raw dots, K row stride G*D; head j's scores at j * n_eff
        # three heads per K block where 32 vector registers hold their operands (AVX512); one at a time is
        # faster with 16 (AVX2: measured 11 -> 5 ns per head and cell). numba prunes the branch a CPU does not
        # take (a global constant): AVX2 does not compile the 3-head code (~1.5 s of a cold first run).
        if HAS_AVX512:
            _dots16_heads(k16, (c0 * G + g) * D, G * D, qv, D, D, n, (n // 3) * 3, sc, c0, n_eff, buf)
        else:
            for j in range(n):
                store16(sc, c0 + j * n_eff, _dots16(k16, (c0 * G + g) * D, G * D, qv, j * D, D))
    for c in range(n16, n_eff):  # a view whose length is not a multiple of 16: the last cells one at a time
        for j in range(n):
            sc[j * n_eff + c] = _reduce_add16(_dot_lanes(k16, (c * G + g) * D, qv, j * D, D))
    nv = _visible_cells(kv_pos, n_eff, qp, vis)  # the same for every head
    for j in range(n):
        sinv[j] = _soft_max(sc, j * n_eff, vis, nv, scale, msv[j], vsv[j], xs)
    # VKQ in slabs of 64 dimensions (slab k: head k // (D/64), dimensions 64 * (k % (D/64)) on), two slabs at a
    # time: eight independent F16 chains in registers over all cells, enough to cover the chain's latency
    per = D // 64
    n_slabs = n * per
    for k in range(0, n_slabs - 1, 2):
        _vkq_slabs2(v16, vis, nv, G * D, g * D, k // per, 64 * (k % per), (k + 1) // per, 64 * ((k + 1) % per),
                    msv, vsv, sinv, out, t * H * D + h0 * D)
    if n_slabs % 2:
        k = n_slabs - 1
        _vkq_slab(v16, vis, nv, G * D, g * D, k // per, 64 * (k % per), msv, vsv, sinv, out, t * H * D + h0 * D)


@ijit
def _vkq_step(v16, v0, ms, vs, arith, a0, a1, a2, a3):
    """One cell of ggml's F16 accumulator for 64 dimensions in four registers: VKQ = fp16(VKQ * ms) where ms != 1
    (ms == 1 leaves F16 values unchanged), then VKQ = fp16(fma(V, vs, VKQ)) with V at v16's flat offset v0;
    arith: the 64 dimensions are below f16_arith_dims."""
    if ms != 1.0:
        a0 = vec_scale_f16_16(a0, ms, arith)
        a1 = vec_scale_f16_16(a1, ms, arith)
        a2 = vec_scale_f16_16(a2, ms, arith)
        a3 = vec_scale_f16_16(a3, ms, arith)
    a0 = vec_mad_f16_16(load16(v16, v0), vs, a0, arith)
    a1 = vec_mad_f16_16(load16(v16, v0 + 16), vs, a1, arith)
    a2 = vec_mad_f16_16(load16(v16, v0 + 32), vs, a2, arith)
    a3 = vec_mad_f16_16(load16(v16, v0 + 48), vs, a3, arith)
    return a0, a1, a2, a3


@ijit
def _vkq_store(out, o, s_inv, a0, a1, a2, a3):
    """out[o:o+64] = VKQ * (1/S)."""
    v = splat16(s_inv)
    store16(out, o, mul16(a0, v))
    store16(out, o + 16, mul16(a1, v))
    store16(out, o + 32, mul16(a2, v))
    store16(out, o + 48, mul16(a3, v))


@jit
def _vkq_slabs2(v16, vis, nv, GD, gD, ja, da, jb, db, msv, vsv, sinv, out, o):
    """VKQ of two 64-dimension slabs (head ja from dimension da, head jb from db) over the visible cells, each
    cell by _vkq_step, then out = VKQ * (1/S). V of cell vis[i] at vis[i] * GD + gD; out of head j at o + j * D."""
    D = v16.shape[2]
    na = f16_arith_dims(D)
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = zero16()
    for i in range(nv):
        v0 = vis[i] * GD + gD
        a0, a1, a2, a3 = _vkq_step(v16, v0 + da, msv[ja, i], vsv[ja, i], da < na, a0, a1, a2, a3)
        b0, b1, b2, b3 = _vkq_step(v16, v0 + db, msv[jb, i], vsv[jb, i], db < na, b0, b1, b2, b3)
    _vkq_store(out, o + ja * D + da, sinv[ja], a0, a1, a2, a3)
    _vkq_store(out, o + jb * D + db, sinv[jb], b0, b1, b2, b3)


@jit
def _vkq_slab(v16, vis, nv, GD, gD, j, d, msv, vsv, sinv, out, o):
    """_vkq_slabs2 for one slab (the last of an odd count)."""
    a0 = a1 = a2 = a3 = zero16()
    arith = d < f16_arith_dims(v16.shape[2])
    for i in range(nv):
        a0, a1, a2, a3 = _vkq_step(v16, vis[i] * GD + gD + d, msv[j, i], vsv[j, i], arith, a0, a1, a2, a3)
    _vkq_store(out, o + j * v16.shape[2] + d, sinv[j], a0, a1, a2, a3)


@jit
def _one_row_items(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, parts, i0, step):
    """Work items i0, i0 + step, ... of (token, KV head, part of its query heads) on the one-row kernel (one set
    of scratch arrays); interleaved so that threads share the causal mask's growing rows evenly. parts: how
    many pieces each KV head's query heads are cut into (a single token has only Hkv (token, KV head) items to
    share between the threads)."""
    T, H, D = q.shape
    G = k16.shape[1]
    gqa = H // G
    qv = np.empty((gqa, D), np.float32)
    sc = np.empty(gqa * n_kv, np.float32)
    vis = np.empty(n_kv, np.int64)
    msv = np.empty((gqa, n_kv + 16), np.float32)
    vsv = np.empty((gqa, n_kv + 16), np.float32)
    sinv = np.empty(gqa, np.float32)
    buf = np.empty(768, np.float32)
    xs = np.empty(n_kv + 32, np.float32)
    for item in range(i0, T * G * parts, step):
        t = item // (G * parts)
        g = (item // parts) % G
        part = item % parts
        n_eff = _n_eff(kv_pos, n_kv, q_pos[t])
        _group_one_row(q, k16, v16, kv_pos, q_pos[t], scale, t, g, part * gqa // parts, (part + 1) * gqa // parts,
                       n_eff, qv, sc, vis, msv, vsv, sinv, buf, xs, out)


@pjit
def _one_row_parallel(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, parts, n_chunks):
    for ci in prange(n_chunks):
        _one_row_items(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, parts, ci, n_chunks)


# One query token over a long view: the one-row kernel's work in three parallel phases (_one_token_phases)
ONE_TOKEN_PHASES_MIN = 512  # from this many cells of view (benchmarks/RESULTS.md, issue #20's third session)
VKQ_UNITS = 6  # 16-lane F16 accumulator chains per pass of _vkq_units: enough to cover the chain's latency


@ijit
def _vkq_rescale(a, ms, arith):
    """_vkq_step's rescale for one 16-lane vector: fp16(a * ms) where ms != 1."""
    return vec_scale_f16_16(a, ms, arith) if ms != 1.0 else a


@ijit
def _unit(u, u1, nvec, gqa, D):
    """Unit u (the last one, u1 - 1, from u1 on) of the VKQ phase: (head, its V's flat offset in a cell row,
    dimension), units numbered head-major with nvec 16-lane vectors a head."""
    u = min(u, u1 - 1)
    h = u // nvec
    d = 16 * (u % nvec)
    return h, (h // gqa) * D + d, d


@jit
def _vkq_units(v16, vis, nv, GD, u, u1, nvec, gqa, msv, vsv, sinv, out):
    """VKQ of units u .. u + 5 (those past u1 repeat u1 - 1: the same value stored twice) over the visible
    cells, six independent F16 chains in registers, then out = VKQ * (1/S): the one-row kernel's accumulator
    (_vkq_slabs2), cut into 16-lane units instead of 64-dimension slabs."""
    D = v16.shape[2]
    h0, g0, d0 = _unit(u, u1, nvec, gqa, D)
    h1, g1, d1 = _unit(u + 1, u1, nvec, gqa, D)
    h2, g2, d2 = _unit(u + 2, u1, nvec, gqa, D)
    h3, g3, d3 = _unit(u + 3, u1, nvec, gqa, D)
    h4, g4, d4 = _unit(u + 4, u1, nvec, gqa, D)
    h5, g5, d5 = _unit(u + 5, u1, nvec, gqa, D)
    a0 = a1 = a2 = a3 = a4 = a5 = zero16()
    na = f16_arith_dims(D)
    one = np.float32(1.0)
    for i in range(nv):
        # a new running maximum of one of the heads (rare): its chains rescale first. One branch for the six:
        # per chain, LLVM turns the test into a select and computes the rescaling, two conversions, every cell
        m0, m1, m2, m3, m4, m5 = msv[h0, i], msv[h1, i], msv[h2, i], msv[h3, i], msv[h4, i], msv[h5, i]
        if m0 != one or m1 != one or m2 != one or m3 != one or m4 != one or m5 != one:
            a0 = _vkq_rescale(a0, m0, d0 < na)
            a1 = _vkq_rescale(a1, m1, d1 < na)
            a2 = _vkq_rescale(a2, m2, d2 < na)
            a3 = _vkq_rescale(a3, m3, d3 < na)
            a4 = _vkq_rescale(a4, m4, d4 < na)
            a5 = _vkq_rescale(a5, m5, d5 < na)
        c = vis[i] * GD
        a0 = vec_mad_f16_16(load16(v16, c + g0), vsv[h0, i], a0, d0 < na)
        a1 = vec_mad_f16_16(load16(v16, c + g1), vsv[h1, i], a1, d1 < na)
        a2 = vec_mad_f16_16(load16(v16, c + g2), vsv[h2, i], a2, d2 < na)
        a3 = vec_mad_f16_16(load16(v16, c + g3), vsv[h3, i], a3, d3 < na)
        a4 = vec_mad_f16_16(load16(v16, c + g4), vsv[h4, i], a4, d4 < na)
        a5 = vec_mad_f16_16(load16(v16, c + g5), vsv[h5, i], a5, d5 < na)
    store16(out, h0 * D + d0, mul16(a0, splat16(sinv[h0])))
    store16(out, h1 * D + d1, mul16(a1, splat16(sinv[h1])))
    store16(out, h2 * D + d2, mul16(a2, splat16(sinv[h2])))
    store16(out, h3 * D + d3, mul16(a3, splat16(sinv[h3])))
    store16(out, h4 * D + d4, mul16(a4, splat16(sinv[h4])))
    store16(out, h5 * D + d5, mul16(a5, splat16(sinv[h5])))


@pjit
def _one_token_phases(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, n_chunks):
    """The one-row kernel for ONE query token (q (1, H, D), out (1, H*D) C-contiguous), its work shared evenly
    between n_chunks threads in three parallel regions instead of cut by heads (SmolLM2's 9 heads: 5 and 4 to
    two threads; each head reading its KV head's K and V again):
      1. the scores, 16 cells at a time, the cells cut between the threads; all of a KV head's query heads per
         K block (_dots16_heads: K read once);
      2. per head, ggml's online soft-max in order (ms, vs of every visible cell, 1/S);
      3. VKQ, 16-lane units (head, 16 dimensions) cut between the threads, six chains at a time.
    Each score, each head's soft-max chain and each dimension's F16 accumulator chain is computed exactly as in
    _group_one_row (the same operations in the same order): the same bits, for any thread count."""
    T, H, D = q.shape
    G = k16.shape[1]
    gqa = H // G
    n3 = (gqa // 3) * 3
    qp = q_pos[0]
    n_eff = _n_eff(kv_pos, n_kv, qp)
    qv = np.empty((H, D), np.float32)
    for h in range(H):
        for d in range(D):
            qv[h, d] = round_f16_scalar(q[0, h, d])
    sc = np.empty(H * n_eff, np.float32)  # head h's scores at h * n_eff
    n16 = n_eff // 16 * 16
    nb = n16 // 16
    for ci in prange(n_chunks):
        buf = np.empty(768, np.float32)
        for b in range(ci * nb // n_chunks, (ci + 1) * nb // n_chunks):
            c0 = 16 * b
            for g in range(G):
                if HAS_AVX512:
                    _dots16_heads(k16, (c0 * G + g) * D, G * D, qv[g * gqa:], D, D, gqa, n3, sc,
                                  g * gqa * n_eff + c0, n_eff, buf)
                else:
                    for j in range(g * gqa, (g + 1) * gqa):
                        store16(sc, c0 + j * n_eff, _dots16(k16, (c0 * G + g) * D, G * D, qv, j * D, D))
    for c in range(n16, n_eff):  # a view whose length is not a multiple of 16: the last cells one at a time
        for h in range(H):
            sc[h * n_eff + c] = _reduce_add16(_dot_lanes(k16, (c * G + h // gqa) * D, qv, h * D, D))
    vis = np.empty(n_eff, np.int64)
    nv = _visible_cells(kv_pos, n_eff, qp, vis)
    msv = np.empty((H, nv + 16), np.float32)
    vsv = np.empty((H, nv + 16), np.float32)
    sinv = np.empty(H, np.float32)
    for h in prange(H):
        xs = np.empty(nv + 32, np.float32)
        sinv[h] = _soft_max(sc, h * n_eff, vis, nv, scale, msv[h], vsv[h], xs)
    nvec = D // 16
    n_units = H * nvec
    for ci in prange(n_chunks):
        u0 = ci * n_units // n_chunks
        u1 = (ci + 1) * n_units // n_chunks
        for u in range(u0, u1, VKQ_UNITS):
            _vkq_units(v16, vis, nv, G * D, u, u1, nvec, gqa, msv, vsv, sinv, out)


@jit
def _row_chunk_any(q, k16, kq8, kcode, v16, v32, vcode, kv_pos, qp, scale, t, h, g, qq16, qq, qd, qs, qb16, c1,
                   c2, acc8, vkq, acc):
    """The one-row kernel for any other K/V cell types (kernels/kv_cache.py): K scores by K's vec_dot (query in
    K's vec_dot_type), V rows from v16 (F16 bits, F16 accumulator) or v32 (their float32 values, F32
    accumulator: ggml_vec_scale_f32 / ggml_vec_mad_f32). Returns S; VKQ (not divided) in acc."""
    D = q.shape[2]
    Hkv = k16.shape[1]
    if kcode == F16:
        for d in range(D):
            qq16[d] = round_f16_scalar(q[t, h, d])
    else:
        prepare_query(kcode, q[t, h], qq, qd, qs, qb16)
    for d in range(D):
        vkq[d] = 0
        acc[d] = 0
    S = np.float32(0.0)
    M = np.float32(-np.inf)
    for c in range(kv_pos.shape[0]):
        p = kv_pos[c]
        if p < 0 or p > qp:
            continue
        if kcode == F16:
            s = _reduce_add16(_dot_lanes(k16, (c * Hkv + g) * D, qq16, 0, D))
        elif kcode == BF16:
            s = score(kcode, k16[c, g], qq, qd, qs, qb16, c1, c2, acc8)
        else:
            s = score(kcode, kq8[c, g], qq, qd, qs, qb16, c1, c2, acc8)
        new_max, M, ms, vs = _soft_max_step(s, scale, M)
        if new_max and vcode == F16:
            _vkq_f16_scale(vkq, ms)
        elif new_max:
            for d in range(D):
                acc[d] = np.float32(acc[d] * ms)
        if vcode == F16:
            _vkq_f16_mad(vkq, v16, c, g, vs)
        else:
            for d in range(D):
                acc[d] = fma_f32(v32[c, g, d], vs, acc[d])
        S = fma_f32(S, ms, vs)
    if vcode == F16:
        for d in range(D):
            acc[d] = f16_bits_to_f32_hw(vkq[d])
    return S


@pjit
def flash_attn_any(q, k16, kq8, kcode, v16, v32, vcode, kv_pos, q_pos, scale, out):
    """flash_attn_ext for the other cell types: one-row kernel for every row (llama.cpp's tiled and split-KV
    kernels take F16/F32 caches only). K cells: k16 (n_kv, Hkv, D) F16/BF16 bits or kq8 (n_kv, Hkv, bytes)
    blocks, of type kcode; V: v16 (vcode F16) or v32 (float32 values)."""
    T, H, D = q.shape
    r = H // k16.shape[1]
    for item in prange(T * H):
        t = item // H
        h = item % H
        qq16 = np.empty(D, np.float32)
        qq = np.empty(D, np.int8)
        qd = np.empty(D // 32, np.float32)
        qs = np.empty(D // 32, np.float32)
        qb16 = np.empty(D, np.uint16)
        c1 = np.empty(16, np.float32)
        c2 = np.empty(16, np.float32)
        acc8 = np.empty(8, np.float32)
        vkq = np.empty(D, np.uint16)
        acc = np.empty(D, np.float32)
        S = _row_chunk_any(q, k16, kq8, kcode, v16, v32, vcode, kv_pos, q_pos[t], np.float32(scale), t, h,
                           h // r, qq16, qq, qd, qs, qb16, c1, c2, acc8, vkq, acc)
        _write(out, t, h, acc, S)


@jit
def _row_split(q, k16, v16, n_kv, kv_pos, qp, scale, t, h, g, n_chunks, qq, vkq, vkq32, acc):
    """The split-KV kernel for one query row: n_chunks chunks, partials reduced in chunk order into acc (D,)."""
    D = q.shape[2]
    chunk = (n_kv + n_chunks - 1) // n_chunks
    acc[:] = 0
    M = np.float32(-np.inf)
    S = np.float32(0.0)
    for ci in range(n_chunks):
        c0 = ci * chunk
        if c0 >= n_kv:
            continue
        Mc, Sc = _row_chunk(q, k16, v16, kv_pos, qp, scale, t, h, g, c0, min(c0 + chunk, n_kv), qq, vkq, vkq32)
        if Sc == 0.0:
            continue
        m_new = max(M, Mc)
        a = np.float32(math.exp(np.float32(M - m_new)))
        b = np.float32(math.exp(np.float32(Mc - m_new)))
        for d in range(D):
            acc[d] = fma_f32(acc[d], a, np.float32(vkq32[d] * b))
        S = fma_f32(S, a, np.float32(Sc * b))
        M = m_new
    return S


@jit
def _row_tiled(q, k16, v16, n_kv, kv_pos, qp, scale, t, h, g, kq, acc):
    """ggml's tiled kernel for one query row (module docstring); returns S, leaves VKQ in acc (D,)."""
    D = q.shape[2]
    acc[:] = 0
    M = np.float32(-np.inf)
    S = np.float32(0.0)
    for c0 in range(0, n_kv, FA_TILE_KV):
        n = min(FA_TILE_KV, n_kv - c0)
        for j in range(FA_TILE_KV):
            if j >= n:
                kq[j] = -np.inf
                continue
            a = np.float32(0.0)
            for d in range(D):
                a = fma_f32(f16_bits_to_f32_hw(k16[c0 + j, g, d]), q[t, h, d], a)
            p = kv_pos[c0 + j]
            kq[j] = np.float32(a * scale) if 0 <= p <= qp else -np.inf
        tile_max = row_max(kq, FA_TILE_KV)
        if tile_max == -np.inf:
            continue
        m_new = max(M, tile_max)
        if m_new > M:
            ms = np.float32(math.exp(np.float32(M - m_new)))
            for d in range(D):
                acc[d] = np.float32(acc[d] * ms)
            S = np.float32(S * ms)
        M = m_new
        S = np.float32(np.float64(S) + vec_soft_max(FA_TILE_KV, kq, kq, M, True))
        for d in range(D):
            a = acc[d]
            for j in range(n):
                a = fma_f32(f16_bits_to_f32_hw(v16[c0 + j, g, d]), kq[j], a)
            acc[d] = a
    return S


FA_TILED_ROWS = 8  # query rows per work item of the vectorised tiled kernel: they share each converted K tile


@jit
def _tiled_group(q, k16, v16, n_kv, kv_pos, q_pos, scale, g, t0, t1, kt, kq, acc, mj, sj, out):
    """_row_tiled for the query heads of KV head g at tokens t0..t1-1, vectorised, same bits: per KV tile,
    K converted to F32 once into kt (D * FA_TILE_KV,) flat, cells in lanes, so that each row's 64 scores are
    4 x 16 lanes of fma chains over the head dimension (the simd_gemm chain of each cell); VKQ 16 dims at a
    time, the chain over the tile's cells in order. Scratch: kq (FA_TILE_KV,); per (row, head) r:
    acc (rows * gqa * D,) flat, mj, sj (rows * gqa,) the running M and S."""
    G, D = k16.shape[1], k16.shape[2]
    gqa = q.shape[1] // G
    h0 = g * gqa
    n_r = (t1 - t0) * gqa
    q_last = q_pos[t0]
    for t in range(t0, t1):
        q_last = max(q_last, q_pos[t])
    for r in range(n_r):
        mj[r] = -np.inf
        sj[r] = 0
    acc[: n_r * D] = 0
    for c0 in range(0, n_kv, FA_TILE_KV):
        n = min(FA_TILE_KV, n_kv - c0)
        seen = False  # a tile whose cells every row's mask hides is skipped for all of them
        for j in range(n):
            p = kv_pos[c0 + j]
            seen = seen or 0 <= p <= q_last
        if not seen:
            continue
        for d in range(D):
            for j in range(n):
                kt[d * FA_TILE_KV + j] = f16_bits_to_f32_hw(k16[c0 + j, g, d])
            for j in range(n, FA_TILE_KV):
                kt[d * FA_TILE_KV + j] = 0
        for t in range(t0, t1):
            qp = q_pos[t]
            for hj in range(gqa):
                h = h0 + hj
                r = (t - t0) * gqa + hj
                a0 = zero16()
                a1 = zero16()
                a2 = zero16()
                a3 = zero16()
                for d in range(D):
                    qd = splat16(q[t, h, d])
                    a0 = fma16(load16(kt, d * FA_TILE_KV), qd, a0)
                    a1 = fma16(load16(kt, d * FA_TILE_KV + 16), qd, a1)
                    a2 = fma16(load16(kt, d * FA_TILE_KV + 32), qd, a2)
                    a3 = fma16(load16(kt, d * FA_TILE_KV + 48), qd, a3)
                store16(kq, 0, a0)
                store16(kq, 16, a1)
                store16(kq, 32, a2)
                store16(kq, 48, a3)
                for j in range(FA_TILE_KV):
                    p = kv_pos[c0 + j] if j < n else -1
                    kq[j] = np.float32(kq[j] * scale) if 0 <= p <= qp else -np.inf
                tile_max = row_max(kq, FA_TILE_KV)
                if tile_max == -np.inf:
                    continue
                M = mj[r]
                m_new = max(M, tile_max)
                if m_new > M:
                    ms = np.float32(math.exp(np.float32(M - m_new)))
                    vms = splat16(ms)
                    for d0 in range(0, D, 16):
                        store16(acc, r * D + d0, mul16(load16(acc, r * D + d0), vms))
                    sj[r] = np.float32(sj[r] * ms)
                mj[r] = m_new
                sj[r] = np.float32(np.float64(sj[r]) + vec_soft_max(FA_TILE_KV, kq, kq, m_new, True))
                for d0 in range(0, D, 16):
                    a = load16(acc, r * D + d0)
                    for j in range(n):
                        a = fma16(load16(v16, ((c0 + j) * G + g) * D + d0), splat16(kq[j]), a)
                    store16(acc, r * D + d0, a)
    for t in range(t0, t1):
        for hj in range(gqa):
            r = (t - t0) * gqa + hj
            s_inv = np.float32(0.0) if sj[r] == 0.0 else np.float32(np.float32(1.0) / sj[r])
            for d in range(D):
                out[t, (h0 + hj) * D + d] = np.float32(acc[r * D + d] * s_inv)


@jit
def _tiled_items(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, i0, step):
    """Work items i0, i0 + step, ... of (block of FA_TILED_ROWS tokens, KV head) on the vectorised tiled
    kernel (one set of scratch arrays)."""
    T, H, D = q.shape
    G = k16.shape[1]
    gqa = H // G
    kt = np.empty(D * FA_TILE_KV, np.float32)
    kq = np.empty(FA_TILE_KV, np.float32)
    acc = np.empty(FA_TILED_ROWS * gqa * D, np.float32)
    mj = np.empty(FA_TILED_ROWS * gqa, np.float32)
    sj = np.empty(FA_TILED_ROWS * gqa, np.float32)
    n_blocks = (T + FA_TILED_ROWS - 1) // FA_TILED_ROWS
    for item in range(i0, n_blocks * G, step):
        t0 = (item // G) * FA_TILED_ROWS
        _tiled_group(q, k16, v16, n_kv, kv_pos, q_pos, scale, item % G, t0, min(T, t0 + FA_TILED_ROWS), kt, kq,
                     acc, mj, sj, out)


@pjit
def _tiled_parallel(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, n_chunks):
    for ci in prange(n_chunks):
        _tiled_items(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, ci, n_chunks)


@jit
def _write(out, t, h, acc, S):
    D = acc.shape[0]
    s_inv = np.float32(0.0) if S == 0.0 else np.float32(np.float32(1.0) / S)
    for d in range(D):
        out[t, h * D + d] = np.float32(acc[d] * s_inv)


PATH_ONE_ROW, PATH_TILED, PATH_SPLIT_KV = 0, 1, 2


@functools.lru_cache(maxsize=64)
def head_parts(T: int, G: int, gqa: int, n_chunks: int) -> int:
    """Into how many equal pieces the one-row kernel cuts each KV head's gqa query heads so that n_chunks
    threads get the most even share: a single token has only G (token, KV head) items (SmolLM2: 3 for 2
    threads, one thread would do two thirds). The fewest pieces among the best, which keeps heads that share
    a K block together."""
    return min((p for p in range(1, gqa + 1) if gqa % p == 0),
               key=lambda p: (-(-T * G * p // n_chunks) * (gqa // p), p))


def fa_path(T: int, n_kv: int, order: Order) -> int:
    """Which of ggml's kernels a batch of T query rows over n_kv cells takes: llama.cpp's choice (LLAMA), or
    one kernel for every row whatever the batch: the one-row kernel (SINGLE), the tiled one (BATCHED)."""
    if order == Order.SINGLE:
        return PATH_ONE_ROW
    if order == Order.BATCHED or T >= FA_TILE_Q:
        return PATH_TILED
    if T == 1 and n_kv >= FA_SPLIT_KV_MIN:
        return PATH_SPLIT_KV
    return PATH_ONE_ROW


@pjit
def _flash_attn_ext(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, path, n_chunks):
    """The scalar ports of the three kernels (the specification the vectorised paths are tested against)."""
    T, H, D = q.shape
    r = H // k16.shape[1]
    for item in prange(T * H):
        t = item // H
        h = item % H
        g = h // r
        qq = np.empty(D, np.float32)
        vkq = np.empty(D, np.uint16)
        acc = np.empty(D, np.float32)
        if path == PATH_TILED:
            kq = np.empty(FA_TILE_KV, np.float32)
            S = _row_tiled(q, k16, v16, n_kv, kv_pos, q_pos[t], scale, t, h, g, kq, acc)
        elif path == PATH_SPLIT_KV:
            vkq32 = np.empty(D, np.float32)
            S = _row_split(q, k16, v16, n_kv, kv_pos, q_pos[t], scale, t, h, g, n_chunks, qq, vkq, vkq32, acc)
        else:
            M, S = _row_chunk(q, k16, v16, kv_pos, q_pos[t], scale, t, h, g, 0, n_kv, qq, vkq, acc)
        _write(out, t, h, acc, S)


@jit
def on_calling_thread(T, H, D, n_kv, q_pos, n_chunks):
    """Whether the one-row and tiled kernels run a batch of T query rows (positions q_pos) on the calling
    thread: one chunk, or less work than ONE_ROW_PARALLEL_MIN_FLOPS."""
    return n_chunks == 1 or T == 0 or T * H * min(n_kv, q_pos[T - 1] + 1) * D * 4 < ONE_ROW_PARALLEL_MIN_FLOPS


@jit
def in_phases(T, n_kv, G, parts, n_chunks):
    """Whether one query token takes _one_token_phases: a long view (ONE_TOKEN_PHASES_MIN cells) whose work, cut
    by heads into G * parts items (head_parts), does not share evenly between the threads (SmolLM2's 3 KV heads
    on 2 threads; where it does, as the Qwen2.5 models' 2 on 2, the heads cut stays faster)."""
    return T == 1 and n_kv >= ONE_TOKEN_PHASES_MIN and (G * parts) % n_chunks != 0


@jit
def one_row_attend(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, parts, n_chunks):
    """flash_attn_ext's one-row path (head dimension a multiple of 64, out C-contiguous, scale float32) from
    jitted code (kernels/layer.py); parts: head_parts(T, Hkv, H / Hkv, n_chunks)."""
    T, H, D = q.shape
    if on_calling_thread(T, H, D, n_kv, q_pos, n_chunks):
        _one_row_items(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, 1, 0, 1)
    elif in_phases(T, n_kv, k16.shape[1], parts, n_chunks):
        _one_token_phases(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, n_chunks)
    else:
        _one_row_parallel(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, parts, n_chunks)


def flash_attn_ext(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, order=Order.SINGLE, n_threads=1):
    """out (T, H*D) = FLASH_ATTN_EXT of q (T, H, D) f32 over the first n_kv cells of k16 / v16 (n_ctx, Hkv, D)
    F16 bits; kv_pos (n_kv,) int32 position of each cell (-1: empty), q_pos (T,) int32; causal mask; the
    kernel by fa_path (llama.cpp's split-KV kernel cuts the cells into n_threads chunks). The one-row and tiled
    kernels run vectorised for head dimensions of a multiple of 64 (ggml_vec_dot_f16's 4 x 16 lanes) and 16."""
    if not out.flags.c_contiguous:  # the vectorised one-row kernel stores whole rows of 16 lanes
        whole = np.empty(out.shape, np.float32)
        flash_attn_ext(q, k16, v16, n_kv, kv_pos, q_pos, scale, whole, order, n_threads)
        out[...] = whole
        return
    path = fa_path(q.shape[0], n_kv, order)
    T, H, D = q.shape
    n_chunks = max(1, int(n_threads))
    scale = np.float32(scale)
    serial = on_calling_thread(T, H, D, n_kv, q_pos, n_chunks)
    if path == PATH_ONE_ROW and rows_kernel_applies(T, D):  # a batch: the same kernel regrouped (flash_attn_rows)
        if serial:
            one_row_tile_items(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, 0, 1)
        else:
            one_row_tiles(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, n_chunks)
    elif path == PATH_ONE_ROW and D % 64 == 0:
        if serial:
            _one_row_items(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, 1, 0, 1)
        else:
            parts = head_parts(T, k16.shape[1], H // k16.shape[1], n_chunks)
            if in_phases(T, n_kv, k16.shape[1], parts, n_chunks):
                _one_token_phases(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, n_chunks)
            else:
                _one_row_parallel(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, parts, n_chunks)
    elif path == PATH_TILED and D % 16 == 0:
        if serial:
            _tiled_items(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, 0, 1)
        else:
            _tiled_parallel(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, n_chunks)
    else:
        _flash_attn_ext(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, path, n_chunks)
