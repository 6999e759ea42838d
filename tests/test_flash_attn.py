"""kernels.flash_attn: the three paths of ggml's CPU flash attention against each other (the one-row kernel is
checked against llama.cpp's own logs in test_evalcb_live.py, the others against a llama.cpp built here in
test_reference_llama.py within rounding)."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.order import Order
from kernels.flash_attn import FA_SPLIT_KV_MIN, FA_TILE_Q, PATH_ONE_ROW, PATH_SPLIT_KV, PATH_TILED, fa_path, flash_attn_ext


def _case(T, n_kv, H=4, Hkv=2, D=64, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((T, H, D)).astype(np.float32)
    k = rng.standard_normal((n_kv, Hkv, D)).astype(np.float16).view(np.uint16)
    v = rng.standard_normal((n_kv, Hkv, D)).astype(np.float16).view(np.uint16)
    n_used = n_kv - 37  # the last cells are empty
    kv_pos = np.where(np.arange(n_kv) < n_used, np.arange(n_kv), -1).astype(np.int32)
    q_pos = np.arange(n_used - T, n_used, dtype=np.int32)
    return q, k, v, kv_pos, q_pos


def _run(args, n_kv, llama_order, n_threads=1):
    q, k, v, kv_pos, q_pos = args
    out = np.empty((q.shape[0], q.shape[1] * q.shape[2]), np.float32)
    flash_attn_ext(q, k, v, n_kv, kv_pos, q_pos, 0.125, out, llama_order, n_threads)
    return out


def test_paths_llama_cpp_takes():
    assert fa_path(FA_TILE_Q, 256, True) == PATH_TILED and fa_path(FA_TILE_Q - 1, 256, True) == PATH_ONE_ROW
    assert fa_path(1, FA_SPLIT_KV_MIN, True) == PATH_SPLIT_KV and fa_path(1, FA_SPLIT_KV_MIN - 1, True) == PATH_ONE_ROW
    assert fa_path(FA_TILE_Q, FA_SPLIT_KV_MIN, False) == PATH_ONE_ROW  # batch-invariant default
    assert fa_path(1, FA_SPLIT_KV_MIN, Order.BATCHED) == PATH_TILED  # batch-invariant, large batches' kernel


def test_tiled_path_agrees_with_one_row_path_within_rounding():
    """Same attention, other summation order and F32 instead of F16 Q: close, not equal."""
    args = _case(FA_TILE_Q + 5, 256)
    a, b = _run(args, 256, False), _run(args, 256, True)
    assert not np.array_equal(a, b)
    assert np.abs(a - b).max() <= 1e-2 * np.abs(a).max()  # the one-row kernel accumulates V in F16


@pytest.mark.parametrize("threads", [2, 3])
def test_split_kv_path_agrees_with_one_row_path_and_equals_it_with_one_chunk(threads):
    args = _case(1, 768)
    one_row = _run(args, 768, False)
    assert np.array_equal(_run(args, 768, True, 1), one_row)  # one chunk: the one-row kernel, exactly
    split = _run(args, 768, True, threads)
    assert np.abs(split - one_row).max() <= 1e-2 * np.abs(one_row).max()


def test_rows_do_not_depend_on_the_batch():
    """The default path: a row's result is the same alone or in a batch (prompt splits equal token-by-token)."""
    q, k, v, kv_pos, q_pos = _case(9, 256)
    whole = _run((q, k, v, kv_pos, q_pos), 256, False)
    for t in range(9):
        one = _run((q[t:t + 1], k, v, kv_pos, q_pos[t:t + 1]), 256, False)
        assert np.array_equal(one[0], whole[t])


@pytest.mark.parametrize("H,Hkv,D", [(4, 4, 64), (4, 2, 64), (9, 3, 64), (14, 2, 64), (12, 2, 128), (32, 8, 128)])
def test_vectorised_one_row_kernel_is_the_scalar_specification(H, Hkv, D):
    """flash_attn_ext's one-row path (query heads of a KV head together, 16-lane F16 accumulator) gives the bits
    of the scalar port of ggml's loop (`_row_chunk`, one row at a time), at any thread count; the scores grow
    along the cells so that later cells keep raising the running maximum (the rescaling branch); some cells inside the
    view are empty and some out of position order."""
    from kernels.flash_attn import _flash_attn_ext

    q, k, v, kv_pos, q_pos = _case(5, 512, H, Hkv, D, seed=H + D)
    kv_pos[100:130] = -1  # empty cells inside the view
    kv_pos[300:340] = kv_pos[300:340][::-1].copy()  # cells out of position order (a sequence edited in place)
    ramp = (np.linspace(0.0, 4.0, 512, dtype=np.float32)[:, None, None] * np.ones((1, Hkv, D), np.float32))
    k = (k.view(np.float16).astype(np.float32) + ramp).astype(np.float16).view(np.uint16)
    want = np.empty((q.shape[0], H * D), np.float32)
    _flash_attn_ext(q, k, v, 512, kv_pos, q_pos, np.float32(0.125), want, PATH_ONE_ROW, 1)
    for threads in (1, 2, 3):
        got = _run((q, k, v, kv_pos, q_pos), 512, False, threads)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), threads
        for t in (0, 4):  # one token: each KV head's query heads cut into pieces for the threads (head_parts)
            one = _run((q[t:t + 1], k, v, kv_pos, q_pos[t:t + 1]), 512, False, threads)
            assert np.array_equal(one[0].view(np.uint32), want[t].view(np.uint32)), (threads, t)


@pytest.mark.parametrize("H,Hkv,D", [(9, 3, 64), (12, 2, 128)])
def test_one_row_kernel_over_a_view_of_any_length(H, Hkv, D):
    """A view of n_kv cells that is not a multiple of 16 (the cache array exactly that long): the vectorised
    one-row path still gives the scalar specification's bits (its last partial block of scores used to spill
    into the next head's)."""
    from kernels.flash_attn import _flash_attn_ext

    q, k, v, kv_pos, q_pos = _case(3, 301, H, Hkv, D, seed=7)
    want = np.empty((3, H * D), np.float32)
    kv_pos[:] = np.arange(301)  # every cell used: the last visible cell is the view's last
    q_pos[:] = 300
    _flash_attn_ext(q, k, v, 301, kv_pos, q_pos, np.float32(0.125), want, PATH_ONE_ROW, 1)
    for threads in (1, 2):
        got = _run((q, k, v, kv_pos, q_pos), 301, False, threads)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), threads
    wide = np.zeros((3, 2 * H * D), np.float32)  # a non-contiguous output: every other column
    flash_attn_ext(q, k, v, 301, kv_pos, q_pos, 0.125, wide[:, ::2], Order.SINGLE, 2)
    assert np.array_equal(wide[:, ::2].view(np.uint32), want.view(np.uint32)) and not wide[:, 1::2].any()


@pytest.mark.parametrize("H,Hkv,D", [(9, 3, 64), (14, 2, 64), (15, 5, 128), (3, 3, 64), (10, 5, 64), (32, 8, 128)])
@pytest.mark.parametrize("n_kv", [512, 1301])
def test_one_token_over_a_long_view_in_three_phases(H, Hkv, D, n_kv):
    """One query token over ONE_TOKEN_PHASES_MIN cells or more whose heads do not share evenly between the threads
    takes _one_token_phases (the scores cut by cells, the soft-max by heads, the accumulator by 16-lane units):
    the bits of the scalar port of ggml's loop at 1-3 threads, with empty cells, cells out of order, a rising
    maximum and a view whose length is not a multiple of 16 (1301)."""
    from kernels.flash_attn import ONE_TOKEN_PHASES_MIN, _flash_attn_ext, head_parts, in_phases

    assert n_kv >= ONE_TOKEN_PHASES_MIN
    assert any(in_phases(1, n_kv, Hkv, head_parts(1, Hkv, H // Hkv, n), n) for n in (2, 3))
    q, k, v, kv_pos, q_pos = _case(1, n_kv, H, Hkv, D, seed=H + n_kv)
    kv_pos[100:130] = -1
    kv_pos[300:400] = kv_pos[300:400][::-1].copy()
    ramp = (np.linspace(0.0, 4.0, n_kv, dtype=np.float32)[:, None, None] * np.ones((1, Hkv, D), np.float32))
    k = (k.view(np.float16).astype(np.float32) + ramp).astype(np.float16).view(np.uint16)
    want = np.empty((1, H * D), np.float32)
    _flash_attn_ext(q, k, v, n_kv, kv_pos, q_pos, np.float32(0.125), want, PATH_ONE_ROW, 1)
    for threads in (1, 2, 3):
        got = _run((q, k, v, kv_pos, q_pos), n_kv, False, threads)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), threads
    early = q_pos // 3  # a query that sees only the first cells of the view
    _flash_attn_ext(q, k, v, n_kv, kv_pos, early, np.float32(0.125), want, PATH_ONE_ROW, 1)
    got = _run((q, k, v, kv_pos, early), n_kv, False, 2)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_no_query_rows():
    for llama_order in (False, True):
        assert _run(_case(0, 256), 256, llama_order, 2).shape == (0, 4 * 64)


def test_head_parts_share_a_single_token_evenly():
    """(T, Hkv, gqa, threads) -> pieces per KV head: SmolLM2's 9 heads in 3 groups go one head per item on 2
    threads (5 + 4 heads, not 6 + 3); 2 groups of 6 on 2 threads need no cut; on 3 threads, pieces of 2 heads."""
    from kernels.flash_attn import head_parts

    assert head_parts(1, 3, 3, 2) == 3
    assert head_parts(1, 2, 6, 2) == 1
    assert head_parts(1, 2, 6, 3) == 3
    assert head_parts(1, 2, 7, 2) == 1
    assert head_parts(64, 3, 3, 2) == 1


@pytest.mark.parametrize("H,Hkv,D,T", [(4, 4, 64, 3), (4, 2, 64, 70), (9, 3, 64, 17), (14, 2, 64, 64), (12, 2, 128, 9),
                                       (32, 8, 128, 65), (4, 2, 80, 11)])
def test_vectorised_tiled_kernel_is_the_scalar_specification(H, Hkv, D, T):
    """flash_attn_ext's tiled path (blocks of rows sharing each F32 K tile, 4 x 16 score lanes) gives the bits
    of the scalar port of ggml's tiled kernel (`_row_tiled`) at any thread count, in llama.cpp's order (T >= 64)
    and for every row (Order.BATCHED); rising scores exercise the rescaling branch, and the
    empty cells past n_used a partly and a wholly masked tile."""
    from kernels.flash_attn import _flash_attn_ext

    n_kv = 320
    q, k, v, kv_pos, q_pos = _case(T, n_kv, H, Hkv, D, seed=H + D + T)
    ramp = (np.linspace(0.0, 4.0, n_kv, dtype=np.float32)[:, None, None] * np.ones((1, Hkv, D), np.float32))
    k = (k.view(np.float16).astype(np.float32) + ramp).astype(np.float16).view(np.uint16)
    kv_pos[200:256] = -1  # a whole tile of empty cells inside the view
    want = np.empty((T, H * D), np.float32)
    _flash_attn_ext(q, k, v, n_kv, kv_pos, q_pos, np.float32(0.125), want, PATH_TILED, 1)
    for threads in (1, 2, 3):
        got = np.empty_like(want)
        flash_attn_ext(q, k, v, n_kv, kv_pos, q_pos, 0.125, got, Order.BATCHED, threads)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), threads
        if T >= FA_TILE_Q:
            flash_attn_ext(q, k, v, n_kv, kv_pos, q_pos, 0.125, got, True, threads)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), threads


def test_batched_order_rows_do_not_depend_on_the_batch():
    """Order.BATCHED, the tiled kernel for every row: a row alone equals the row in a batch of 70 (which
    llama.cpp's order computes with the tiled kernel too: the same bits)."""
    q, k, v, kv_pos, q_pos = _case(70, 256)
    whole = np.empty((70, q.shape[1] * q.shape[2]), np.float32)
    flash_attn_ext(q, k, v, 256, kv_pos, q_pos, 0.125, whole, Order.BATCHED, 2)
    assert np.array_equal(whole, _run((q, k, v, kv_pos, q_pos), 256, True))
    for t in (0, 9, 69):
        one = np.empty((1, whole.shape[1]), np.float32)
        flash_attn_ext(q[t:t + 1], k, v, 256, kv_pos, q_pos[t:t + 1], 0.125, one, Order.BATCHED, 1)
        assert np.array_equal(one[0], whole[t])


# --- the one-row kernel for batches (kernels/flash_attn_rows.py) and its 16-lane primitives (kernels/_vec.py)

needs_glibc = pytest.mark.skipif(__import__("platform").libc_ver()[0] != "glibc",
                                 reason="expf16 reproduces glibc's expf")


@needs_glibc
def test_expf16_is_the_c_library_expf():
    """expf16 (glibc's expf in 16 lanes) against this C library's expf (math.exp on a float32, the scalar kernels'
    call): every 37th float32 of [-104, 0] (the soft-max's arguments), every 4099th of the rest, the range edges
    and a few special values; and the once-a-process check the kernels rely on says so too. (All 2^32 inputs
    matched when the code was written: RESULTS.md, issue #20.)"""
    from kernels._vec import _EXPF_MAY_UFLOW, _EXPF_OFLOW, _EXPF_UFLOW, _expf16_mismatches, expf16_matches_libm

    assert _expf16_mismatches(0x80000000, 0xC2D00001, 37) == 0
    assert _expf16_mismatches(0xC2D00001, 0xFFFFFFFF + 1, 4099) == 0
    assert _expf16_mismatches(0, 0x80000000, 4099) == 0
    # 0xC27C65D9 (-63.0995): the one argument of [-104, 0] whose expf needs r's FMA (z - kd with z unrounded); the
    # other contractions (kd, the polynomial) give the same floats over that range either way
    hard = np.array([0xC27C65D9], np.uint32).view(np.float32)[0]
    for x in (_EXPF_UFLOW, _EXPF_MAY_UFLOW, _EXPF_OFLOW, -88.0, 88.0, 0.0, -0.0, -np.inf, np.inf, np.nan, hard):
        b = int(np.array([x], np.float32).view(np.uint32)[0])
        for d in (-1, 0, 1):  # the value and its neighbours
            if 0 <= b + d <= 0xFFFFFFFF:
                assert _expf16_mismatches(b + d, b + d + 1, 1) == 0, (x, d)
    assert expf16_matches_libm()


@needs_glibc
def test_expf16_table_lookup_without_avx2(tmp_path):
    """expf16's third table lookup (a load per lane, for CPUs with neither AVX512's vpermi2q nor AVX2's vpgatherqq;
    this machine runs one of those two): compiled for a baseline x86-64 CPU in a subprocess with its own kernel
    cache, it still gives the C library's expf on a sample of [-104, 0] and the rest."""
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    code = textwrap.dedent("""
        from kernels._vec import HAS_AVX512, HAS_GATHER, _expf16_mismatches
        assert not HAS_AVX512 and not HAS_GATHER
        print(_expf16_mismatches(0x80000000, 0xC2D00001, 1009) + _expf16_mismatches(0xC2D00001, 0xFFFFFFFF + 1, 65537)
              + _expf16_mismatches(0, 0x80000000, 65537))
    """)
    env = dict(os.environ, NUMBA_CPU_NAME="generic", NUMBA_CPU_FEATURES="+sse2", NUMBA_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split()[-1] == "0"


@needs_glibc
def test_online_soft_max16_is_the_scalar_loop():
    """16 cells at a time with a prefix scan of the running maximum: per visible cell the ms and vs of the scalar
    loop (`_soft_max_row`, ggml's order), and the maximum carried to the next block, with hidden cells, NaN, -inf
    and +inf scores, ties, and scores far below the maximum (expf underflowing to 0 and subnormals)."""
    from numba import njit

    from kernels._vec import load16, online_soft_max16, store16
    from kernels.flash_attn import _soft_max_row

    @njit
    def blocks(x, vis, ms, vs):
        m = np.float32(-np.inf)
        for c in range(0, x.shape[0], 16):
            a, b, m = online_soft_max16(load16(x, c), load16(vis, c), m)
            store16(ms, c, a)
            store16(vs, c, b)
        return m

    rng = np.random.default_rng(5)
    for case in range(40):
        n = 16 * int(rng.integers(1, 9))
        x = (rng.standard_normal(n) * (1.0, 10.0, 60.0)[case % 3]).astype(np.float32)
        x += np.linspace(0, (0.0, 30.0)[case % 2], n, dtype=np.float32)  # a rising maximum: many new maxima
        x[rng.integers(0, n, 3)] = x[rng.integers(0, n)]  # ties with earlier scores
        if case % 4 == 1:
            x[rng.integers(0, n, 2)] = np.nan
        if case % 4 == 2:
            x[rng.integers(0, n, 2)] = -np.inf
        if case % 8 == 3:
            x[rng.integers(0, n)] = np.inf
        vis = (rng.random(n) < 0.8).astype(np.float32)
        ms = np.empty(n, np.float32)
        vs = np.empty(n, np.float32)
        m = blocks(x, vis, ms, vs)
        cells = np.flatnonzero(vis).astype(np.int64)
        want_ms = np.empty(n, np.float32)
        want_vs = np.empty(n, np.float32)
        _soft_max_row(x, 0, cells, len(cells), np.float32(1.0), want_ms, want_vs)
        k = len(cells)
        for got, want in ((ms[cells], want_ms[:k]), (vs[cells], want_vs[:k])):
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)) or \
                np.array_equal(got, want, equal_nan=True), case
        seen = x[cells][~np.isnan(x[cells])]
        assert m == (seen.max() if seen.size else -np.inf), case


@needs_glibc
@pytest.mark.parametrize("H,Hkv,D", [(9, 3, 64), (12, 2, 128), (8, 1, 64), (4, 4, 64), (6, 2, 192), (10, 5, 64)])
@pytest.mark.parametrize("T,depth", [(2, 0), (13, 290), (9, 700)])
def test_rows_kernel_is_the_scalar_specification(H, Hkv, D, T, depth):
    """The one-row kernel regrouped for batches (tiles of ROWS_TILE tokens x a KV head's query heads, cells in
    chunks of ROWS_CHUNK) gives, row by row, the bits of the scalar port of ggml's loop (`_row_chunk`) at 1-3
    threads: several tiles and chunks, a last partial tile and chunk, empty cells and cells out of order, a
    maximum that keeps rising across chunks (the rescaling), head groups of 1 to 8 heads (slab groups of three
    with a short last one), a head dimension the unrolled scores do not cover (192), and large scores whose expf
    underflow to subnormals and 0. flash_attn_ext takes this kernel for a batch of the one-row path (without AVX512
    for a head dimension of 64 only: the test runs the kernel directly either way)."""
    from kernels._vec import HAS_AVX512
    from kernels.flash_attn import _flash_attn_ext
    from kernels.flash_attn_rows import ROWS_CHUNK, ROWS_TILE, one_row_tile_items, one_row_tiles, rows_kernel_applies

    n_kv = depth + T + 37
    assert rows_kernel_applies(T, D) == (HAS_AVX512 or D == 64)
    q, k, v, kv_pos, q_pos = _case(T, n_kv, H, Hkv, D, seed=H + D + T)
    kv_pos[depth // 3: depth // 3 + 20] = -1
    kv_pos[depth // 2: depth // 2 + 40] = kv_pos[depth // 2: depth // 2 + 40][::-1].copy()
    ramp = (np.linspace(0.0, 6.0, n_kv, dtype=np.float32)[:, None, None] * np.ones((1, Hkv, D), np.float32))
    k = (k.view(np.float16).astype(np.float32) + ramp).astype(np.float16).view(np.uint16)
    if depth == 290:
        q = q * 8  # scores spread over hundreds: most expf arguments below -104
    want = np.empty((T, H * D), np.float32)
    _flash_attn_ext(q, k, v, n_kv, kv_pos, q_pos, np.float32(0.125), want, PATH_ONE_ROW, 1)
    got = np.empty_like(want)
    one_row_tile_items(q, k, v, n_kv, kv_pos, q_pos, np.float32(0.125), got, 0, 1)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    for threads in (2, 3):
        got[:] = 0
        one_row_tiles(q, k, v, n_kv, kv_pos, q_pos, np.float32(0.125), got, threads)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), threads
        assert np.array_equal(_run((q, k, v, kv_pos, q_pos), n_kv, False, threads).view(np.uint32),
                              want.view(np.uint32)), threads
    if depth == 700:
        assert n_kv > 2 * ROWS_CHUNK and T > ROWS_TILE


@needs_glibc
def test_rows_kernel_with_nan_scores():
    """A query head with NaN: the rows kernel gives NaN exactly where the scalar loop does, the other heads'
    bits unchanged."""
    from kernels.flash_attn import _flash_attn_ext
    from kernels.flash_attn_rows import one_row_tiles

    q, k, v, kv_pos, q_pos = _case(6, 300, 9, 3, 64, seed=3)
    q[2, 4, 7] = np.nan
    want = np.empty((6, 9 * 64), np.float32)
    _flash_attn_ext(q, k, v, 300, kv_pos, q_pos, np.float32(0.125), want, PATH_ONE_ROW, 1)
    got = np.empty_like(want)
    one_row_tiles(q, k, v, 300, kv_pos, q_pos, np.float32(0.125), got, 2)
    assert np.isnan(want).any() and np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


def _round_f16_exact(q) -> float:
    """A Fraction rounded to the nearest float16 (ties to even; subnormals from 2^-24, inf from 65520)."""
    from fractions import Fraction

    if q == 0:
        return 0.0
    sign, q = (-1.0 if q < 0 else 1.0), abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** e > q:
        e -= 1
    while Fraction(2) ** (e + 1) <= q:
        e += 1
    ulp = Fraction(2) ** (max(e, -14) - 10)
    n = q / ulp
    whole = n.numerator // n.denominator
    rest = n - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2):
        whole += 1
    v = whole * ulp
    return sign * (float("inf") if v > 65504 else float(v))


@pytest.mark.skipif(not __import__("kernels._vec", fromlist=["F16_ARITH"]).F16_ARITH,
                    reason="FP16 arithmetic is the path of a CPU with AVX512-FP16")
def test_fp16_arithmetic_rounds_once():
    """ggml_vec_mad_f16 / ggml_vec_scale_f16 as an AVX512-FP16 build computes them: fma(x, fp16(v), y) and
    y * fp16(v) with ONE rounding to FP16, 16 lanes and scalar, against the exact value rounded (Fractions): normal,
    subnormal and overflowing results, and ties."""
    from fractions import Fraction

    from numba import njit

    from kernels._vec import load16, mad_f16_arith16, scale_f16_arith16, store16
    from kernels.fp16 import fma_f16_arith, mul_f16_arith

    @njit
    def run(x, v, y, mad, scale, mad1, scale1):
        for i in range(0, x.shape[0], 16):
            store16(mad, i, mad_f16_arith16(load16(x, i), v[i], load16(y, i)))
            store16(scale, i, scale_f16_arith16(load16(y, i), v[i]))
        for i in range(x.shape[0]):
            mad1[i] = fma_f16_arith(x[i], v[i], y[i])
            scale1[i] = mul_f16_arith(y[i], v[i])

    rng = np.random.default_rng(11)
    n = 16 * 200
    f16 = lambda a: np.clip(np.asarray(a, np.float32), -65504, 65504).astype(np.float16).astype(np.float32)  # noqa: E731
    x = f16(rng.standard_normal(n) * np.repeat([1.0, 1e-5, 300.0, 1.0], n // 4))
    y = f16(rng.standard_normal(n) * np.repeat([4.0, 1e-6, 6e4, 1.0], n // 4))
    v = np.repeat(np.exp(-rng.random(n // 16) * 12).astype(np.float32), 16)  # one scalar per 16 lanes
    v[16:32] = 1.0
    x[-16:], y[-16:], v[-16:] = f16(1.0 + 2.0 ** -10), f16(2.0 ** -11), 1.0  # exact ties: 1 + 1.5 ulp -> even
    outs = [np.empty(n, np.float32) for _ in range(4)]
    run(x, v, y, *outs)
    for i in range(n):
        vh = Fraction(float(np.float16(v[i])))
        mad = _round_f16_exact(Fraction(float(x[i])) * vh + Fraction(float(y[i])))
        scale = _round_f16_exact(Fraction(float(y[i])) * vh)
        assert outs[0][i] == mad and outs[2][i] == mad, (i, x[i], v[i], y[i])
        assert outs[1][i] == scale and outs[3][i] == scale, (i, y[i], v[i])
