"""The vocabulary types and pre-tokenizers added for issue #19, against llama.cpp's own outputs.

* every line of the fixtures' tokenizer-more/<vocab>.jsonl (aquila, baichuan, bert-bge = WPM, gemma-4 =
  SPM-style BPE, gpt-neox, nomic-bert-moe = UGM): ids for the three flag combinations, pieces with
  special=true and special=false, llama_detokenize for its three flag combinations;
* test-tokenizer-0 on the vocab-more .inp/.out pairs (bert-bge, gemma-4);
* test-tokenizer-0 on the vocabularies of llama.cpp's models/ folder that the fixtures do not carry
  (command-r, qwen35), read from a llama.cpp source tree ($LLAMA_CPP_DIR, default the one this project
  was built against); skipped when there is none.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import FIXTURES, MODELS

from tokenizer import load_tokenizer

MORE = FIXTURES / "tokenizer-more"
VOCAB_MORE = FIXTURES / "vocab-more"
JSONL = sorted(MORE.glob("*.jsonl"))
LLAMA_CPP = Path(os.environ.get("LLAMA_CPP_DIR", "/root/llama/llama_cpp_python-0.3.36/vendor/llama.cpp"))
SEP = "\n__ggml_vocab_test__\n"


@lru_cache(maxsize=None)
def tok_for(path: str):
    return load_tokenizer(path)


def test_fixture_files_present():
    assert [p.stem for p in JSONL] == [
        "ggml-vocab-aquila", "ggml-vocab-baichuan", "ggml-vocab-bert-bge", "ggml-vocab-gemma-4",
        "ggml-vocab-gpt-neox", "ggml-vocab-nomic-bert-moe"]


@pytest.mark.parametrize("path", JSONL, ids=[p.stem for p in JSONL])
def test_jsonl_lines(path):
    from test_tokenizer_fixtures import jsonl_mismatches

    bad = jsonl_mismatches(tok_for(str(VOCAB_MORE / f"{path.stem}.gguf")), path)
    assert not bad, f"{len(bad)} mismatches: {bad[:4]}"


def read_tests(inp: Path) -> list[tuple[str, list[int]]]:
    """test-tokenizer-0's reader: inputs split on SEP (a final separator optional), one output line each."""
    raw = inp.read_bytes().decode("utf-8")
    inputs = raw.split(SEP)
    if inputs and inputs[-1] == "":
        inputs.pop()
    outputs = inp.with_suffix(".out").read_text(encoding="utf-8").split("\n")
    if outputs and outputs[-1] == "":
        outputs.pop()
    assert len(inputs) == len(outputs), inp
    return [(s, [int(x) for x in o.split()]) for s, o in zip(inputs, outputs)]


def _tokenizer_0(gguf: Path):
    tok = tok_for(str(gguf))
    cases = read_tests(gguf.with_name(gguf.name + ".inp"))
    failures = [(t[:40], e[:12], g[:12]) for t, e in cases if (g := tok.encode(t, False, False)) != e]
    assert not failures, f"{len(failures)}/{len(cases)} differ: {failures[:3]}"
    return len(cases)


@pytest.mark.parametrize("name", ["ggml-vocab-bert-bge", "ggml-vocab-gemma-4"])
def test_tokenizer_0_vocab_more(name):
    assert _tokenizer_0(VOCAB_MORE / f"{name}.gguf") == 46


@pytest.mark.parametrize("name", ["ggml-vocab-command-r", "ggml-vocab-qwen35"])
def test_tokenizer_0_llama_cpp_models(name):
    gguf = MODELS / "llama.cpp-vocab" / f"{name}.gguf"  # `make models` takes them from the llama-cpp-python sdist
    if not gguf.exists():
        gguf = LLAMA_CPP / "models" / f"{name}.gguf"
    if not gguf.exists():
        pytest.skip(f"{gguf.name} not found (run `make models`, or set LLAMA_CPP_DIR to a llama.cpp 0c1e570 tree)")
    assert _tokenizer_0(gguf) >= 46


def test_vocabulary_types_and_flags():
    """What llama.cpp's load prints for the six vocab-more files (fixtures README, section 4)."""
    t = {p.stem: tok_for(str(VOCAB_MORE / f"{p.stem}.gguf")).vocab for p in JSONL}
    assert [t[n].type for n in sorted(t)] == ["bpe", "spm", "wpm", "bpe", "bpe", "ugm"]
    bert, gemma, nomic = t["ggml-vocab-bert-bge"], t["ggml-vocab-gemma-4"], t["ggml-vocab-nomic-bert-moe"]
    assert (bert.bos_id, bert.sep_id, bert.unk_id, bert.pad_id, bert.mask_id) == (101, 102, 100, 0, 103)
    assert (bert.add_bos, bert.add_eos, bert.add_sep, bert.lowercase, bert.strip_accents) == (True, False, True, True, True)
    assert gemma.pre_tokenizer.type == "gemma4" and gemma.escape_whitespaces and not gemma.byte_encode
    assert (gemma.bos_id, gemma.eos_id, gemma.unk_id, gemma.pad_id, gemma.mask_id) == (2, 1, 3, 0, 4)
    assert gemma.eog_ids == {1, 50, 106} and gemma.token_type(212) == 1  # "</s>" back to NORMAL
    assert (nomic.bos_id, nomic.eos_id, nomic.sep_id, nomic.unk_id, nomic.pad_id, nomic.mask_id) == (0, 2, 2, 3, 1, 250001)
    assert (nomic.add_bos, nomic.add_eos, nomic.remove_extra_whitespaces) == (True, True, True)
    assert tok_for(str(VOCAB_MORE / "ggml-vocab-gemma-4.gguf")).linefeed_id == 107
    assert tok_for(str(VOCAB_MORE / "ggml-vocab-bert-bge.gguf")).linefeed_id == 0
    assert tok_for(str(VOCAB_MORE / "ggml-vocab-nomic-bert-moe.gguf")).linefeed_id == 1  # pad: no newline token


# --- RWKV: a small vocabulary made here, against llama-tokenize (tests/reference/rwkv) -----------------

RWKV = Path(__file__).resolve().parent / "reference" / "rwkv"


@pytest.fixture(scope="module")
def rwkv_vocab(tmp_path_factory) -> str:
    """The vocabulary the references were made with, written again by its script (not committed)."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("rwkv") / "ggml-vocab-tiny-rwkv.gguf"
    subprocess.run([sys.executable, str(RWKV / "make_vocab.py"), str(FIXTURES / "tokenizer" / "texts.json"),
                    str(out)], check=True, capture_output=True)
    return str(out)


def test_rwkv_ids_equal_llama_tokenize(rwkv_vocab):
    tok = tok_for(rwkv_vocab)
    assert tok.vocab.type == "rwkv" and not tok.vocab.add_bos
    texts = {d["case_id"]: d["text"] for d in json.loads((FIXTURES / "tokenizer" / "texts.json").read_text(encoding="utf-8"))}
    lines = [json.loads(x) for x in (RWKV / "ids.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 88
    bad = [(d["case_id"], d["parse_special"]) for d in lines
           if tok.encode(texts[d["case_id"]], True, d["parse_special"]) != d["ids"]]
    assert not bad, bad


@pytest.mark.parametrize("case", ["multi_script", "emoji", "python_code", "spm_specials"])
def test_rwkv_pieces_equal_llama_tokenize(case, rwkv_vocab):
    from synapse_cli.commands.tokenize import render_pieces

    tok = tok_for(rwkv_vocab)
    text = {d["case_id"]: d["text"] for d in json.loads((FIXTURES / "tokenizer" / "texts.json").read_text(encoding="utf-8"))}[case]
    assert render_pieces(tok, tok.encode(text, True, True)) == (RWKV / f"pieces__{case}.txt").read_bytes()


def test_rwkv_unescape():
    from tokenizer.rwkv import unescape_rwkv_token

    assert unescape_rwkv_token(b"a\\tb\\n\\r\\x41\\\\\\q") == b"a\tb\n\rA\\q"
    assert unescape_rwkv_token(b"\\xff\\xe4") == b"\xff\xe4"
