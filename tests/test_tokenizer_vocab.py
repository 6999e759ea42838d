"""Tokenizer vs llama.cpp's own vocabulary tests and load-time logs.

* every ggml-vocab-*.gguf.inp/.out pair of ../shared/fixtures/vocab, under test-tokenizer-0's rules
  (tests/test-tokenizer-0.cpp: inputs split on "\\n__ggml_vocab_test__\\n", add_special=false,
  parse_special=false, ids compared exactly);
* test-tokenizer-1-spm's round trips on the SPM vocabularies (token -> text -> tokens -> same text,
  codepoint -> tokens -> same codepoint), on a seeded sample;
* what llama.cpp prints while loading the vocabularies of the tiny and real models (eval-callback logs):
  BOS/EOS/EOT/UNK/PAD/LF/FIM ids, the end-of-generation set, the special-token cache size, the max
  token length and the size of the token-to-piece cache (which sums every piece).
"""

from __future__ import annotations

import random
import re
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import FIXTURES, QWEN_05B, QWEN_15B, SMOLLM2, VOCABS, real_model_path, write_vocab_gguf

from tokenizer import load_tokenizer
from tokenizer.unicode import utf8_encode

SEP = "\n__ggml_vocab_test__\n"
VOCAB_NAMES = sorted(p.name[: -len(".gguf.inp")] for p in VOCABS.glob("ggml-vocab-*.gguf.inp"))


@lru_cache(maxsize=None)
def tok_for(path: str):
    return load_tokenizer(path)


def read_tests(name: str) -> list[tuple[str, list[int]]]:
    """read_tests of test-tokenizer-0.cpp: the inputs as bytes split on SEP, one output line each."""
    raw = (VOCABS / f"{name}.gguf.inp").read_bytes().decode("utf-8")
    inputs = []
    pos = 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            inputs.append(raw[pos:])
            break
        inputs.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    outputs = (VOCABS / f"{name}.gguf.out").read_text(encoding="utf-8").split("\n")
    if outputs and outputs[-1] == "":
        outputs.pop()
    assert len(inputs) == len(outputs), name
    return [(s, [int(x) for x in o.split()]) for s, o in zip(inputs, outputs)]


def test_all_vocab_files_are_covered():
    assert len(VOCAB_NAMES) == 12, VOCAB_NAMES  # the 11 of llama.cpp's models/ plus tekken


@pytest.mark.parametrize("name", VOCAB_NAMES)
def test_tokenizer_0(name):
    tok = tok_for(str(VOCABS / f"{name}.gguf"))
    failures = []
    cases = read_tests(name)
    for text, expected in cases:
        got = tok.encode(text, add_special=False, parse_special=False)
        if got != expected:
            failures.append((text[:60], expected[:16], got[:16]))
    assert not failures, f"{len(failures)}/{len(cases)} differ: {failures[:3]}"


@pytest.mark.parametrize("name", ["ggml-vocab-llama-spm", "ggml-vocab-tiny-spm"])
def test_tokenizer_1_spm_round_trips(name):
    """test-tokenizer-1-spm on a sample: detokenize(special) -> tokenize(no add, parse special) ->
    detokenize gives the same text, and every codepoint survives tokenize + detokenize."""
    tok = tok_for(str(VOCABS / f"{name}.gguf"))
    rng = random.Random(1234)
    n = tok.vocab.n_tokens
    ids = list(range(min(n, 300))) + rng.sample(range(n), min(n, 700))
    for i in ids:
        s = tok.detokenize_bytes([i], unparse_special=True)
        again = tok.detokenize_bytes(tok.encode(s, False, True), unparse_special=True)
        assert again == s, (i, s, again)
    cps = list(range(1, 0x300)) + [rng.randrange(0x300, 0x40000) for _ in range(1500)]
    for cp in cps:
        if 0xD800 <= cp <= 0xDFFF or cp == 9601:
            continue
        s = utf8_encode(chr(cp))
        assert tok.detokenize_bytes(tok.encode(s, False, True), unparse_special=True) == s, hex(cp)


# --- load-time facts printed by llama.cpp -----------------------------------------------------------

_SLOTS = {"BOS": "bos_id", "EOS": "eos_id", "EOT": "eot_id", "EOM": "eom_id", "UNK": "unk_id", "SEP": "sep_id",
          "PAD": "pad_id", "MASK": "mask_id", "FIM PRE": "fim_pre_id", "FIM SUF": "fim_suf_id",
          "FIM MID": "fim_mid_id", "FIM PAD": "fim_pad_id", "FIM REP": "fim_rep_id", "FIM SEP": "fim_sep_id"}


def parse_load_log(path: Path) -> dict:
    text = path.read_text(encoding="utf-8", errors="replace")
    facts: dict = {"ids": {}, "eog": set()}
    for m in re.finditer(r"print_info: (BOS|EOS|EOT|EOM|UNK|SEP|PAD|MASK|LF|FIM [A-Z]{3}|EOG) token +=\s+(\d+) ", text):
        kind, tid = m.group(1), int(m.group(2))
        if kind == "EOG":
            facts["eog"].add(tid)
        else:
            facts["ids"][kind] = tid
    facts["n_special"] = int(re.search(r"special tokens cache size = (\d+)", text).group(1))
    facts["piece_mb"] = re.search(r"token to piece cache size = ([0-9.]+) MB", text).group(1)
    facts["max_len"] = int(re.search(r"max token length += (\d+)", text).group(1))
    return facts


LOGS = [
    ("tiny/models/tiny-llama-F32.gguf", "tiny/evalcb/tiny-llama-F32__pub__kvf32.log"),
    ("tiny/models/tiny-qwen2-F32.gguf", "tiny/evalcb/tiny-qwen2-F32__pub__kvf32.log"),
    (SMOLLM2, f"real/evalcb/{Path(SMOLLM2).stem}__pub.log"),
    (QWEN_05B, f"real/evalcb/{Path(QWEN_05B).stem}__pub.log"),
    (QWEN_15B, f"real/evalcb/{Path(QWEN_15B).stem}__pub.log"),
]


@pytest.mark.parametrize("model,log", LOGS, ids=[Path(m).stem for m, _ in LOGS])
def test_load_facts_match_llama_cpp_log(model, log):
    path = FIXTURES / model if model.startswith("tiny/") else real_model_path(model)
    facts = parse_load_log(FIXTURES / log)
    tok = tok_for(str(path))
    v = tok.vocab
    for kind, tid in facts["ids"].items():
        got = tok.linefeed_id if kind == "LF" else getattr(v, _SLOTS[kind])
        assert got == tid, (kind, got, tid)
    for kind, attr in _SLOTS.items():  # slots llama.cpp does not print are unset
        if kind not in facts["ids"]:
            assert getattr(v, attr) == -1, kind
    assert v.eog_ids == facts["eog"]
    assert all(v.is_eog(i) for i in facts["eog"])
    assert len(v.special_ids) == facts["n_special"]
    assert v.max_token_len == facts["max_len"]
    total = sum(len(tok.token_to_piece(i, special=True)) for i in range(v.n_tokens))
    assert f"{total / 1024.0 / 1024.0:.4f}" == facts["piece_mb"]


def test_qwen_plain_eos_text_is_retyped_control():
    """llama.cpp re-types Qwen's plain `</s>` (128247) as CONTROL, so it is an EOG and parsed as special."""
    tok = tok_for(str(VOCABS / "ggml-vocab-qwen2.gguf"))
    v = tok.vocab
    assert v.file_token_type(128247) == 1 and v.token_type(128247) == 3
    assert v.is_control(128247) and v.is_eog(128247)
    assert tok.encode("</s>", False, True) == [128247]
    assert tok.encode("</s>", False, False) != [128247]


def test_phi3_rstrip_attributes():
    """general.name "Phi3": every special token strips whitespace to its right, except <unk>, <s>,
    <|endoftext|> (llama-vocab.cpp per-model attributes)."""
    tok = tok_for(str(VOCABS / "ggml-vocab-phi-3.gguf"))
    end = tok.vocab.token_to_id[b"<|end|>"]
    assert tok.encode("<|end|>  \n hi", False, True) == [end] + tok.encode("hi", False, False)
    bos = tok.vocab.bos_id
    assert tok.encode("<s>  hi", False, True)[:1] == [bos]
    assert tok.encode("<s>  hi", False, True) != [bos] + tok.encode("hi", False, False)


# --- synthetic vocabularies --------------------------------------------------------------------------

def test_lstrip_attribute_strips_spaces_left_of_the_token(tmp_path):
    """jina-v2-* vocabularies give <mask> LSTRIP: "a  <mask>" loses the spaces before <mask>."""
    kv = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "\u0120", "\u0120b", "<mask>"],
          "tokenizer.ggml.token_type": [1, 1, 1, 1, 3], "tokenizer.ggml.merges": ["\u0120 b"]}
    strip = load_tokenizer(write_vocab_gguf(tmp_path / "j.gguf", {**kv, "tokenizer.ggml.pre": "jina-v2-code"}))
    plain = load_tokenizer(write_vocab_gguf(tmp_path / "g.gguf", {**kv, "tokenizer.ggml.pre": "gpt-2"}))
    assert strip.encode("a  <mask>  b", False, True) == [0, 4, 2, 3]
    assert plain.encode("a  <mask>  b", False, True) == [0, 2, 2, 4, 2, 3]
    assert strip.vocab.bos_id == -1  # BPE default 11 is out of range: disabled


def test_unloadable_vocabularies(tmp_path):
    from kernels.errors import SynapseError

    cases = {
        "no vocabulary": {"general.name": "x"},
        "unknown tokenizer: 'klingon'": {"tokenizer.ggml.model": "klingon"},
        "cannot find tokenizer merges": {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a"]},
        "not implemented by synapse": {"tokenizer.ggml.model": "plamo2", "tokenizer.ggml.tokens": ["a"]},
        "unknown pre-tokenizer type: 'klingon'": {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "klingon",
                                                  "tokenizer.ggml.tokens": ["a"], "tokenizer.ggml.merges": ["a a"]},
        "cannot find tokenizer vocab": {"tokenizer.ggml.model": "llama"},
    }
    for i, (msg, kv) in enumerate(cases.items()):
        with pytest.raises(SynapseError, match=re.escape(msg)):
            load_tokenizer(write_vocab_gguf(tmp_path / f"{i}.gguf", kv))
