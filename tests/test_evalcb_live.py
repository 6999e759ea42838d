"""Our forward pass, traced, against llama-eval-callback's logs of the same prompt (fixtures */evalcb).

For every tiny model (F16 and F32 cache logs) and the real SmolLM2 and Qwen2.5-0.5B logs:
- structure is exact: every tensor llama.cpp printed is in our trace with the same name, op and shape,
  and we print nothing it does not;
- layer 0's Q/K/V projections (the first matrix products, fed by inputs that are bit-identical) agree
  within 1e-5 relative for every weight type: this checks each quantized dot kernel and the activation
  quantization against llama.cpp's;
- every file agrees on every tensor, sums and printed values, within the default 1e-4 of `eval-callback
  diff` (a clean verdict): the integer dot products are exact and the float arithmetic follows ggml's x86
  kernels (AVX2 vec_dot for Q4_1, Q5_0, Q5_1, Q8_0, Q6_K; the repacked Q4_K gemv/gemm; AVX512
  ggml_vec_dot_f32/f16 and llamafile tinyBLAS for F32/F16 weights and batched attention), so sums agree to
  the 6 printed decimals (measured worst 1.6e-5 relative over the tiny files; 3.5e-7 SmolLM2, 5.6e-7
  Qwen2.5-0.5B, 1.8e-7 Qwen2.5-1.5B). Before those orders were ported, a float addition in another order
  moved a value by ~1e-7 relative, and where that value was then rounded to F16 (KV cache, q) or to an int8
  activation block, a value at a rounding boundary flipped by one step and the step propagated over the
  layers (SmolLM2 diverged at layer 3).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES, TINY_MODELS, real_model_path

from synapse_cli import evalcb
from synapse_cli.evalcb import TraceRecorder, diff_traces, load_trace

TINY_LOGS = sorted((FIXTURES / "tiny" / "evalcb").glob("*.log"))
REAL_LOGS = sorted((FIXTURES / "real" / "evalcb").glob("*.log"))  # the 1.5B's is skipped unless fetched
LONG_LOGS = sorted((FIXTURES / "real" / "evalcb-long").glob("*.log"))  # Qwen2.5, 13 and 35 tokens
FA_TINY_LOGS = sorted((FIXTURES / "tiny" / "evalcb-fa").glob("*.log"))  # llama.cpp's default -fa (auto: on)
FA_REAL_LOGS = sorted((FIXTURES / "real" / "evalcb-fa").glob("*.log"))

FIRST_PROJECTIONS = ("Qcur-0", "Kcur-0", "Vcur-0")


def _trace(model: Path, prompt: str, cache: str, flash_attn: bool = False):
    rec = TraceRecorder()
    evalcb.run_live(model, prompt, threads=2, ctx_size=4096, batch=2048, ubatch=512,
                    cache_type_k=cache, cache_type_v=cache, hook=rec, flash_attn=flash_attn)
    return rec.records


def _check(ours, log: Path):
    theirs = load_trace(log)
    # structure: names, ops, shapes, every occurrence
    assert [(r.name, r.op, r.ne) for r in ours] == [(r.name, r.op, r.ne) for r in theirs]
    d = diff_traces(ours, theirs, tolerance=1e-4, occurrence="all")
    assert not d.only_a and not d.only_b
    proj = [t for t in d.tensors if t.name in FIRST_PROJECTIONS and t.op == "MUL_MAT"]
    assert len(proj) == 3
    for t in proj:
        assert t.rel_diff is not None and t.rel_diff <= 1e-5, f"{t.name}: rel {t.rel_diff:.2e}"
    # a clean verdict: every sum and every printed value within the default tolerance
    assert d.first_divergence is None and d.n_within == len(d.compared), \
        f"first divergence {d.first_divergence}; {d.n_within} of {len(d.compared)} within 1e-4"


@pytest.mark.parametrize("log", TINY_LOGS, ids=lambda p: p.stem)
def test_tiny_trace_matches_llama_eval_callback(log):
    stem = log.name.split("__")[0]
    cache = "f32" if "kvf32" in log.name else "f16"
    _check(_trace(TINY_MODELS / f"{stem}.gguf", "Hello world, the quick brown fox", cache), log)


@pytest.mark.real
@pytest.mark.parametrize("log", REAL_LOGS, ids=lambda p: p.stem)
def test_real_trace_matches_llama_eval_callback(log):
    model = real_model_path(log.name.split("__")[0] + ".gguf")
    _check(_trace(model, "The capital of France is", "f16"), log)


@pytest.mark.real
@pytest.mark.parametrize("log", LONG_LOGS, ids=lambda p: p.stem)
def test_real_long_prompt_trace_matches_llama_eval_callback(log):
    """Batches of >= 8 tokens: the Q6_K (and Q4_K-mix) products take llama.cpp's tiled K-quant matmul."""
    stem, pid = log.stem.split("__")
    prompt = (FIXTURES / "real" / "prompts" / f"{stem}__{pid}.txt").read_text()
    if prompt.endswith("\n"):
        prompt = prompt[:-1]  # llama.cpp's -f strips one trailing newline (fixtures README 7.1)
    _check(_trace(real_model_path(stem + ".gguf"), prompt, "f16"), log)


def test_cli_diff_live_against_log_exit_code():
    """`synapse eval-callback diff --model M --prompt P LOG` end to end: table, verdict, exit 0."""
    from click.testing import CliRunner

    from synapse_cli.cli import cli

    log = FIXTURES / "tiny" / "evalcb" / "tiny-llama-Q8_0__pub__kvf16.log"
    model = TINY_MODELS / "tiny-llama-Q8_0.gguf"
    r = CliRunner().invoke(cli, ["eval-callback", "diff", "--model", str(model), "--prompt",
                                 "Hello world, the quick brown fox", "-t", "2", "-fa", "off", str(log)])
    assert r.exit_code == 0, r.output
    assert "no divergence" in r.output


def test_cli_diff_live_prompt_from_file(tmp_path):
    """`diff -m M -f FILE LOG` reads the live run's prompt as llama-eval-callback's -f does (one trailing newline
    stripped): the same clean verdict as --prompt; a file that cannot be read is one error line, exit 2."""
    from click.testing import CliRunner

    from synapse_cli.cli import cli

    log = FIXTURES / "tiny" / "evalcb" / "tiny-llama-Q8_0__pub__kvf16.log"
    model = TINY_MODELS / "tiny-llama-Q8_0.gguf"
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Hello world, the quick brown fox\n")
    r = CliRunner().invoke(cli, ["eval-callback", "diff", "-m", str(model), "-f", str(prompt), "-t", "2", "-fa", "off",
                                 str(log)])
    assert r.exit_code == 0, r.output
    assert "no divergence" in r.output
    r = CliRunner().invoke(cli, ["eval-callback", "diff", "-m", str(model), "-f", str(tmp_path / "missing.txt"),
                                 str(log)])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "missing.txt" in r.stderr
    # -bf: the file as it is; its trailing newline is one more token, so the same log no longer lines up
    r = CliRunner().invoke(cli, ["eval-callback", "diff", "-m", str(model), "-bf", str(prompt), "-t", "2", "-fa", "off",
                                 str(log)])
    assert r.exit_code == 1 and "FIRST DIVERGENCE; shape {256, 8, 1, 1} vs {256, 7, 1, 1}" in r.output, r.output
    prompt.write_text("Hello world, the quick brown fox")
    r = CliRunner().invoke(cli, ["eval-callback", "diff", "-m", str(model), "-bf", str(prompt), "-t", "2", "-fa", "off",
                                 str(log)])
    assert r.exit_code == 0 and "no divergence" in r.output, r.output


@pytest.mark.real
def test_cli_diff_live_smollm2_clean_verdict():
    """The README's example: SmolLM2 against llama.cpp's log of the same prompt, default tolerance."""
    from click.testing import CliRunner

    from synapse_cli.cli import cli

    name = "SmolLM2-135M-Instruct.Q4_1"
    args = ["eval-callback", "diff", "--model", str(real_model_path(name + ".gguf")), "--prompt",
            "The capital of France is", "-fa", "off", str(FIXTURES / "real" / "evalcb" / f"{name}__pub.log")]
    r = CliRunner().invoke(cli, args[:-1] + ["-c", "4096", args[-1]])  # the log's -c
    assert r.exit_code == 0, r.output[-2000:]
    assert "no divergence; 876 of 876 tensors within 1e-4" in r.output
    # without -c, llama.cpp's default: the model's training context (8192 cells), as llama-eval-callback's
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 1
    assert "first divergence: cache_v_l0 (reshaped) (rel 0.0e+00, shapes differ)" in r.output
    assert "note: the KV cache tensors' shapes differ" in r.output


@pytest.mark.parametrize("log", FA_TINY_LOGS, ids=lambda p: p.stem)
def test_tiny_flash_attention_trace_matches_llama_eval_callback(log):
    """llama-eval-callback with its default -fa (enabled on CPU): the FLASH_ATTN_EXT graph (V cache not
    transposed; with an F32 cache the K/V views cast to F16 by CPY nodes) and its values."""
    stem = log.name.split("__")[0]
    cache = "f32" if "kvf32" in log.name else "f16"
    _check(_trace(TINY_MODELS / f"{stem}.gguf", "Hello world, the quick brown fox", cache, True), log)


@pytest.mark.real
@pytest.mark.parametrize("log", FA_REAL_LOGS, ids=lambda p: p.stem)
def test_real_flash_attention_trace_matches_llama_eval_callback(log):
    model = real_model_path(log.name.split("__")[0] + ".gguf")
    _check(_trace(model, "The capital of France is", "f16", True), log)
