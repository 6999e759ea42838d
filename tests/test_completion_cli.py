"""`synapse decode` as llama-completion: sampled and chat runs of the real models, byte for byte
(fixtures real/completion, section 7.3), the conversation loop on a pipe and on a terminal, and clear errors for
bad sampling and chat input."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, REPO, SMOLLM2, real_model_path

CASES = sorted(p for p in (FIXTURES / "real" / "completion").glob("*.json")) + \
    sorted((REPO / "tests" / "reference" / "completion").glob("*.json"))


def _synapse(*args, stdin=subprocess.DEVNULL, cwd=None):
    return subprocess.run([sys.executable, "-m", "synapse_cli", "decode", *map(str, args)], stdin=stdin,
                          capture_output=True, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.real
@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_sampled_and_chat_runs_print_llama_completions_stdout(case, monkeypatch):
    """Every argument list of real/completion (samplers, seeds, -cnv -st -sys, --jinja; and two references made
    here, tests/reference/completion) run with --llama-batch-order prints llama-completion's exact stdout
    (in-process; the piped and terminal tests below run the real executable)."""
    from click.testing import CliRunner

    from synapse_cli.cli import cli

    rec = json.loads(case.read_text())
    args = list(rec["args"])
    args[args.index("-m") + 1] = str(real_model_path(args[args.index("-m") + 1]))
    monkeypatch.chdir(FIXTURES)  # prompt files are relative to the fixtures
    r = CliRunner().invoke(cli, ["decode", *args, "--llama-batch-order"], input=b"")
    assert r.exit_code == 0, r.stderr
    assert r.stdout_bytes == rec["stdout"].encode()
    if "--seed" in args:  # the seed is reported as llama.cpp logs it
        assert f"sampler seed: {args[args.index('--seed') + 1]}" in r.stderr


@pytest.mark.real
def test_random_seed_is_printed_and_reproduces_the_run():
    model = real_model_path(SMOLLM2)
    r = _synapse("-m", model, "-p", "Once upon a time", "-n", 12, "--temp", 0.9, "--json")
    assert r.returncode == 0, r.stderr.decode()
    first = json.loads(r.stdout)
    seed = first["sampling"]["seed"]
    assert 0 <= seed < 2**32 and first["sampling"]["chain"].endswith("dist")
    again = json.loads(_synapse("-m", model, "-p", "Once upon a time", "-n", 12, "--temp", 0.9, "-s", seed,
                                "--json").stdout)
    assert again["generated_ids"] == first["generated_ids"]


@pytest.mark.real
def test_piped_conversation_keeps_history_and_ends_at_end_of_input():
    """Turns read line by line from a pipe: each reply is followed by `\\n> `, the second turn sees the first
    (chat history in the KV cache), and the end of input ends the session as llama-completion does."""
    model = real_model_path(SMOLLM2)
    p = subprocess.run([sys.executable, "-m", "synapse_cli", "decode", "-m", str(model), "-cnv", "-sys",
                        "You are terse.", "-n", "24", "--json"], input=b"What is 2+2?\nAnd times 3?\n",
                       capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr.decode()
    obj = json.loads(p.stdout)
    assert [t["role"] for t in obj["turns"] if t["role"] == "user"] == ["user", "user"]
    assert obj["turns"][0]["content"] == "What is 2+2?" and obj["stop"] == "eof"
    assert obj["stdout"].count("\n> ") == 3 and obj["stdout"].endswith("EOF by user\n\n\n")


@pytest.mark.real
def test_interactive_chat_on_a_terminal():
    """A pty as stdin: the reply streams, `> ` asks for the next turn, Ctrl-D ends the session (exit 0); the reply
    is the one the same turn gets through a pipe."""
    model = real_model_path(SMOLLM2)
    args = ["-m", str(model), "-cnv", "-sys", "You are a helpful assistant.", "-n", "16"]
    pid, fd = pty.fork()
    if pid == 0:  # child: synapse on the terminal
        os.environ["PYTHONPATH"] = str(REPO)
        os.execv(sys.executable, [sys.executable, "-m", "synapse_cli", "decode", *args])
    out = b""

    def read_until(marker: bytes, count: int, timeout: float = 240) -> None:
        nonlocal out
        end = time.time() + timeout
        while out.count(marker) < count and time.time() < end:
            if select.select([fd], [], [], 1)[0]:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    break
        assert out.count(marker) >= count, out.decode("utf-8", "replace")

    read_until(b"> ", 1)
    os.write(fd, b"Name one primary color.\n")
    read_until(b"> ", 2)
    os.write(fd, b"\x04")  # Ctrl-D on an empty line
    read_until(b"EOF by user", 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    # the terminal echoes the typed line and ends lines with \r\n; the reply runs up to the next prompt
    reply = out.replace(b"\r\n", b"\n").split(b"> Name one primary color.\n", 1)[1].split(b"\n> ", 1)[0]
    p = subprocess.run([sys.executable, "-m", "synapse_cli", "decode", *args, "--json"],
                       input=b"Name one primary color.\n", capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr.decode()
    piped = json.loads(p.stdout)["stdout"].split("> ", 1)[1].split("\n> ", 1)[0]
    assert piped and reply == piped.encode(), (reply, piped)


@pytest.mark.real
@pytest.mark.parametrize("template", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
])
def test_hostile_chat_template_is_one_error_line(template):
    model = real_model_path(SMOLLM2)
    t0 = time.time()
    r = _synapse("-m", model, "-cnv", "-st", "-p", "hi", "--jinja", "--chat-template", template, "-n", 4)
    assert r.returncode != 0 and time.time() - t0 < 60
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error: chat template"), err


@pytest.mark.parametrize("args,message", [
    (["--repeat-penalty", "0"], "repeat-penalty must be finite and greater than 0"),
    (["--repeat-last-n", "-2"], "invalid repeat-last-n = -2"),
    (["-l", "12x"], "invalid input format"),
    (["--mirostat", "3"], "unknown mirostat version"),
    (["--seed", "abc"], "not an integer"),
])
def test_bad_sampling_flags_are_refused_before_loading(args, message):
    r = _synapse("-m", "/nonexistent.gguf", "-p", "x", *args)
    assert r.returncode != 0 and message in r.stderr.decode() and "Traceback" not in r.stderr.decode()
