"""GBNF grammars against llama.cpp: the cases of its test-grammar-parser and test-grammar-integration.

`data/grammar_cases.json` holds the data of llama.cpp's tests/test-grammar-parser.cpp and
tests/test-grammar-integration.cpp (0c1e570, MIT; regenerate with tests/gen_grammar_cases.py). Each kind of case
is checked as the C++ test checks it: the parser's symbol ids and all rules' elements in rule order
(`verify_parsing`), parser failures (`verify_failure`), whether a grammar is built (`llama_grammar_init_impl`),
and strings fed to the matcher one code point or token at a time (`match_string`), for GBNF grammars and for the
grammars of JSON schemas.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synapse_cli.sampling import grammar as gr
from synapse_cli.sampling.grammar import Grammar, GrammarError, parse_grammar
from synapse_cli.sampling.json_schema import json_schema_to_grammar

TABLE = json.loads((Path(__file__).parent / "data" / "grammar_cases.json").read_text(encoding="utf-8"))
PIECES = [b""] * 16  # a dummy vocabulary: the C++ test builds without one; accept_token is given each piece


def cases(kind: str, key: str = "") -> dict:
    """Parametrize over one kind of case (`key`: over each of their `passing`/`failing` strings instead)."""
    if not key:
        return {"argvalues": TABLE[kind], "ids": [c["name"] for c in TABLE[kind]]}
    items = [(c, s) for c in TABLE[kind] for s in c[key]]
    return {"argvalues": items, "ids": [f"{c['name']}: {label(s)}" for c, s in items]}


def label(s) -> str:
    return s if isinstance(s, str) else "".join(x if isinstance(x, str) else f"<[{x}]>" for x in s)


def to_bytes(s) -> bytes:
    """A test string's bytes: text as UTF-8, a token id as the C++ `token()` encodes it (0xff + 4 bytes BE)."""
    if isinstance(s, str):
        return s.encode("utf-8")
    return b"".join(x.encode("utf-8") if isinstance(x, str) else b"\xff" + x.to_bytes(4, "big") for x in s)


def _cpt_from_utf8(data: bytes, off: int) -> tuple[int, int]:
    """unicode_cpt_from_utf8: (code point, offset after it); ValueError (invalid_argument) on a bad sequence."""
    b = data[off]
    if not b & 0x80:
        return b, off + 1
    for n, bit in ((2, 0x20), (3, 0x10), (4, 0x08)):
        if b & 0x40 and not b & bit:
            tail = data[off + 1 : off + n]
            if len(tail) < n - 1 or any(c & 0xC0 != 0x80 for c in tail):
                break
            cpt = b & (0xFF >> (n + 1))
            for c in tail:
                cpt = (cpt << 6) | (c & 0x3F)
            return cpt, off + n
    raise ValueError("invalid character")


def parse_tokens(data: bytes) -> list[tuple[int, bytes]]:
    """The C++ test's parse_tokens: a (token, piece) per token encoding or code point; invalid UTF-8 -> U+FFFD."""
    out, off = [], 0
    while off < len(data):
        if data[off] == 0xFF:
            val = int.from_bytes(data[off + 1 : off + 5], "big")
            out.append((val, f"<[{val}]>".encode()))
            off += 5
            continue
        try:
            cpt, off = _cpt_from_utf8(data, off)
            out.append((0, chr(cpt).encode("utf-8", "surrogatepass")))  # unicode_cpt_to_utf8 (ValueError > 0x10FFFF)
        except ValueError:
            off += 1
            out.append((0, "\ufffd".encode()))
    return out


def match_string(g: Grammar, data: bytes) -> bool:
    for token, piece in parse_tokens(data):
        try:
            g.accept_token(token, piece)
        except GrammarError:
            return False
        if not g.stacks:
            return False
    return any(len(stack) == 0 for stack in g.stacks)


def test_all_cases_extracted():
    assert {k: len(v) for k, v in TABLE.items() if k != "source"} == {
        "parser": 17, "parser_failure": 6, "integration": 14, "schema": 33, "build": 7, "parse": 2}


@pytest.mark.parametrize("case", **cases("parser"))
def test_parser(case):
    rules, symbol_ids = parse_grammar(case["grammar"])
    assert symbol_ids == case["symbol_ids"]
    assert [elem for rule in rules for elem in rule] == [(getattr(gr, t), v) for t, v in case["elements"]]


@pytest.mark.parametrize("case", **cases("parser_failure"))
def test_parser_failure(case):
    with pytest.raises(GrammarError):
        parse_grammar(case["grammar"])


@pytest.mark.parametrize("case", **cases("parse"))
def test_parse(case):
    if not case["ok"]:
        with pytest.raises(GrammarError):
            parse_grammar(case["grammar"])
        return
    rules, symbol_ids = parse_grammar(case["grammar"])
    assert rules
    assert not set(case["absent_symbols"]) & set(symbol_ids)


@pytest.mark.parametrize("case", **cases("build"))
def test_build(case):
    if case["ok"]:
        Grammar(case["grammar"], PIECES, (), root=case["root"])
    else:
        with pytest.raises(GrammarError):
            Grammar(case["grammar"], PIECES, (), root=case["root"])


_grammars: dict = {}


def grammar_of(kind: str, case) -> Grammar:
    """The case's grammar (built once per case, reset before each string as the C++ test resets the stacks)."""
    key = (kind, case["name"])
    if key not in _grammars:
        # test_schema: json::parse gives a common_json (nlohmann ordered_json): keys in document order, as json.loads
        text = json_schema_to_grammar(json.loads(case["schema"]), True) if kind == "schema" else case["grammar"]
        _grammars[key] = Grammar(text, PIECES, ())
    g = _grammars[key]
    g.reset()
    return g


@pytest.mark.parametrize(("case", "string"), **cases("integration", "passing"))
def test_integration_passing(case, string):
    assert match_string(grammar_of("integration", case), to_bytes(string))


@pytest.mark.parametrize(("case", "string"), **cases("integration", "failing"))
def test_integration_failing(case, string):
    assert not match_string(grammar_of("integration", case), to_bytes(string))


@pytest.mark.parametrize(("case", "string"), **cases("schema", "passing"))
def test_schema_passing(case, string):
    assert match_string(grammar_of("schema", case), to_bytes(string))


@pytest.mark.parametrize(("case", "string"), **cases("schema", "failing"))
def test_schema_failing(case, string):
    assert not match_string(grammar_of("schema", case), to_bytes(string))
