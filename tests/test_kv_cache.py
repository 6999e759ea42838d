"""kernels.kv_cache: cache cells written as ggml's SET_ROWS writes them (against gguf-py's reference quantizers,
an independent port of ggml-quants.c), read back as ggml's to_float, the Hadamard transform, and llama.cpp's
rules for -ctk/-ctv."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from conftest import TINY_MODELS  # noqa: E402
from kernels import kv_cache  # noqa: E402
from kernels.errors import ModelError  # noqa: E402
from synapse_cli.model import Context, Model  # noqa: E402

QT = gguf.GGMLQuantizationType


@pytest.mark.parametrize("name", ["q4_0", "q4_1", "q5_0", "q5_1"])
def test_cells_are_ggml_reference_blocks_and_read_back_as_ggml_dequantizes(name):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((5, 2, 64)) * rng.uniform(0.1, 10, (5, 2, 1))).astype(np.float32)
    x[0, 0, :32] = 0.0  # an all-zero block (d = 0)
    cache = kv_cache.cell_array(name, 8, 2, 64)
    code = kv_cache.KV_TYPES[name][0]
    kv_cache.store(code, cache, x, np.arange(5, dtype=np.int32))
    want = gguf.quants.quantize(x.reshape(10, 64), QT[name.upper()])
    assert np.array_equal(cache[:5].reshape(10, -1), want)
    out = np.empty((5, 2, 64), np.float32)
    kv_cache.to_f32(code, cache, 5, out)
    assert np.array_equal(out.reshape(10, 64), gguf.quants.dequantize(want, QT[name.upper()]).astype(np.float32))


def test_fwht_is_the_orthonormal_hadamard_transform():
    n = 64
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    x = np.random.default_rng(2).standard_normal((3, n)).astype(np.float32)
    y = x.copy()
    kv_cache.fwht_rows(y, n)
    assert np.allclose(y, x @ h.T / np.sqrt(n), atol=1e-5)
    kv_cache.fwht_rows(y, n)  # H is its own inverse
    assert np.allclose(y, x, atol=1e-5)
    assert kv_cache.rot_size_k(64) == 64 and kv_cache.rot_size_k(128) == 128 and kv_cache.rot_size_k(192) == 64


def test_cache_type_rules():
    model = Model.load(TINY_MODELS / "tiny-llama-Q8_0.gguf")
    with pytest.raises(ModelError, match="quantized V cache requires flash_attn"):
        Context(model, n_ctx=256, cache_type_k="f16", cache_type_v="q8_0", flash_attn=False)
    with pytest.raises(ModelError, match="without flash attention"):
        Context(model, n_ctx=256, cache_type_k="f32", cache_type_v="bf16", flash_attn=False)
    # a quantized K cache without flash attention: rotated as with it (llama_kv_cache's attn_rot_k), its kq
    # products the quantized matmul (llama-completion runs in tests/reference/runs: SmolLM2__fa_off_ctk_*)
    ctx = Context(model, n_ctx=256, cache_type_k="q8_0", cache_type_v="f16", flash_attn=False)
    assert ctx.rot_k == 64 and ctx.rot_v == 0 and ctx.decode([1, 2, 3]).shape == (model.hparams.n_vocab,)
    with pytest.raises(ModelError, match="q9_0"):
        Context(model, n_ctx=256, cache_type_k="q9_0", cache_type_v="f16", flash_attn=True)
    ctx = Context(model, n_ctx=256, cache_type_k="q8_0", cache_type_v="q4_1", flash_attn=True)
    assert ctx.rot_k == 64 and ctx.rot_v == 64
    assert ctx.decode([1, 2, 3]).shape == (model.hparams.n_vocab,)
