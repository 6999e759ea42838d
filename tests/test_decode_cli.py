"""`synapse decode` end to end (CliRunner): the ids and text llama.cpp's greedy runs produced, the
stop reasons, llama_perf_context_print's lines, and one clear line for bad input."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, TINY_MODELS, VOCABS, real_model_path, spy_model_loads

from synapse_cli.cli import cli

PROMPT = "Hello world, the quick brown fox"


def _run(*args):
    return CliRunner().invoke(cli, ["decode", *map(str, args)], catch_exceptions=False)


@pytest.mark.parametrize("stem,cache", [("tiny-llama-F32", "f32"), ("tiny-qwen2-Q8_0", "f32"), ("tiny-llama-Q4_K_M", "f16")])
def test_json_matches_llama_greedy(stem, cache):
    """Files whose every top1-top2 gap exceeds our measured deviation: the whole run must match."""
    suffix = "__kvf32" if cache == "f32" else ""
    rec = json.loads((FIXTURES / "tiny" / "greedy" / f"{stem}__pub{suffix}.json").read_text())
    r = _run("-m", TINY_MODELS / f"{stem}.gguf", "-p", PROMPT, "-n", 48, "-c", 4096, "-t", 2, "-ctk", cache, "-ctv", cache,
             "-fa", "off", "--json")  # the fixtures: llama-completion -fa off
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["prompt_ids"] == rec["prompt_ids"]
    assert out["generated_ids"] == rec["generated_ids"]
    assert out["stop"] == "limit"
    assert out["text"] == rec["text"]
    t = out["timings"]
    assert t["n_prompt"] == len(rec["prompt_ids"]) and t["n_eval"] == 47


@pytest.mark.parametrize("mode", ["none", "dio"])
def test_load_mode_reading_the_weights_matches_llama_greedy(mode, monkeypatch):
    """-lm none / dio (llama.cpp's load modes that read the model instead of mapping it): the model is loaded
    with use_mmap=False (the weights in memory), and the greedy run is llama.cpp's."""
    loads = spy_model_loads(monkeypatch)
    rec = json.loads((FIXTURES / "tiny" / "greedy" / "tiny-llama-Q4_K_M__pub.json").read_text())
    r = _run("-m", TINY_MODELS / "tiny-llama-Q4_K_M.gguf", "-p", PROMPT, "-n", 48, "-c", 4096, "-t", 2, "-fa", "off",
             "-lm", mode, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["generated_ids"] == rec["generated_ids"]
    assert loads[-1] is False
    _run("-m", TINY_MODELS / "tiny-llama-Q4_K_M.gguf", "-p", "x", "-n", 1, "--json")
    assert loads[-1] is True  # the default maps the file


def test_load_mode_mlock_is_mapped_with_a_note():
    """-lm mlock: decode's own -lm option (not the ignored-option note other commands give), which maps the
    weights without locking them, and says so."""
    r = CliRunner().invoke(cli, ["decode", "-m", str(TINY_MODELS / "tiny-llama-F32.gguf"), "-p", "x", "-n", "1",
                                 "-lm", "mlock"])
    assert r.exit_code == 0, r.output
    assert "does not lock the weights" in r.stderr and "is ignored" not in r.stderr


def test_text_output_and_perf_lines(tmp_path):
    r = CliRunner().invoke(cli, ["decode", "-m", str(TINY_MODELS / "tiny-llama-F32.gguf"), "-p", PROMPT, "-n", "8",
                                 "-ctk", "f32", "-ctv", "f32", "-fa", "off"])
    assert r.exit_code == 0, r.output
    rec = json.loads((FIXTURES / "tiny" / "greedy" / "tiny-llama-F32__pub__kvf32.json").read_text())
    from tokenizer import load_tokenizer

    tok = load_tokenizer(TINY_MODELS / "tiny-llama-F32.gguf")
    want = b"".join(tok.token_to_piece(i, special=False) for i in rec["generated_ids"][:8]).decode("utf-8", "replace")
    # the prompt is echoed as its token pieces (llama-completion's display_prompt): SPM's "▁Hello" is " Hello"
    assert r.stdout.startswith(" " + PROMPT)
    assert r.stdout.rstrip("\n").endswith(want)
    assert re.search(r"llama_perf_context_print: prompt eval time = +[\d.]+ ms / +7 tokens", r.stderr)
    assert re.search(r"llama_perf_context_print:        eval time = +[\d.]+ ms / +7 runs", r.stderr)


def test_prompt_file_strips_one_newline_and_no_display_prompt(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text(PROMPT + "\n")
    r = _run("-m", TINY_MODELS / "tiny-llama-F32.gguf", "-f", f, "-n", 2, "--json")
    assert json.loads(r.stdout)["prompt_ids"] == [1, 623, 645, 268, 389, 388, 451]
    shown = _run("-m", TINY_MODELS / "tiny-llama-F32.gguf", "-p", PROMPT, "-n", 2)
    r = _run("-m", TINY_MODELS / "tiny-llama-F32.gguf", "-p", PROMPT, "-n", 2, "--no-display-prompt")
    assert r.exit_code == 0 and shown.stdout == " " + PROMPT + r.stdout  # the same run minus the echoed prompt


def test_escapes_processed_unless_no_escape():
    from tokenizer import load_tokenizer

    model = TINY_MODELS / "tiny-llama-F32.gguf"
    tok = load_tokenizer(model)
    a = json.loads(_run("-m", model, "-p", "a\\nb", "-n", 1, "--json").stdout)
    b = json.loads(_run("-m", model, "-p", "a\\nb", "-n", 1, "--json", "--no-escape").stdout)
    assert a["prompt_ids"] == tok.encode("a\nb", add_special=True, parse_special=True)
    assert b["prompt_ids"] == tok.encode("a\\nb", add_special=True, parse_special=True)
    assert 13 in a["prompt_ids"] and 13 not in b["prompt_ids"]  # <0x0A>: the tiny SPM vocabulary's newline byte


def test_context_full_stops_with_reason():
    r = _run("-m", TINY_MODELS / "tiny-llama-F32.gguf", "-p", PROMPT, "-n", -1, "-c", 256, "--json", "--ignore-eos")
    out = json.loads(r.stdout)
    assert out["stop"] == "ctx"
    assert len(out["prompt_ids"]) + len(out["generated_ids"]) == 256


@pytest.mark.parametrize("args,msg", [
    (["-m", "nope.gguf", "-p", "x"], "nope.gguf"),
    (["-m", str(TINY_MODELS / "tiny-llama-F32.gguf"), "-p", "x", "--repeat-penalty", "-1"], "repeat-penalty"),
    (["-m", str(TINY_MODELS / "tiny-llama-F32.gguf"), "-p", "x", "-b", "0"], "-b"),
    (["-m", str(VOCABS / "ggml-vocab-llama-spm.gguf"), "-p", "x"], "tensor"),
])
def test_bad_input_is_one_clear_line(args, msg):
    r = CliRunner().invoke(cli, ["decode", *args])
    assert r.exit_code != 0
    assert "Traceback" not in r.output
    assert msg in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_zero_threads_and_micro_batch_mean_llama_cpps_defaults():
    """common/arg.cpp: -t 0 or less is every hardware thread; llama_context: -ub 0 (or less) is -b. Both run,
    and print what the explicit values print."""
    model = TINY_MODELS / "tiny-llama-F32.gguf"
    ref = _run("-m", model, "-p", PROMPT, "-n", 8, "-b", 5, "-ub", 5, "--json")
    for t, ub in ((0, 0), (-1, -3)):
        r = _run("-m", model, "-p", PROMPT, "-n", 8, "-b", 5, "-ub", ub, "-t", t, "--json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["generated_ids"] == json.loads(ref.stdout)["generated_ids"]
    from synapse_cli.commands.llama_flags import batch_sizes, threads_value

    assert [batch_sizes(64, ub) for ub in (0, -1, 1, 512)] == [(64, 64), (64, 64), (64, 1), (64, 512)]
    assert [threads_value(None, None, t) for t in (None, 0, -2, 3)] == [None, None, None, 3]


@pytest.mark.real
def test_real_model_generates_llama_tokens():
    model = real_model_path("SmolLM2-135M-Instruct.Q4_1.gguf")
    rec = json.loads((FIXTURES / "real" / "greedy" / "SmolLM2-135M-Instruct.Q4_1__p1_plain.json").read_text())
    r = _run("-m", model, "-p", rec["prompt"], "-n", 32, "-c", 4096, "-fa", "off", "--json")
    out = json.loads(r.stdout)
    assert out["prompt_ids"] == rec["prompt_ids"]
    # the first steps have top-2 gaps far above llama.cpp's own batch noise: they must agree
    assert out["generated_ids"][:8] == rec["generated_ids"][:8]


@pytest.mark.real
@pytest.mark.parametrize("prompt", ["p1_plain", "p2_code", "p3_chat"])
def test_llama_batch_order_reproduces_llama_cpp_exactly(prompt):
    """With --llama-batch-order, SmolLM2's whole greedy run is llama.cpp's: every id and the text (its logits
    are bit-identical, tests/test_model_agreement.py); the default batch-invariant order differs slightly on
    the longer prompts (README, "Agreement")."""
    model = real_model_path("SmolLM2-135M-Instruct.Q4_1.gguf")
    rec = json.loads((FIXTURES / "real" / "greedy" / f"SmolLM2-135M-Instruct.Q4_1__{prompt}.json").read_text())
    r = _run("-m", model, "-p", rec["prompt"], "-n", 32, "-c", 4096, "-t", 2, "--llama-batch-order", "-fa", "off",
             "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["prompt_ids"] == rec["prompt_ids"]
    assert out["generated_ids"] == rec["generated_ids"]
    assert out["text"] == rec["text"]


@pytest.mark.parametrize("fa", ["on", "auto"])
def test_flash_attention_prompt_in_any_split_equals_token_by_token(fa):
    """-fa on/auto: the default mode stays batch-invariant (every query row runs ggml's one-row kernel)."""
    import numpy as np

    from synapse_cli.model import Context, Model
    from tokenizer import load_tokenizer

    model = Model.load(TINY_MODELS / "tiny-llama-Q8_0.gguf")
    ids = load_tokenizer(model.reader).encode(PROMPT + " jumps over the lazy dog", add_special=True, parse_special=True)
    whole = Context(model, n_ctx=256, flash_attn=True).decode(ids, all_logits=True)
    ctx = Context(model, n_ctx=256, flash_attn=True)
    one = np.stack([ctx.decode([t]) for t in ids])
    assert np.array_equal(whole, one)
    r = _run("-m", TINY_MODELS / "tiny-llama-Q8_0.gguf", "-p", PROMPT, "-n", 4, "-fa", fa, "-no-cnv", "--json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)["generated_ids"]) == 4


def test_quantized_v_cache_enables_flash_attention_unless_it_is_off():
    """llama.cpp's default -fa auto turns flash attention on for a quantized V cache; -fa off is an error."""
    r = _run("-m", TINY_MODELS / "tiny-llama-Q8_0.gguf", "-p", PROMPT, "-n", 2, "-ctk", "q8_0", "-ctv", "q8_0", "--json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)["generated_ids"]) == 2
    r = CliRunner().invoke(cli, ["decode", "-m", str(TINY_MODELS / "tiny-llama-Q8_0.gguf"), "-p", "x", "-ctv", "q8_0",
                                 "-fa", "off"])
    assert r.exit_code != 0 and "quantized V cache requires flash_attn" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.real
def test_end_of_generation_is_reported_and_marked():
    """A chat prompt the model answers and closes: the run stops at the EOS token, says "eos", and text mode
    ends as llama-completion's does (" [end of text]" then the closing empty lines)."""
    model = real_model_path("SmolLM2-135M-Instruct.Q4_1.gguf")
    p = r"<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    out = json.loads(_run("-m", model, "-p", p, "-n", 40, "--json").stdout)
    assert out["stop"] == "eos" and out["generated_ids"][-1] == 2 and len(out["generated_ids"]) < 40
    r = _run("-m", model, "-p", p, "-n", 40)
    assert r.stdout.endswith(" [end of text]\n\n\n")


def test_n_predict_zero_generates_nothing():
    """llama-completion -n 0 runs no generation loop: no token, no prompt echo, only the closing lines."""
    out = json.loads(_run("-m", TINY_MODELS / "tiny-llama-F32.gguf", "-p", PROMPT, "-n", 0, "--json").stdout)
    assert out["generated_ids"] == [] and out["stop"] == "limit"
    assert _run("-m", TINY_MODELS / "tiny-llama-F32.gguf", "-p", PROMPT, "-n", 0).stdout == "\n\n"


def test_prompt_too_long_fails_before_any_output(tmp_path):
    f = tmp_path / "long.txt"
    f.write_text("word " * 400)
    r = CliRunner().invoke(cli, ["decode", "-m", str(TINY_MODELS / "tiny-llama-F32.gguf"), "-f", str(f), "-c", "10"])
    assert r.exit_code != 0 and r.stdout == ""
    assert "prompt is too long" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_prompt_bytes_that_are_not_utf8_are_tokenized(tmp_path):
    """-f and -p take raw bytes as llama.cpp does (the same ids as tokenize, which checks against llama-tokenize)."""
    f = tmp_path / "bad.txt"
    f.write_bytes(b"ab\xffcd\n")
    a = json.loads(_run("-m", TINY_MODELS / "tiny-llama-F32.gguf", "-f", f, "-n", 1, "--json").stdout)
    b = json.loads(_run("-m", TINY_MODELS / "tiny-llama-F32.gguf", "-p", r"ab\xffcd", "-n", 1, "--json").stdout)
    from tokenizer import load_tokenizer

    want = load_tokenizer(TINY_MODELS / "tiny-llama-F32.gguf").encode(b"ab\xffcd", add_special=True, parse_special=True)
    assert a["prompt_ids"] == b["prompt_ids"] == want


def test_flash_attn_takes_llama_cpp_spellings():
    """-fa as common/arg.cpp parses it: on|enabled|true|1, off|disabled|false|0, auto|-1 (a quantized V cache needs
    it on, as in llama.cpp; auto announces itself on stderr); anything else is a usage error."""
    model = TINY_MODELS / "tiny-llama-Q8_0.gguf"
    for value in ("on", "enabled", "true", "1"):
        r = _run("-m", model, "-p", "Hello", "-n", 2, "-ctv", "q8_0", "-fa", value)
        assert r.exit_code == 0, (value, r.output)
        assert "Flash Attention enabled" not in r.stderr
    for value in ("off", "disabled", "false", "0"):
        r = _run("-m", model, "-p", "Hello", "-n", 2, "-ctv", "q8_0", "-fa", value)
        assert r.exit_code == 1 and "quantized V cache requires flash_attn to be enabled" in r.stderr, value
    for value in ("auto", "-1"):  # auto resolves to on (on a CPU); eval-callback logs that, as llama.cpp does
        assert _run("-m", model, "-p", "Hello", "-n", 2, "-ctv", "q8_0", "-fa", value).exit_code == 0, value
    for value, logged in (("-1", True), ("auto", True), ("1", False)):
        r = CliRunner().invoke(cli, ["eval-callback", "-m", str(model), "-p", "Hello", "--no-values", "-fa", value])
        assert r.exit_code == 0 and ("resolve_fused_ops: Flash Attention enabled" in r.stderr) == logged, value
    for value in ("ON", "yes", ""):
        assert _run("-m", model, "-p", "Hello", "-n", 2, "-fa", value).exit_code == 2, value


def test_prompt_and_file_the_last_one_counts(tmp_path):
    """-p and -f both set llama.cpp's prompt (common/arg.cpp), so the one given last counts; the file is read
    either way, and one that cannot be read is an error even before a later -p."""
    model = TINY_MODELS / "tiny-llama-Q8_0.gguf"
    f = tmp_path / "p.txt"
    f.write_text("Bonjour le monde\n")

    def ids(*args):
        r = _run("-m", model, "-n", 1, "--json", *args)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["prompt_ids"]

    from_file, from_p = ids("-f", f), ids("-p", "Hello")
    assert from_file != from_p
    assert ids("-p", "Hello", "-f", f) == from_file
    assert ids("-f", f, "-p", "Hello") == from_p
    r = _run("-m", model, "-n", 1, "-f", tmp_path / "missing.txt", "-p", "Hello")
    assert r.exit_code == 1 and "failed to open file" in r.stderr and r.stderr.count("\n") == 1
