"""`synapse tokenize` against llama-tokenize's recorded output, its flags, batch mode and bad input.

* the 64 `pieces/<vocab>__<case>.txt` files (raw stdout of `llama-tokenize -m V -f F --log-disable
  --no-escape`) byte for byte: through the command's renderer for all, end to end for a few;
* --ids / --show-count / escape processing / --jsonl batch (checked against the fixtures' jsonl ids);
* missing files, invalid UTF-8, a GGUF without vocabulary, an unknown pre-tokenizer: one `Error:` line on
  stderr, exit code 1, no traceback;
* in a fresh interpreter the command imports neither numba nor any compute kernel, and starts fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from functools import lru_cache

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, REPO, TINY_MODELS, VOCABS, real_model_path, write_vocab_gguf

from synapse_cli.cli import cli
from synapse_cli.commands.tokenize import process_escapes, render_pieces
from tokenizer import load_tokenizer

PIECES = sorted((FIXTURES / "tokenizer" / "pieces").glob("*.txt"))
TEXTS = {d["case_id"]: d["text"] for d in json.loads((FIXTURES / "tokenizer" / "texts.json").read_text("utf-8"))}
TINY = str(VOCABS / "ggml-vocab-tiny-spm.gguf")
QWEN = str(VOCABS / "ggml-vocab-qwen2.gguf")


def model_path(vocab: str) -> str:
    return str(VOCABS / f"{vocab}.gguf") if vocab.startswith("ggml-vocab-") else str(real_model_path(f"{vocab}.gguf"))


@lru_cache(maxsize=None)
def tok_for(path: str):
    return load_tokenizer(path)


def run(args, input=None):
    return CliRunner().invoke(cli, ["tokenize", *args], input=input)


def test_pieces_files_present():
    assert len(PIECES) == 64


@pytest.mark.parametrize("path", PIECES, ids=[p.stem for p in PIECES])
def test_pieces_render_exactly(path):
    vocab, case = path.stem.split("__")
    tok = tok_for(model_path(vocab))
    add = tok.vocab.add_bos  # llama-tokenize: add_special = model's add_bos (no --no-bos)
    assert render_pieces(tok, tok.encode(TEXTS[case], add, True)) == path.read_bytes()


@pytest.mark.parametrize("stem", ["ggml-vocab-tiny-spm__emoji", "ggml-vocab-qwen2__chatml", "ggml-vocab-llama-bpe__python_code"])
def test_pieces_end_to_end(stem, tmp_path):
    vocab, case = stem.split("__")
    f = tmp_path / "text.txt"
    f.write_bytes(TEXTS[case].encode())
    r = run(["-m", model_path(vocab), "-f", str(f), "--log-disable", "--no-escape"])
    assert r.exit_code == 0, r.output
    assert r.stdout_bytes == (FIXTURES / "tokenizer" / "pieces" / f"{stem}.txt").read_bytes()


def test_ids_and_count():
    r = run(["-m", TINY, "-p", "Hello world, the quick brown fox", "--ids", "--show-count"])
    assert r.exit_code == 0
    assert r.stdout_bytes == b"[1, 623, 645, 268, 389, 388, 451]\nTotal number of tokens: 7\n"
    r = run(["-m", TINY, "-p", "Hello world, the quick brown fox", "--ids", "--no-bos"])
    assert r.stdout_bytes == b"[623, 645, 268, 389, 388, 451]\n"


def test_parse_special_flag():
    on = run(["-m", QWEN, "-p", "<|im_start|>", "--ids"]).stdout_bytes
    off = run(["-m", QWEN, "-p", "<|im_start|>", "--ids", "--no-parse-special"]).stdout_bytes
    assert on == b"[151644]\n" and off != on


def test_json_output():
    r = run(["-m", TINY, "-p", "Hello", "--json"])
    d = json.loads(r.stdout_bytes)
    assert d["ids"] == [1, 623] and d["pieces"] == ["<s>", " Hello"]


def test_escapes():
    tok = tok_for(QWEN)
    nl = run(["-m", QWEN, "-p", "a\\nb", "--ids"]).stdout_bytes
    raw = run(["-m", QWEN, "-p", "a\\nb", "--ids", "--no-escape"]).stdout_bytes
    assert nl == f"{tok.encode('a' + chr(10) + 'b', False, True)}\n".encode()
    assert raw == f"{tok.encode('a' + chr(92) + 'nb', False, True)}\n".encode()
    assert process_escapes(rb"\x41\t\'\"\\\q\x4") == b"A\t'\"\\\\q\\x4"
    assert process_escapes(b"\\x 9") == b"\t"  # strtol skips a leading space
    assert process_escapes(b"end\\") == b"end\\"


def test_file_escapes_and_stdin(tmp_path):
    tok = tok_for(QWEN)
    f = tmp_path / "p.txt"
    f.write_bytes(b"x\\ty\n")
    expected = f"{tok.encode('x' + chr(9) + 'y' + chr(10), False, True)}\n".encode()
    assert run(["-m", QWEN, "-f", str(f), "--ids"]).stdout_bytes == expected  # verbatim, then escapes
    assert run(["-m", QWEN, "--stdin", "--ids"], input=b"x\\ty\n").stdout_bytes == expected


def test_jsonl_batch_matches_fixture(tmp_path):
    lines = [json.loads(x) for x in (FIXTURES / "tokenizer" / "ggml-vocab-qwen2.jsonl").read_text("utf-8").splitlines()]
    req = tmp_path / "req.jsonl"
    req.write_text("".join(json.dumps({k: d[k] for k in ("text", "add_special", "parse_special")}) + "\n"
                           for d in lines), encoding="utf-8")
    r = run(["-m", QWEN, "--jsonl", str(req)])
    assert r.exit_code == 0, r.output
    got = [json.loads(x)["ids"] for x in r.stdout_bytes.decode().splitlines()]
    assert got == [d["ids"] for d in lines]
    r = run(["-m", TINY, "--jsonl", "-"], input='{"text": "Hello"}\n{"text": "Hello", "add_special": false}\n')
    assert r.stdout_bytes == b'{"ids": [1, 623]}\n{"ids": [623]}\n'


def _assert_clean_error(r, needle: str):
    assert r.exit_code == 1, (r.exit_code, r.output)
    err = r.stderr_bytes.decode()
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("Error:"), err
    assert needle in err, err


def test_bad_input(tmp_path):
    _assert_clean_error(run(["-m", str(tmp_path / "nope.gguf"), "-p", "x"]), "nope.gguf")
    _assert_clean_error(run(["-m", TINY, "-f", str(tmp_path / "nope.txt")]), "nope.txt")
    _assert_clean_error(run(["-m", TINY]), "--prompt")
    _assert_clean_error(run(["-m", TINY, "-p", ""]), "--prompt")  # (llama-tokenize: an empty -p is none)
    novocab = write_vocab_gguf(tmp_path / "novocab.gguf", {"general.name": "x"})
    _assert_clean_error(run(["-m", novocab, "-p", "x"]), "no vocabulary")
    weird = write_vocab_gguf(tmp_path / "weird.gguf", {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "no-such-pre",
                                                       "tokenizer.ggml.tokens": ["a", "b"], "tokenizer.ggml.merges": ["a b"]})
    _assert_clean_error(run(["-m", weird, "-p", "x"]), "unknown pre-tokenizer type: 'no-such-pre'")
    req = tmp_path / "bad.jsonl"
    req.write_text('{"text": "ok"}\nnot json\n')
    r = run(["-m", TINY, "--jsonl", str(req)])
    assert r.exit_code == 1 and "bad.jsonl:2" in r.stderr_bytes.decode()


def test_fresh_process_imports_no_numba_and_starts_fast():
    probe = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "from synapse_cli.cli import main\n"
        f"sys.argv = ['synapse', 'tokenize', '-m', {TINY!r}, '-p', 'Hello', '--ids']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "mods = sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite', 'kernels'))\n"
        "print(mods, time.perf_counter() - t, file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    wall = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr
    assert p.stdout == "[1, 623]\n"
    mods = eval(p.stderr.rsplit("]", 1)[0] + "]")
    # the numba-free bottom of kernels/ only: errors, the type table and the GGUF reader
    assert set(mods) <= {"kernels", "kernels.errors", "kernels.ggml_type", "kernels.gguf"}, mods
    assert wall < 2.0, wall  # ~0.4 s on an idle core


REF_TOKENIZE = REPO / "tests" / "reference" / "tokenize"


@pytest.mark.parametrize("case", ["invalid-utf8-1", "invalid-utf8-2"])
@pytest.mark.parametrize("model", ["tiny-llama-F32", "SmolLM2-135M-Instruct.Q4_1"])
def test_invalid_utf8_is_tokenized_as_llama_tokenize_does(case, model):
    """Bytes that are not valid UTF-8 are tokenized, not refused: llama-tokenize's output byte for byte
    (tests/reference/README.md), from -f and from the same bytes given with -p."""
    if model.startswith("tiny"):
        path = str(TINY_MODELS / f"{model}.gguf")
    else:
        path = str(real_model_path(f"{model}.gguf"))
    want = (REF_TOKENIZE / f"{case}.{model}.out").read_bytes()
    r = run(["-m", path, "-f", str(REF_TOKENIZE / f"{case}.txt")])
    assert r.exit_code == 0 and r.stdout_bytes == want
