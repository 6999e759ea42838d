"""The grid i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (kernels/quants/iq_grid.py), IQ1_S, IQ1_M
(kernels/quants/iq1.py), the ternary TQ1_0, TQ2_0 (kernels/quants/tq.py) and Q1_0, Q2_0 (kernels/quants/lowbit.py)
against ggml itself: tests/reference/iq_grid.bin, iq1.bin, tq.bin and lowbit.bin hold random rows quantized by
ggml_quantize_chunk, the products ggml computed with them in a plain context (llama.cpp's x86 build repacks none of
these types: ggml_vec_dot below 8 tokens, the tiled matmul from 8 on; TQ, Q1_0, Q2_0: vec_dot at every size) and the
rows dequantized by ggml
(tests/reference/harness/iq_grid.c, commands in tests/reference/README.md). Whole tiny models in these types:
test_reference_llama.py (the evalcb/ and completion/ files of tiny-llama-IQ3_XS, -IQ3_S, -IQ3_M, the IQ2 models
and IQ1_M)."""

from __future__ import annotations

import numpy as np
import pytest

import other_cpus
from conftest import at_thread_counts, harness_cases, products_by_order

from kernels.dequant import dequantize
from kernels.ggml_type import GGMLType
from kernels.matmul import Weight, matmul
from kernels.order import Order
from kernels.quants import get_format, iq1, iq_grid, lowbit, tq
from kernels.quants.vec_dot_type import quantize_activations

ROWS = 2000  # the harness writes 2000 + type for the dequantized rows

ALL = sum((harness_cases(f"{name}.bin") for name in ("iq_grid", "iq1", "tq", "lowbit")), [])
CASES = [c for c in ALL if c[0] < ROWS]  # (type, K, N, T, raw (N, row_bytes), x (T, K), ggml's out (T, N))
ROW_CASES = [(c[0] - ROWS,) + c[1:] for c in ALL if c[0] >= ROWS]  # out: ggml's rows (N, K)
IDS = [f"{GGMLType(c[0]).name}-K{c[1]}-N{c[2]}-T{c[3]}" for c in CASES]
TYPES = [GGMLType.IQ2_XXS, GGMLType.IQ2_XS, GGMLType.IQ2_S, GGMLType.IQ3_XXS, GGMLType.IQ3_S, GGMLType.IQ1_S,
         GGMLType.IQ1_M, GGMLType.TQ1_0, GGMLType.TQ2_0, GGMLType.Q1_0, GGMLType.Q2_0]
GGUF_PY_TYPES = TYPES[:-2]  # gguf-py 0.19 has no Q1_0 / Q2_0: test_lowbit_dequantize_equals_numpy instead


def _grid(typ):
    """A type's grid as signed values (None: TQ, Q1_0, Q2_0 have none)."""
    if int(typ) in tq.TYPES or int(typ) in lowbit.TYPES:
        return None
    return iq1.GRID.view(np.int8) if int(typ) in iq1.TYPES else iq_grid.GRIDS[int(typ)]


def _portable(typ, raw, a, out):
    """The scalar kernel of a type's module, in llama.cpp's batch order."""
    mode = iq_grid.TILED if a.qs.shape[0] >= iq_grid.TILED_MIN_BATCH else iq_grid.VEC
    if int(typ) in tq.TYPES:
        tq._mm_scalar(raw, int(typ), a.qs, a.d, a.bsums, out)
    elif int(typ) in lowbit.TYPES:
        lowbit._mm_scalar(raw, int(typ), a.qs, a.d, out)
    elif int(typ) in iq1.TYPES:
        iq1._mm_scalar(raw, int(typ), mode, a.qs, a.d, iq1.GRID, out)
    else:
        iq_grid._mm_scalar(raw, int(typ), mode, a.qs, a.d, iq_grid.GRIDS[int(typ)], out)


def _same_bits(a, b) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_the_reference_covers_every_path():
    """Every type: one token, batches below the tiled matmul's 8 tokens and from there on (vec_dot, tiled), one
    and several super-blocks per row; the dequantized rows."""
    def path(T):
        return "one" if T == 1 else "vec_dot" if T < iq_grid.TILED_MIN_BATCH else "tiled"

    kinds = {(c[0], path(c[3]), c[1] > 256) for c in CASES}
    assert {(t, p, k) for t in TYPES for p in ("one", "vec_dot", "tiled") for k in (False, True)} <= kinds
    assert {c[0] for c in ROW_CASES} == set(TYPES)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_products_equal_ggml_in_llama_batch_order(case):
    """Every output bit for bit, in llama.cpp's batch order (what eval-callback and --llama-batch-order run)."""
    typ, K, N, T, raw, x, ref = case
    out = np.empty((T, N), np.float32)
    matmul(Weight(typ, raw.copy(), K, N), x.copy(), out, Order.LLAMA)
    assert _same_bits(out, ref), f"{int((out != ref).sum())} of {ref.size} differ"


@pytest.mark.parametrize("case", [c for c in CASES if c[3] == 1], ids=[i for i, c in zip(IDS, CASES) if c[3] == 1])
def test_single_token_equals_ggml_and_batches_equal_single_tokens(case):
    """One token: ggml's vec_dot; the default batch-invariant mode gives every row of a batch those bits (the
    row repeated 9 times: past the tiled matmul's 8), at 1 and 2 threads."""
    typ, K, N, T, raw, x, ref = case
    w = Weight(typ, raw.copy(), K, N)

    def run():
        out = np.empty((1, N), np.float32)
        matmul(w, x.copy(), out)
        outb = np.empty((9, N), np.float32)
        matmul(w, np.repeat(x, 9, axis=0), outb)
        return out, outb

    for out, outb in at_thread_counts(run):
        assert _same_bits(out, ref)
        assert all(_same_bits(outb[t], out[0]) for t in range(9))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_portable_kernels_equal_ggml(case):
    """The scalar kernels (machines without AVX2) give the same bits, lane by lane."""
    typ, K, N, T, raw, x, ref = case
    a = quantize_activations(get_format(typ).vec_dot_type, x.copy())
    out = np.empty((T, N), np.float32)
    _portable(typ, raw, a, out)
    assert _same_bits(out, ref)


@pytest.mark.parametrize("case", ROW_CASES, ids=[f"{GGMLType(c[0]).name}-K{c[1]}-N{c[2]}" for c in ROW_CASES])
def test_dequantize_equals_ggml(case):
    """Token embeddings (get_rows) and the float paths read rows as ggml's dequantize_row_<type> gives them."""
    typ, K, N, T, raw, x, ref = case
    assert _same_bits(dequantize(typ, raw.reshape(-1), K * N).reshape(N, K), ref)


@pytest.mark.parametrize("typ", GGUF_PY_TYPES, ids=lambda t: t.name)
def test_dequantize_and_grids_equal_gguf_py(typ):
    """An independent oracle for the tables and the bit layout: gguf-py's grids and its dequantizer on random
    bytes (with finite scales)."""
    gguf_quants = pytest.importorskip("gguf.quants")
    from gguf.constants import GGMLQuantizationType as QT

    cls = getattr(gguf_quants, typ.name)
    if _grid(typ) is not None:
        cls.init_grid()
        assert np.array_equal(np.asarray(cls.grid).reshape(-1), _grid(typ).astype(np.float32))
    fmt = get_format(typ)
    rng = np.random.default_rng(int(typ))
    blocks = rng.integers(0, 256, (12, fmt.type_size), dtype=np.uint8)
    d = rng.normal(size=12).astype(np.float16).view(np.uint8).reshape(-1, 2)
    if typ == GGMLType.IQ1_M:  # d's fp16 in the top nibbles of the scale words: exponent below 0x10, finite
        blocks[:, 55] &= 0xBF
    elif int(typ) in tq.TYPES:  # d last
        blocks[:, -2:] = d
    else:
        blocks[:, :2] = d
    ref = gguf_quants.dequantize(blocks.reshape(-1), QT(int(typ))).reshape(-1).astype(np.float32)
    assert _same_bits(dequantize(typ, blocks.reshape(-1), 12 * fmt.block_size), ref)


@pytest.mark.parametrize("typ", TYPES, ids=lambda t: t.name)
def test_batches_are_thread_invariant(typ):
    """A batch in both orders gives the same bits at 1 and 2 threads (rows split differently)."""
    typ_, K, N, T, raw, x, ref = next(c for c in CASES if c[0] == typ and c[3] == 13)
    w = Weight(typ, raw.copy(), K, N)

    def run():
        outs = []
        for order in (Order.SINGLE, Order.LLAMA):
            out = np.empty((T, N), np.float32)
            matmul(w, x.copy(), out, order)
            outs.append(out)
        return outs

    one, two = at_thread_counts(run)
    assert all(_same_bits(a, b) for a, b in zip(one, two))
    assert _same_bits(one[1], ref)


@pytest.mark.parametrize("typ", [GGMLType.Q1_0, GGMLType.Q2_0], ids=lambda t: t.name)
def test_lowbit_dequantize_equals_numpy(typ):
    """An independent oracle for Q1_0 / Q2_0's bit layout: numpy's unpackbits on random blocks (finite d)."""
    fmt = get_format(typ)
    rng = np.random.default_rng(int(typ))
    blocks = rng.integers(0, 256, (12, fmt.type_size), dtype=np.uint8)
    blocks[:, :2] = rng.normal(size=12).astype(np.float16).view(np.uint8).reshape(-1, 2)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)  # (12, 1)
    bits = np.unpackbits(blocks[:, 2:], axis=1, bitorder="little").astype(np.int32)  # (12, 128): bit j of the block
    if typ == GGMLType.Q1_0:
        values = 2 * bits - 1
    else:
        values = bits[:, 0::2] + 2 * bits[:, 1::2] - 1  # (12, 64): the 2-bit codes in order, minus 1
    ref = (values.astype(np.float32) * d).reshape(-1)
    assert _same_bits(dequantize(typ, blocks.reshape(-1), 12 * fmt.block_size), ref)


@pytest.mark.skipif(not other_cpus.applies("no-bmi2"), reason="the host has no BMI2: the main tests already run "
                                                            "that path")
def test_avx2_kernels_without_bmi2_equal_ggml():
    """The AVX2 kernels of a CPU without BMI2 (scalar grid indices and delta-sign tables instead of pdep),
    compiled in a subprocess for the host's features minus bmi2, in their own numba cache (tests/other_cpus.py):
    every IQ1_S, IQ1_M, IQ2_S and IQ3_S case of the reference, in both orders, bit for bit."""
    p = other_cpus.run("no-bmi2")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "BAD []" in p.stdout, p.stdout


@pytest.mark.skipif(not tq.HAS_AVX2, reason="AVX2 only")
def test_trits8_is_the_top_base3_digit_of_every_byte():
    """trits8 (ggml's saturating subtract and two rounding averages) equals (v * 3) >> 8 for all 256 bytes: the
    top base-3 digit of TQ1_0's packing, and of bytes a hostile file may hold."""
    from numba import njit

    from kernels.quants._simd import load32, store32, trits8

    @njit
    def digits(v, out):
        for o in range(0, 256, 32):
            store32(out, o, trits8(load32(v, o)))

    v = np.arange(256, dtype=np.uint8)
    out = np.empty(256, np.uint8)
    digits(v, out)
    assert np.array_equal(out, (v.astype(np.int32) * 3 >> 8).astype(np.uint8))


@pytest.mark.parametrize("typ", [GGMLType.IQ2_XXS, GGMLType.IQ3_S, GGMLType.IQ1_S, GGMLType.IQ1_M, GGMLType.TQ1_0],
                         ids=lambda t: t.name)
def test_long_prompts_equal_single_tokens(typ):
    """A prompt longer than a work item's pass of tokens (q32.pass_tokens: several passes, the last one odd), with
    a row count that leaves a last work item of one row (the batch kernels' items hold iq_grid.ROW_GROUP rows):
    the default order gives every row the single-token bits (which the cases above show to be ggml's), llama.cpp's
    the portable kernels' (its tiled matmul's float order), at 1 and 2 threads."""
    from kernels.quants.q32 import pass_tokens

    _, K, N, _, raw, _, _ = next(c for c in CASES if c[0] == typ and c[1] == 1280 and c[2] % iq_grid.ROW_GROUP == 1)
    w = Weight(typ, raw.copy(), K, N)
    T = 3 * pass_tokens(10 ** 6, K) + 1
    x = np.random.default_rng(7).normal(0, 0.5, (T, K)).astype(np.float32)
    portable = np.empty((T, N), np.float32)
    _portable(typ, raw, quantize_activations(get_format(typ).vec_dot_type, x), portable)

    for single, batch, llama in at_thread_counts(lambda: products_by_order(w, x), (1, 2)):
        assert np.isfinite(single).all()
        assert _same_bits(batch, single) and _same_bits(llama, portable)
