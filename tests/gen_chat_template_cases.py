"""Regenerate tests/data/llama_chat_template_cases.json from llama.cpp's tests/test-chat-template.cpp.

    python tests/gen_chat_template_cases.py /path/to/llama.cpp > tests/data/llama_chat_template_cases.json

The JSON is the data of llama.cpp's automated chat-template test (llama.cpp, MIT; see
THIRD_PARTY_NOTICES.md): the fixed conversation and, per test case, the template source, the exact prompt
llama.cpp's built-in formatter gives (`expected_output`) and the one its Jinja path gives
(`expected_output_jinja`, empty = same as `expected_output`), the bos/eos token strings, whether the Jinja
path is tested, and any extra messages. Only the C++ string literals of the table are read; no code.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from cpp_literals import tokens as cpp_tokens, unescape

FIELDS = ("name", "template_str", "expected_output", "expected_output_jinja", "bos_token", "eos_token",
          "supported_with_jinja", "extra_conversation")
DEFAULTS = {"bos_token": "", "eos_token": "", "supported_with_jinja": True, "extra_conversation": []}

_TOKEN = re.compile(r'''\s+|//[^\n]*|/\*.*?\*/|U8C\(|LU8\(|"(?:[^"\\]|\\.)*"|[{},()]|true|false|[A-Za-z_]\w*''',
                    re.S)


def _tokens(src: str) -> list[str]:
    return cpp_tokens(src, _TOKEN, skip=("U8C(", "LU8(", ")", "("))


def _parse(tokens: list, i: int):
    """One initializer: a {...} list, a (concatenated) string, or a bool."""
    t = tokens[i]
    if t == "{":
        items, i = [], i + 1
        while tokens[i] != "}":
            item, i = _parse(tokens, i)
            items.append(item)
            if tokens[i] == ",":
                i += 1
        return items, i + 1
    if t.startswith('"'):
        s = ""
        while i < len(tokens) and tokens[i].startswith('"'):  # adjacent literals concatenate
            s += unescape(tokens[i])
            i += 1
        return s, i
    if t in ("true", "false"):
        return t == "true", i + 1
    raise ValueError(f"unexpected token {t!r}")


def main(llama_dir: str) -> None:
    src = (Path(llama_dir) / "tests" / "test-chat-template.cpp").read_text(encoding="utf-8")
    conv_src = src[src.index("std::vector<llama_chat_message> conversation {") :]
    conv_src = conv_src[conv_src.index("{") : conv_src.index("};") + 1]
    toks = list(_tokens(conv_src))
    conversation, _ = _parse(toks, 0)
    table = src[src.index("std::vector<TestCase> test_cases {") :]
    table = table[table.index("{") : table.index("\n    };") + 6]
    toks = list(_tokens(table))
    cases, _ = _parse(toks, 0)
    out = []
    for c in cases:
        d = dict(DEFAULTS)
        d.update(zip(FIELDS, c))
        d["extra_conversation"] = [{"role": r, "content": x} for r, x in d["extra_conversation"]]
        out.append(d)
    json.dump({
        "source": "llama.cpp tests/test-chat-template.cpp (commit 0c1e570), MIT License",
        "conversation": [{"role": r, "content": x} for r, x in conversation],
        "cases": out,
    }, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
