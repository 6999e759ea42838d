"""`synapse perplexity --hellaswag` prints llama-perplexity's HellaSwag table byte for byte (tests/reference/tasks:
its README has the commands), and bad task files get one error line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import TINY_MODELS, real_model_path

from synapse_cli.cli import cli

TASKS = Path(__file__).resolve().parent / "reference" / "tasks"
RUNS = {  # NAME -> flags (README there)
    "SmolLM2-135M-Instruct.Q4_1": ["--hellaswag-tasks", "10"],
    "tiny-llama-F32": [],
    "tiny-qwen2-F32": ["--hellaswag-tasks", "7", "-c", "128"],
    "tiny-mistral3-F32": ["-fa", "off"],
}


def _model(name: str) -> str:
    return str(TINY_MODELS / f"{name}.gguf" if name.startswith("tiny") else real_model_path(name + ".gguf"))


def _run(*args):
    return CliRunner().invoke(cli, ["perplexity", *map(str, args)])


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.real) if not n.startswith("tiny") else n
                                  for n in RUNS])
def test_hellaswag_prints_llama_perplexitys_table(name):
    r = _run("-m", _model(name), "-f", TASKS / "hellaswag-12.txt", "--hellaswag", *RUNS[name], "-t", "2")
    assert r.exit_code == 0, r.output
    assert r.stdout == (TASKS / f"{name}.hellaswag.out").read_text()
    assert "hellaswag_score : loaded 12 tasks from prompt." in r.stderr


def test_hellaswag_bad_files_are_one_line(tmp_path):
    tiny = _model("tiny-llama-F32")
    lines = (TASKS / "hellaswag-12.txt").read_text().splitlines()
    short = tmp_path / "short.txt"
    short.write_text("\n".join(lines[:10]) + "\n")
    r = _run("-m", tiny, "-f", short, "--hellaswag")
    assert r.exit_code == 1 and "number of lines in prompt not a multiple of 6" in r.stderr
    bad = tmp_path / "bad.txt"
    bad.write_text("\n".join(lines[:1] + ["x"] + lines[2:6]) + "\n")
    r = _run("-m", tiny, "-f", bad, "--hellaswag")
    assert r.exit_code == 1 and "right ending's index" in r.stderr
    r = _run("-m", tiny, "-f", TASKS / "hellaswag-12.txt", "--hellaswag", "-c", "8")  # (4 * 8 padded to 256)
    assert r.exit_code == 0 and r.stdout == (TASKS / "tiny-llama-F32.hellaswag.out").read_text()
    long = tmp_path / "long.txt"
    long.write_text("\n".join([lines[0] + " and then" * 100] + lines[1:6]) + "\n")
    r = _run("-m", tiny, "-f", long, "--hellaswag", "-c", "8")
    assert r.exit_code == 1 and "task 0 does not fit in the context window" in r.stderr


WINOGRANDE = {  # NAME -> flags (README there)
    "tiny-llama-F32": ["--winogrande-tasks", "9"],
    "tiny-qwen2-F32": ["-c", "128"],
    "tiny-mistral3-F32": ["--winogrande-tasks", "5", "-fa", "off"],
}


@pytest.mark.parametrize("name", WINOGRANDE)
def test_winogrande_prints_llama_perplexitys_lines(name):
    """Each line's running accuracy, the model's answer and the right one exactly; the two scores (six decimals of a
    float mean of log-probabilities) within 5e-4. llama.cpp packs many tasks into one batch, and its flash attention
    takes another kernel (another float order) for a large batch than for a task's few tokens, so its scores depend
    on the packing: synapse's, one task at a time in the batch-invariant order, lie up to 2.5e-4 from them here
    (with -fa off, within 1e-6: only the dot products' last bits of this AVX2 build differ). A wrong token or row
    moves a score by 1e-2 or more."""
    r = _run("-m", _model(name), "-f", TASKS / "winogrande-14.csv", "--winogrande", *WINOGRANDE[name], "-t", "2")
    assert r.exit_code == 0, r.output
    want = (TASKS / f"{name}.winogrande.out").read_text()
    got_lines, want_lines = r.stdout.split("\n"), want.split("\n")
    assert len(got_lines) == len(want_lines) and want.endswith("\n\n")
    for g, w in zip(got_lines, want_lines):
        g, w = g.split(), w.split()
        assert len(g) == len(w) and (not g or (g[:2], g[4:]) == (w[:2], w[4:])), (g, w)
        assert all(abs(float(a) - float(b)) <= 5e-4 for a, b in zip(g[2:4], w[2:4])), (g, w)
    assert "load_winogrande_from_csv: no _ in <This line has no blank and is skipped.>" in r.stderr


MULTIPLE_CHOICE = {  # NAME -> flags (README there)
    "SmolLM2-135M-Instruct.Q4_1": ["-np", "5"],
    "tiny-llama-F32": ["--multiple-choice-tasks", "6"],
    "tiny-qwen2-F32": ["-c", "128", "-np", "8"],
    "tiny-mistral3-F32": ["-np", "5", "-fa", "off"],
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.real) if not n.startswith("tiny") else n
                                  for n in MULTIPLE_CHOICE])
def test_multiple_choice_prints_llama_perplexitys_table(name):
    """stdout byte for byte (the progress dots, the table), the result and random-chance lines of stderr."""
    r = _run("-m", _model(name), "-bf", TASKS / "multiple-choice-10.bin", "--multiple-choice",
             *MULTIPLE_CHOICE[name], "-t", "2")
    assert r.exit_code == 0, r.output
    assert r.stdout == (TASKS / f"{name}.multiple-choice.out").read_text()
    assert "Final result: " in r.stderr and "Random chance: " in r.stderr


def test_multiple_choice_needs_a_sequence_per_answer(tmp_path):
    """Task 3 has five answers: llama-perplexity's default -np (4 sequences) stops there, as here."""
    r = _run("-m", _model("tiny-llama-F32"), "-bf", TASKS / "multiple-choice-10.bin", "--multiple-choice")
    assert r.exit_code == 1 and "task 2 requires a higher -np|--parallel value (at least 5)" in r.stderr
    assert r.stdout.endswith("task\tacc_norm\n1\t0.00000000\n2\t50.00000000\n")
    bad = tmp_path / "bad.bin"
    bad.write_bytes((TASKS / "multiple-choice-10.bin").read_bytes()[:200])
    r = _run("-m", _model("tiny-llama-F32"), "-bf", bad, "--multiple-choice")
    assert r.exit_code == 1 and "failed to read task" in r.stderr


def test_multiple_choice_of_a_text_file_is_one_error_line(tmp_path):
    """A text file's first four bytes claim ~2e9 tasks: llama-perplexity fails to read their positions; reading
    them first had taken minutes and gigabytes. Here the count is checked against the file's size first."""
    text = tmp_path / "text.txt"
    text.write_bytes(b"This is not a task file, only some text for a perplexity run.\n" * 4)
    r = _run("-m", _model("tiny-llama-F32"), "-f", text, "--multiple-choice", "-c", "128")
    assert r.exit_code == 1 and r.stderr.strip().splitlines()[-1] == (
        "Error: multiple_choice_score: failed to read task positions from prompt")
    assert "there are 1936287828 tasks in prompt" in r.stderr
