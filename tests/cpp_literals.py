"""Reading C++ test sources as data: the tokens of a file and the values of its string and char literals.

Shared by the generators that turn llama.cpp's test tables into JSON (gen_chat_template_cases.py,
gen_json_schema_cases.py, gen_grammar_cases.py); each passes the token pattern its file needs. No code is run.
"""

from __future__ import annotations

import re

ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}

# blank, comment, raw or plain string literal, char literal, word, two-character operator, or any other character
TOKEN = re.compile(r'''\s+|//[^\n]*|/\*.*?\*/|R"(?P<delim>[^(\s]*)\(.*?\)(?P=delim)"|"(?:[^"\\]|\\.)*"'''
                   r"|'(?:[^'\\]|\\.)*'|\w+|==|!=|::|.", re.S)


def unescape(lit: str) -> str:
    """The value of a plain string or char literal (quotes included in `lit`)."""
    body = lit[1:-1]
    out, i = [], 0
    while i < len(body):
        if body[i] == "\\":
            out.append(ESCAPES[body[i + 1]])
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def string_value(tok: str) -> str:
    """The value of a plain or raw (R"delim(...)delim") string literal."""
    if tok.startswith('R"'):
        delim = tok[2:tok.index("(")]
        return tok[len(delim) + 3 : -len(delim) - 2]
    return unescape(tok)


def is_string(tok: str) -> bool:
    return tok.startswith('"') or tok.startswith('R"')


def tokens(src: str, pattern: re.Pattern = TOKEN, skip: tuple[str, ...] = ()) -> list[str]:
    """src's tokens without blanks, comments and the `skip` ones; text the pattern cannot read is an error."""
    out, pos = [], 0
    while pos < len(src):
        m = pattern.match(src, pos)
        if not m:
            raise ValueError(f"cannot read C++ at {src[pos:pos + 40]!r}")
        pos = m.end()
        t = m.group()
        if not (t.isspace() or t.startswith("//") or t.startswith("/*") or t in skip):
            out.append(t)
    return out
