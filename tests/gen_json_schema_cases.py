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
import sys
from pathlib import Path

from cpp_literals import is_string, string_value, tokens


def main(llama_dir: str) -> None:
    src = (Path(llama_dir) / "tests" / "test-json-schema-to-grammar.cpp").read_text(encoding="utf-8")
    toks = list(tokens(src))
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
            if is_string(toks[j]):
                s = ""
                while is_string(toks[j]):  # adjacent literals concatenate
                    s += string_value(toks[j])
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
