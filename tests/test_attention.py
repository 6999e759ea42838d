"""kernels/fp16.py and kernels/attention.py: F16/BF16 conversions against numpy and gguf-py, attention
against a slow numpy port of llama.cpp's non-flash-attention graph, batch/decode/thread behaviour, and
the tiny F32 fixture models end to end (eval-callback sums and greedy logits, bit for bit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import numba
import numpy as np
import pytest

from conftest import REPO, at_thread_counts, bits, needs_fixtures
from elementwise_reference import (
    TINY_F32,
    attention_ref,
    check_against_record,
    fma32,
    greedy_json,
    log_records,
    prompt_run,
    TinyF32Forward,
)
from kernels.attention import attention, kv_store, n_kv_padded
from kernels.fp16 import (
    bf16_to_fp32,
    f16_bits_to_f32,
    f16_bits_to_f32_hw,
    f32_to_f16_bits,
    f32_to_f16_bits_hw,
    fma_f32,
    fp16_to_fp32,
    fp32_to_bf16,
    fp32_to_fp16,
    round_bf16,
    round_fp16,
)

def _random_f32_bits(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


# --------------------------------------------------------------------------------------------------
# 16-bit floats


def test_fp32_to_fp16_matches_numpy():
    edges = np.array([65504, 65519.996, 65520, 65536, 1e9, 2**-24, 2**-25, 2**-25 * 1.000001, 2**-14,
                      2**-14 * (1 - 2**-11), 5.96e-8, 1e-8, -0.0, 0.0, np.inf, -np.inf, -65520], np.float32)
    rng = np.random.default_rng(1)
    x = np.concatenate([_random_f32_bits(1 << 20), edges, (rng.standard_normal(1 << 16) * 1e-5).astype(np.float32)])
    h = np.empty(x.shape, np.uint16)
    fp32_to_fp16(x, h)
    finite_or_inf = ~np.isnan(x)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    assert np.array_equal(h[finite_or_inf], want[finite_or_inf])
    nan_h = h[~finite_or_inf]
    assert np.all((nan_h & 0x7E00) == 0x7E00)  # NaN stays a (quiet) NaN


def test_fp16_to_fp32_exhaustive():
    h = np.arange(1 << 16, dtype=np.uint16)
    out = np.empty(h.shape, np.float32)
    fp16_to_fp32(h, out)
    want = h.view(np.float16).astype(np.float32)
    ok = ~np.isnan(want)
    assert np.array_equal(bits(out[ok]), bits(want[ok]))
    assert np.all(np.isnan(out[~ok]))


@numba.njit(cache=False)
def _both_conversions(x, h, hs, f, fs):
    for i in range(x.shape[0]):
        h[i] = f32_to_f16_bits_hw(x[i])
        hs[i] = f32_to_f16_bits(x[i])
    for i in range(65536):
        f[i] = f16_bits_to_f32_hw(np.uint16(i))
        fs[i] = f16_bits_to_f32(np.uint16(i))


def test_bitwise_f16_conversions_equal_hardware_path():
    """The written-out conversions (the spec) and the LLVM fpext/fptrunc ones (fast) agree everywhere,
    NaNs included (quieted, payload kept, as vcvtph2ps / vcvtps2ph)."""
    x = _random_f32_bits(1 << 20, seed=2)
    h, hs = np.empty(x.shape, np.uint16), np.empty(x.shape, np.uint16)
    f, fs = np.empty(65536, np.float32), np.empty(65536, np.float32)
    _both_conversions(x, h, hs, f, fs)
    assert np.array_equal(h, hs)
    assert np.array_equal(bits(f), bits(fs))


def test_bf16_matches_gguf_py():
    from gguf import GGMLQuantizationType, quants

    x = np.concatenate([_random_f32_bits(1 << 18, seed=3), np.array([np.nan, -np.nan, np.inf, 1e-40, 3.0], np.float32)])
    h = np.empty(x.shape, np.uint16)
    fp32_to_bf16(x, h)
    want = quants.quantize(x, GGMLQuantizationType.BF16).view(np.uint16)
    assert np.array_equal(h, want)
    back = np.empty(x.shape, np.float32)
    bf16_to_fp32(h, back)
    assert np.array_equal(bits(back), (h.astype(np.uint32) << 16))
    r = round_bf16(x[:1000])
    assert np.array_equal(bits(r), bits(back[:1000]))
    r16 = round_fp16(np.array([0.1, 70000.0, 1e-6], np.float32))
    with np.errstate(over="ignore"):
        assert np.array_equal(r16, np.array([0.1, 70000.0, 1e-6], np.float32).astype(np.float16).astype(np.float32))


@numba.njit(cache=False)
def _fma_map(a, b, c, out):
    for i in range(a.shape[0]):
        out[i] = fma_f32(a[i], b[i], c[i])


def test_fma_f32_is_single_rounding():
    rng = np.random.default_rng(4)
    a, b, c = (rng.standard_normal(1 << 16).astype(np.float32) for _ in range(3))
    out = np.empty_like(a)
    _fma_map(a, b, c, out)
    assert np.array_equal(bits(out), bits(fma32(a, b, c)))
    assert np.count_nonzero(out != (a * b + c)) > 0  # the unfused result differs somewhere


# --------------------------------------------------------------------------------------------------
# KV store


@pytest.mark.parametrize("f16", [True, False])
def test_kv_store_layout_and_rounding(f16):
    rng = np.random.default_rng(5)
    G, D, n_ctx = 2, 64, 300
    dt = np.uint16 if f16 else np.float32
    kc, vc = np.zeros((n_ctx, G, D), dt), np.zeros((G, D, n_ctx), dt)
    k = rng.standard_normal((3, G, D)).astype(np.float32)
    v = rng.standard_normal((3, G, D)).astype(np.float32)
    cells = np.array([7, 0, 299], np.int32)
    kv_store(kc, vc, k, v, cells)
    conv = (lambda a: a.astype(np.float16).view(np.uint16)) if f16 else (lambda a: a)
    for t, c in enumerate(cells):
        assert np.array_equal(kc[c], conv(k[t]))
        assert np.array_equal(vc[:, :, c], conv(v[t]))
    assert np.count_nonzero(kc) == np.count_nonzero(conv(k))
    with pytest.raises(ValueError):
        kv_store(kc, vc, k, v, np.array([0, 1, 300], np.int32))


# --------------------------------------------------------------------------------------------------
# attention against the numpy port


def _setup(f16, T, n_kv, G, H, D, n_ctx=512, seed=0, empty=(), garbage=True):
    """A cache whose cells 0..n_kv-1 hold positions 0..n_kv-1 (cells in `empty` are free: kv_pos -1)
    and queries for the last T positions. Cells past n_kv hold garbage (they must be masked)."""
    rng = np.random.default_rng(seed)
    dt = np.uint16 if f16 else np.float32
    kc, vc = np.zeros((n_ctx, G, D), dt), np.zeros((G, D, n_ctx), dt)
    n_fill = min(n_ctx, n_kv + 40) if garbage else n_kv
    k = rng.standard_normal((n_fill, G, D)).astype(np.float32)
    v = rng.standard_normal((n_fill, G, D)).astype(np.float32)
    kv_store(kc, vc, k, v, np.arange(n_fill, dtype=np.int32))
    kv_pos = np.arange(n_ctx, dtype=np.int32)
    kv_pos[n_kv:] = -1
    kv_pos[list(empty)] = -1
    q = (rng.standard_normal((T, H, D)) * 0.5).astype(np.float32)
    q_pos = np.arange(n_kv - T, n_kv, dtype=np.int32)
    return q, kc, vc, kv_pos, q_pos


def _cells(kc, vc, n_pad, f16):
    """Values of cache cells 0..n_pad-1 as float32 (n_pad, G, D), from the kernels' layout."""
    k = kc[:n_pad]
    v = np.transpose(vc[:, :, :n_pad], (2, 0, 1))
    if f16:
        k, v = k.view(np.float16), v.view(np.float16)
    return np.ascontiguousarray(k, np.float32), np.ascontiguousarray(v, np.float32)


def _run(q, kc, vc, n_kv, kv_pos, q_pos, scale, traces=True):
    T, H, D = q.shape
    n_pad = n_kv_padded(n_kv, kc.shape[0])
    out = np.empty((T, H * D), np.float32)
    if not traces:
        attention(q, kc, vc, n_kv, kv_pos, q_pos, scale, out)
        return out, None, None
    kq = np.empty((H, T, n_pad), np.float32)
    sm = np.empty((H, T, n_pad), np.float32)
    attention(q, kc, vc, n_kv, kv_pos, q_pos, scale, out, kq, sm)
    return out, kq, sm


ATT_CASES = [
    # f16, T, n_kv, G, H, D, empty cells
    (True, 1, 5, 2, 4, 64, ()),
    (True, 3, 70, 2, 4, 64, (3, 40)),
    (True, 17, 300, 2, 4, 64, (100,)),
    (False, 1, 300, 2, 4, 64, (0, 299)),
    (False, 5, 70, 2, 4, 64, ()),
    (True, 2, 40, 3, 9, 64, ()),
    (False, 4, 130, 1, 2, 128, ()),
    (True, 1, 130, 2, 14, 128, ()),
    (True, 2, 40, 2, 4, 80, ()),  # head_dim not a multiple of 64: ggml's leftovers
    (False, 1, 40, 2, 4, 80, ()),
    (True, 3, 90, 2, 4, 64, (), 100),  # n_ctx < 256: n_kv_pad = 100, leftovers over cells, no sgemm for kqv
    (False, 1, 90, 2, 4, 64, (), 100),
    # the vectorised single-token path: 3 query heads per KV head (SmolLM2), 6 (Qwen 1.5B), F32 cache
    (True, 1, 1000, 3, 9, 64, (5, 999), 2048),
    (True, 1, 64, 2, 12, 128, ()),
    (False, 1, 200, 3, 9, 64, (7,)),
]


@pytest.mark.parametrize("case", ATT_CASES, ids=lambda c: f"{'f16' if c[0] else 'f32'}-T{c[1]}-kv{c[2]}-G{c[3]}-H{c[4]}-D{c[5]}" + (f"-ctx{c[7]}" if len(c) > 7 else ""))
def test_attention_bit_exact_vs_port(case):
    f16, T, n_kv, G, H, D, empty = case[:7]
    n_ctx = case[7] if len(case) > 7 else 512
    q, kc, vc, kv_pos, q_pos = _setup(f16, T, n_kv, G, H, D, n_ctx=n_ctx, empty=empty)
    scale = float(np.float32(1.0) / np.float32(np.sqrt(np.float32(D))))
    out, kq, sm = _run(q, kc, vc, n_kv, kv_pos, q_pos, scale)
    n_pad = n_kv_padded(n_kv, kc.shape[0])
    kcells, vcells = _cells(kc, vc, n_pad, f16)
    r_out, r_kq, r_sm = attention_ref(q, kcells, vcells, n_kv, kv_pos, q_pos, scale, n_pad, f16)
    assert np.array_equal(bits(kq), bits(r_kq))
    assert np.array_equal(bits(sm), bits(r_sm))
    assert np.array_equal(bits(out), bits(r_out))
    # without the traces only the cells up to roundup(n_kv, 64) are computed: same result
    out2, _, _ = _run(q, kc, vc, n_kv, kv_pos, q_pos, scale, traces=False)
    assert np.array_equal(bits(out2), bits(out))


@pytest.mark.parametrize("f16", [True, False])
def test_batch_split_and_decode_paths(f16):
    """llama.cpp computes a multi-token batch with llamafile tinyBLAS and a single token with
    ggml_vec_dot (different summation orders), so prefill and token-by-token are not bit-identical:
    * any split of a batch into parts of >= 2 tokens gives bit-identical rows (per-output lanes);
    * each single-token decode equals the port's vec_dot path;
    * the two paths differ by at most a few ulps (F32 cache: kq is vec_dot in both, so kq is equal)."""
    T, n_kv, G, H, D = 8, 200, 2, 4, 64
    q, kc, vc, kv_pos, q_pos = _setup(f16, T, n_kv, G, H, D, garbage=False)
    scale = 0.125
    full, kq_full, _ = _run(q, kc, vc, n_kv, kv_pos, q_pos, scale)
    parts = [_run(q[a:b], kc, vc, n_kv, kv_pos, q_pos[a:b], scale)[0] for a, b in ((0, 3), (3, 5), (5, 8))]
    assert np.array_equal(bits(np.concatenate(parts)), bits(full))
    n_pad = n_kv_padded(n_kv, kc.shape[0])
    kcells, vcells = _cells(kc, vc, n_pad, f16)
    for t in range(T):
        one, kq_one, _ = _run(q[t:t + 1], kc, vc, n_kv, kv_pos, q_pos[t:t + 1], scale)
        r_out, _, _ = attention_ref(q[t:t + 1], kcells, vcells, n_kv, kv_pos, q_pos[t:t + 1], scale, n_pad, f16)
        assert np.array_equal(bits(one), bits(r_out))
        assert np.max(np.abs(one[0] - full[t])) <= 1e-6 * max(1.0, float(np.max(np.abs(full[t]))))
        if not f16:
            assert np.array_equal(bits(kq_one[:, 0]), bits(kq_full[:, t]))


@pytest.mark.parametrize("f16,G,H", [(True, 3, 9), (True, 2, 4), (False, 3, 9)])
def test_batch_invariant_mode_matches_single_token_port(f16, G, H):
    """batch_paths=False: every token of a batch (any split, several threads) has the single-token
    (ggml_vec_dot) result of the port, bit for bit."""
    T, n_kv, D = 6, 150, 64
    q, kc, vc, kv_pos, q_pos = _setup(f16, T, n_kv, G, H, D, empty=(9,))
    n_pad = n_kv_padded(n_kv, kc.shape[0])
    kcells, vcells = _cells(kc, vc, n_pad, f16)
    out = np.empty((T, H * D), np.float32)
    at_thread_counts(lambda: attention(q, kc, vc, n_kv, kv_pos, q_pos, 0.125, out, None, None, False), (2,))
    for t in range(T):
        r_out, _, _ = attention_ref(q[t:t + 1], kcells, vcells, n_kv, kv_pos, q_pos[t:t + 1], 0.125, n_pad, f16)
        assert np.array_equal(bits(out[t:t + 1]), bits(r_out)), t


def test_attention_thread_invariant():
    """1 and 2 threads in process, 3 threads in a subprocess (NUMBA_NUM_THREADS is fixed per process)."""
    q, kc, vc, kv_pos, q_pos = _setup(True, 40, 300, 2, 4, 64, garbage=False)
    outs = at_thread_counts(lambda: _run(q, kc, vc, 300, kv_pos, q_pos, 0.125, traces=False)[0])
    assert np.array_equal(bits(outs[0]), bits(outs[1]))


def test_long_decode_split_over_kv_heads():
    """A single token over enough cells is split over KV heads (prange): same bits as the port and as
    one thread."""
    n_kv, n_ctx, G, H, D = 2400, 2560, 2, 14, 128
    q, kc, vc, kv_pos, q_pos = _setup(True, 1, n_kv, G, H, D, n_ctx=n_ctx, garbage=False)
    outs = at_thread_counts(lambda: _run(q, kc, vc, n_kv, kv_pos, q_pos, 0.088, traces=False)[0])
    assert np.array_equal(bits(outs[0]), bits(outs[1]))
    n_pad = n_kv_padded(n_kv, n_ctx)
    kcells, vcells = _cells(kc, vc, n_pad, True)
    r_out, _, _ = attention_ref(q, kcells, vcells, n_kv, kv_pos, q_pos, 0.088, n_pad, True)
    assert np.array_equal(bits(outs[0]), bits(r_out))


def test_attention_three_threads_subprocess(tmp_path):
    q, kc, vc, kv_pos, q_pos = _setup(True, 40, 300, 2, 4, 64, garbage=False)
    np.savez(tmp_path / "in.npz", q=q, kc=kc, vc=vc, kv_pos=kv_pos, q_pos=q_pos)
    code = (
        "import sys, numpy as np; sys.path.insert(0, %r)\n"
        "from kernels.attention import attention\n"
        "import numba; assert numba.get_num_threads() == 3\n"
        "d = np.load(%r); q = d['q']\n"
        "out = np.empty((q.shape[0], q.shape[1] * q.shape[2]), np.float32)\n"
        "attention(q, d['kc'], d['vc'], 300, d['kv_pos'], d['q_pos'], 0.125, out)\n"
        "np.save(%r, out)\n" % (str(REPO), str(tmp_path / "in.npz"), str(tmp_path / "out.npy"))
    )
    env = dict(os.environ, NUMBA_NUM_THREADS="3")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=REPO, timeout=600)
    three = np.load(tmp_path / "out.npy")
    one = _run(q, kc, vc, 300, kv_pos, q_pos, 0.125, traces=False)[0]
    assert np.array_equal(bits(three), bits(one))


def test_attention_rejects_bad_input():
    q, kc, vc, kv_pos, q_pos = _setup(False, 2, 10, 2, 4, 64)
    out = np.empty((2, 256), np.float32)
    with pytest.raises(ValueError):
        attention(q, kc, vc, 0, kv_pos, q_pos, 0.125, out)
    with pytest.raises(ValueError):
        attention(q, kc, vc, 10, kv_pos, q_pos, 0.125, np.empty((2, 128), np.float32))
    with pytest.raises(ValueError):
        attention(q, kc, np.zeros((1, 64, 512), np.float32), 10, kv_pos, q_pos, 0.125, out)
    with pytest.raises(ValueError):
        attention(q, kc, vc, 10, kv_pos, q_pos, 0.125, out, np.empty((4, 2, 100), np.float32))
    with pytest.raises(ValueError):
        attention(q, kc, vc, 1000, kv_pos, q_pos, 0.125, out)


# --------------------------------------------------------------------------------------------------
# the tiny F32 fixture models end to end: the numpy reference (TinyF32Forward) against llama.cpp's logs and
# logits, and synapse's attention kernel against the reference on the same (llama.cpp-identical) inputs

CONFIGS = [(a, kv) for a in ("llama", "qwen2", "mistral3") for kv in ("kvf32", "kvf16")]


def _log_record(recs, name, k, n_values):
    rs = recs[name]
    if name.startswith(("Qcur-", "Kcur-")):  # before and after RoPE
        return next(r for r in rs if r.op == ("RESHAPE" if k == 0 else "ROPE"))
    if name.startswith("norm-"):
        return rs[0]  # the attention norm (the FFN norm is logged under the same name)
    return [r for r in rs if r.n_elements == n_values][-1]


@needs_fixtures
@pytest.mark.parametrize("arch,kv", CONFIGS)
def test_prompt_batch_matches_evalcb_and_logits(arch, kv):
    """Every node we trace has llama.cpp's logged float32 sum (printed identically) and printed values
    (within 5e-5), and the last token's top-5 logits are bit-identical to the greedy fixture."""
    m, logits, g = prompt_run(arch, kv)
    recs = log_records(arch, kv)
    checked = 0
    for name, values in m.trace.items():
        if name not in recs:
            continue  # e.g. qwen2 logs no attn_out
        for k, v in enumerate(values):
            rec = _log_record(recs, name, k, v.size)
            same_sum, diff = check_against_record(v, rec)
            assert same_sum and diff <= 5e-5, (name, rec.op)
            checked += 1
    assert checked >= 30
    for tok, logit in g["top5"][0]:
        assert np.float32(logits[tok]) == np.float32(logit), tok


@needs_fixtures
@pytest.mark.parametrize("arch,kv", CONFIGS)
def test_attention_kernel_on_fixture_inputs(arch, kv):
    """synapse's attention kernel, given the reference's Q and KV cells of the prompt batch (which match
    llama.cpp's logs, see above), gives the reference's kq, kq_soft_max and kqv_out bit for bit."""
    m, _, _ = prompt_run(arch, kv)
    n_kv = m.n_used
    T = m.trace["embd"][0].shape[0]
    q_pos = np.arange(n_kv - T, n_kv, dtype=np.int32)
    G, D = m.n_head_kv, m.hd
    dt = np.uint16 if m.kv_f16 else np.float32
    n_pad = n_kv_padded(n_kv, m.n_ctx)
    scale = float(np.float32(1.0) / np.float32(np.sqrt(np.float32(D))))
    for il in range(m.n_layer):
        kc, vc = np.zeros((m.n_ctx, G, D), dt), np.zeros((G, D, m.n_ctx), dt)
        cells = np.arange(n_kv, dtype=np.int32)
        kv_store(kc, vc, m.k_cells[il][:n_kv], m.v_cells[il][:n_kv], cells)  # already F16-rounded: exact
        q = m.trace.get(f"Qcur_attn_temp_scaled-{il}", m.trace[f"Qcur-{il}"])[-1]
        out, kq, sm = _run(q, kc, vc, n_kv, m.kv_pos, q_pos, scale)
        assert kq.shape[2] == n_pad
        assert np.array_equal(bits(kq), bits(m.trace[f"kq-{il}"][0])), il
        assert np.array_equal(bits(sm), bits(m.trace[f"kq_soft_max-{il}"][0])), il
        assert np.array_equal(bits(out), bits(m.trace[f"kqv_out-{il}"][0])), il


@needs_fixtures
@pytest.mark.parametrize("arch,kv", CONFIGS)
def test_decode_steps_match_greedy_logits(arch, kv):
    """Then token by token (the single-token vec_dot paths): top-5 logits bit-identical for 6 steps."""
    g = json.loads(greedy_json(arch, kv).read_text())
    m = TinyF32Forward(TINY_F32[arch], kv_f16=(kv == "kvf16"))
    logits = m.decode(g["prompt_ids"])
    for step in range(6):
        if step:
            logits = m.decode([g["generated_ids"][step - 1]])
        for tok, logit in g["top5"][step]:
            assert np.float32(logits[tok]) == np.float32(logit), (step, tok)
