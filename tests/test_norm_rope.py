"""kernels/norm.py and kernels/rope.py against slow references (tests/elementwise_reference.py) and
llama.cpp's eval-callback logs of the tiny F32 models (Qcur/Kcur before and after ROPE)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import at_thread_counts, bits, needs_fixtures
from elementwise_reference import (
    check_against_record,
    corr_dims_ref,
    log_records,
    prompt_run,
    rms_norm_ref,
    rope_ref_f32,
    rope_ref_f64,
)
from kernels.norm import add, add_rms_norm_mul, mul_rows, rms_norm, rms_norm_mul
from kernels.rope import rope, rope_cache, rope_ext, rope_qk, rope_qk_cached, rope_yarn_corr_dims


# --------------------------------------------------------------------------------------------------
# norm


@pytest.mark.parametrize("n", [256, 576, 896, 1536])
@pytest.mark.parametrize("eps", [1e-5, 1e-6])
def test_rms_norm_bit_exact_vs_double_sum_port(n, eps):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((5, n)) * rng.choice([1e-3, 1.0, 40.0], (5, 1))).astype(np.float32)
    out = np.empty_like(x)
    rms_norm(x, eps, out)
    assert np.array_equal(bits(out), bits(rms_norm_ref(x, eps)))


def test_rms_norm_mul_is_rms_norm_then_mul():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 896)).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(896)).astype(np.float32)
    fused = np.empty_like(x)
    rms_norm_mul(x, 1e-6, w, fused)
    norm = np.empty_like(x)
    rms_norm(x, 1e-6, norm)
    two_step = np.empty_like(x)
    mul_rows(norm, w, two_step)
    assert np.array_equal(bits(fused), bits(two_step))
    assert np.array_equal(bits(fused), bits(rms_norm_ref(x, 1e-6) * w))
    rms_norm_mul(x, 1e-6, w, x)  # in place
    assert np.array_equal(bits(x), bits(fused))


@pytest.mark.parametrize("T", [1, 3, 80])  # 80 x 896: the parallel norm after a separate add
def test_add_rms_norm_mul_is_add_then_rms_norm_mul(T):
    """The residual add and the next block's norm in one call: the bits of add then rms_norm_mul."""
    rng = np.random.default_rng(T)
    a = rng.standard_normal((T, 896)).astype(np.float32)
    b = (rng.standard_normal((T, 896)) * 30).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(896)).astype(np.float32)
    s, out = np.empty_like(a), np.empty_like(a)
    add_rms_norm_mul(a, b, s, 1e-6, w, out)
    want_s, want = np.empty_like(a), np.empty_like(a)
    add(a, b, want_s)
    rms_norm_mul(want_s, 1e-6, w, want)
    assert np.array_equal(bits(s), bits(a + b)) and np.array_equal(bits(out), bits(want))
    assert np.array_equal(bits(out), bits(rms_norm_ref(a + b, 1e-6) * w))
    with pytest.raises(ValueError):
        add_rms_norm_mul(a, b[:, :100].copy(), s, 1e-6, w, out)


def test_add_and_mul_rows_broadcast():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 128)).astype(np.float32)
    full = rng.standard_normal((6, 128)).astype(np.float32)
    row = rng.standard_normal(128).astype(np.float32)
    for b in (full, row, row[None, :]):
        out = np.empty_like(a)
        add(a, b, out)
        assert np.array_equal(bits(out), bits(a + b))
    out = np.empty_like(a)
    mul_rows(a, row, out)
    assert np.array_equal(bits(out), bits(a * row))
    c = a.copy()
    add(c, full, c)  # residual in place
    assert np.array_equal(bits(c), bits(a + full))
    with pytest.raises(ValueError):
        add(a, rng.standard_normal((3, 128)).astype(np.float32), out)
    with pytest.raises(ValueError):
        mul_rows(a, row[:100], out)


def test_norm_threads_invariant():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 896)).astype(np.float32)  # large enough for the prange path
    w = rng.standard_normal(896).astype(np.float32)

    def run():
        o = np.empty_like(x)
        rms_norm_mul(x, 1e-5, w, o)
        return o

    outs = at_thread_counts(run)
    assert np.array_equal(bits(outs[0]), bits(outs[1]))
    assert np.array_equal(bits(outs[0]), bits(rms_norm_ref(x, 1e-5) * w))


# --------------------------------------------------------------------------------------------------
# rope

LLAMA3_FF = np.array([1.0] * 15 + [1.6513292, 3.2922626, 9.66673] + [32.0] * 14, np.float32)
YARN_AF = 1.1217511 / (1 + 0.1 * np.log(16))

# name: (neox, freq_base, freq_scale, ext_factor, attn_factor, n_ctx_orig, beta_fast, beta_slow, ff, n_dims, D)
ROPE_CASES = {
    "llama3-freq-factors": (False, 500000.0, 1.0, 0.0, 1.0, 4096, 32.0, 1.0, LLAMA3_FF, 64, 64),
    "neox": (True, 1e6, 1.0, 0.0, 1.0, 32768, 32.0, 1.0, None, 64, 64),
    "neox-128": (True, 1e6, 1.0, 0.0, 1.0, 32768, 32.0, 1.0, None, 128, 128),
    "yarn": (False, 1e6, 1 / 16, 1.0, YARN_AF, 4, 0.25, 0.01, None, 64, 64),
    "yarn-neox": (True, 10000.0, 0.25, 1.0, 0.9, 2048, 32.0, 1.0, None, 64, 64),
    "linear-scaling": (False, 10000.0, 0.5, 0.0, 1.0, 4096, 32.0, 1.0, None, 64, 64),
    "partial-n_dims": (True, 10000.0, 1.0, 0.0, 1.0, 4096, 32.0, 1.0, None, 32, 64),
}


def _rope_inputs(D, T=9, H=3, seed=0, pos_scale=37):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, H, D)).astype(np.float32)
    pos = (np.arange(T) * pos_scale).astype(np.int32)
    return x, pos


@pytest.mark.parametrize("case", sorted(ROPE_CASES))
def test_rope_bit_exact_vs_float32_port(case):
    neox, fb, fs, ef, af, nco, bf, bs, ff, nd, D = ROPE_CASES[case]
    x, pos = _rope_inputs(D)
    cd = rope_yarn_corr_dims(nd, nco, fb, bf, bs)
    out = np.empty_like(x)
    rope(x, pos, out, nd, neox, fb, fs, ef, af, cd, ff)
    ref = rope_ref_f32(x, pos, nd, neox, fb, fs, ef, af, cd, ff, contract=True)
    assert np.array_equal(bits(out), bits(ref))
    # the unfused arithmetic is a different (also exactly reproduced) result
    plain = np.empty_like(x)
    rope_ext(x, pos, plain, nd, neox, fb, fs, ef, af, cd, ff, False)
    assert np.array_equal(bits(plain), bits(rope_ref_f32(x, pos, nd, neox, fb, fs, ef, af, cd, ff, contract=False)))
    if nd < D:  # dims past n_dims are copied through
        assert np.array_equal(bits(out[..., nd:]), bits(x[..., nd:]))


@pytest.mark.parametrize("case", sorted(ROPE_CASES))
def test_rope_close_to_float64_formula(case):
    neox, fb, fs, ef, af, nco, bf, bs, ff, nd, D = ROPE_CASES[case]
    x, pos = _rope_inputs(D, pos_scale=11)
    cd = rope_yarn_corr_dims(nd, nco, fb, bf, bs)
    out = np.empty_like(x)
    rope(x, pos, out, nd, neox, fb, fs, ef, af, cd, ff)
    ref = rope_ref_f64(x, pos, nd, neox, fb, fs, ef, af, cd, ff)
    # float32 theta (cumulative products) and cosf/sinf: ~1e-7 relative per step, positions < 100
    assert np.max(np.abs(out - ref)) < 2e-5


def test_corr_dims():
    assert rope_yarn_corr_dims(64, 4, 1e6, 0.25, 0.01) == (2.0, 10.0)  # fixtures README, tiny-mistral3
    assert corr_dims_ref(64, 4, 1e6, 0.25, 0.01) == (2.0, 10.0)
    for args in [(64, 4096, 10000.0, 32.0, 1.0), (128, 32768, 1e6, 32.0, 1.0), (64, 8192, 500000.0, 32.0, 1.0),
                 (64, 1, 10000.0, 32.0, 1.0)]:
        assert rope_yarn_corr_dims(*args) == corr_dims_ref(*args)


def test_rope_qk_and_in_place():
    neox, fb, fs, ef, af, nco, bf, bs, ff, nd, D = ROPE_CASES["yarn"]
    cd = rope_yarn_corr_dims(nd, nco, fb, bf, bs)
    q, pos = _rope_inputs(D, H=4, seed=1)
    k, _ = _rope_inputs(D, H=2, seed=2)
    qo, ko = np.empty_like(q), np.empty_like(k)
    rope_qk(q, k, pos, qo, ko, nd, neox, fb, fs, ef, af, cd, ff)
    for x, o in ((q, qo), (k, ko)):
        ref = np.empty_like(x)
        rope(x, pos, ref, nd, neox, fb, fs, ef, af, cd, ff)
        assert np.array_equal(bits(o), bits(ref))
        rope(x, pos, x, nd, neox, fb, fs, ef, af, cd, ff)  # out may be x
        assert np.array_equal(bits(x), bits(ref))


@pytest.mark.parametrize("case", ["yarn", "neox", "llama3-freq-factors", "partial-n_dims"])
def test_rope_cached_equals_rope_qk(case):
    """The cos/sin cache computed once (rope_cache) and reused per layer gives rope_qk's bits."""
    neox, fb, fs, ef, af, nco, bf, bs, ff, nd, D = ROPE_CASES[case]
    cd = rope_yarn_corr_dims(nd, nco, fb, bf, bs)
    q, pos = _rope_inputs(D, T=5, H=6, seed=3)
    k, _ = _rope_inputs(D, T=5, H=2, seed=4)
    want_q, want_k = np.empty_like(q), np.empty_like(k)
    rope_qk(q, k, pos, want_q, want_k, nd, neox, fb, fs, ef, af, cd, ff)
    cache = np.empty((5, nd), np.float32)
    rope_cache(pos, nd, fb, fs, ef, af, cd, ff, cache)
    for _layer in range(2):
        qo, ko = np.empty_like(q), np.empty_like(k)
        rope_qk_cached(q, k, cache, qo, ko, nd, neox)
        assert np.array_equal(bits(qo), bits(want_q))
        assert np.array_equal(bits(ko), bits(want_k))
    with pytest.raises(ValueError):
        rope_qk_cached(q, k, cache[:4], qo, ko, nd, neox)


def test_rope_threads_invariant():
    neox, fb, fs, ef, af, nco, bf, bs, ff, nd, D = ROPE_CASES["neox"]
    x, pos = _rope_inputs(D, T=400, H=14, pos_scale=1)
    cd = rope_yarn_corr_dims(nd, nco, fb, bf, bs)

    def run():
        o = np.empty_like(x)
        rope(x, pos, o, nd, neox, fb, fs, ef, af, cd, ff)
        return o

    outs = at_thread_counts(run)
    assert np.array_equal(bits(outs[0]), bits(outs[1]))


def test_rope_rejects_bad_shapes():
    x, pos = _rope_inputs(64)
    with pytest.raises(ValueError):
        rope(x, pos, np.empty((9, 3, 32), np.float32), 64, False, 1e4, 1.0, 0.0, 1.0, (0.0, 0.0), None)
    with pytest.raises(ValueError):
        rope(x, pos[:3], np.empty_like(x), 64, False, 1e4, 1.0, 0.0, 1.0, (0.0, 0.0), None)
    with pytest.raises(ValueError):
        rope(x, pos, np.empty_like(x), 63, False, 1e4, 1.0, 0.0, 1.0, (0.0, 0.0), None)


# --------------------------------------------------------------------------------------------------
# against llama.cpp: Qcur-0 / Kcur-0 of the tiny F32 models (llama3 freq factors, NEOX, YaRN)


@needs_fixtures
@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral3"])
def test_rope_matches_evalcb_log(arch):
    """The reference pipeline's Q and K before RoPE reproduce the logged inputs (reshape), so running the
    rope kernel on them tests it against llama.cpp: every printed value of its output within 5e-5
    (4 decimals), the float32 sum of all values printed identically (a bit-level check of the whole
    tensor), and the reference's RoPE output equal bit for bit."""
    m, _, _ = prompt_run(arch, "kvf32")
    recs = log_records(arch, "kvf32")
    pos = np.arange(m.trace["embd"][0].shape[0], dtype=np.int32)
    for il in range(m.n_layer):
        for name in (f"Qcur-{il}", f"Kcur-{il}"):
            x_in, x_ref = m.trace[name]
            rec_in = next(r for r in recs[name] if r.op == "RESHAPE")
            rec_out = next(r for r in recs[name] if r.op == "ROPE")
            out = np.empty_like(x_in)
            rope(x_in, pos, out, *m.rope_args)
            assert np.array_equal(bits(out), bits(x_ref)), (arch, name)
            for value, rec in ((x_in, rec_in), (out, rec_out)):
                same_sum, diff = check_against_record(value, rec)
                assert diff <= 5e-5, (arch, name, rec.op)
                assert same_sum, (arch, name, rec.op)
