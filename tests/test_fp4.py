"""MXFP4 and NVFP4 weights (kernels/quants/fp4.py) against ggml itself: tests/reference/fp4.bin holds random rows
quantized by ggml_quantize_chunk and the products ggml computed with them (tests/reference/harness/fp4.c, commands
in tests/reference/README.md): a plain context's MUL_MAT (ggml_vec_dot_mxfp4_q8_0 / _nvfp4_q8_0 at every batch
size), the repacked mxfp4_8x8 gemv/gemm that llama.cpp runs for MXFP4 weights with a multiple of 8 rows, and the
rows dequantized by ggml's to_float. Whole tiny models in these types: test_reference_llama.py."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import harness_cases

from kernels.dequant import dequantize
from kernels.ggml_type import GGMLType
from kernels.matmul import Weight, matmul
from kernels.order import Order
from kernels.quants import fp4, get_format, iq4
from kernels.quants.base import llama_repacks
from kernels.quants.vec_dot_type import quantize_activations

REPACKED, ROWS = 1000, 2000  # the harness writes 1000 + type (repacked MXFP4) and 2000 + type (dequantized rows)


def _cases():
    """(type, repacked, K, N, T, raw, x, ggml's out) of the products in fp4.bin; a plain-context product of a weight
    llama.cpp would repack is not the path llama.cpp takes (nor synapse), so it is left out."""
    out = []
    for typ, K, N, T, raw, x, ref in harness_cases("fp4.bin"):
        if typ >= ROWS:
            continue
        repacked, typ = typ >= REPACKED, typ % REPACKED
        if repacked or not llama_repacks(typ, N):
            out.append((typ, repacked, K, N, T, raw, x, ref))
    return out


CASES = _cases()
IDS = [f"{GGMLType(c[0]).name}{'-repacked' if c[1] else ''}-K{c[2]}-N{c[3]}-T{c[4]}" for c in CASES]
ROW_CASES = [c for c in harness_cases("fp4.bin") if c[0] >= ROWS]


def _same_bits(a, b) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_the_reference_covers_every_path():
    """Both types; MXFP4 repacked and not, one token and batches, an odd number of blocks (vec_dot's last block
    outside its pairs); blocks with denormal E8M0 scales (exponents 0 and 1)."""
    kinds = {(c[0], c[1], c[4] == 1, (c[2] // 32) % 2) for c in CASES}
    assert {(GGMLType.MXFP4, False, True, 1), (GGMLType.MXFP4, False, False, 0), (GGMLType.MXFP4, True, True, 1),
            (GGMLType.MXFP4, True, False, 0), (GGMLType.NVFP4, False, True, 0),
            (GGMLType.NVFP4, False, False, 0)} <= kinds
    exps = np.concatenate([c[5].reshape(c[3], -1, 17)[:, :, 0].ravel() for c in CASES if c[0] == GGMLType.MXFP4])
    assert {0, 1} <= set(exps.tolist())


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
    """One token: ggml's vec_dot or repacked gemv; every row of a batch gets those bits (the row repeated 9 times),
    at 1 and 2 threads."""
    from conftest import at_thread_counts

    typ, repacked, K, N, T, raw, x, ref = case
    w = Weight(typ, raw.copy(), K, N)

    def run():
        out = np.empty((1, N), np.float32)
        matmul(w, x.copy(), out)
        outb = np.empty((9, N), np.float32)
        matmul(w, np.repeat(x, 9, axis=0), outb)
        return out, outb

    for out, outb in at_thread_counts(run, (1, 2)):
        assert _same_bits(out, ref)
        assert all(_same_bits(outb[t], out[0]) for t in range(9))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_portable_kernels_equal_ggml(case):
    """The scalar kernels (machines without AVX2) give the same bits, lane by lane."""
    typ, repacked, K, N, T, raw, x, ref = case
    a = quantize_activations(GGMLType.Q8_0, x.copy())
    out = np.empty((T, N), np.float32)
    if typ == GGMLType.NVFP4:
        fp4._mm_nv_scalar(raw, a.qs, a.d, out)
    else:
        iq4._mm_scalar(raw, iq4.SUMI_FMA if repacked else iq4.PAIRS, a.qs, a.d, fp4.KVALUES_FP4, True, out)
    assert _same_bits(out, ref)


@pytest.mark.parametrize("case", ROW_CASES, ids=[f"{GGMLType(c[0] - ROWS).name}-K{c[1]}-N{c[2]}" for c in ROW_CASES])
def test_dequantize_equals_ggml(case):
    """The rows as ggml's to_float gives them (the token embeddings' get_rows)."""
    typ, K, N, T, raw, x, ref = case
    assert _same_bits(dequantize(typ - ROWS, raw.reshape(-1), K * N).reshape(N, K), ref)


@pytest.mark.parametrize("typ", [GGMLType.MXFP4, GGMLType.NVFP4], ids=lambda t: t.name)
def test_dequantize_random_bytes_equals_gguf_py(typ):
    """Every scale byte (E8M0 0..255; UE4M3 with its zero and NaN codes) and random quants against gguf-py."""
    gguf_quants = pytest.importorskip("gguf.quants")
    from gguf.constants import GGMLQuantizationType as QT

    fmt = get_format(typ)
    rng = np.random.default_rng(int(typ))
    blocks = rng.integers(0, 256, (256, fmt.type_size), dtype=np.uint8)
    n_scales = 1 if typ == GGMLType.MXFP4 else 4
    blocks[:, :n_scales] = np.arange(256 * n_scales).reshape(256, n_scales) % 256
    if typ == GGMLType.NVFP4:
        blocks[:, :4] &= 0x7F  # UE4M3: the sign bit unused
    ours = dequantize(typ, blocks.reshape(-1), 256 * fmt.block_size)
    with np.errstate(over="ignore"):  # (MXFP4's largest exponents overflow, in ggml's float32 too)
        ref = gguf_quants.dequantize(blocks.reshape(-1), QT(int(typ))).reshape(-1).astype(np.float32)
    finite = np.isfinite(ref)
    assert finite.mean() > 0.9
    assert _same_bits(ours[finite], ref[finite])


def test_fp4_scales_are_ggmls_functions():
    """e8m0_to_f32_half and ue4m3_to_f32_half over all 256 bytes against ggml-impl.h's definitions written out in
    numpy: 2^(e - 128) (denormal for e < 2), and (UE4M3, bias 7) / 2 with 0 and 0x7F read as 0 (bit 7 ignored,
    as ggml's (x >> 3) & 0xF)."""
    from kernels.quants._bits import e8m0_to_f32_half, ue4m3_to_f32_half

    e = np.arange(256)
    want = np.ldexp(np.float64(1), e - 128).astype(np.float32)
    got = np.array([e8m0_to_f32_half(np.uint8(v)) for v in e], np.float32)
    assert _same_bits(got, want)
    ex, man = (e >> 3) & 15, e & 7
    want = np.where(ex == 0, np.ldexp(man.astype(np.float64), -9), np.ldexp(1 + man / 8.0, ex - 7)) * 0.5
    want[(e == 0) | (e == 0x7F)] = 0
    got = np.array([ue4m3_to_f32_half(np.uint8(v)) for v in e], np.float32)
    assert _same_bits(got, want.astype(np.float32))


def test_fused_one_token_products_equal_ggml():
    """Decoding's fused call for repacked MXFP4 weights (up to 3 weights, one activation conversion, one parallel
    region: FusedGemv, as for Q/K/V) gives each weight ggml's bits, at 1 and 2 threads."""
    from conftest import assert_fused_one_token_products

    typ, repacked, K, N, T, raw, x, ref = next(c for c in CASES if c[0] == GGMLType.MXFP4 and c[1] and c[4] == 1
                                               and c[3] == 40)
    assert_fused_one_token_products(typ, K, raw, x, ref)


@pytest.mark.parametrize("kind", [(GGMLType.MXFP4, True), (GGMLType.MXFP4, False), (GGMLType.NVFP4, False)],
                         ids=["MXFP4-repacked", "MXFP4", "NVFP4"])
def test_long_prompts_equal_single_tokens(kind):
    """A prompt longer than a work item's pass of tokens (q32.pass_tokens: several passes, an odd last token of the
    repacked gemm's pairs) gives every row the single-token bits (which the cases above show to be ggml's), in the
    default and in llama.cpp's batch order (the same for these types: no tinyBLAS), at 1 and 2 threads."""
    from conftest import at_thread_counts, products_by_order

    from kernels.quants.q32 import pass_tokens

    typ, repacked = kind
    _, _, K, N, _, raw, _, _ = next(c for c in CASES if (c[0], c[1]) == kind and c[3] > 8)
    w = Weight(typ, raw.copy(), K, N)
    T = 3 * pass_tokens(10 ** 6, K) + 1
    x = np.random.default_rng(7).normal(0, 0.5, (T, K)).astype(np.float32)

    for single, batch, llama in at_thread_counts(lambda: products_by_order(w, x), (1, 2)):
        assert np.isfinite(single).all()
        assert _same_bits(batch, single) and _same_bits(llama, single)
