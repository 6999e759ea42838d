"""Regenerate tests/data/json_schema_cases.json from llama.cpp's tests/test-json-schema-to-grammar.cpp.

    python tests/gen_json_schema_cases.py /path/to/llama.cpp > tests/data/json_schema_cases.json

The JSON is the data of llama.cpp's automated JSON-schema-to-grammar test (llama.cpp, MIT; see
THIRD_PARTY_NOTICES.md): per `test({ SUCCESS|FAILURE, "name", <schema>, <grammar> })` call (the last two raw
string literals), whether the conversion must succeed, the case's name, the schema text and the grammar
`json_schema_to_grammar` must give (empty for a failure). The grammars are stored as written in the C++ source,
indentation included: the test compares them after its `trim()` (strip, then drop each line's leading blanks).
Only the C++ string literals of the calls are read; no code.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

_ESC = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}

# a token: blank, comment, raw or plain string literal, char literal, word, or any other single character
_TOKEN = re.compile(r'''\s+|//[^\n]*|/\*.*?\*/|R"(?P<delim>[^(\s]*)\(.*?\)(?P=delim)"|"(?:[^"\\]|\\.)*"'''
                    r"|'(?:[^'\\]|\\.)*'|\w+|.", re.S)


def _unescape(lit: str) -> str:
    body = lit[1:-1]
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            out.append(_ESC[body[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _string(tok: str) -> str:
    """The value of a plain or raw (R"delim(...)delim") string literal."""
    if tok.startswith('R"'):
        delim = tok[2:tok.index("(")]
        return tok[len(delim) + 3 : -len(delim) - 2]
    return _unescape(tok)


def _tokens(src: str):
    pos = 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        pos = m.end()
        t = m.group()
        if t.isspace() or t.startswith("//") or t.startswith("/*"):
            continue
        yield t


def _is_string(tok: str) -> bool:
    return tok.startswith('"') or tok.startswith('R"')


def main(llama_dir: str) -> None:
    src = (Path(llama_dir) / "tests" / "test-json-schema-to-grammar.cpp").read_text(encoding="utf-8")
    toks = list(_tokens(src))
    cases = []
    for i in range(len(toks) - 2):
        # test ( { STATUS , string , string , string } )
        if toks[i : i + 3] != ["test", "(", "{"]:
            continue
        j, fields = i + 3, []
        while toks[j] != "}":
            if toks[j] == ",":
                j += 1
                continue
            if _is_string(toks[j]):
                s = ""
                while _is_string(toks[j]):  # adjacent literals concatenate
                    s += _string(toks[j])
                    j += 1
                fields.append(s)
            else:
                fields.append(toks[j])
                j += 1
        status, name, schema, grammar = fields
        if status not in ("SUCCESS", "FAILURE"):
            raise ValueError(f"unexpected status {status!r} in case {name!r}")
        cases.append({"name": name, "expected_status": status, "schema": schema, "expected_grammar": grammar})
    json.dump({
        "source": "llama.cpp tests/test-json-schema-to-grammar.cpp (commit 0c1e570), MIT License",
        "cases": cases,
    }, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
