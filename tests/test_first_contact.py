"""What a new user meets first: llama.cpp command lines, bad input to every command, exit codes, the process edges.

Each test here failed before its fix (issue #16): the expected behaviour is llama.cpp's where it has one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, REPO, TINY_MODELS, VOCABS

from synapse_cli.cli import cli

TINY = str(TINY_MODELS / "tiny-llama-F32.gguf")
TINY_Q8 = str(TINY_MODELS / "tiny-llama-Q8_0.gguf")


def _run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def _one_clean_line(r, needle: str = ""):
    """Non-zero exit, no traceback, one line on stderr (containing needle)."""
    assert r.exit_code != 0, r.output
    assert "Traceback" not in r.stderr and r.exception is None or isinstance(r.exception, SystemExit), r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) <= 4 and needle in r.stderr, r.stderr  # one line, or a usage error (Usage, Try, Error)


# --- llama.cpp command lines ---------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", [["--spm-infill"], ["-md", "draft.gguf"], ["-hf", "user/model"]])
def test_llama_cpp_options_synapse_lacks_are_named(flag):
    """click would read -np as -n p, -ot as -o t: they are refused by name instead."""
    r = _run("decode", "-m", TINY, "-p", "Hello", "-n", 1, *flag)
    assert r.exit_code == 2 and f"unsupported llama.cpp option {flag[0]}" in r.output


@pytest.mark.parametrize("flag", [["-ngl", "99"], ["-lv", "3"], ["--no-mmap"], ["-tb", "2"], ["-cmoe"],
                                  ["--simple-io"], ["-v"], ["--no-warmup"], ["-rea", "off"], ["--reasoning-budget", "0"],
                                  ["-ctkd", "q8_0"]])
def test_options_a_cpu_build_ignores_are_accepted_with_a_note(flag):
    r = _run("decode", "-m", TINY, "-p", "Hello", "-n", 1, *flag)
    assert r.exit_code == 0 and f"note: {flag[0]} is ignored" in r.stderr


@pytest.mark.parametrize("cmd", [["decode", "-n", 1], ["eval-callback"]])
@pytest.mark.parametrize("flag", ["-kvu", "--kv-unified"])
def test_kv_unified_is_refused_where_llama_cpp_refuses_it(cmd, flag):
    """llama-completion and llama-eval-callback refuse -kvu ("invalid argument"); llama-perplexity takes it."""
    r = _run(cmd[0], "-m", TINY, "-p", "Hi", *cmd[1:], flag)
    assert r.exit_code == 2 and "no such option" in r.output.lower() and flag in r.output
    r = _run("perplexity", "-m", TINY, "-p", "Hi", flag)
    assert "note: -kvu is ignored" in r.stderr


def test_unknown_single_dash_words_are_not_split():
    r = _run("eval-callback", "-m", TINY, "-p", "Hi", "-xyz")
    assert r.exit_code == 2 and "no such option: -xyz" in r.output
    r = _run("decode", "-m", TINY, "-p", "-hello-", "-n", 1, "--json")  # an option's value may look like one
    assert r.exit_code == 0, r.output


# --- bad input, every command ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "empty.gguf").write_bytes(b"")
    (d / "magic.gguf").write_bytes(b"NOPE" + bytes(60))
    (d / "truncated.gguf").write_bytes(open(TINY, "rb").read(5000))
    return d


@pytest.mark.parametrize("which", ["missing.gguf", "empty.gguf", "magic.gguf", "truncated.gguf"])
@pytest.mark.parametrize("cmd", [["decode", "-p", "x"], ["tokenize", "-p", "x"], ["inspect-gguf"],
                                 ["eval-callback", "-p", "x"], ["bench", "-p", "8", "-n", "0", "-r", "1"]])
def test_bad_model_files_give_one_line(bad_files, which, cmd):
    path = bad_files / which
    args = [cmd[0], str(path), *cmd[1:]] if cmd[0] == "inspect-gguf" else [cmd[0], "-m", str(path), *cmd[1:]]
    _one_clean_line(_run(*args))


@pytest.mark.parametrize("args,needle", [
    (["decode", "-m", TINY, "-p", "x", "-c", "100000000"], "GiB of memory available"),
    (["decode", "-m", TINY, "-p", "x", "-c", "-5"], "-c must be >= 0"),
    (["bench", "-m", TINY, "-p", "100000000", "-n", "0", "-r", "1", "--no-roofline"], "GiB of memory available"),
    (["decode", "-m", TINY, "-p", "x", "-ctk", "f32", "-ctv", "bf16", "-fa", "off"], "without flash attention"),
    (["eval-callback", "-m", TINY, "-p", "x", "-ctv", "q8_0", "-fa", "off"], "quantized V cache requires flash_attn"),
    (["eval-callback", "-m", TINY, "-p", "x", "--dump-dir", "/proc/no/such/dir"], "--dump-dir"),
    (["eval-callback", "-m", TINY, "-f", "/no/such/file.txt"], "failed to open file"),
    (["decode", "-m", TINY, "-f", "/no/such/file.txt"], "failed to open file"),
])
def test_absurd_numbers_and_unwritable_paths_give_one_line(args, needle):
    _one_clean_line(_run(*args), needle)


def test_cache_types_are_checked_before_the_model_is_read():
    r = _run("decode", "-m", "/no/such/model.gguf", "-p", "x", "-ctv", "q8_0", "-fa", "off")
    assert r.exit_code == 1 and "quantized V cache requires flash_attn" in r.stderr


def test_training_context_overflow_is_warned_about():
    r = _run("decode", "-m", TINY, "-p", "Hello", "-n", 1, "-c", 8192)
    assert r.exit_code == 0 and "possible training context overflow" in r.stderr


# --- eval-callback ----------------------------------------------------------------------------------------------

def test_diff_against_a_log_cut_off_mid_graph_says_so(tmp_path):
    full = FIXTURES / "tiny" / "evalcb" / "tiny-llama-Q8_0__pub__kvf16.log"
    cut = tmp_path / "cut.log"
    cut.write_bytes(full.read_bytes()[:60000])
    r = _run("eval-callback", "diff", full, cut)
    assert r.exit_code == 2 and "cut.log is incomplete" in r.stderr


def test_prompt_file_rule_is_llama_cpps(tmp_path):
    """-f: one trailing newline stripped, then escapes processed (common/arg.cpp), for eval-callback as decode."""
    f = tmp_path / "p.txt"
    f.write_bytes(b"Hello\\tworld\n")
    r = _run("eval-callback", "-m", TINY_Q8, "-f", f, "--no-values")
    assert r.exit_code == 0
    from tokenizer import load_tokenizer

    want = load_tokenizer(TINY_Q8).encode("Hello\tworld", add_special=True, parse_special=True)
    assert f"number of input tokens = {len(want)}\n" + "".join(f"  {t}\n" for t in want) in r.stderr  # the ids


# --- tokenize --jsonl ---------------------------------------------------------------------------------------------

def test_jsonl_answers_every_line():
    vocab = str(VOCABS / "ggml-vocab-llama-spm.gguf")
    r = _run("tokenize", "-m", vocab, "--jsonl", "-",
             input='{"text": "ok"}\n\n{"text": "x", "bogus": 1}\nnot json\n{"text": "Hello"}\n')
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(out) == 5 and "ids" in out[0] and "ids" in out[4]
    assert "empty line" in out[1]["error"] and "unknown key 'bogus'" in out[2]["error"] and "error" in out[3]
    assert r.exit_code == 1 and "3 of 5 lines failed" in r.stderr


# --- bench --compare ----------------------------------------------------------------------------------------------

def test_compare_that_measures_nothing_is_warned_about(tmp_path):
    stub = tmp_path / "llama-bench"
    stub.write_text(f"#!{sys.executable}\nprint('[]')\n")
    stub.chmod(0o755)
    r = _run("bench", "-m", TINY, "-p", "8", "-n", "0", "-r", "1", "--no-roofline", "--compare", stub)
    assert r.exit_code == 0 and "printed no result for pp8" in r.stderr


# --- the process: version, exit codes, pipes, encodings -------------------------------------------------------------

def _synapse(*args, env=None, **kw):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "synapse_cli", *map(str, args)], cwd=REPO, env=e,
                          capture_output=True, **kw)


def test_version_names_the_build():
    r = _synapse("--version", text=True)
    assert r.returncode == 0 and "synapse, version" in r.stdout and "(build " in r.stdout


def test_closed_pipe_ends_quietly():
    code = textwrap.dedent(f"""
        import subprocess, sys
        p = subprocess.Popen([sys.executable, "-m", "synapse_cli", "decode", "-m", {TINY!r}, "-p", "Hello",
                              "-n", "200", "--ignore-eos"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdout.read(1); p.stdout.close()
        err = p.stderr.read(); p.wait()
        print(p.returncode, len(err.strip().splitlines()), b"Traceback" in err)
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    rc, n_err, tb = r.stdout.split()
    assert rc == "-13" and tb == "False"  # killed by SIGPIPE, as llama.cpp's tools are


def test_output_is_utf8_whatever_the_locale():
    r = _synapse("decode", "-m", TINY, "-p", "Café ☕", "-n", 2, "--json", env={"PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0 and b"Traceback" not in r.stderr
    json.loads(r.stdout.decode("utf-8"))


def test_override_tensor_to_cpu_is_accepted_and_changes_nothing():
    """-ot PATTERN=CPU: a CPU build's only buffer type, whose weights llama.cpp still repacks (llama_model_loader):
    the same text, with a note; another buffer type or a value without '=' is refused as llama.cpp refuses it."""
    plain = _run("decode", "-m", TINY, "-p", "Hello", "-n", 4)
    r = _run("decode", "-m", TINY, "-p", "Hello", "-n", 4, "-ot", "ffn_.*=CPU,attn_q=CPU")
    assert r.exit_code == 0 and r.stdout == plain.stdout and "note: -ot is ignored" in r.stderr
    for value, needle in (("ffn_.*=CUDA0", "unknown buffer type"), ("ffn_", "invalid value"),
                          ("ffn_[=CPU", "invalid regular expression")):
        r = _run("decode", "-m", TINY, "-p", "Hello", "-n", 4, "-ot", value)
        assert r.exit_code == 2 and needle in r.stderr
