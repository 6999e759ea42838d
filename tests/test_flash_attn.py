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
