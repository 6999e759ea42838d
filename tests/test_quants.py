"""Block formats: dequantization (bit-exact with gguf-py) and activation quantization (bit-exact with slow
numpy re-implementations of ggml's quantize_row_q8_0 / q8_1 (x86 and generic) and quantize_row_q8_K_ref)."""

from __future__ import annotations


import numpy as np
import pytest

gguf_quants = pytest.importorskip("gguf.quants")
from gguf.constants import GGMLQuantizationType as QT  # noqa: E402

import quant_reference as R  # noqa: E402
from kernels.dequant import UnsupportedTypeError, dequantize  # noqa: E402
from kernels.ggml_type import GGMLType as G  # noqa: E402
from kernels.quants.vec_dot_type import quantize_activations, to_blocks  # noqa: E402
from kernels.errors import ModelError  # noqa: E402
from kernels.gguf import GGUFReader  # noqa: E402

from conftest import REAL_MODELS, TINY_MODELS, real_model_path  # noqa: E402

TINY_FILES = sorted(TINY_MODELS.glob("*.gguf"))
QUANT_TYPES = [G.Q4_0, G.Q4_1, G.Q5_0, G.Q5_1, G.Q8_0, G.Q2_K, G.Q3_K, G.Q4_K, G.Q5_K, G.Q6_K]
ALL_TYPES = [G.F32, G.F16, G.BF16] + QUANT_TYPES


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a = np.asarray(a, np.float32).reshape(-1)
    b = np.asarray(b, np.float32).reshape(-1)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def _gguf_py(ggml_type, raw: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return gguf_quants.dequantize(raw, QT(int(ggml_type))).reshape(-1).astype(np.float32)


# ------------------------------------------------------------------------------------------ dequantize

@pytest.mark.skipif(not TINY_FILES, reason="fixture models missing")
@pytest.mark.parametrize("path", TINY_FILES, ids=lambda p: p.name)
def test_dequantize_fixture_model_tensors(path):
    r = GGUFReader(path)
    for t in r.tensors:
        ours = dequantize(t.ggml_type, t.data, t.n_elements)
        assert _same_bits(ours, _gguf_py(t.ggml_type, t.data)), f"{path.name}: {t.name} ({t.type_name})"


@pytest.mark.real
@pytest.mark.parametrize("name", REAL_MODELS)
def test_dequantize_real_model_tensors(name):
    """Every tensor of the real models, first 16 rows of each (gguf-py is slow on the full 1.5B file)."""
    path = real_model_path(name)
    r = GGUFReader(path)
    seen = set()
    for t in r.tensors:
        n_rows, row_bytes = t.rows().shape
        rows = min(n_rows, 16)
        raw = t.rows()[:rows].reshape(-1)
        ours = dequantize(t.ggml_type, raw, rows * (t.n_elements // n_rows))
        assert _same_bits(ours, _gguf_py(t.ggml_type, raw)), f"{path.name}: {t.name} ({t.type_name})"
        seen.add(t.type_name)
    assert seen  # the file really had tensors


@pytest.mark.parametrize("ggml_type", QUANT_TYPES + [G.F16, G.BF16], ids=lambda t: t.name)
def test_dequantize_random_blocks(ggml_type):
    rng = np.random.default_rng(int(ggml_type))
    K = 512
    raw = R.random_weight_bytes(ggml_type, 6, K, rng)
    if ggml_type in R.BLOCK:  # also completely random bytes (any finite fp16 scale, incl. subnormals)
        noise = rng.integers(0, 256, raw.shape, dtype=np.uint8)
        ref_noise = _gguf_py(ggml_type, noise)
        if np.isfinite(ref_noise).all():
            assert _same_bits(dequantize(ggml_type, noise.reshape(-1), 6 * K), ref_noise)
        raw[0, :] = 0  # an all-zero row
    ours = dequantize(ggml_type, raw.reshape(-1), 6 * K)
    assert _same_bits(ours, _gguf_py(ggml_type, raw))


def test_dequantize_errors():
    with pytest.raises(UnsupportedTypeError, match="F64"):
        dequantize(G.F64, np.zeros(8 * 256, np.uint8), 256)
    assert issubclass(UnsupportedTypeError, ModelError)
    with pytest.raises(ValueError, match="Q4_K"):
        dequantize(G.Q4_K, np.zeros(100, np.uint8), 256)       # too few bytes
    with pytest.raises(ValueError, match="block"):
        dequantize(G.Q8_0, np.zeros(34, np.uint8), 20)         # not a whole block


# ------------------------------------------------------------------------------------------ activations

def _activation_rows(K: int, rng) -> np.ndarray:
    """Rows exercising ties, zeros, negative maxima, huge and tiny magnitudes."""
    rows = [rng.standard_normal(K), rng.standard_normal(K) * 1e-3, rng.standard_normal(K) * 1e4,
            np.zeros(K), -np.abs(rng.standard_normal(K))]
    tie = np.zeros(K)
    tie[0::32] = 127.0                                   # amax 127 -> x*id = x exactly
    tie[1::32], tie[2::32], tie[3::32], tie[4::32] = 0.5, 1.5, -2.5, 100.5
    rows.append(tie)
    sparse = np.zeros(K)
    sparse[5] = -3.0
    rows.append(sparse)
    # equal magnitudes of both signs: the first one found decides Q8_K's sign (the quantizers scan 16 at a time)
    rows.append(rng.integers(-3, 4, K).astype(np.float64))
    signs = np.zeros(K)
    signs[[3, min(200, K - 30)]] = [-5.0, 5.0]
    signs[K - 20] = 7.0  # the positive one first, both in the last vector
    signs[K - 2] = -7.0
    rows.append(signs)
    return np.ascontiguousarray(np.array(rows, dtype=np.float32))


@pytest.mark.parametrize("flavour", ["x86", "ref"])
@pytest.mark.parametrize("kind", [G.Q8_0, G.Q8_1], ids=["Q8_0", "Q8_1"])
def test_quantize_q8_0_q8_1(kind, flavour):
    rng = np.random.default_rng(7)
    x = _activation_rows(256, rng)
    a = quantize_activations(kind, x, flavour=flavour)
    blocks = to_blocks(a)
    ref = R.quantize_q8_0 if kind == G.Q8_0 else R.quantize_q8_1
    for t in range(x.shape[0]):
        assert np.array_equal(blocks[t], ref(x[t], flavour)), f"row {t}"
    # the float32 scales handed to the dot kernels are the fp16 values
    assert np.array_equal(a.d, a.d16.view(np.float16).astype(np.float32))


def test_quantize_any_layout():
    """The quantizers read rows 16 values at a time: a strided view gives what its contiguous copy gives."""
    x = _activation_rows(512, np.random.default_rng(3))
    view = np.repeat(x, 2, axis=1)[:, ::2]  # the same values, every second element of wider rows
    for kind in (G.Q8_0, G.Q8_1, G.Q8_K):
        assert np.array_equal(to_blocks(quantize_activations(kind, view)), to_blocks(quantize_activations(kind, x)))


def test_q8_0_x86_and_generic_round_ties_differently():
    """x86 rounds x*id half to even, generic C roundf half away from zero: the tie row tells them apart."""
    x = _activation_rows(64, np.random.default_rng(1))[5:6]
    x86 = quantize_activations(G.Q8_0, x, "x86").qs[0, :5]
    gen = quantize_activations(G.Q8_0, x, "ref").qs[0, :5]
    assert x86.tolist() == [127, 0, 2, -2, 100]
    assert gen.tolist() == [127, 1, 2, -3, 101]


def test_quantize_q8_K():
    rng = np.random.default_rng(8)
    x = _activation_rows(512, rng)
    x[0, 10] = -50.0  # negative value of largest magnitude -> iscale > 0
    a = quantize_activations(G.Q8_K, x)
    blocks = to_blocks(a)
    for t in range(x.shape[0]):
        if not x[t].any():  # ggml leaves bsums untouched for an all-zero block; we zero them
            assert not blocks[t].any()
            continue
        assert np.array_equal(blocks[t], R.quantize_q8_K(x[t])), f"row {t}"


def test_round_f16_bf16():
    rng = np.random.default_rng(9)
    bits = rng.integers(0, 2**32, (4, 256), dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x[~np.isfinite(x)] = 1.0
    x = np.ascontiguousarray(x)
    with np.errstate(over="ignore"):
        f16 = x.astype(np.float16)
    a = quantize_activations(G.F16, x)
    assert np.array_equal(a.h, f16.view(np.uint16))
    b = quantize_activations(G.BF16, x)
    assert _same_bits(b.x, R.bf16_round(x))
    # gguf-py's BF16 quantizer is ggml_compute_fp32_to_bf16 too
    assert np.array_equal(b.h.view(np.uint8).reshape(-1), gguf_quants.quantize(x.reshape(-1), QT.BF16).reshape(-1))
