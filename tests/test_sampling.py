"""synapse's sampler port against llama.cpp's: the random engine, libstdc++'s sorts, every sampler.

The reference tests/reference/sampling/samplers.jsonl was printed by llama.cpp 0c1e570's own samplers
(libllama's public API) on synthetic logits with many exact ties (see the README there); the test builds
the same chains from `synapse_cli.sampling.samplers` and feeds them the same logits.
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from conftest import REPO, VOCABS
from synapse_cli.sampling import samplers as S
from synapse_cli.sampling.rng import MT19937, canonical_double, canonical_float, discrete_distribution
from synapse_cli.sampling.stdsort import std_partial_sort, std_sort
from synapse_cli.sampling.token_data import TokenDataArray

REF = REPO / "tests" / "reference" / "sampling" / "samplers.jsonl"


def test_mt19937_is_the_standard_engine():
    # [rand.predef]: the 10000th invocation of a default-constructed mt19937 produces 4123659995
    g = MT19937()
    for _ in range(9999):
        g()
    assert g() == 4123659995
    # and Python's own Mersenne Twister, seeded by init_genrand, is the same engine
    py = random.Random()
    py.setstate((3, tuple(MT19937(42).mt) + (624,), None))
    g = MT19937(42)
    assert [g() for _ in range(1000)] == [py.getrandbits(32) for _ in range(1000)]


def test_canonical_draws_are_libstdcxx_generate_canonical():
    g, h = MT19937(7), MT19937(7)
    for _ in range(200):
        u0, u1 = h(), h()
        assert canonical_double(g) == min((u0 + u1 * 2.0**32) / 2.0**64, math.nextafter(1.0, 0.0))
    g, h = MT19937(9), MT19937(9)
    for _ in range(200):
        r = np.float32(h()) / np.float32(2.0**32)
        assert canonical_float(g) == (r if r < 1 else np.nextafter(np.float32(1), np.float32(0)))
    # discrete_distribution: fewer than two weights draw nothing
    g = MT19937(1)
    assert discrete_distribution(np.array([0.5], np.float32), g) == 0 and g() == MT19937(1)()


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 100, 1000, 5000])
def test_std_sort_and_partial_sort_order_ties_deterministically_and_correctly(n):
    rng = np.random.default_rng(n)
    key = rng.integers(0, 7, n).astype(np.float32)  # few values: many ties
    perm = np.arange(n, dtype=np.int64)
    std_sort(perm, 0, n, key, True)
    assert sorted(perm.tolist()) == list(range(n)) and np.all(np.diff(key[perm]) <= 0)
    k = max(1, n // 3)
    perm = np.arange(n, dtype=np.int64)
    std_partial_sort(perm, 0, k, n, key, False)
    assert np.all(np.diff(key[perm[:k]]) >= 0) and key[perm[:k]].max() <= np.sort(key)[k - 1]


def _reference_cases():
    """Both files' cases, each with its logits' kind ("continuous" for samplers-continuous.jsonl)."""
    cases = [{**json.loads(line), "continuous": ref.name.endswith("-continuous.jsonl")}
             for ref in (REF, REF.with_name("samplers-continuous.jsonl")) for line in ref.read_text().splitlines()]
    return [c for c in cases if c["case"] != "temp_ext_rows"]


def test_dynamic_temperature_scales_with_llama_cpps_bits():
    """temp-ext alone on 100 rows of 1000 continuous logits: the first candidate's scaled logit has llama.cpp's
    bits in every row. Its entropy sum `entropy -= p * logf(p)` is two roundings per term in libllama (compiled
    without FMA); a fused multiply-add gives other bits in about one row of five."""
    ref = next(json.loads(line) for line in REF.with_name("samplers-continuous.jsonl").read_text().splitlines()
               if line.startswith('{"case": "temp_ext_rows"'))
    bitgen = np.random.MT19937()
    bitgen.state = {"bit_generator": "MT19937", "state": {"key": np.array(MT19937(43).mt, np.uint32), "pos": 624}}
    got = []
    for _ in range(100):
        u = bitgen.random_raw(1000)
        logits = ((u >> 8).astype(np.float32) * np.float32(1.0 / 2097152.0) - np.float32(4.0)).astype(np.float32)
        cur = TokenDataArray.from_logits(logits)
        S.TempExt(0.9, 0.5, 1.3).apply(cur)
        got.append(f"{np.float32(cur.logit[0]).view(np.uint32):08x}")
    assert got == ref["bits"]


def _chains(n_vocab, vocab_pieces, tokenize):
    seed = 1234
    return {
        "default": [S.TopK(40), S.TopP(0.95, 0), S.MinP(0.05, 0), S.TempExt(0.8, 0.0, 1.0), S.Dist(seed)],
        "top_p_unsorted": [S.TopP(0.9, 0), S.Dist(seed)],
        "min_p_unsorted": [S.MinP(0.3, 0), S.Dist(seed)],
        "typical": [S.Typical(0.6, 1), S.Dist(seed)],
        "xtc": [S.TopK(50), S.XTC(0.7, 0.05, 0, seed), S.Dist(seed)],
        "dynatemp": [S.TopK(100), S.TempExt(0.9, 0.5, 1.3), S.Dist(seed)],
        "top_n_sigma": [S.TopNSigma(1.5), S.TopK(30), S.Dist(seed)],
        "mirostat": [S.Temp(0.9), S.Mirostat(n_vocab, seed, 5.0, 0.1, 100)],
        "mirostat_v2": [S.Temp(0.7), S.MirostatV2(seed, 4.0, 0.2)],
        "penalties": [S.Penalties(n_vocab, 16, 1.3, 0.2, 0.3), S.TopK(40), S.Dist(seed)],
        "dry": [S.Dry(vocab_pieces, tokenize, 0.8, 1.75, 2, 64, [b"\n", b":", b'"', b"*"]), S.TopK(40), S.Dist(seed)],
        "logit_bias": [S.LogitBias([(5, 4.5), (10, -np.inf), (5, 1.0), (-3, 2.0)]), S.TopK(40), S.Dist(seed)],
        "adaptive_p": [S.TopK(60), S.AdaptiveP(0.3, 0.9, seed)],
        "top_k_200": [S.TopK(200), S.TempExt(1.2, 0.0, 1.0), S.Dist(seed)],
        "greedy_ties": [S.TopK(40), S.TempExt(0.0, 0.0, 1.0), S.Dist(seed)],
    }


@pytest.fixture(scope="module")
def qwen2_vocab():
    from tokenizer import load_tokenizer

    tok = load_tokenizer(VOCABS / "ggml-vocab-qwen2.gguf")
    pieces = [tok.detokenize_bytes([i], unparse_special=True) for i in range(tok.vocab.n_tokens)]
    return tok.vocab.n_tokens, pieces, lambda b: tok.encode(b, add_special=False, parse_special=False)


@pytest.mark.parametrize("case", _reference_cases(), ids=lambda c: c["case"] + ("-continuous" if c["continuous"] else ""))
def test_each_sampler_chooses_llama_cpps_tokens_and_probabilities(case, qwen2_vocab):
    n_vocab, pieces, tokenize = qwen2_vocab
    chain = _chains(n_vocab, pieces, tokenize)[case["case"]]
    # the harness's std::mt19937(42) stream, drawn in bulk by numpy's implementation of the same engine
    bitgen = np.random.MT19937()
    bitgen.state = {"bit_generator": "MT19937", "state": {"key": np.array(MT19937(42).mt, np.uint32), "pos": 624}}

    def draw(n):
        return bitgen.random_raw(n)

    hist = []
    for i in range(30):
        t = int(1 + draw(1)[0] % 50) if i % 7 == 6 else 11 + i % 4
        for s in chain:
            s.accept(t)
        hist.append(t)
    ids = []
    for _ in range(24):
        u = draw(n_vocab)
        if case["continuous"]:  # (u >> 8) / 2^21 - 4: few ties, so the float orders of the samplers' sums show
            logits = ((u >> 8).astype(np.float32) * np.float32(1.0 / 2097152.0) - np.float32(4.0)).astype(np.float32)
        else:
            logits = ((u % 64).astype(np.float32) / np.float32(8.0) - np.float32(4.0)).astype(np.float32)
        for t in hist[-3:]:
            logits[t] += np.float32(3.0)
        cur = TokenDataArray.from_logits(logits)
        for s in chain:
            s.apply(cur)
        tok = int(cur.ids[cur.selected])
        for s in chain:
            s.accept(tok)
        hist.append(tok)
        ids.append(tok)
    assert ids == case["ids"]
    assert cur.size == case["size"] and cur.selected == case["selected"]
    head = [[int(i), f"{np.float32(lg).view(np.uint32):08x}", f"{np.float32(p).view(np.uint32):08x}"]
            for i, lg, p in zip(cur.ids[:64], cur.logit[:64], cur.p[:64])]
    assert head == case["head"]
