"""ggml's one-row flash-attention kernel for a batch of query rows: the same bits per row, the work regrouped.

kernels/flash_attn.py gives the kernel (`_row_chunk`, ggml_compute_forward_flash_attn_ext_f16_one_chunk) and runs
it a query token at a time. For a prompt, a work item here is a tile of ROWS_TILE tokens x the query heads of one
KV head, and the KV cells go by in chunks of ROWS_CHUNK:

    K, V of the chunk converted to F32 once (kb, vb)                 each row reads them from L1/L2 as F32
    scores: per (row, 16 cells), ggml_vec_dot_f16's 16 lane sums      Q in registers, the 16 cells reduced
            by the `_mm512_reduce_add_ps` tree all at once            together (kernels/_vec.py fold8..fold1)
    soft-max: per (row, 16 cells), `online_soft_max16`                the running maximum by a prefix scan,
                                                                      one 16-lane glibc expf for ms or vs
    VKQ: per token, its heads' F16 accumulators over its visible      twelve 16-lane chains in registers (AVX2:
         cells in order; S = fma(S, ms, vs) beside them               four, one head's 64 dimensions at a time),
                                                                      the accumulators kept across chunks

Per row every operation is the scalar kernel's, in its order: a score is the same 64-element FMA lanes and
reduction tree (with D = 64, s0 + s2 is fused into one FMA: both are exact products of two F16 values, so the
FMA rounds what the add rounds); the running maximum, ms and vs are those of the cell loop (only cells the mask
shows count; a NaN score never becomes the maximum); each accumulator takes fp16(VKQ * ms) on a new maximum and
fp16(fma(V, vs, VKQ)) every visible cell, in cell order (in FP16 arithmetic where the build's F16 vector ops are:
kernels/_vec.py F16_ARITH). So the output equals `_row_chunk`'s, row by row, for any
tile, chunk or thread count (tests/test_flash_attn.py).
"""

from __future__ import annotations

import kernels.config  # noqa: F401  (NUMBA_CACHE_DIR before numba)

import numpy as np
from numba import prange

from kernels._vec import (
    F16_ARITH, HAS_AVX512, add16, expf16_matches_libm, f16_arith_dims, fma16, from_f16x16, load16, load16h, mad16h,
    mul16, online_soft_max16, scale16h, splat16, store16, to_f16x16, vec_mad_f16_16, vec_scale_f16_16, zero16,
)
from kernels.attention import _dot_lanes, make_dots16
from kernels.config import ijit, jit, pjit
from kernels.fp16 import fma_f32, round_f16_scalar

ROWS_TILE = 8  # query tokens per work item: they share each chunk's conversion of K and V to F32 (8: 6-9 % faster
# than 4 on SmolLM2 and the 1.5B, 512-token prompts at depth 0 and 2048, 2 threads, same process; 16 little more)
ROWS_CHUNK = 256  # KV cells per chunk: K and V as F32 (2 x 256 x D x 4 bytes) stay in L2 for the tile's rows
ROWS_MIN = 2  # batches of at least this many tokens take this kernel (one token: flash_attn's own paths)


def rows_kernel_applies(T: int, D: int) -> bool:
    """Whether flash_attn_ext's one-row path runs a batch of T rows of head dimension D here: a head dimension that
    is a multiple of 64 (AVX512) or exactly 64 (AVX2: at 128 it took 0.83-0.99x the time of the rows one at a time,
    too little to switch; `python benchmarks/attention_rows.py --cases q15,q15_d`), and a C library whose expf
    expf16 reproduces."""
    return T >= ROWS_MIN and (D % 64 == 0 if HAS_AVX512 else D == 64) and expf16_matches_libm()


@ijit
def _lanes64(kb, o, qv, qo, D):
    """ggml_vec_dot_f16's 16 lane sums (before `_mm512_reduce_add_ps`) of the F32 row kb[o:o+64] with qv[qo:qo+64]:
    s_j = fma(K_j, Q_j, 0) for the four 16-lane parts j, then (s0 + s2) + (s1 + s3). s0 and s2 are exact products
    of two F16 values, so fma(K0, Q0, s2) rounds s0 + s2 once, as the add does."""
    s2 = fma16(load16(kb, o + 32), load16(qv, qo + 32), zero16())
    s3 = fma16(load16(kb, o + 48), load16(qv, qo + 48), zero16())
    return add16(fma16(load16(kb, o), load16(qv, qo), s2), fma16(load16(kb, o + 16), load16(qv, qo + 16), s3))


@ijit
def _lanes128(kb, o, qv, qo, D):
    """The same for 128 elements: each s_j an FMA chain over the two 64-element steps."""
    s0 = fma16(load16(kb, o + 64), load16(qv, qo + 64), fma16(load16(kb, o), load16(qv, qo), zero16()))
    s1 = fma16(load16(kb, o + 80), load16(qv, qo + 80), fma16(load16(kb, o + 16), load16(qv, qo + 16), zero16()))
    s2 = fma16(load16(kb, o + 96), load16(qv, qo + 96), fma16(load16(kb, o + 32), load16(qv, qo + 32), zero16()))
    s3 = fma16(load16(kb, o + 112), load16(qv, qo + 112), fma16(load16(kb, o + 48), load16(qv, qo + 48), zero16()))
    return add16(add16(s0, s2), add16(s1, s3))


def _make_scores(lanes):
    """scores(kb, qv, D, n_rows, cn16, sc): sc[r, c] (rows, ROWS_CHUNK) = the raw score of row r (qv[r*D:][:D]) with
    cell c < cn16 of the chunk (kb (ROWS_CHUNK, D) F32), 16 cells at a time: lanes(...) of each, reduced together
    (attention.make_dots16). One function per head dimension with no branch in its loop: numba's reference-count
    pruning then drops the arrays' increfs (a branch inside left NRT calls in the loop, and every vector spilled
    around them: 3x the time)."""
    scores16 = make_dots16(lanes, ijit)

    @jit
    def scores(kb, qv, D, n_rows, cn16, sc):
        for c in range(0, cn16, 16):
            for r in range(n_rows):
                store16(sc, r * ROWS_CHUNK + c, scores16(kb, c * D, D, qv, r * D, D))

    return scores


_scores64 = _make_scores(_lanes64)
_scores128 = _make_scores(_lanes128)
_scores_any = _make_scores(_dot_lanes)  # 192, 256, ...: ggml_vec_dot_f16's loop as attention.py has it


# The accumulator chains in two kinds (ggml's F16 vector ops as the build computes them, kernels/_vec.py): float
# arithmetic rounded to F16 every step, chains as F32x16; or FP16 arithmetic (F16_ARITH dimensions), chains as
# F16x16 and V read from the F16 cache as it is. Per kind: (enter from acc, rescale by ms, mad of V, leave to acc).

@ijit
def _enter32(acc, o):
    return load16(acc, o)


@ijit
def _rescale32(x, ms):
    return vec_scale_f16_16(x, ms, False)


@ijit
def _mad32(vsrc, o, vs, x):
    return vec_mad_f16_16(load16(vsrc, o), vs, x, False)


@ijit
def _leave32(acc, o, x):
    store16(acc, o, x)


@ijit
def _enter16(acc, o):
    return to_f16x16(load16(acc, o))


@ijit
def _rescale16(x, ms):
    return scale16h(x, ms)


@ijit
def _mad16(vsrc, o, vs, x):
    return mad16h(load16h(vsrc, o), vs, x)


@ijit
def _leave16(acc, o, x):
    store16(acc, o, from_f16x16(x))


def _make_vkq_slabs(enter, rescale, mad, leave):
    """vkq_slabs(vsrc, v0, vstride, D, vis, nv, ra, rb, rc, da, db, dc, msv, vsv, acc, S): three slabs (row r, 64
    dimensions from d) of the accumulators acc (rows, D) F32 (F16 values) over the visible cells vis[:nv] of the
    chunk (V of chunk cell c at vsrc[v0 + c * vstride:][:D]; msv / vsv (rows, ROWS_CHUNK)), in cell order: twelve
    independent chains in registers; S[r] = fma(S[r], ms, vs) kept from a row's slab at dimension 0. A slab given
    twice computes and stores the same values twice. vkq_slab(vsrc, v0, vstride, D, vis, nv, r, d, msv, vsv, acc,
    S): one slab the same way (without AVX-512, where the three slabs' 24 ymm chains spilled: the kernel then took
    0.82-0.92x the time at SmolLM2's shape, `python benchmarks/attention_ab.py --base 21b5246`)."""

    @ijit
    def enter4(acc, o):
        return enter(acc, o), enter(acc, o + 16), enter(acc, o + 32), enter(acc, o + 48)

    @ijit
    def rescale4(x0, x1, x2, x3, ms):  # on a new maximum only (ms == 1 would leave F16 values as they are)
        if ms != 1.0:
            return rescale(x0, ms), rescale(x1, ms), rescale(x2, ms), rescale(x3, ms)
        return x0, x1, x2, x3

    @ijit
    def mad4(vsrc, o, vs, x0, x1, x2, x3):
        return mad(vsrc, o, vs, x0), mad(vsrc, o + 16, vs, x1), mad(vsrc, o + 32, vs, x2), mad(vsrc, o + 48, vs, x3)

    @ijit
    def leave4(acc, o, x0, x1, x2, x3):
        leave(acc, o, x0)
        leave(acc, o + 16, x1)
        leave(acc, o + 32, x2)
        leave(acc, o + 48, x3)

    @jit
    def vkq_slabs(vsrc, v0, vstride, D, vis, nv, ra, rb, rc, da, db, dc, msv, vsv, acc, S):
        a0, a1, a2, a3 = enter4(acc, ra * D + da)
        b0, b1, b2, b3 = enter4(acc, rb * D + db)
        e0, e1, e2, e3 = enter4(acc, rc * D + dc)
        Sa, Sb, Sc = S[ra], S[rb], S[rc]
        one = np.float32(1.0)
        for i in range(nv):
            c = vis[i]
            ma, mb, mc = msv[ra, c], msv[rb, c], msv[rc, c]
            va, vb_, vc = vsv[ra, c], vsv[rb, c], vsv[rc, c]
            Sa = fma_f32(Sa, ma, va)
            Sb = fma_f32(Sb, mb, vb_)
            Sc = fma_f32(Sc, mc, vc)
            if ma != one or mb != one or mc != one:  # a new maximum (rare past the first cells): one branch for all
                a0, a1, a2, a3 = rescale4(a0, a1, a2, a3, ma)
                b0, b1, b2, b3 = rescale4(b0, b1, b2, b3, mb)
                e0, e1, e2, e3 = rescale4(e0, e1, e2, e3, mc)
            o = v0 + c * vstride
            a0, a1, a2, a3 = mad4(vsrc, o + da, va, a0, a1, a2, a3)
            b0, b1, b2, b3 = mad4(vsrc, o + db, vb_, b0, b1, b2, b3)
            e0, e1, e2, e3 = mad4(vsrc, o + dc, vc, e0, e1, e2, e3)
        leave4(acc, ra * D + da, a0, a1, a2, a3)
        leave4(acc, rb * D + db, b0, b1, b2, b3)
        leave4(acc, rc * D + dc, e0, e1, e2, e3)
        if da == 0:
            S[ra] = Sa
        if db == 0:
            S[rb] = Sb
        if dc == 0:
            S[rc] = Sc

    @jit
    def vkq_slab(vsrc, v0, vstride, D, vis, nv, ra, da, msv, vsv, acc, S):
        a0, a1, a2, a3 = enter4(acc, ra * D + da)
        Sa = S[ra]
        one = np.float32(1.0)
        for i in range(nv):
            c = vis[i]
            ma = msv[ra, c]
            va = vsv[ra, c]
            Sa = fma_f32(Sa, ma, va)
            if ma != one:
                a0, a1, a2, a3 = rescale4(a0, a1, a2, a3, ma)
            a0, a1, a2, a3 = mad4(vsrc, v0 + c * vstride + da, va, a0, a1, a2, a3)
        leave4(acc, ra * D + da, a0, a1, a2, a3)
        if da == 0:
            S[ra] = Sa

    return vkq_slabs, vkq_slab


_vkq_slabs32, _vkq_slab32 = _make_vkq_slabs(_enter32, _rescale32, _mad32, _leave32)
_vkq_slabs16, _ = _make_vkq_slabs(_enter16, _rescale16, _mad16, _leave16)


@jit
def _tile(q, k16, v16, n_kv, kv_pos, q_pos, scale, g, t0, t1, qv, kb, vb, vm, vis, nvis, sc, msv, vsv, M, S, acc,
          out):
    """The one-row kernel for tokens t0..t1-1 (at most ROWS_TILE) x the query heads of KV head g (rows r = (t - t0)
    * gqa + j). Scratch: qv (rows, D) the queries in F16; kb, vb (ROWS_CHUNK, D) a chunk's K and V in F32; vm
    (ROWS_TILE, ROWS_CHUNK) 1 where a token sees a cell; vis (ROWS_TILE, ROWS_CHUNK) its visible cells, nvis
    their count; sc, msv, vsv (rows, ROWS_CHUNK) raw scores, ms, vs; M, S (rows,); acc (rows, D)."""
    T, H, D = q.shape
    G = k16.shape[1]
    gqa = H // G
    h0 = g * gqa
    nt = t1 - t0
    n_rows = nt * gqa
    q_last = q_pos[t0]
    for t in range(t0, t1):
        q_last = max(q_last, q_pos[t])
        for j in range(gqa):
            for d in range(D):
                qv[(t - t0) * gqa + j, d] = round_f16_scalar(q[t, h0 + j, d])
    n_end = 0  # past the last cell any of the tile's tokens sees
    for c in range(n_kv):
        if 0 <= kv_pos[c] <= q_last:
            n_end = c + 1
    for r in range(n_rows):
        M[r] = -np.inf
        S[r] = 0
        for d in range(D):
            acc[r, d] = 0
    for c0 in range(0, n_end, ROWS_CHUNK):
        cn = min(ROWS_CHUNK, n_end - c0)
        cn16 = (cn + 15) // 16 * 16
        for c in range(cn):  # K, V of the chunk in F32
            o = ((c0 + c) * G + g) * D
            for d in range(0, D, 16):
                store16(kb, c * D + d, load16(k16, o + d))
                store16(vb, c * D + d, load16(v16, o + d))
        for c in range(cn, cn16):  # rows past the view: zero, and hidden
            for d in range(D):
                kb[c, d] = 0
                vb[c, d] = 0
        for i in range(nt):
            qp = q_pos[t0 + i]
            n = 0
            for c in range(cn16):
                p = kv_pos[c0 + c] if c < cn else -1
                seen = 0 <= p <= qp
                vm[i, c] = 1 if seen else 0
                if seen:
                    vis[i, n] = c
                    n += 1
            nvis[i] = n
        if D == 64:
            _scores64(kb, qv, D, n_rows, cn16, sc)
        elif D == 128:
            _scores128(kb, qv, D, n_rows, cn16, sc)
        else:
            _scores_any(kb, qv, D, n_rows, cn16, sc)
        vscale = splat16(scale)
        for r in range(n_rows):
            i = r // gqa
            if nvis[i] == 0:
                continue
            m = M[r]
            for c in range(0, cn16, 16):
                x = add16(mul16(load16(sc, r * ROWS_CHUNK + c), vscale), zero16())  # s * scale + 0 (the mask)
                ms, vs, m = online_soft_max16(x, load16(vm, i * ROWS_CHUNK + c), m)
                store16(msv, r * ROWS_CHUNK + c, ms)
                store16(vsv, r * ROWS_CHUNK + c, vs)
            M[r] = m
        # slabs (row, 64 dimensions): those in FP16 arithmetic (the first f16_arith_dims of a row) read V from the F16
        # cache (no conversion: their chains stay in FP16), the others the chunk's F32 copy
        na = f16_arith_dims(D) // 64
        for i in range(nt):
            if nvis[i] == 0:
                continue
            for arith in (True, False):
                per = na if arith else D // 64 - na  # slabs a row of this kind, from slab s0
                s0 = 0 if arith else na
                n_slabs = gqa * per
                if not HAS_AVX512:  # one slab at a time: its 4 chains are 8 of the 16 ymm registers (three spilled)
                    for k in range(n_slabs):
                        _vkq_slab32(vb, 0, D, D, vis[i], nvis[i], i * gqa + k // per, 64 * (s0 + k % per), msv, vsv,
                                    acc, S)
                    continue
                for k in range(0, n_slabs, 3):  # three slabs at a time; a short last group repeats its last slab
                    ka, kb_, kc = k, min(k + 1, n_slabs - 1), min(k + 2, n_slabs - 1)
                    ra, rb, rc = i * gqa + ka // per, i * gqa + kb_ // per, i * gqa + kc // per
                    da, db, dc = 64 * (s0 + ka % per), 64 * (s0 + kb_ % per), 64 * (s0 + kc % per)
                    if arith:
                        if F16_ARITH:  # (a global constant: numba prunes this call where there is no AVX512-FP16)
                            _vkq_slabs16(v16, (c0 * G + g) * D, G * D, D, vis[i], nvis[i], ra, rb, rc, da, db, dc,
                                         msv, vsv, acc, S)
                    else:
                        _vkq_slabs32(vb, 0, D, D, vis[i], nvis[i], ra, rb, rc, da, db, dc, msv, vsv, acc, S)
    for r in range(n_rows):
        t = t0 + r // gqa
        h = h0 + r % gqa
        s_inv = np.float32(0.0) if S[r] == 0.0 else np.float32(np.float32(1.0) / S[r])
        for d in range(D):
            out[t, h * D + d] = np.float32(acc[r, d] * s_inv)


@jit
def one_row_tile_items(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, i0, step):
    """Work items i0, i0 + step, ... of (tile of ROWS_TILE tokens, KV head), one set of scratch arrays; interleaved
    so that the threads share the causal mask's growing rows evenly."""
    T, H, D = q.shape
    G = k16.shape[1]
    rows = ROWS_TILE * (H // G)
    qv = np.empty((rows, D), np.float32)
    kb = np.empty((ROWS_CHUNK, D), np.float32)
    vb = np.empty((ROWS_CHUNK, D), np.float32)
    vm = np.empty((ROWS_TILE, ROWS_CHUNK), np.float32)
    vis = np.empty((ROWS_TILE, ROWS_CHUNK), np.int64)
    nvis = np.empty(ROWS_TILE, np.int64)
    sc = np.empty((rows, ROWS_CHUNK), np.float32)
    msv = np.empty((rows, ROWS_CHUNK), np.float32)
    vsv = np.empty((rows, ROWS_CHUNK), np.float32)
    M = np.empty(rows, np.float32)
    S = np.empty(rows, np.float32)
    acc = np.empty((rows, D), np.float32)
    n_tiles = (T + ROWS_TILE - 1) // ROWS_TILE
    for item in range(i0, n_tiles * G, step):
        t0 = (item // G) * ROWS_TILE
        _tile(q, k16, v16, n_kv, kv_pos, q_pos, scale, item % G, t0, min(T, t0 + ROWS_TILE), qv, kb, vb, vm, vis,
              nvis, sc, msv, vsv, M, S, acc, out)


@pjit
def one_row_tiles(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, n_chunks):
    """out (T, H*D) C-contiguous = the one-row kernel of every query row of q (T, H, D) over the first n_kv cells
    of k16 / v16 (n_ctx, Hkv, D) F16 bits, D a multiple of 64, scale float32 (see the module docstring), on
    n_chunks threads (1: on the calling thread's loop, the same bits)."""
    for ci in prange(n_chunks):
        one_row_tile_items(q, k16, v16, n_kv, kv_pos, q_pos, scale, out, ci, n_chunks)
