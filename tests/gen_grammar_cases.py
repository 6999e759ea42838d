"""Regenerate tests/data/grammar_cases.json from llama.cpp's tests/test-grammar-parser.cpp and
tests/test-grammar-integration.cpp.

    python tests/gen_grammar_cases.py /path/to/llama.cpp > tests/data/grammar_cases.json

The JSON is the data of llama.cpp's automated GBNF grammar tests (llama.cpp, MIT; see THIRD_PARTY_NOTICES.md):
- `parser`: per `verify_parsing(grammar, {symbol pairs}, {elements})`, the grammar, the symbol ids the parser must
  give and all rules' elements in rule order, each as [type name without LLAMA_GRETYPE_, value];
- `parser_failure`: per `verify_failure(grammar)`, a grammar the parser must reject;
- `integration`: per `test_grammar(desc, grammar, {passing}, {failing})`, the strings the grammar must match or not;
- `schema`: per `test_schema(desc, schema, {passing}, {failing})`, the same for the grammar of a JSON schema;
- `build` and `parse`: the checks of the integration test's other test functions (left recursion, missing root,
  missing rule, custom root symbol): a grammar, the root symbol and whether llama_grammar_init_impl gives a
  grammar (`build`), or whether the parser accepts it and which symbols it must not define (`parse`).
A string that contains `token(id)` encodings (0xff + the id's 4 big-endian bytes) is stored as a list of segments:
text (str) and token ids (int); any other string is stored as it is.
Only the C++ string, char and integer literals of these calls and assignments are read; no code is run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cpp_literals import is_string, string_value, tokens, unescape


class _Reader:
    """Reads the initializer data at toks[i]: lists, (concatenated) strings with token(N), chars, ints, names."""

    def __init__(self, toks: list[str], variables: dict | None = None):
        self.toks, self.variables = toks, {} if variables is None else variables

    def value(self, i: int):
        t = self.toks[i]
        if t == "{":
            items, i = [], i + 1
            while self.toks[i] != "}":
                item, i = self.value(i)
                items.append(item)
                if self.toks[i] == ",":
                    i += 1
            return items, i + 1
        if is_string(t) or t == "token":
            return self.string(i)
        if t.startswith("'"):
            return ord(unescape(t)), i + 1
        if t.isdigit():
            return int(t), i + 1
        if t.startswith("LLAMA_GRETYPE_"):
            return t[len("LLAMA_GRETYPE_"):], i + 1
        if t in self.variables:
            return self.variables[t], i + 1
        raise ValueError(f"unexpected token {t!r}")

    def string(self, i: int):
        """A string expression: literals (adjacent ones concatenate) and token(N) calls joined by '+'."""
        segments: list = []
        while True:
            if self.toks[i] == "token":
                assert self.toks[i + 1] == "(" and self.toks[i + 3] == ")", self.toks[i:i + 4]
                segments.append(int(self.toks[i + 2]))
                i += 4
            elif is_string(self.toks[i]):
                s = ""
                while is_string(self.toks[i]):
                    s += string_value(self.toks[i])
                    i += 1
                if segments and isinstance(segments[-1], str):
                    segments[-1] += s
                else:
                    segments.append(s)
            else:
                raise ValueError(f"unexpected token in a string expression: {self.toks[i]!r}")
            if self.toks[i] != "+":
                break
            i += 1
        if all(isinstance(s, str) for s in segments):
            return "".join(segments), i
        return [s for s in segments if s != ""], i

    def call_args(self, i: int) -> tuple[list, int]:
        """The arguments of the call whose '(' is at toks[i], and the index after its ')'."""
        assert self.toks[i] == "(", self.toks[i]
        args, i = [], i + 1
        while self.toks[i] != ")":
            arg, i = self.value(i)
            args.append(arg)
            if self.toks[i] == ",":
                i += 1
        return args, i + 1


def _functions(toks: list[str]) -> dict[str, list[str]]:
    """The body tokens of every `name ( ) { ... }` definition without parameters (the test functions, main)."""
    out = {}
    for i in range(1, len(toks) - 3):
        if toks[i - 1] in ("void", "int") and toks[i + 1 : i + 4] == ["(", ")", "{"]:
            depth, j = 0, i + 3
            while True:
                depth += {"{": 1, "}": -1}.get(toks[j], 0)
                if depth == 0:
                    break
                j += 1
            out[toks[i]] = toks[i + 4 : j]
    return out


def _test_functions(funcs: dict[str, list[str]]) -> list[tuple[str, list[str]]]:
    """main's body, or the functions main calls, in its order."""
    main = funcs["main"]
    called = [t for k, t in enumerate(main[:-3]) if t in funcs and main[k + 1 : k + 4] == ["(", ")", ";"]]
    return [(name, funcs[name]) for name in called] or [("main", main)]


def _unique(name: str, seen: set) -> str:
    n, out = 1, name
    while out in seen:
        n += 1
        out = f"{name} ({n})"
    seen.add(out)
    return out


def _grammar_name(grammar: str) -> str:
    name = " ".join(grammar.split())
    return name if len(name) <= 60 else name[:57] + "..."


def parser_cases(src: str) -> dict:
    toks = tokens(src)
    out: dict = {"parser": [], "parser_failure": []}
    seen: set = set()
    for _, body in _test_functions(_functions(toks)):
        reader = _Reader(body)
        for i, t in enumerate(body):
            if t == "verify_parsing" and body[i + 1] == "(":
                (grammar, symbols, elements), _ = reader.call_args(i + 1)
                out["parser"].append({"name": _unique(_grammar_name(grammar), seen), "grammar": grammar,
                                      "symbol_ids": dict(symbols), "elements": elements})
            elif t == "verify_failure" and body[i + 1] == "(":
                (grammar,), _ = reader.call_args(i + 1)
                out["parser_failure"].append({"name": _unique(_grammar_name(grammar), seen), "grammar": grammar})
    return out


def integration_cases(src: str) -> dict:
    toks = tokens(src)
    out: dict = {"integration": [], "schema": [], "build": [], "parse": []}
    seen: set = set()
    for func, body in _test_functions(_functions(toks)):
        variables: dict = {}  # const std::string NAME = <string>;
        built: dict = {}  # llama_grammar * NAME = build_grammar[_with_root](...): (name, grammar, root)
        parsed: dict = {}  # PARSER.parse(NAME.c_str()): its case, completed by the assertions that follow
        reader = _Reader(body, variables)
        for i, t in enumerate(body):
            nxt = body[i + 1] if i + 1 < len(body) else ""
            if t in ("test_grammar", "test_schema") and nxt == "(":
                (desc, text, passing, failing), _ = reader.call_args(i + 1)
                kind, key = ("integration", "grammar") if t == "test_grammar" else ("schema", "schema")
                name = _unique(desc or f"{func} (no description)", seen)
                out[kind].append({"name": name, key: text, "passing": passing, "failing": failing})
            elif body[i : i + 4] == ["const", "std", "::", "string"] and body[i + 5] == "=":
                variables[body[i + 4]], _ = reader.string(i + 6)
            elif t == "test_build_grammar_fails" and nxt == "(":  # assert(test_build_grammar_fails(X))
                assert body[i - 2 : i] == ["assert", "("], body[i - 2 : i]
                (grammar,), _ = reader.call_args(i + 1)
                out["build"].append({"name": _unique(f"{func}: {body[i + 2]}", seen), "grammar": grammar,
                                     "root": "root", "ok": False})
            elif t in ("build_grammar", "build_grammar_with_root") and nxt == "(":  # llama_grammar * VAR = ...
                args, _ = reader.call_args(i + 1)
                assert body[i - 1] == "=", body[i - 4 : i]
                grammar, root = (args + ["root"])[:2]
                built[body[i - 2]] = (f"{func}: {body[i + 2]}, root {root}", grammar, root)
            elif t == "parse" and body[i - 1] == "." and nxt == "(":  # PARSER.parse(NAME.c_str())
                assert body[i + 3 : i + 7] == [".", "c_str", "(", ")"], body[i : i + 7]
                parsed[body[i - 2]] = {"name": _unique(f"{func}: {body[i + 2]}", seen),
                                       "grammar": variables[body[i + 2]], "ok": None, "absent_symbols": []}
            elif t == "assert" and nxt == "(":
                cond = body[i + 2 : body.index(";", i) - 1]
                if len(cond) == 3 and cond[0] in built and cond[2] == "nullptr":  # assert(VAR ==/!= nullptr)
                    name, grammar, root = built[cond[0]]
                    out["build"].append({"name": _unique(name, seen), "grammar": grammar, "root": root,
                                         "ok": cond[1] == "!="})
                elif cond[-5:] == ["rules", ".", "empty", "(", ")"]:  # assert([!]PARSER.rules.empty())
                    case = parsed[cond[1] if cond[0] == "!" else cond[0]]
                    case["ok"] = cond[0] == "!"
                    if case not in out["parse"]:
                        out["parse"].append(case)
                elif cond[1:5] == [".", "symbol_ids", ".", "find"] and cond[8] == "==" and cond[-3] == "end":
                    # assert(PARSER.symbol_ids.find("X") == PARSER.symbol_ids.end())
                    parsed[cond[0]]["absent_symbols"].append(string_value(cond[6]))
                elif cond[0] != "test_build_grammar_fails":
                    raise ValueError(f"{func}: unknown assertion {' '.join(cond)}")
        assert all(case in out["parse"] for case in parsed.values()), f"{func}: a parse without assertion"
    return out


def main(llama_dir: str) -> None:
    tests = Path(llama_dir) / "tests"
    out = {"source": "llama.cpp tests/test-grammar-parser.cpp and tests/test-grammar-integration.cpp "
                     "(commit 0c1e570), MIT License"}
    out.update(parser_cases((tests / "test-grammar-parser.cpp").read_text(encoding="utf-8")))
    out.update(integration_cases((tests / "test-grammar-integration.cpp").read_text(encoding="utf-8")))
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
