"""Every line of the fixtures' tokenizer/<vocab>.jsonl: llama_tokenize ids for the three flag combinations,
the pieces (llama_token_to_piece, special=true) and llama_detokenize for its three flag combinations.

The real models' vocabularies are read from models/*.gguf and skipped when not fetched.
"""

from __future__ import annotations

import json
from functools import lru_cache

import pytest

from conftest import FIXTURES, VOCABS, real_model_path

from tokenizer import load_tokenizer

JSONL = sorted((FIXTURES / "tokenizer").glob("*.jsonl"))


@lru_cache(maxsize=None)
def tok_for(name: str):
    path = VOCABS / f"{name}.gguf" if name.startswith("ggml-vocab-") else real_model_path(f"{name}.gguf")
    return load_tokenizer(path)


def test_fixture_files_present():
    assert len(JSONL) == 8, JSONL


def jsonl_mismatches(tok, path: Path) -> list:
    """Every line of a llama-tokenize record (tokenizer/, tokenizer-more/: 132 lines) against `tok`: ids, pieces
    (with and, where recorded, without specials) and the four detokenizations; the mismatches found."""
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 132
    bad = []
    for d in lines:
        where = (d["case_id"], d["add_special"], d["parse_special"])
        ids = tok.encode(d["text"], d["add_special"], d["parse_special"])
        if ids != d["ids"]:
            bad.append(("ids", where, d["ids"][:12], ids[:12]))
            continue
        if [tok.token_to_piece(i, special=True).hex() for i in ids] != d["pieces_hex"]:
            bad.append(("pieces", where))
        if "pieces_nospecial_hex" in d and \
                [tok.token_to_piece(i, special=False).hex() for i in ids] != d["pieces_nospecial_hex"]:
            bad.append(("pieces_nospecial", where))
        for key, exp in d["detok"].items():
            rs = "remove_special=true" in key
            us = "unparse_special=true" in key
            raw = tok.detokenize_bytes(ids, remove_special=rs, unparse_special=us)
            if raw.hex() != exp["hex"] or tok.detokenize(ids, rs, us) != exp["text"]:
                bad.append(("detok", where, key))
            if "valid_utf8" in exp and (raw.decode("utf-8", "ignore").encode() == raw) != exp["valid_utf8"]:
                bad.append(("valid_utf8", where, key))
    return bad


@pytest.mark.parametrize("path", JSONL, ids=[p.stem for p in JSONL])
def test_jsonl_lines(path):
    bad = jsonl_mismatches(tok_for(path.stem), path)
    assert not bad, f"{len(bad)} mismatches: {bad[:4]}"


def test_spm_space_prefix_after_specials():
    """README example: tiny-spm `<s>Hello</s>` with (true, true) is [1, 1, 623, 2]."""
    tok = tok_for("ggml-vocab-tiny-spm")
    assert tok.encode("<s>Hello</s>", True, True) == [1, 1, 623, 2]
    assert tok.encode("Hello world, the quick brown fox", True, True) == [1, 623, 645, 268, 389, 388, 451]
