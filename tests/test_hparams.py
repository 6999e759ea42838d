"""Hyper-parameters read from GGUF metadata equal what llama.cpp printed when it loaded the same files
(`print_info:` lines of the fixtures' eval-callback logs, run with -lv 4)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, TINY_MODELS, real_model_path

from kernels.gguf import GGUFReader
from synapse_cli.hparams import attn_temp_scale, load_hparams

REF = Path(__file__).resolve().parent / "reference"
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


@pytest.mark.parametrize("name,model,rope,adjusted", [
    ("rope-yarn4", "tiny-llama-Q8_0", dict(rope_freq_base=20000.0, rope_scaling_type="yarn", rope_freq_scale=0.25,
                                           yarn_orig_ctx=64), 256),
    ("rope-yarn8", "tiny-mistral3-Q4_K_M", dict(rope_freq_scale=0.125, yarn_beta_fast=16.0, yarn_beta_slow=2.0,
                                                yarn_ext_factor=0.5), 32),
    ("rope-none", "tiny-llama-Q8_0", dict(rope_scaling_type="none", rope_freq_scale=0.25, yarn_attn_factor=1.5), None),
])
def test_rope_flags_give_llama_context_values(name, model, rope, adjusted):
    """with_rope (the --rope-*/--yarn-* flags) against what llama_context logged with the same flags
    (tests/reference/evalcb/<model>__long__<name>.log): freq_base, freq_scale, the new yarn_attn_factor and
    llama_init_from_model's adjusted n_ctx_train."""
    from synapse_cli.hparams import RopeParams, n_ctx_train_after_yarn, with_rope

    log = (REF / "evalcb" / f"{model}__long__{name}.log").read_text(errors="replace")
    hp = with_rope(load_hparams(GGUFReader(TINY_MODELS / f"{model}.gguf")), RopeParams(**rope))
    assert f"{hp.rope_freq_base:.1f}" == re.search(r"llama_context: freq_base\s+= (\S+)", log).group(1)
    assert f"{hp.rope_freq_scale:g}" == re.search(r"llama_context: freq_scale\s+= (\S+)", log).group(1)
    m = re.search(r"n_ctx_train adjusted to (\d+)", log)
    assert (int(m.group(1)) if m else None) == adjusted
    assert n_ctx_train_after_yarn(hp) == (adjusted or hp.n_ctx_train)
    m = re.search(r"setting new yarn_attn_factor = ([\d.]+)", log)
    if m:  # logged before the 1/(1 + 0.1 ln factor) correction
        logged = np.float32(hp.yarn_attn_factor) * np.float32(1.0 + 0.1 * np.log(np.float32(1 / hp.rope_freq_scale)))
        assert f"{logged:.4f}" == m.group(1)
    if name == "rope-none":  # scaling none: no frequency scaling, the given attention factor as it is
        assert hp.rope_freq_scale == 1.0 and hp.yarn_ext_factor == 0.0 and hp.yarn_attn_factor == 1.5
