"""Every llama.cpp pre-tokenizer type: its regex list and its splits, against llama.cpp's own unicode_regex_split.

tests/reference/regex_split/ holds the regex_exprs of all 60 LLAMA_VOCAB_PRE_TYPE_* read from llama.cpp
0c1e570's llama-vocab.cpp (input.json) and what unicode_regex_split made of 298 texts with each list
(splits.json: word lengths in codepoints), produced by tests/reference/harness/regex_split.cpp (commands in
tests/reference/README.md). synapse's table must hold the same strings (llama.cpp chooses its custom
splitters by string comparison) and its RegexSplitter must cut every text at the same places.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from tokenizer.pretokenizers import BYTE_ENCODE_OFF, PRE_TOKENIZERS, PRE_TYPE_REGEXES
from tokenizer.unicode import RegexSplitter

REF = Path(__file__).resolve().parent / "reference" / "regex_split"


@lru_cache(maxsize=None)
def reference():
    inp = json.loads((REF / "input.json").read_text(encoding="utf-8"))
    splits = json.loads((REF / "splits.json").read_text(encoding="utf-8"))
    return inp, splits


def test_table_is_llama_cpps():
    inp, splits = reference()
    types = inp["types"]
    assert len(types) == 60 and set(splits) == set(types)
    assert {t.lower() for t in types} == set(PRE_TYPE_REGEXES)
    for name, t in types.items():
        assert PRE_TYPE_REGEXES[name.lower()] == tuple(t["regexes"]), name
        assert (name.lower() not in BYTE_ENCODE_OFF) == t["byte_encode"], name
    assert {p.type for p in PRE_TOKENIZERS.values()} <= set(PRE_TYPE_REGEXES)
    assert len(PRE_TOKENIZERS) == 91  # every tokenizer.ggml.pre name llama_vocab::impl::load knows


def test_flags_spot_checks():
    """A few of llama_vocab::impl::load's per-name flags."""
    P = PRE_TOKENIZERS
    assert P["llama-bpe"].ignore_merges and P["llama-bpe"].add_bos and P["llama-bpe"].clean_spaces
    assert not P["qwen35"].clean_spaces and P["qwen35"].type == "qwen35"
    assert P["gemma4"].escape_whitespaces and not P["gemma4"].byte_encode and P["gemma4"].clean_spaces
    assert P["sarvam-moe"].escape_whitespaces and not P["sarvam-moe"].clean_spaces
    assert P["glm4"].bos_null and P["glm4"].ignore_merges and P["chatglm-bpe"].bos_null
    assert P["roberta-bpe"].add_sep and P["whitespace"].lowercase is False
    assert P["chameleon"].add_bos and P["minicpm5"].ignore_merges and P["youtu"].ignore_merges
    assert P["megrez"].type == "qwen2" and P["megrez"].clean_spaces  # qwen2's regex, not its flags
    assert P["llama4"].type == "gpt4o" and P["pixtral"].type == "llama3"


@pytest.mark.parametrize("pre_type", sorted(PRE_TYPE_REGEXES))
def test_splits_equal_llama_cpp(pre_type):
    inp, splits = reference()
    name = pre_type.upper()
    splitter = RegexSplitter(list(PRE_TYPE_REGEXES[pre_type]))
    bad = []
    for i, (text, lens) in enumerate(zip(inp["texts"], splits[name])):
        if lens is None:  # llama.cpp throws (kimi-k2 and afmoe on ""); llama_tokenize never splits ""
            assert text == ""
            continue
        got = [len(w) for w in splitter.split(text)]
        if got != lens:
            bad.append((i, text[:30], got[:10], lens[:10]))
    assert not bad, f"{len(bad)} texts split differently: {bad[:3]}"
