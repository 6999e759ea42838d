"""JSON schema to GBNF against llama.cpp: the cases of its test-json-schema-to-grammar and a few more.

`data/json_schema_cases.json` holds the 81 `test({...})` cases of llama.cpp's tests/test-json-schema-to-grammar.cpp
(0c1e570, MIT; regenerate with tests/gen_json_schema_cases.py): a schema text, whether the conversion succeeds and
the grammar it gives, compared as the C++ test compares them (after its `trim()`). The extra cases below were
produced by llama.cpp itself: `json_schema_to_grammar(common_json::parse(schema), true)` of the build's
libllama-common, at the same commit.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernels.errors import SynapseError
from synapse_cli.sampling.grammar import parse_grammar
from synapse_cli.sampling.json_schema import (JsonSchemaError, _dump, json_schema_to_grammar, parse_json,
                                              schema_text_to_grammar)

TABLE = json.loads((Path(__file__).parent / "data" / "json_schema_cases.json").read_text(encoding="utf-8"))
CASES = TABLE["cases"]
IDS = [c["name"] for c in CASES]


def trim(source: str) -> str:
    """The C++ test's trim(): strip blanks at both ends, then the blanks that start each line."""
    return re.sub(r"(^|\n)[ \t]+", r"\1", source.strip(" \n\r\t"))


def test_all_cases_extracted():
    assert len(CASES) == 81
    assert sum(c["expected_status"] == "FAILURE" for c in CASES) == 3


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_llama_cpp_case(case):
    if case["expected_status"] == "SUCCESS":
        assert trim(schema_text_to_grammar(case["schema"])) == trim(case["expected_grammar"])
    else:
        with pytest.raises(JsonSchemaError, match="^JSON schema conversion failed:\n"):
            schema_text_to_grammar(case["schema"])


@pytest.mark.parametrize("case", [c for c in CASES if c["expected_status"] == "SUCCESS"],
                         ids=[c["name"] for c in CASES if c["expected_status"] == "SUCCESS"])
def test_expected_grammar_parses(case):
    """The C++ test's second pass: each expected grammar is valid GBNF with a root rule."""
    _, symbol_ids = parse_grammar(case["expected_grammar"])
    assert "root" in symbol_ids


# (schema text, the exact grammar llama.cpp gives)
LLAMA_OUTPUTS = [
    ('{"const": [1e15, 1e14, 0.1, -0.0, 1e-5, 0.0001, 5e-324, 1.7976931348623157e308, 18446744073709551615,'
     ' -9223372036854775809, 123456789012345678901]}',
     'root ::= "[1e+15,100000000000000.0,0.1,-0.0,1e-05,0.0001,5e-324,1.7976931348623157e+308,'
     '18446744073709551615,-9.223372036854776e+18,1.2345678901234568e+20]"\n'
     'space ::= | " " | "\\n"{1,2} [ \\t]{0,20}\n'),
    ('{"enum": ["\\u00e9\\n\\u0001\\"", {"b": 1, "a": [true, null]}]}',
     'root ::= ("\\"é\\\\n\\\\u0001\\\\\\"\\"" | "{\\"b\\":1,\\"a\\":[true,null]}")\n'
     'space ::= | " " | "\\n"{1,2} [ \\t]{0,20}\n'),
    ('{"type": "object", "properties": {"z": {"type": "integer", "exclusiveMinimum": 2.5, "maximum": 1000.9},'
     ' "a": {"type": "string", "pattern": "^\\u00e9+$"}, "é": {"type": "null"}}, "required": ["a"]}',
     # (the pattern is read byte by byte: "+" repeats the last byte of é, a split UTF-8 sequence)
     '--kv ::= "\\"é\\"" space ":" space null\n'
     'a ::= "\\"" ("\udcc3" "\udca9"+) "\\""\n'
     'a-kv ::= "\\"a\\"" space ":" space a\n'
     'null ::= "null"\n'
     'root ::= "{" space a-kv ( "," space ( z-kv z-rest | --kv ) )? space "}"\n'
     'space ::= | " " | "\\n"{1,2} [ \\t]{0,20}\n'
     'z ::= ([3-9] | ([1-8] [0-9] | [9] [0-9]) | ([1-8] [0-9]{2} | [9] ([0-8] [0-9] | [9] [0-9])) | "1000")\n'
     'z-kv ::= "\\"z\\"" space ":" space z\n'
     'z-rest ::= ( "," space --kv )?\n'),
]


@pytest.mark.parametrize("schema, expected", LLAMA_OUTPUTS)
def test_matches_llama_cpp_output(schema, expected):
    assert schema_text_to_grammar(schema) == expected


def test_float_dump_is_nlohmanns():
    """(values checked against llama.cpp's dump(); Grisu2 is not always Python's shortest repr)"""
    assert _dump(3.481616345211129e+68) == "3.4816163452111288e+68"
    assert _dump(0.1 + 0.2) == "0.30000000000000004"
    assert _dump(1e21) == "1e+21"
    assert _dump(123456.789) == "123456.789"
    assert _dump(1e100) == "1e+100"
    assert _dump(2.5e-7) == "2.5e-07"


def test_keys_keep_their_order():
    """ordered_json: the properties' order is the text's, and it decides the grammar."""
    a = schema_text_to_grammar('{"properties": {"b": {}, "a": {}}, "required": ["a", "b"]}')
    b = schema_text_to_grammar('{"properties": {"a": {}, "b": {}}, "required": ["a", "b"]}')
    assert 'root ::= "{" space b-kv "," space a-kv space "}"' in a
    assert 'root ::= "{" space a-kv "," space b-kv space "}"' in b


@pytest.mark.parametrize("text", ["", "{", "{} x", "NaN", '{"const": Infinity}', '{"const": 1e400}',
                                  '{"const": "\\ud800"}', b'{"const": "\xff"}', "\0{}"])
def test_invalid_json_is_one_line_error(text):
    with pytest.raises(SynapseError, match=r"^invalid JSON schema: [^\n]+$"):
        schema_text_to_grammar(text)


def test_nlohmann_parse_details():
    assert parse_json('\ufeff{"a": 1}\0trailing') == {"a": 1}
    assert parse_json('{"a": 1, "a": 2, "b": 3}') == {"a": 2, "b": 3}
    assert isinstance(parse_json("123456789012345678901"), float)


@pytest.mark.parametrize("schema, message", [
    ({"$ref": "https://example.com/schema.json"},
     "JSON schema error at #: unsupported $ref https://example.com/schema.json, only references into the same "
     "document are supported"),
    ({"$ref": "#/definitions/missing"}, "JSON schema error at #: cannot resolve $ref #/definitions/missing, "
                                         "definitions not found"),
    (True, "JSON schema error at #: schema must be an object"),
    ({"type": "integer", "maximum": -2**63}, "At least one of min_value or max_value must be set"),
    ({"type": "array", "minItems": 1.0}, "JSON schema error at #: minItems must be a non-negative integer"),
])
def test_conversion_errors(schema, message):
    with pytest.raises(JsonSchemaError) as e:
        json_schema_to_grammar(schema)
    assert str(e.value) == "JSON schema conversion failed:\n" + message


def test_unsupported_pattern_warns(capsys):
    g = json_schema_to_grammar({"type": "string", "pattern": "a+"})
    assert "root ::= string\n" in g and 'string ::= "\\"" char* "\\""\n' in g
    assert capsys.readouterr().err == ("WARNING: JSON schema conversion was incomplete: pattern a+ is not supported "
                                       "(not anchored with '^' and '$'), accepting any string\n")
