"""IQ4_NL and IQ4_XS weights (kernels/quants/iq4.py) against ggml itself: tests/reference/iq4.bin holds random rows
quantized by ggml_quantize_chunk and the products ggml computed with them (tests/reference/harness/iq4.c, commands
in tests/reference/README.md): a plain context's MUL_MAT (ggml_vec_dot for one token; tinyBLAS for IQ4_NL batches;
vec_dot and, from 8 tokens, the tiled matmul for IQ4_XS) and the repacked iq4_nl_8x8 gemv/gemm that llama.cpp
runs for IQ4_NL weights with a multiple of 8 rows. Whole tiny models in these types: test_reference_llama.py
(the evalcb/ and completion/ files of tiny-llama-IQ4_NL and -IQ4_XS)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import harness_cases

from kernels.dequant import dequantize
from kernels.ggml_type import GGMLType
from kernels.matmul import Weight, matmul
from kernels.order import Order
from kernels.quants import get_format, iq4
from kernels.quants.base import llama_repacks
from kernels.quants.vec_dot_type import quantize_activations

REPACKED = 1000  # the harness writes 1000 + type for the repacked IQ4_NL cases


def _cases():
    """(type, repacked, K, N, T, raw (N, row_bytes), x (T, K), ggml's out (T, N)) of iq4.bin: a plain-context product
    of a weight llama.cpp would repack is not the path llama.cpp takes (nor synapse), so it is left out."""
    out = []
    for typ, K, N, T, raw, x, ref in harness_cases("iq4.bin"):
        repacked, typ = typ >= REPACKED, typ % REPACKED
        if repacked or not llama_repacks(typ, N):
            out.append((typ, repacked, K, N, T, raw, x, ref))
    return out


CASES = _cases()
IDS = [f"{GGMLType(c[0]).name}{'-repacked' if c[1] else ''}-K{c[2]}-N{c[3]}-T{c[4]}" for c in CASES]


def _same_bits(a, b) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_the_reference_covers_every_path():
    """Repacked and not, one token and batches, an odd number of blocks (vec_dot's last block outside its pairs),
    IQ4_XS below and from the tiled matmul's 8 tokens."""
    kinds = {(c[0], c[1], c[4] == 1, (c[2] // 32) % 2, c[4] >= 8) for c in CASES}
    assert {(GGMLType.IQ4_NL, False, True, 1, False), (GGMLType.IQ4_NL, False, True, 0, False),
            (GGMLType.IQ4_NL, False, False, 0, True), (GGMLType.IQ4_NL, True, True, 1, False),
            (GGMLType.IQ4_NL, True, False, 0, True), (GGMLType.IQ4_XS, False, True, 0, False),
            (GGMLType.IQ4_XS, False, False, 0, False), (GGMLType.IQ4_XS, False, False, 0, True)} <= kinds


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_products_equal_ggml_in_llama_batch_order(case):
    """Every output bit for bit, in llama.cpp's batch order (what eval-callback and --llama-batch-order run)."""
    typ, repacked, K, N, T, raw, x, ref = case
    w = Weight(typ, raw.copy(), K, N)
    assert llama_repacks(typ, N) == repacked
    out = np.empty((T, N), np.float32)
    matmul(w, x.copy(), out, Order.LLAMA)
    assert _same_bits(out, ref), f"{int((out != ref).sum())} of {ref.size} differ"


@pytest.mark.parametrize("case", [c for c in CASES if c[4] == 1], ids=[i for i, c in zip(IDS, CASES) if c[4] == 1])
def test_single_token_equals_ggml_and_batches_equal_single_tokens(case):
    """One token: ggml's vec_dot or repacked gemv; the default batch-invariant mode gives every row of a batch
    those bits (the row repeated 9 times: past the tiled matmul's 8)."""
    typ, repacked, K, N, T, raw, x, ref = case
    w = Weight(typ, raw.copy(), K, N)
    out = np.empty((1, N), np.float32)
    matmul(w, x.copy(), out)
    assert _same_bits(out, ref)
    outb = np.empty((9, N), np.float32)
    matmul(w, np.repeat(x, 9, axis=0), outb)
    assert all(_same_bits(outb[t], out[0]) for t in range(9))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_portable_kernels_equal_ggml(case):
    """The scalar kernels (machines without AVX2) give the same bits, lane by lane."""
    typ, repacked, K, N, T, raw, x, ref = case
    packed = get_format(typ).pack(raw, K)  # only for its modes (single token, llama.cpp's batch)
    mode = packed[1] if T == 1 or (packed[2] == iq4.TILED and T < iq4.TILED_MIN_BATCH) else packed[2]
    a = quantize_activations(get_format(typ).vec_dot_type, x.copy())
    out = np.empty((T, N), np.float32)
    iq4._mm_scalar(raw, mode, a.qs, a.d, iq4.KVALUES_IQ4NL, False, out)
    assert _same_bits(out, ref)


@pytest.mark.parametrize("typ", [GGMLType.IQ4_NL, GGMLType.IQ4_XS], ids=lambda t: t.name)
def test_dequantize_equals_gguf_py(typ):
    """ggml's rows of iq4.bin and random bytes (with finite scales) against gguf-py's dequantizer."""
    gguf_quants = pytest.importorskip("gguf.quants")
    from gguf.constants import GGMLQuantizationType as QT

    raws = [c[5] for c in CASES if c[0] == typ][:4]
    rng = np.random.default_rng(int(typ))
    fmt = get_format(typ)
    noise = rng.integers(0, 256, (5, fmt.type_size * 4), dtype=np.uint8)
    blocks = noise.reshape(-1, fmt.type_size)
    blocks[:, :2] = np.float16(rng.normal(size=blocks.shape[0]).astype(np.float16)).view(np.uint8).reshape(-1, 2)
    for raw in raws + [noise]:
        ours = dequantize(typ, raw.reshape(-1), raw.size // fmt.type_size * fmt.block_size)
        ref = gguf_quants.dequantize(raw.reshape(-1), QT(int(typ))).reshape(-1).astype(np.float32)
        assert _same_bits(ours, ref)


@pytest.mark.parametrize("typ", [GGMLType.IQ4_NL, GGMLType.IQ4_XS], ids=lambda t: t.name)
def test_fused_one_token_products_equal_ggml(typ):
    """Decoding's fused call (up to 3 weights, one activation conversion, one parallel region: FusedGemv, as for
    Q/K/V) gives each weight ggml's bits, at 1 and 2 threads."""
    from conftest import assert_fused_one_token_products

    typ_, repacked, K, N, T, raw, x, ref = next(c for c in CASES if c[0] == typ and c[4] == 1 and c[3] == 40
                                                 and (c[1] or typ == GGMLType.IQ4_XS))
    assert_fused_one_token_products(typ, K, raw, x, ref)
