"""The pieces under the tokenizer, each against a slow, literal reference.

* the fast custom splitters (ASCII, BMP-class and stand-in paths, chunked long texts) against a
  line-by-line port of unicode.cpp's unicode_regex_split_custom_{gpt2,llama3,qwen2,qwen35};
* the stand-in trick's premise: no non-ASCII codepoint lowercases to an ASCII contraction letter;
* llama.cpp's lenient UTF-8 decoder, the GPT-2 byte map, the ECMAScript -> Python regex translation;
* merge_word (min-rank scan) against merge_word_queue (llama.cpp's heap);
* the libstdc++ hash and unordered_map iteration order against a linked-list simulation.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import VOCABS
from split_reference import custom_split_reference

from tokenizer import load_tokenizer
from tokenizer import unicode as U
from tokenizer import unicode_data
from tokenizer.bpe import build_ranks, merge_word, merge_word_queue, word_symbols
from tokenizer.hash_order import _RehashPolicy, hash_bytes, hash_many, iteration_order

# characters that exercise every branch of the splitters
INTERESTING = (
    list("abcxyzSTMDRELVstmdrelv'  \t\n\r\x0b\x0c0123456789.,!?-_()[]{}<>/\\\"#$%&*+=:;@^`|~")
    + ["é", "ß", "Ω", "中", "日", "한", "ا", "ж", "²", "٣", "Ⅻ", "\xa0", "\u3000", "\x85", "\u2028", "\u0301",
       "\u200b", "\u200d", "\ufeff", "\x00", "\x1f", "\x7f", "\ud7ff", "\U0001f999", "\U0001f468", "\U0001d400",
       "\U00010400", "\U000e0001", "\u0378", "\U0010fffe", "İ", "ſ", "K", "\u2581", "\u093f", "\u094d",
       "\U0001d167", "\u20dd", "\x01"]
)
texts = st.lists(st.sampled_from(INTERESTING), max_size=60).map("".join) | st.text(max_size=40)


@settings(max_examples=300, deadline=None)
@given(texts)
def test_custom_splitters_match_reference(text):
    for kind in ("gpt2", "llama3", "qwen2", "qwen35"):
        got = U.custom_split(kind, text)
        assert "".join(got) == text
        assert got == custom_split_reference(kind, text), kind


@pytest.mark.parametrize("seed", range(6))
def test_chunked_long_text_matches_reference(seed):
    """Texts over the chunk size, with astral codepoints and many newlines, take the chunked path."""
    rng = random.Random(seed)
    weights = [1.0] * len(INTERESTING)
    weights[INTERESTING.index("\n")] = 8.0 * (seed % 3)  # from no newlines at all to many
    text = "".join(rng.choices(INTERESTING, weights, k=rng.randrange(5000, 12000)))
    for kind in ("gpt2", "llama3", "qwen2", "qwen35"):
        assert U.custom_split(kind, text) == custom_split_reference(kind, text), kind


def test_stand_in_premise_no_exotic_contraction_letters():
    """The stand-in text keeps ASCII as is, so only ASCII may lowercase to s t r e v m l d."""
    letters = {ord(c) for c in "strevmld"}
    exotic = [hex(a) for a, b in zip(unicode_data.LOWER_FROM, unicode_data.LOWER_TO) if b in letters and a >= 128]
    assert exotic == []


def test_ascii_classes_equal_llama_tables():
    for cp in range(128):
        f = U.cpt_flags(cp)
        c = chr(cp)
        assert bool(f & U.LETTER) == c.isalpha()
        assert bool(f & U.NUMBER) == c.isdigit()
        assert bool(f & U.WHITESPACE) == (c in " \t\n\v\f\r")


def test_flags_table_spot_checks():
    assert U.cpt_flags(ord("a")) == U.LETTER
    assert U.cpt_flags(0x20) == U.SEPARATOR | U.WHITESPACE
    assert U.cpt_flags(0x0A) == U.CONTROL | U.WHITESPACE
    assert U.cpt_flags(0x0378) == U.UNDEFINED  # unassigned
    assert U.cpt_flags(0x110000) == U.UNDEFINED
    assert U.tolower(ord("A")) == ord("a") and U.tolower(0x0130) == ord("i")


def test_llama_utf8_decoder():
    assert U.utf8_decode_llama("héllo".encode()) == "héllo"
    assert U.utf8_decode_llama(b"a\xffb") == "a\ufffdb"
    assert U.utf8_decode_llama(b"\xe4\xbd") == "\ufffd\ufffd"  # truncated: one U+FFFD per byte
    assert U.utf8_decode_llama(b"\xc0\x80") == "\x00"  # overlong forms are accepted
    assert U.utf8_decode_llama(b"\xed\xa0\x80") == "\ud800"  # so are surrogates
    assert U.utf8_decode_llama(b"\x80A") == "\ufffdA"


def test_gpt2_byte_map():
    chars = U.BYTE_TO_UNICODE
    assert len(set(chars)) == 256
    assert chars[ord(" ")] == "\u0120" and chars[ord("\n")] == "\u010a" and chars[ord("A")] == "A"
    for b in range(256):
        assert U.byte_decode(chars[b]) == bytes([b])
    assert U.byte_decode("a\u4e2d") == b"a[UNK_BYTE_0xe4b8ada\xe4\xb8\xad]"


def test_ecmascript_translation():
    s = re.compile(U.ecma_to_python("\\s+$"))
    assert s.search("ab \t") and not s.search("ab \n x")
    assert not re.fullmatch(U.ecma_to_python("\\s"), "\xa0")  # C locale: ASCII spaces only
    assert not re.fullmatch(U.ecma_to_python("\\s"), "\x1c")
    assert re.fullmatch(U.ecma_to_python("[^(\\s|.,)]+"), "ab") and not re.fullmatch(U.ecma_to_python("[^(\\s|.,)]+"), "a b")
    c = U.collapse_regex("[\\p{P}\\$]+|\\p{N}")
    assert c == "[\xd3\x21-\x23\x25-\x2a\x2c-\x2f\x3a-\x3b\x3f-\x40\\\x5b-\\\x5d\x5f\\\x7b\\\x7d\\$]+|[\xd1\x30-\x39]"
    assert U.collapse("a中 1٣\xa0!") == "a\xd2 1\xd1\x0b!"


@lru_cache(maxsize=None)
def qwen_ranks():
    tok = load_tokenizer(VOCABS / "ggml-vocab-qwen2.gguf")
    return build_ranks(tok.vocab.merges)


@settings(max_examples=200, deadline=None)
@given(texts)
def test_merge_scan_equals_llama_heap(word):
    ranks = qwen_ranks()
    assert merge_word(word_symbols(word), ranks) == merge_word_queue(word_symbols(word), ranks)


# --- libstdc++ unordered_map -------------------------------------------------------------------------

def simulate_unordered_map(hashes: list[int]) -> list[int]:
    """Insert keys 0..n-1 into a literal model of libstdc++'s hashtable (singly linked list + bucket
    array of "before" pointers) and return the iteration order."""
    BEFORE = -1
    nxt: dict[int, int | None] = {BEFORE: None}
    pol = _RehashPolicy()
    n_bkt = 1
    buckets: list[int | None] = [None]

    def rehash(new_n: int):
        nonlocal buckets, n_bkt
        new: list[int | None] = [None] * new_n
        p = nxt[BEFORE]
        nxt[BEFORE] = None
        bbegin = 0
        while p is not None:
            after = nxt[p]
            b = hashes[p] % new_n
            if new[b] is None:
                nxt[p] = nxt[BEFORE]
                nxt[BEFORE] = p
                new[b] = BEFORE
                if nxt[p] is not None:
                    new[bbegin] = p
                bbegin = b
            else:
                nxt[p] = nxt[new[b]]
                nxt[new[b]] = p
            p = after
        buckets, n_bkt = new, new_n

    for i in range(len(hashes)):
        grow = pol.need_rehash(n_bkt, i, 1)
        if grow:
            rehash(grow)
        b = hashes[i] % n_bkt
        if buckets[b] is not None:
            nxt[i] = nxt[buckets[b]]
            nxt[buckets[b]] = i
        else:
            nxt[i] = nxt[BEFORE]
            nxt[BEFORE] = i
            if nxt[i] is not None:
                buckets[hashes[nxt[i]] % n_bkt] = i
            buckets[b] = BEFORE
    order = []
    p = nxt[BEFORE]
    while p is not None:
        order.append(p)
        p = nxt[p]
    return order


def test_hash_bytes_known_value_and_vectorized():
    assert hash_bytes(b"abc") == 3663726644998027833  # std::hash<std::string>{}("abc"), g++ 12, x86-64
    rng = random.Random(7)
    words = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40))) for _ in range(500)]
    blob = b"".join(words) + b"\x01" * 3
    offsets = np.cumsum([0] + [len(w) for w in words[:-1]]).astype(np.int64)
    lengths = np.array([len(w) for w in words], dtype=np.int64)
    buf = np.frombuffer(blob, dtype=np.uint8)
    assert hash_many(buf, offsets, lengths).tolist() == [hash_bytes(w) for w in words]


def test_iteration_order_matches_linked_list_model():
    rng = random.Random(3)
    hashes = [rng.getrandbits(64) for _ in range(3000)]
    assert iteration_order(np.array(hashes, dtype=np.uint64)).tolist() == simulate_unordered_map(hashes)
