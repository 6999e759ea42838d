"""Round trips and the streaming decoder.

* byte-level BPE loses nothing: detokenize(encode(s)) == s for random Unicode text (for vocabularies
  with clean_up_tokenization_spaces, == s after llama.cpp's three space-cleaning passes, which we check
  separately against hand-made cases);
* the streamer returns exactly the text of the pieces, never a partial character, holds incomplete
  multi-byte sequences back and turns hopeless bytes into U+FFFD one per byte; over the greedy
  fixtures it reproduces what llama-completion printed (the prompts tokenize to the recorded ids too).
"""

from __future__ import annotations

import json
from functools import lru_cache

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, VOCABS, real_model_path

from tokenizer import load_tokenizer
from tokenizer.bpe import BYTE_SYMBOL
from tokenizer.tokenizer import _clean_spaces

BPE_VOCABS = ["ggml-vocab-qwen2", "ggml-vocab-llama-bpe", "ggml-vocab-tekken", "ggml-vocab-gpt-2",
              "ggml-vocab-deepseek-llm", "ggml-vocab-starcoder", "ggml-vocab-falcon"]

# no surrogates, and (as test-tokenizer-1-bpe) no codepoints of the unassigned planes 4-13
unicode_text = st.text(st.characters(max_codepoint=0x3FFFF, exclude_categories=("Cs",)), max_size=80) | st.lists(
    st.sampled_from(list("ab ,.?!'\n\t") + ["é", "中", "\U0001f999", " 's", " 've", "\u200d", "  ", "\xa0"]),
    max_size=40).map("".join)


@lru_cache(maxsize=None)
def tok_for(name: str):
    return load_tokenizer(VOCABS / f"{name}.gguf")


@pytest.mark.parametrize("name", BPE_VOCABS)
def test_bpe_round_trip(name):
    tok = tok_for(name)
    # bytes the vocabulary has no token for are dropped by llama.cpp too (falcon, starcoder: a few)
    missing = {b for b in range(256) if BYTE_SYMBOL[b] not in tok.vocab.token_to_id}

    @settings(max_examples=60, deadline=None)
    @given(unicode_text)
    def check(s):
        assume(not missing.intersection(s.encode()))
        ids = tok.encode(s, add_special=False, parse_special=False)
        expected = s.encode()
        if tok.vocab.clean_spaces:
            expected = _clean_spaces(bytearray(expected)) if expected else expected
        assert tok.detokenize_bytes(ids) == expected

    check()


@pytest.mark.parametrize("raw,clean", [
    (b"a , b . c ? d ! e", b"a, b. c? d! e"),
    (b"it ' s", b"it's"),  # pass 2 joins " ' " , pass 3 does not apply then
    (b"he 's she 'm we 're they 've", b"he's she'm we're they've"),
    (b"do n't 'll 'd", b"do n't 'll 'd"),  # " 't", " 'd", " 'll" keep their space
    (b" ?", b"?"),  # the write index starts at 1, so a leading " ?" loses its space too
])
def test_clean_spaces_passes(raw, clean):
    assert _clean_spaces(bytearray(raw)) == clean


@pytest.mark.parametrize("name", ["ggml-vocab-qwen2", "ggml-vocab-tiny-spm", "ggml-vocab-llama-spm"])
def test_streamer_matches_pieces(name):
    tok = tok_for(name)

    @settings(max_examples=40, deadline=None)
    @given(unicode_text)
    def check(s):
        ids = tok.encode(s, add_special=True, parse_special=False)
        st_ = tok.streamer()
        parts = [st_.push(i) for i in ids]
        parts.append(st_.flush())
        pieces = b"".join(tok.token_to_piece(i, special=False) for i in ids)
        assert "".join(parts).encode() == pieces  # valid text: streamed exactly, in pieces
        assert all("\ufffd" not in p for p in parts) or "\ufffd" in s

    check()


def test_streamer_holds_back_partial_characters():
    tok = tok_for("ggml-vocab-tiny-spm")  # llama emoji = 4 byte-fallback tokens
    ids = tok.encode("\U0001f999", add_special=False, parse_special=False)
    byte_ids = [i for i in ids if tok.vocab.is_byte(i)]
    assert len(byte_ids) == 4
    s = tok.streamer()
    out = [s.push(i) for i in ids]
    assert "".join(out).endswith("\U0001f999") and out[-1].endswith("\U0001f999")
    assert all("\ufffd" not in o for o in out)
    # a sequence that can never complete comes out as one U+FFFD per byte, at once
    ff = tok.vocab.token_to_id[b"<0xFF>"]
    e2 = tok.vocab.token_to_id[b"<0xE2>"]
    s = tok.streamer()
    assert s.push(e2) == ""  # could still become a character
    assert s.push(ff) == "\ufffd\ufffd"  # 0xE2 0xFF: both hopeless
    assert s.push(e2) == ""
    assert s.flush() == "\ufffd"


def test_streamer_special_flag():
    tok = tok_for("ggml-vocab-tiny-spm")
    assert tok.streamer().push(1) == ""  # <s> is CONTROL
    assert tok.streamer(special=True).push(1) == "<s>"


GREEDY = sorted((FIXTURES / "tiny" / "greedy").glob("*.json")) + sorted((FIXTURES / "real" / "greedy").glob("*.json"))


@lru_cache(maxsize=None)
def tok_for_model(model: str):
    path = FIXTURES / model if model.startswith("tiny/") else real_model_path(model)
    return load_tokenizer(path)


@pytest.mark.parametrize("path", GREEDY, ids=[p.stem for p in GREEDY])
def test_streamer_reproduces_llama_completion_text(path):
    """greedy fixtures: `text` is what llama-completion printed (pieces with special=false, the final
    EOG token left out, invalid bytes as one U+FFFD each), `text_special` the same with special=true."""
    d = json.loads(path.read_text(encoding="utf-8"))
    tok = tok_for_model(d["model"])
    assert tok.encode(d["prompt"], add_special=True, parse_special=True) == d["prompt_ids"]
    gen = d["generated_ids"]
    assert (d["stop"] == "eog") == tok.vocab.is_eog(gen[-1])
    shown = gen[:-1] if d["stop"] == "eog" else gen
    assert b"".join(tok.token_to_piece(i, special=False) for i in shown).hex() == d["text_hex"]
    for special, key in ((False, "text"), (True, "text_special")):
        s = tok.streamer(special=special)
        assert "".join(s.push(i) for i in shown) + s.flush() == d[key]
