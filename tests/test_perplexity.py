"""synapse perplexity against llama-perplexity's logs (fixtures section 7.4: -c 128 -b 128 --chunks 4 -fa off -t 2)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, TINY_MODELS, real_model_path

from synapse_cli.cli import cli

CORPUS = FIXTURES / "perplexity-corpus.txt"
ARGS = ["-f", str(CORPUS), "-c", "128", "-b", "128", "--chunks", "4", "-fa", "off", "-t", "2", "--llama-batch-order"]


def _llama(log_name: str) -> tuple[list[str], str]:
    log = (FIXTURES / log_name).read_text()
    chunks = re.search(r"^(\[1\].*,)$", log, re.M).group(1)
    final = re.search(r"Final estimate: PPL = .*$", log, re.M).group(0)
    return re.findall(r"\[\d+\]([\d.]+),", chunks), final


def _ours(model) -> tuple[list[str], str, str]:
    r = CliRunner().invoke(cli, ["perplexity", "-m", str(model), *ARGS])
    assert r.exit_code == 0, r.output
    return re.findall(r"\[\d+\]([\d.]+),", r.stdout), re.search(r"Final estimate: PPL = .*$", r.stderr, re.M).group(0), r.stdout


@pytest.mark.real
@pytest.mark.parametrize("name", ["SmolLM2-135M-Instruct.Q4_1", "qwen2.5-coder-0.5b-instruct-awq-q4_k_m"])
def test_real_models_print_llama_perplexitys_numbers(name):
    want_chunks, want_final = _llama(f"real/perplexity/{name}__c128.log")
    chunks, final, stdout = _ours(real_model_path(name + ".gguf"))
    assert chunks == want_chunks and final == want_final
    assert re.fullmatch(r"\d+\.\d\d minutes\n(\[\d\][\d.]+,){4}\n\n", stdout)  # llama-perplexity's stdout layout


def test_tiny_model_agrees_with_llama_perplexity():
    """That log was made with --kl-divergence-base, whose nll llama-perplexity sums from float values; without it
    (this run) the double path is taken: the final estimate is the same, the running values agree to one unit of
    the 4th decimal (chunk 1: 1033.742036 here; the float path, exact, in the base-file test below)."""
    want_chunks, want_final = _llama("tiny/perplexity/tiny-llama-F32__c128.log")
    chunks, final, _ = _ours(TINY_MODELS / "tiny-llama-F32.gguf")
    assert final == want_final
    assert all(abs(float(a) - float(b)) <= 1.5e-4 for a, b in zip(chunks, want_chunks)) and len(chunks) == 4


def test_short_text_and_missing_context_are_one_line(tmp_path):
    f = tmp_path / "short.txt"
    f.write_text("too short")
    tiny = str(TINY_MODELS / "tiny-llama-F32.gguf")
    r = CliRunner().invoke(cli, ["perplexity", "-m", tiny, "-f", str(f), "-c", "128"])
    assert r.exit_code == 1 and "you need at least 256 tokens" in r.stderr
    r = CliRunner().invoke(cli, ["perplexity", "-m", tiny, "-f", str(f)])
    assert r.exit_code == 1 and "requires '--ctx-size' > 0" in r.stderr


KLD_BASE = FIXTURES / "tiny" / "perplexity" / "tiny-llama-F32__c128.kld"


def test_kl_divergence_base_file_is_llama_perplexitys_bytes(tmp_path):
    """--kl-divergence-base writes llama.cpp's file byte for byte (header, tokens, 16-bit log-probability levels),
    and the PPL lines of that run are those of its log (the float path of llama-perplexity's nll)."""
    out = tmp_path / "base.kld"
    tiny = TINY_MODELS / "tiny-llama-F32.gguf"
    r = CliRunner().invoke(cli, ["perplexity", "-m", str(tiny), *ARGS, "--kl-divergence-base", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes() == KLD_BASE.read_bytes()
    want_chunks, want_final = _llama("tiny/perplexity/tiny-llama-F32__c128.log")
    assert re.findall(r"\[\d+\]([\d.]+),", r.stdout) == want_chunks
    assert want_final in r.stderr


def _content_lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip() and "minutes" not in x]


@pytest.mark.parametrize("name", ["tiny-llama-Q4_0", "tiny-llama-Q4_K_M", "tiny-qwen2-Q8_0", "tiny-llama-F32"])
def test_kl_divergence_prints_llama_perplexitys_tables(name):
    """--kl-divergence against the fixtures' base file: the per-chunk table and the three statistics blocks,
    line for line as llama-perplexity printed them (fixtures tiny/perplexity/*__kld.log)."""
    r = CliRunner().invoke(cli, ["perplexity", "-m", str(TINY_MODELS / f"{name}.gguf"), "-c", "128",
                                 "-b", "128", "-fa", "off", "-t", "2", "--llama-batch-order",
                                 "--kl-divergence-base", str(KLD_BASE), "--kl-divergence"])
    assert r.exit_code == 0, r.output
    log = (FIXTURES / "tiny" / "perplexity" / f"{name}__kld.log").read_text()
    want = [x for x in _content_lines(log) if not re.match(r"^\d+\.\d+\.\d+\.\d+ [IWE] |^\.+$", x)]
    assert _content_lines(r.stdout) == want


def test_kl_divergence_refuses_foreign_or_truncated_base_files(tmp_path):
    tiny = str(TINY_MODELS / "tiny-llama-F32.gguf")
    bad = tmp_path / "bad.kld"
    bad.write_bytes(b"_logits_" + (128).to_bytes(4, "little") + (99).to_bytes(4, "little") + (4).to_bytes(4, "little"))
    r = CliRunner().invoke(cli, ["perplexity", "-m", tiny, "-c", "128", "--kl-divergence-base", str(bad), "--kl-divergence"])
    assert r.exit_code == 1 and "inconsistent vocabulary" in r.stderr
    cut = tmp_path / "cut.kld"
    cut.write_bytes(KLD_BASE.read_bytes()[:300000])
    r = CliRunner().invoke(cli, ["perplexity", "-m", tiny, "-c", "128", "--kl-divergence-base", str(cut), "--kl-divergence"])
    assert r.exit_code == 1 and "truncated" in r.stderr and len(r.stderr.strip().splitlines()) <= 3
