"""Hyper-parameters read from GGUF metadata equal what llama.cpp printed when it loaded the same files
(`print_info:` lines of the fixtures' eval-callback logs, run with -lv 4)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import FIXTURES, TINY_MODELS, real_model_path

from kernels.gguf import GGUFReader
from synapse_cli.hparams import attn_temp_scale, load_hparams

LOGS = sorted((FIXTURES / "tiny" / "evalcb").glob("*__kvf32.log")) + sorted((FIXTURES / "real" / "evalcb").glob("*.log"))


def _print_info(log_text: str) -> dict[str, str]:
    out = {}
    for m in re.finditer(r"print_info: (\w[\w ]*?)\s*= (.*)", log_text):
        out.setdefault(m.group(1).strip(), m.group(2).strip())
    return out


def _model_for_log(log) -> str:
    stem = log.name.split("__")[0]
    if log.parent.parent.name == "tiny":
        return str(TINY_MODELS / f"{stem}.gguf")
    return str(real_model_path(stem + ".gguf"))


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_hparams_match_llama_print_info(log):
    info = _print_info(log.read_text(errors="replace"))
    hp = load_hparams(GGUFReader(_model_for_log(log)))
    assert hp.arch == info["arch"]
    for ours, key in ((hp.n_ctx_train, "n_ctx_train"), (hp.n_embd, "n_embd"), (hp.n_layer, "n_layer"),
                      (hp.n_head, "n_head"), (hp.n_head_kv, "n_head_kv"), (hp.n_rot, "n_rot"),
                      (hp.n_embd_head, "n_embd_head_k"), (hp.n_gqa, "n_gqa"), (hp.n_embd_k_gqa, "n_embd_k_gqa"),
                      (hp.n_ff, "n_ff"), (hp.n_ctx_orig_yarn, "n_ctx_orig_yarn"), (hp.n_vocab, "n_vocab")):
        assert ours == int(info[key]), key
    assert f"{hp.f_norm_rms_eps:.1e}" == info["f_norm_rms_eps"]
    assert f"{hp.rope_freq_base:.1f}" == info["freq_base_train"]
    assert float(info["freq_scale_train"]) == pytest.approx(hp.rope_freq_scale, rel=1e-6)
    assert int(info["rope type"]) == (2 if hp.rope_neox else 0)  # LLAMA_ROPE_TYPE_NEOX = 2, NORM = 0
    if "rope scaling" in info:
        assert info["rope scaling"] == hp.rope_scaling_type


def test_mistral3_yarn_attn_factor_and_temperature():
    """README section 1: llama-context logs `setting new yarn_attn_factor = 1.1218`; net factor 1.1217511
    after ggml's own mscale (1 + 0.1 ln 16) is cancelled; temperature scale 1 + 0.1 ln(floor(pos/4) + 1)."""
    log = (FIXTURES / "tiny" / "evalcb" / "tiny-mistral3-F32__pub__kvf32.log").read_text()
    m = re.search(r"setting new yarn_attn_factor = ([\d.]+)", log)
    assert m is not None
    hp = load_hparams(GGUFReader(TINY_MODELS / "tiny-mistral3-F32.gguf"))
    assert hp.yarn_ext_factor == 1.0 and hp.rope_scaling_type == "yarn"
    # hparams store the factor after the 1/(1 + 0.1 ln 16) correction; undo it to compare with the log
    logged = np.float32(hp.yarn_attn_factor) * np.float32(1.0 + 0.1 * np.log(np.float32(16.0)))
    assert f"{logged:.4f}" == m.group(1)
    net = hp.yarn_attn_factor * (1.0 + 0.1 * np.log(1.0 / hp.rope_freq_scale))
    assert net == pytest.approx(1.1217511, abs=1e-6)
    scale = attn_temp_scale(hp, np.arange(16, dtype=np.int32))
    expect = 1 + 0.1 * np.log(np.floor(np.arange(16) / 4) + 1)
    np.testing.assert_allclose(scale, expect, rtol=1e-6)
    assert scale[0] == 1.0 and scale[4] == np.float32(1.0693147)


def test_unsupported_arch_is_rejected(tmp_path):
    gguf = pytest.importorskip("gguf")
    from kernels.errors import ModelError

    path = tmp_path / "falcon.gguf"
    w = gguf.GGUFWriter(str(path), "falcon")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelError, match="architecture 'falcon' is not supported"):
        load_hparams(GGUFReader(path))
