"""kernels/activations.py: ggml_v_expf / SiLU / SwiGLU / soft-max against numpy ports with glibc expf
and an exact float64-built FMA, and the expf decision against llama.cpp's eval-callback logs."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from conftest import at_thread_counts, bits, needs_fixtures
from elementwise_reference import (
    libm,
    log_records,
    prompt_run,
    soft_max_ext_ref,
    swiglu_ref,
    v_expf_ref,
)
from kernels.activations import (
    libm_expf,
    soft_max_ext,
    soft_max_ext_libm,
    swiglu,
    swiglu_libm,
    v_expf,
)
from synapse_cli.evalcb import ggml_sum


@numba.njit(cache=False)
def _map_expf(x, out, vec):
    for i in range(x.shape[0]):
        out[i] = v_expf(x[i]) if vec else libm_expf(x[i])


def _exp_inputs():
    rng = np.random.default_rng(0)
    parts = [
        rng.standard_normal(20000) * 3,
        rng.uniform(-110, 90, 20000),  # subnormal results below -87.3, overflow above 88.7
        rng.uniform(-300, 300, 2000),  # |n| > 192: flushed to 0 / inf
        [0.0, -0.0, 88.72, 88.73, -87.33, -103.9, -104.0, 1e-30, -1e-30, np.inf, -np.inf],
    ]
    return np.concatenate([np.asarray(p, np.float64) for p in parts]).astype(np.float32)


def test_v_expf_bit_exact_vs_port():
    x = _exp_inputs()
    out = np.empty_like(x)
    _map_expf(x, out, True)
    assert np.array_equal(bits(out), bits(v_expf_ref(x)))
    nan = np.empty(1, np.float32)
    _map_expf(np.array([np.nan], np.float32), nan, True)
    assert np.isnan(nan[0])


def test_libm_expf_is_glibc_and_differs_from_v_expf():
    x = _exp_inputs()[:5000]
    out = np.empty_like(x)
    _map_expf(x, out, False)
    assert np.array_equal(bits(out), bits(libm("expf", x)))
    vec = np.empty_like(x)
    _map_expf(x, vec, True)
    assert np.count_nonzero(vec != out) > 1000  # not the same function: the choice matters


@pytest.mark.parametrize("n", [768, 4864, 77, 5])
def test_swiglu_bit_exact(n):
    rng = np.random.default_rng(n)
    g = (rng.standard_normal((4, n)) * 4).astype(np.float32)
    u = rng.standard_normal((4, n)).astype(np.float32)
    out = np.empty_like(g)
    swiglu(g, u, out)
    assert np.array_equal(bits(out), bits(swiglu_ref(g, u, vec=True)))
    swiglu_libm(g, u, out)
    assert np.array_equal(bits(out), bits(swiglu_ref(g, u, vec=False)))


@pytest.mark.parametrize("n", [256, 512, 77, 15])
def test_soft_max_ext_bit_exact(n):
    rng = np.random.default_rng(n)
    H, R = 3, 6
    x = (rng.standard_normal((H, R, n)) * 3).astype(np.float32)
    mask = np.where(rng.random((R + 2, n)) < 0.4, -np.inf, 0.0).astype(np.float32)
    mask[:, 0] = 0.0  # no fully masked row
    out = np.empty_like(x)
    soft_max_ext(x, mask, 0.125, out)
    assert np.array_equal(bits(out), bits(soft_max_ext_ref(x, mask, 0.125, vec=True)))
    soft_max_ext_libm(x, mask, 0.125, out)
    assert np.array_equal(bits(out), bits(soft_max_ext_ref(x, mask, 0.125, vec=False)))
    soft_max_ext(x, None, 1.0, out)
    assert np.array_equal(bits(out), bits(soft_max_ext_ref(x, None, 1.0, vec=True)))


def test_activations_threads_invariant():
    rng = np.random.default_rng(5)
    g = rng.standard_normal((40, 4864)).astype(np.float32)
    x = rng.standard_normal((14, 64, 512)).astype(np.float32)

    def run():
        o1 = np.empty_like(g)
        swiglu(g, g, o1)
        o2 = np.empty_like(x)
        soft_max_ext(x, None, 0.125, o2)
        return o1, o2

    res = at_thread_counts(run)
    assert np.array_equal(bits(res[0][0]), bits(res[1][0]))
    assert np.array_equal(bits(res[0][1]), bits(res[1][1]))


def test_bad_shapes():
    a = np.zeros((2, 16), np.float32)
    with pytest.raises(ValueError):
        swiglu(a, np.zeros((2, 8), np.float32), a)
    with pytest.raises(ValueError):
        soft_max_ext(np.zeros((1, 2, 16), np.float32), np.zeros((1, 16), np.float32), 1.0,
                     np.zeros((1, 2, 16), np.float32))


# --------------------------------------------------------------------------------------------------
# the expf decision, measured on the fixtures


@needs_fixtures
def test_expf_choice_matches_llama_cpp_logs():
    """Inputs: kq-<il> and ffn_gate-/ffn_up-<il> of our F32 pipeline (bit-identical to llama.cpp's: their
    logged sums match, see test_attention.py), for 3 models x 2 cache types x 2 layers. The AVX512
    ggml_v_expf path reproduces every logged kq_soft_max / ffn_swiglu sum; the generic libm path does
    not (it misses some), so ggml_v_expf is what the fixtures' build ran."""
    vec_ok, libm_ok, total = 0, 0, 0
    for arch in ("llama", "qwen2", "mistral3"):
        for kv in ("kvf32", "kvf16"):
            m, _, _ = prompt_run(arch, kv)
            recs = log_records(arch, kv)
            T = len(m.trace["embd"][0])
            mask = np.full((T, 256), -np.inf, np.float32)
            for t in range(T):
                mask[t, : t + 1] = 0.0
            for il in range(m.n_layer):
                kq = m.trace[f"kq-{il}"][0]
                gate, up = m.trace[f"ffn_gate-{il}"][0], m.trace[f"ffn_up-{il}"][0]
                want_sm = f"{recs[f'kq_soft_max-{il}'][-1].sum:.6f}"
                want_sw = f"{recs[f'ffn_swiglu-{il}'][-1].sum:.6f}"
                for fn_sm, fn_sw, is_vec in ((soft_max_ext, swiglu, True), (soft_max_ext_libm, swiglu_libm, False)):
                    sm = np.empty_like(kq)
                    fn_sm(kq, mask, 0.125, sm)
                    sw = np.empty_like(gate)
                    fn_sw(gate, up, sw)
                    ok = (f"{ggml_sum(sm):.6f}" == want_sm) + (f"{ggml_sum(sw):.6f}" == want_sw)
                    if is_vec:
                        vec_ok += ok
                    else:
                        libm_ok += ok
                total += 2
    assert vec_ok == total
    assert libm_ok < total
