"""JSON schema to GBNF: llama.cpp's `json_schema_to_grammar`, as `-j/--json-schema` and `-jf` use it.

Mirrors common/json-schema-to-grammar.cpp (`json_schema_to_grammar`, its converter `common_chat_schema_converter`
here `SchemaConverter`, `build_repetition`, `build_min_max_int`, `PRIMITIVE_RULES`, `STRING_FORMAT_RULES`),
common/json-schema.cpp (`common_chat_schema_from_json` and its builder, here `SchemaBuilder`), common/trie.cpp (for
`_not_strings`) and, for common/arg.cpp's `json::parse(value)`, nlohmann::ordered_json's parse (object keys keep
their order) and the `dump()` (compact, UTF-8 kept, Grisu2 floats) of the values a grammar quotes: the grammar
text is byte for byte llama.cpp's, built without LLGuidance (so `force_gbnf` changes nothing). As in llama.cpp,
only `#/...` references are supported and nothing is ever fetched; patterns are read as UTF-8 bytes, so a
quantifier after a multi-byte character repeats its last byte only, and the grammar then holds the split bytes as
surrogate escapes (encode it with errors="surrogateescape").
"""

from __future__ import annotations

import json
import math
import re
import struct
import sys
from typing import NamedTuple

from kernels.errors import SynapseError

INT_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1


class JsonSchemaError(SynapseError):
    """A schema that is no JSON, or that llama.cpp's converter rejects (its std::invalid_argument)."""


class _SchemaFailure(Exception):
    """A std::runtime_error of the conversion; json_schema_to_grammar reports it after its prefix."""


def _to_int32(v: int) -> int:
    """static_cast<int> of a JSON integer (nlohmann's get<int>())."""
    return (v + 2**31) % 2**32 - 2**31


def _to_int64(v: int) -> int:
    """static_cast<int64_t>, and int64 arithmetic that wraps (x86)."""
    return (v + 2**63) % 2**64 - 2**63


def _double_to_int64(d: float) -> int:
    """(int64_t) d on x86 (cvttsd2si): truncation, the 'integer indefinite' INT64_MIN when out of range."""
    return int(d) if -(2.0**63) <= d < 2.0**63 else INT64_MIN


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return _is_int(v) or isinstance(v, float)


# --- nlohmann::json dump() -----------------------------------------------------------------------------------
# Constant values reach the grammar through dump(): compact, UTF-8 kept, floats in Grisu2's digits (not always
# Python's shortest repr) laid out as nlohmann's to_chars does.

def _dump_string(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\b\t\n\f\r":
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[ch])
        elif ch <= "\x1f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _cached_power(k: int) -> tuple[int, int]:
    """c = f * 2^e ~= 10^k with f normalised to 64 bits and rounded to nearest (grisu's cached powers)."""
    num, den = (10**k, 1) if k >= 0 else (1, 10**-k)
    e = num.bit_length() - den.bit_length() - 64
    while True:
        n, d = (num, den << e) if e >= 0 else (num << -e, den)
        f = (2 * n + d) // (2 * d)
        if f >= 2**64:
            e += 1
        elif f < 2**63:
            e -= 1
        else:
            return f, e


_CACHED_POWERS = [(*_cached_power(k), k) for k in range(-300, 325, 8)]  # kCachedPowers: 10^-300 .. 10^324


def _diyfp_mul(x: int, y: int) -> int:
    """diyfp::mul: the upper 64 bits of the 128-bit product, rounded (ties up)."""
    return (x * y + 2**63) >> 64


def _normalize(f: int, e: int) -> tuple[int, int]:
    shift = 64 - f.bit_length()
    return f << shift, e - shift


def _grisu2(value: float) -> tuple[str, int]:
    """dtoa_impl::grisu2: digits and decimal exponent of a finite value > 0 (value = digits * 10^exponent)."""
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    biased, fraction = bits >> 52, bits & ((1 << 52) - 1)
    # compute_boundaries
    v_f, v_e = (fraction, 1 - 1075) if biased == 0 else (fraction + (1 << 52), biased - 1075)
    plus_f, plus_e = _normalize(2 * v_f + 1, v_e - 1)
    if fraction == 0 and biased > 1:  # the lower boundary is closer
        minus_f, minus_e = 4 * v_f - 1, v_e - 2
    else:
        minus_f, minus_e = 2 * v_f - 1, v_e - 1
    minus_f <<= minus_e - plus_e
    v_f, v_e = _normalize(v_f, v_e)
    # get_cached_power_for_binary_exponent, with kAlpha = -60 (C's truncating division)
    f = -60 - plus_e - 1
    k = (abs(f) * 78913 >> 18) * (1 if f >= 0 else -1) + (f > 0)
    c_f, c_e, c_k = _CACHED_POWERS[(300 + k + 7) // 8]
    w = _diyfp_mul(v_f, c_f)
    big_minus = _diyfp_mul(minus_f, c_f) + 1
    big_plus = _diyfp_mul(plus_f, c_f) - 1
    e = plus_e + c_e + 64
    return _grisu2_digit_gen(big_minus, w, big_plus, e, -c_k)


def _grisu2_digit_gen(m_minus: int, w: int, m_plus: int, e: int, decimal_exponent: int) -> tuple[str, int]:
    delta, dist = m_plus - m_minus, m_plus - w
    one = 1 << -e
    p1, p2 = m_plus >> -e, m_plus & (one - 1)
    n = len(str(p1))
    pow10 = 10 ** (n - 1)
    buf = []
    while n > 0:
        d, p1 = divmod(p1, pow10)
        buf.append(d)
        n -= 1
        rest = (p1 << -e) + p2
        if rest <= delta:
            return _grisu2_round(buf, dist, delta, rest, pow10 << -e), decimal_exponent + n
        pow10 //= 10
    m = 0
    while True:
        p2 *= 10
        buf.append(p2 >> -e)
        p2 &= one - 1
        m += 1
        delta *= 10
        dist *= 10
        if p2 <= delta:
            break
    return _grisu2_round(buf, dist, delta, p2, one), decimal_exponent - m


def _grisu2_round(buf: list, dist: int, delta: int, rest: int, ten_k: int) -> str:
    while rest < dist and delta - rest >= ten_k and (rest + ten_k < dist or dist - rest > rest + ten_k - dist):
        buf[-1] -= 1
        rest += ten_k
    return "".join(map(str, buf))


def _dump_float(x: float) -> str:
    """serializer::dump_float / to_chars: fixed notation for 1e-4 <= |x| < 1e15, else d.ddde+XX."""
    if not math.isfinite(x):
        return "null"
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    if x == 0:
        return sign + "0.0"
    digits, exp10 = _grisu2(abs(x))
    k, n = len(digits), len(digits) + exp10
    if k <= n <= 15:
        return f"{sign}{digits}{'0' * (n - k)}.0"
    if 0 < n <= 15:
        return f"{sign}{digits[:n]}.{digits[n:]}"
    if -4 < n <= 0:
        return f"{sign}0.{'0' * -n}{digits}"
    mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
    e = n - 1
    return f"{sign}{mantissa}e{'-' if e < 0 else '+'}{abs(e):02d}"


def _dump(value) -> str:
    """nlohmann's dump() (indent -1) of a JSON value as json.loads gives it."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if _is_int(value):
        return str(value)
    if isinstance(value, float):
        return _dump_float(value)
    if isinstance(value, str):
        return _dump_string(value)
    if isinstance(value, list):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return "{" + ",".join(_dump_string(k) + ":" + _dump(v) for k, v in value.items()) + "}"


# --- the schema model (common/json-schema.h) ------------------------------------------------------------------

class Node:
    """A common_chat_schema node: `kind` is its kind_name() ("any", "ref", "anyOf", "allOf", "const", "enum",
    "null", "boolean", "number", "integer", "string", "array", "tuple", "object"); the other attributes are its
    struct's fields (ref/target, children, value, values, minimum/maximum, pattern/format/min_length/max_length,
    items/min_items/max_items, properties as (name, node, required) and additional_properties)."""

    def __init__(self, kind: str, **fields):
        self.kind = kind
        self.__dict__.update(fields)


FORMAT_NONE, FORMAT_UUID, FORMAT_DATE, FORMAT_TIME, FORMAT_DATE_TIME = range(5)


def _stoull(s: str) -> int | None:
    """std::stoull: leading blanks, a sign (a minus wraps), decimal digits; None where it throws."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)", s)
    if not m or int(m.group(2)) > UINT64_MAX:
        return None
    v = int(m.group(2))
    return (-v) % 2**64 if m.group(1) == "-" else v


class SchemaBuilder:
    """common_chat_schema_builder: checks a JSON schema and builds its nodes (common_chat_schema_from_json)."""

    def __init__(self, root):
        self.root = root
        self.refs: dict[str, Node | None] = {}  # every $ref target, built once
        self.pending: list[Node] = []  # ref nodes, given their target once every $ref is built

    @staticmethod
    def fail(path: str, msg: str):
        raise _SchemaFailure(f"JSON schema error at {path}: {msg}")

    def get_count(self, schema: dict, key: str, path: str, default: int) -> int:
        if key not in schema:
            return default
        value = schema[key]
        if not _is_int(value) or _to_int32(value) < 0:
            self.fail(path, f"{key} must be a non-negative integer")
        return _to_int32(value)

    def get_bound(self, schema: dict, key: str, path: str, round_up: bool) -> int:
        """A fractional bound is rounded inwards, towards the integers it still admits."""
        value = schema[key]
        if _is_int(value):
            return _to_int64(value)
        if not _is_number(value):
            self.fail(path, f"{key} must be a number")
        return _double_to_int64(float(math.ceil(value) if round_up else math.floor(value)))

    def get_format(self, schema: dict, path: str) -> int:
        if "format" not in schema:
            return FORMAT_NONE
        fmt = schema["format"]
        if not isinstance(fmt, str):
            self.fail(path, "format must be a string")
        if fmt == "date":
            return FORMAT_DATE
        if fmt == "time":
            return FORMAT_TIME
        if fmt == "date-time":
            return FORMAT_DATE_TIME
        if fmt == "uuid" or (len(fmt) == 5 and fmt.startswith("uuid") and "1" <= fmt[4] <= "5"):
            return FORMAT_UUID
        return FORMAT_NONE

    def resolve_ref(self, ref: str, path: str):
        """The JSON value a `#/a/b/0` reference points to (no ~0/~1 or %-decoding, as llama.cpp)."""
        target = self.root
        for sel in ref[1:].split("/")[1:]:
            if isinstance(target, dict) and sel in target:
                target = target[sel]
            elif isinstance(target, list):
                idx = _stoull(sel)
                if idx is None:
                    idx = len(target)
                if idx >= len(target):
                    self.fail(path, f"cannot resolve $ref {ref}, {sel} is out of range")
                target = target[idx]
            else:
                self.fail(path, f"cannot resolve $ref {ref}, {sel} not found")
        return target

    def build_ref(self, value, path: str) -> Node:
        if not isinstance(value, str):
            self.fail(path, "$ref must be a string")
        ref = value
        if not ref.startswith("#/"):
            self.fail(path, f"unsupported $ref {ref}, only references into the same document are supported")
        if ref not in self.refs:
            self.refs[ref] = None  # reserve the key first, so that a cycle back to this $ref stops here
            self.refs[ref] = self.build_node(self.resolve_ref(ref, path), ref)
        node = Node("ref", ref=ref, target=None)
        self.pending.append(node)
        return node

    def build_alternatives(self, kind: str, alts, path: str) -> Node:
        if not isinstance(alts, list):
            self.fail(path, "must be an array of schemas")
        if not alts:
            self.fail(path, "must not be empty")
        return Node(kind, children=[self.build_node(alt, f"{path}/{i}") for i, alt in enumerate(alts)])

    def build_object(self, schema: dict, path: str) -> Node:
        required = set()
        if isinstance(schema.get("required"), list):
            required = {name for name in schema["required"] if isinstance(name, str)}
        properties = []
        if "properties" in schema:
            props = schema["properties"]
            if not isinstance(props, dict):
                self.fail(path, "properties must be an object")
            for name, prop in props.items():
                properties.append((name, self.build_node(prop, f"{path}/properties/{name}"), name in required))
        additional = None
        if "additionalProperties" in schema:
            value = schema["additionalProperties"]
            if isinstance(value, bool):
                additional = Node("any") if value else None
            elif isinstance(value, dict):
                additional = self.build_node(value, path + "/additionalProperties")
            else:
                self.fail(path, "additionalProperties must be a boolean or a schema")
        elif "properties" not in schema:
            additional = Node("any")  # {"type": "object"} on its own accepts any object
        return Node("object", properties=properties, additional_properties=additional)

    def build_array(self, schema: dict, path: str) -> Node:
        items = Node("any")
        if "items" in schema or "prefixItems" in schema:
            # "items" wins over "prefixItems"; a list is a tuple (its min/max items unchecked), a schema the item
            key = "items" if "items" in schema else "prefixItems"
            value = schema[key]
            if isinstance(value, list):
                return Node("tuple", items=[self.build_node(v, f"{path}/{key}/{i}") for i, v in enumerate(value)])
            items = self.build_node(value, f"{path}/{key}")
        return Node("array", items=items, min_items=self.get_count(schema, "minItems", path, 0),
                    max_items=self.get_count(schema, "maxItems", path, -1))

    def build_string(self, schema: dict, path: str) -> Node:
        pattern = ""
        if "pattern" in schema:
            pattern = schema["pattern"]
            if not isinstance(pattern, str):
                self.fail(path, "pattern must be a string")
        return Node("string", pattern=pattern, format=self.get_format(schema, path),
                    min_length=self.get_count(schema, "minLength", path, 0),
                    max_length=self.get_count(schema, "maxLength", path, -1))

    def build_integer(self, schema: dict, path: str) -> Node:
        """Inclusive bounds, INT64_MIN/INT64_MAX for none; the exclusive ones are folded in (wrapping, as C)."""
        minimum, maximum = INT64_MIN, INT64_MAX
        if "minimum" in schema:
            minimum = self.get_bound(schema, "minimum", path, True)
        elif "exclusiveMinimum" in schema:
            minimum = _to_int64(self.get_bound(schema, "exclusiveMinimum", path, False) + 1)
        if "maximum" in schema:
            maximum = self.get_bound(schema, "maximum", path, False)
        elif "exclusiveMaximum" in schema:
            maximum = _to_int64(self.get_bound(schema, "exclusiveMaximum", path, True) - 1)
        return Node("integer", minimum=minimum, maximum=maximum)

    def build_node(self, schema, path: str) -> Node:
        if not isinstance(schema, dict):
            self.fail(path, "schema must be an object")
        if "$ref" in schema:
            return self.build_ref(schema["$ref"], path)
        if "oneOf" in schema or "anyOf" in schema:
            key = "oneOf" if "oneOf" in schema else "anyOf"
            return self.build_alternatives("anyOf", schema[key], f"{path}/{key}")

        typ = schema.get("type")
        if isinstance(typ, list):
            # {"type": ["a", "b"], ...} is {"anyOf": [{"type": "a", ...}, {"type": "b", ...}]}
            if not typ:
                self.fail(path, "type must not be empty")
            children = []
            for i, t in enumerate(typ):
                alt = dict(schema)
                alt["type"] = t
                children.append(self.build_node(alt, f"{path}/type/{i}"))
            return Node("anyOf", children=children)
        if "const" in schema:
            return Node("const", value=schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                self.fail(path, "enum must be a non-empty array")
            return Node("enum", values=list(values))
        if typ is not None and not isinstance(typ, str):
            self.fail(path, "type must be a string or an array of strings")

        type_name = typ or ""
        # (a JSON true, not Python's 1 == True)
        has_properties = "properties" in schema or (
            "additionalProperties" in schema and schema["additionalProperties"] is not True)
        if not type_name:
            # without a type the structural keywords decide, in the same order as the converter
            if has_properties:
                return self.build_object(schema, path)
            if "allOf" in schema:
                return self.build_alternatives("allOf", schema["allOf"], path + "/allOf")
            if "items" in schema or "prefixItems" in schema:
                return self.build_array(schema, path)
            if ("pattern" in schema or "minLength" in schema or "maxLength" in schema
                    or self.get_format(schema, path) != FORMAT_NONE):
                return self.build_string(schema, path)
            return Node("any")
        if type_name == "object":
            if not has_properties and "allOf" in schema:
                return self.build_alternatives("allOf", schema["allOf"], path + "/allOf")
            return self.build_object(schema, path)
        if type_name == "string":
            if "allOf" in schema:
                return self.build_alternatives("allOf", schema["allOf"], path + "/allOf")
            return self.build_string(schema, path)
        if type_name == "array":
            return self.build_array(schema, path)
        if type_name == "integer":
            return self.build_integer(schema, path)
        if type_name in ("number", "boolean", "null"):
            return Node(type_name)
        self.fail(path, f"unrecognized type {type_name}")

    def build(self) -> Node:
        node = self.build_node(self.root, "#")
        for ref in self.pending:
            ref.target = self.refs[ref.ref]
        return node


# --- grammar building blocks (common/json-schema-to-grammar.cpp) ----------------------------------------------

def build_repetition(item_rule: str, min_items: int, max_items: int, separator_rule: str = "") -> str:
    """`item_rule` min..max times (max INT_MAX: unbounded), `separator_rule` between two items."""
    has_max = max_items != INT_MAX
    if max_items == 0:
        return ""
    if min_items == 0 and max_items == 1:
        return item_rule + "?"

    if not separator_rule:
        if min_items == 1 and not has_max:
            return item_rule + "+"
        if min_items == 0 and not has_max:
            return item_rule + "*"
        return item_rule + "{" + str(min_items) + "," + (str(max_items) if has_max else "") + "}"

    result = item_rule + " " + build_repetition(f"({separator_rule} {item_rule})", 0 if min_items == 0 else
                                                min_items - 1, max_items - 1 if has_max else max_items)
    if min_items == 0:
        result = "(" + result + ")?"
    return result


def build_min_max_int(min_value: int, max_value: int, out: list, decimals_left: int = 16,
                      top_level: bool = True) -> None:
    """Appends to `out` the alternatives of the integers in [min_value, max_value] (INT64_MIN/MAX: unbounded),
    at most 16 digits long (`decimals_left`), digit range by digit range."""
    has_min = min_value != INT64_MIN
    has_max = max_value != INT64_MAX

    def digit_range(frm: str, to: str):
        out.append("[" + (frm if frm == to else f"{frm}-{to}") + "]")

    def more_digits(min_digits: int, max_digits: int):
        out.append("[0-9]")
        if min_digits == max_digits == 1:
            return
        out.append("{" + str(min_digits))
        if max_digits != min_digits:
            out.append(",")
            if max_digits != INT_MAX:
                out.append(str(max_digits))
        out.append("}")

    def uniform_range(frm: str, to: str):
        """Same-length decimal strings frm <= to: a shared prefix, then the digit ranges between them."""
        i = 0
        while i < len(frm) and i < len(to) and frm[i] == to[i]:
            i += 1
        if i > 0:
            out.append('"' + frm[:i] + '"')
        if i < len(frm) and i < len(to):
            if i > 0:
                out.append(" ")
            sub_len = len(frm) - i - 1
            if sub_len > 0:
                from_sub, to_sub = frm[i + 1:], to[i + 1:]
                sub_zeros, sub_nines = "0" * sub_len, "9" * sub_len
                to_reached = False
                out.append("(")
                if from_sub == sub_zeros:
                    digit_range(frm[i], chr(ord(to[i]) - 1))
                    out.append(" ")
                    more_digits(sub_len, sub_len)
                else:
                    out.append(f"[{frm[i]}] (")
                    uniform_range(from_sub, sub_nines)
                    out.append(")")
                    if ord(frm[i]) < ord(to[i]) - 1:
                        out.append(" | ")
                        if to_sub == sub_nines:
                            digit_range(chr(ord(frm[i]) + 1), to[i])
                            to_reached = True
                        else:
                            digit_range(chr(ord(frm[i]) + 1), chr(ord(to[i]) - 1))
                        out.append(" ")
                        more_digits(sub_len, sub_len)
                if not to_reached:
                    out.append(" | ")
                    digit_range(to[i], to[i])
                    out.append(" ")
                    uniform_range(sub_zeros, to_sub)
                out.append(")")
            else:
                out.append(f"[{frm[i]}-{to[i]}]")

    if has_min and has_max:
        if min_value < 0 and max_value < 0:
            out.append('"-" (')
            build_min_max_int(_to_int64(-max_value), _to_int64(-min_value), out, decimals_left, True)
            out.append(")")
            return
        if min_value < 0:
            out.append('"-" (')
            build_min_max_int(0, _to_int64(-min_value), out, decimals_left, True)
            out.append(") | ")
            min_value = 0
        min_s, max_s = str(min_value), str(max_value)
        for digits in range(len(min_s), len(max_s)):
            uniform_range(min_s, "9" * digits)
            min_s = "1" + "0" * digits
            out.append(" | ")
        uniform_range(min_s, max_s)
        return

    less_decimals = max(decimals_left - 1, 1)

    if has_min:
        if min_value < 0:
            out.append('"-" (')
            build_min_max_int(INT64_MIN, _to_int64(-min_value), out, decimals_left, False)
            out.append(") | [0] | [1-9] ")
            more_digits(0, decimals_left - 1)
        elif min_value == 0:
            if top_level:
                out.append("[0] | [1-9] ")
                more_digits(0, less_decimals)
            else:
                more_digits(1, decimals_left)
        elif min_value <= 9:
            c = chr(ord("0") + min_value)
            range_start = "1" if top_level else "0"
            if c > range_start:
                digit_range(range_start, chr(ord(c) - 1))
                out.append(" ")
                more_digits(1, less_decimals)
                out.append(" | ")
            digit_range(c, "9")
            out.append(" ")
            more_digits(0, less_decimals)
        else:
            min_s = str(min_value)
            c = min_s[0]
            if c > "1":
                digit_range("1" if top_level else "0", chr(ord(c) - 1))
                out.append(" ")
                more_digits(len(min_s), less_decimals)
                out.append(" | ")
            digit_range(c, c)
            out.append(" (")
            build_min_max_int(int(min_s[1:]), INT64_MAX, out, less_decimals, False)
            out.append(")")
            if c < "9":
                out.append(" | ")
                digit_range(chr(ord(c) + 1), "9")
                out.append(" ")
                more_digits(len(min_s) - 1, less_decimals)
        return

    if has_max:
        if max_value >= 0:
            if top_level:
                out.append('"-" [1-9] ')
                more_digits(0, less_decimals)
                out.append(" | ")
            build_min_max_int(0, max_value, out, decimals_left, True)
        else:
            out.append('"-" (')
            build_min_max_int(_to_int64(-max_value), INT64_MAX, out, decimals_left, False)
            out.append(")")
        return

    raise _SchemaFailure("At least one of min_value or max_value must be set")


SPACE_RULE = r'| " " | "\n"{1,2} [ \t]{0,20}'


class BuiltinRule(NamedTuple):
    content: str
    deps: tuple


PRIMITIVE_RULES = {
    "boolean": BuiltinRule(r'("true" | "false")', ()),
    "decimal-part": BuiltinRule(r"[0-9]{1,16}", ()),
    "integral-part": BuiltinRule(r"[0] | [1-9] [0-9]{0,15}", ()),
    "number": BuiltinRule(r'("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
                          ("integral-part", "decimal-part")),
    "integer": BuiltinRule(r'("-"? integral-part)', ("integral-part",)),
    "value": BuiltinRule(r"object | array | string | number | boolean | null",
                         ("object", "array", "string", "number", "boolean", "null")),
    "object": BuiltinRule(r'"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"',
                          ("string", "value")),
    "array": BuiltinRule(r'"[" space ( value ("," space value)* )? space "]"', ("value",)),
    "uuid": BuiltinRule(r'"\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" '
                        r'[0-9a-fA-F]{12} "\""', ()),
    "char": BuiltinRule(r'[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})', ()),
    "string": BuiltinRule(r'"\"" char* "\""', ("char",)),
    "null": BuiltinRule(r'"null"', ()),
}

STRING_FORMAT_RULES = {
    "date": BuiltinRule(r'[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )', ()),
    "time": BuiltinRule(r'([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? '
                        r'( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )', ()),
    "date-time": BuiltinRule(r'date "T" time', ("date", "time")),
    "date-string": BuiltinRule(r'"\"" date "\""', ("date",)),
    "time-string": BuiltinRule(r'"\"" time "\""', ("time",)),
    "date-time-string": BuiltinRule(r'"\"" date-time "\""', ("date-time",)),
}

RESERVED_NAMES = {"root", *PRIMITIVE_RULES, *STRING_FORMAT_RULES}

INVALID_RULE_CHARS_RE = re.compile(r"[^a-zA-Z0-9-]+")
GRAMMAR_LITERAL_ESCAPE_RE = re.compile(r'[\r\n"\\]')
GRAMMAR_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "-": "\\-", "]": "\\]", "\\": "\\\\"}

MAX_PATTERN_DEPTH = 100
NON_LITERAL_SET = set("|.()[]{}*+?^$")
ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS = set("^$.[]()|{}*+?")


def format_literal(literal: str) -> str:
    """A GBNF string literal: quoted, with \\r, \\n, '"' and '\\' escaped."""
    return '"' + GRAMMAR_LITERAL_ESCAPE_RE.sub(lambda m: GRAMMAR_LITERAL_ESCAPES[m.group()], literal) + '"'


def gbnf_escape_length(pattern: str, pos: int) -> int:
    """Length of the escape at pos that GBNF reads as the regex does (parse_char in llama-grammar.cpp), else 0."""
    if pos + 1 >= len(pattern) or pattern[pos] != "\\":
        return 0
    n_hex = {"x": 2, "u": 4, "U": 8}.get(pattern[pos + 1])
    if n_hex is None:
        return 2 if pattern[pos + 1] in 'trn\\"[]-' else 0
    if pos + 2 + n_hex > len(pattern):
        return 0
    if any(h not in "0123456789abcdefABCDEF" for h in pattern[pos + 2 : pos + 2 + n_hex]):
        return 0
    return 2 + n_hex


# The pattern converter walks the pattern's UTF-8 bytes as the C++ does: bytes are held as latin-1 characters
# and turned back into text (split sequences as surrogate escapes) where they leave it.

def _as_bytes(text: str) -> str:
    return text.encode("utf-8", "surrogateescape").decode("latin-1")


def _as_text(byte_chars: str) -> str:
    return byte_chars.encode("latin-1").decode("utf-8", "surrogateescape")


class _UnsupportedPattern(Exception):
    """A valid regex with no grammar equivalent: the string is accepted unconstrained, with a warning."""


class _InvalidPattern(Exception):
    """A pattern that is no regex: a conversion error."""


class _TrieNode:
    """common_trie's node: children by code point, whether a word ends here."""

    def __init__(self):
        self.children: dict[str, _TrieNode] = {}
        self.is_end = False


class SchemaConverter:
    """common_chat_schema_converter: turns schema nodes into GBNF rules, kept sorted by name (a std::map)."""

    def __init__(self, dotall: bool = False):
        self._dotall = dotall
        self._rules: dict[str, str] = {"space": SPACE_RULE}
        self._refs_being_resolved: set[str] = set()
        self._errors: list[str] = []
        self._warnings: list[str] = []

    def _add_rule(self, name: str, rule: str) -> str:
        """Adds `rule` under `name` made a valid rule name; a name taken by another rule gets a number."""
        esc_name = INVALID_RULE_CHARS_RE.sub("-", name)
        if esc_name not in self._rules or self._rules[esc_name] == rule:
            self._rules[esc_name] = rule
            return esc_name
        i = 0
        while f"{esc_name}{i}" in self._rules and self._rules[f"{esc_name}{i}"] != rule:
            i += 1
        key = f"{esc_name}{i}"
        self._rules[key] = rule
        return key

    def _generate_union_rule(self, name: str, alt_schemas: list) -> str:
        return " | ".join(self.visit(alt, name + ("-" if name else "alternative-") + str(i))
                          for i, alt in enumerate(alt_schemas))

    def _visit_pattern(self, pattern: str, name: str) -> str:
        rules_snapshot = dict(self._rules)
        try:
            return self._pattern_to_rule(pattern, name)
        except _UnsupportedPattern as err:
            self._rules = rules_snapshot
            self._warnings.append(f"pattern {pattern} is not supported ({err}), accepting any string")
            return self._add_rule(name, self._add_primitive("string", PRIMITIVE_RULES["string"]))
        except _InvalidPattern as err:
            self._rules = rules_snapshot
            self._errors.append(f"Invalid pattern {pattern}: {err}")
            return ""

    def _pattern_to_rule(self, pattern: str, name: str) -> str:
        """An anchored regex (^...$) as a rule for the JSON string of its matches."""
        pattern = _as_bytes(pattern)
        if len(pattern) < 2 or pattern[0] != "^" or pattern[-1] != "$":
            raise _UnsupportedPattern("not anchored with '^' and '$'")
        sub_pattern = pattern[1:-1]
        sub_rule_ids: dict[str, str] = {}
        length = len(sub_pattern)
        i = 0
        paren_depth = 0

        def to_rule(ls: tuple[str, bool]) -> str:
            s, is_literal = ls
            return '"' + s + '"' if is_literal else s

        def transform() -> tuple[str, bool]:
            nonlocal i, paren_depth
            seq: list[tuple[str, bool]] = []  # (text, is_literal)

            def get_dot() -> str:
                return self._add_rule("dot", r"[\U00000000-\U0010FFFF]" if self._dotall else r"[^\x0A\x0D]")

            def join_seq() -> tuple[str, bool]:
                """The sequence joined, consecutive literals merged into one."""
                ret: list[tuple[str, bool]] = []
                literal = ""
                for item in seq:
                    if item[1]:
                        literal += item[0]
                    else:
                        if literal:
                            ret.append((literal, True))
                            literal = ""
                        ret.append(item)
                if literal:
                    ret.append((literal, True))
                return " ".join(to_rule(item) for item in ret), False

            while i < length:
                c = sub_pattern[i]
                if c == ".":
                    seq.append((get_dot(), False))
                    i += 1
                elif c == "(":
                    i += 1
                    if i < length and sub_pattern[i] == "?":
                        if i + 1 < length and sub_pattern[i + 1] == ":":
                            i += 2  # a non-capturing group is a group
                        else:  # lookaround, named group, inline flags, ...
                            raise _UnsupportedPattern("unsupported group syntax")
                    paren_depth += 1
                    if paren_depth > MAX_PATTERN_DEPTH:
                        raise _UnsupportedPattern("pattern nesting too deep")
                    seq.append(("(" + to_rule(transform()) + ")", False))
                elif c == ")":
                    i += 1
                    if paren_depth == 0:
                        raise _InvalidPattern("unbalanced parentheses")
                    paren_depth -= 1
                    return join_seq()
                elif c in "^$":
                    raise _UnsupportedPattern("anchor inside the pattern")
                elif c == "[":
                    square_brackets = c
                    i += 1
                    while i < length and sub_pattern[i] != "]":
                        if sub_pattern[i] == "\\":
                            escape_length = gbnf_escape_length(sub_pattern, i)
                            if escape_length == 0:
                                raise _UnsupportedPattern("unsupported escape in character class: "
                                                          + _as_text(sub_pattern[i : i + 2]))
                            square_brackets += sub_pattern[i : i + escape_length]
                            i += escape_length
                        else:
                            square_brackets += sub_pattern[i]
                            i += 1
                    if i >= length:
                        raise _InvalidPattern("unterminated character class")
                    square_brackets += "]"
                    i += 1
                    seq.append((square_brackets, False))
                elif c == "|":
                    seq.append(("|", False))
                    i += 1
                elif c in "*+?":
                    if not seq:
                        raise _InvalidPattern("nothing to repeat")
                    seq[-1] = (to_rule(seq[-1]) + c, False)
                    i += 1
                elif c == "{":
                    curly_brackets = c
                    i += 1
                    while i < length and sub_pattern[i] != "}":
                        curly_brackets += sub_pattern[i]
                        i += 1
                    if i >= length:
                        raise _UnsupportedPattern("unterminated curly brackets")
                    curly_brackets += "}"
                    i += 1
                    nums = curly_brackets[1:-1].split(",")
                    min_times, max_times = 0, INT_MAX
                    if len(nums) not in (1, 2):
                        raise _UnsupportedPattern("wrong number of values in curly brackets")
                    try:
                        if len(nums) == 1:
                            min_times = max_times = _stoi(nums[0])
                        else:
                            if nums[0]:
                                min_times = _stoi(nums[0])
                            if nums[1]:
                                max_times = _stoi(nums[1])
                    except ValueError:
                        raise _UnsupportedPattern("invalid number in curly brackets") from None
                    if not seq:
                        raise _InvalidPattern("nothing to repeat")
                    sub, sub_is_literal = seq[-1]
                    if not sub_is_literal:
                        # a repeated group becomes a rule of its own, one per distinct group
                        if sub not in sub_rule_ids:
                            sub_rule_ids[sub] = ""
                        if not sub_rule_ids[sub]:
                            sub_rule_ids[sub] = self._add_rule(f"{name}-{len(sub_rule_ids)}", _as_text(sub))
                        sub = sub_rule_ids[sub]
                    seq[-1] = (build_repetition('"' + sub + '"' if sub_is_literal else sub, min_times, max_times),
                               False)
                else:
                    literal = ""
                    while i < length:
                        if sub_pattern[i] == "\\":
                            if i == length - 1:
                                raise _InvalidPattern("trailing backslash")
                            if sub_pattern[i + 1] in ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS:
                                i += 1
                                literal += sub_pattern[i]
                                i += 1
                            else:
                                escape_length = gbnf_escape_length(sub_pattern, i)
                                if escape_length == 0:
                                    raise _UnsupportedPattern("unsupported escape: " + _as_text(sub_pattern[i : i + 2]))
                                literal += sub_pattern[i : i + escape_length]
                                i += escape_length
                        elif sub_pattern[i] == '"':
                            literal += '\\"'
                            i += 1
                        elif sub_pattern[i] not in NON_LITERAL_SET and (
                                i == length - 1 or not literal or sub_pattern[i + 1] == "."
                                or sub_pattern[i + 1] not in NON_LITERAL_SET):
                            # (a character a quantifier follows is left for the next item, unless it comes first)
                            literal += sub_pattern[i]
                            i += 1
                        else:
                            break
                    if not literal:  # nothing was consumed, e.g. a stray ']' or '}'
                        raise _UnsupportedPattern("unsupported character: " + _as_text(c))
                    seq.append((literal, True))
            return join_seq()

        rule = to_rule(transform())
        if paren_depth != 0:
            raise _InvalidPattern("unbalanced parentheses")
        return self._add_rule(name, _as_text('"\\"" (' + rule + ') "\\""'))

    def _not_strings(self, strings: list[str]) -> str:
        """A rule for a JSON string that is none of `strings`, e.g. for ["a"]: ["] ( [a] char+ | [^"a] char* )? ["]
        (a trie of the strings, its children in code-point order; the characters are not escaped)."""
        root = _TrieNode()
        for s in strings:
            node = root
            for ch in s:
                node = node.children.setdefault(ch, _TrieNode())
            node.is_end = True

        char_rule = self._add_primitive("char", PRIMITIVE_RULES["char"])
        out = ['["] ( ']

        def visit(node: _TrieNode):
            rejects = ""
            for n, ch in enumerate(sorted(node.children)):
                child = node.children[ch]
                rejects += ch
                if n > 0:
                    out.append(" | ")
                out.append(f"[{ch}]")
                if child.children:
                    out.append(" (")
                    visit(child)
                    out.append(")")
                else:
                    out.append(f" {char_rule}+")
            if node.children:
                out.append(f' | [^"{rejects}] {char_rule}*')

        visit(root)
        out.append(" )")
        if not root.is_end:
            out.append("?")
        out.append(' ["]')
        return "".join(out)

    def _resolve_ref(self, schema: Node) -> str:
        ref = schema.ref
        ref_fragment = ref[ref.index("#") + 1:] if "#" in ref else ref
        ref_name = "ref" + re.sub(r"[^a-zA-Z0-9-]+", "-", ref_fragment)
        if ref_name not in self._rules and ref not in self._refs_being_resolved:
            if schema.target is None:
                self._errors.append(f"Unresolved $ref {ref}")
                return ""
            self._refs_being_resolved.add(ref)
            ref_name = self.visit(schema.target, ref_name)
            self._refs_being_resolved.discard(ref)
        return ref_name

    def _build_object_rule(self, properties: list, required: set, name: str, additional_properties) -> str:
        """The object's rule: required properties in order, then optional ones (and any additional ones) each
        optional after the ones before it."""
        required_props: list[str] = []
        optional_props: list[str] = []
        prop_kv_rule_names: dict[str, str] = {}
        prop_names: list[str] = []
        dash = "-" if name else ""
        for prop_name, prop_schema in properties:
            prop_rule_name = self.visit(prop_schema, name + dash + prop_name)
            prop_kv_rule_names[prop_name] = self._add_rule(
                name + dash + prop_name + "-kv",
                format_literal(_dump_string(prop_name)) + ' space ":" space ' + prop_rule_name)
            if prop_name in required:
                required_props.append(prop_name)
            else:
                optional_props.append(prop_name)
            prop_names.append(prop_name)
        if additional_properties is not None:
            sub_name = name + dash + "additional"
            if additional_properties.kind != "any":
                value_rule = self.visit(additional_properties, sub_name + "-value")
            else:
                value_rule = self._add_primitive("value", PRIMITIVE_RULES["value"])
            if prop_names:
                key_rule = self._add_rule(sub_name + "-k", self._not_strings(prop_names))
            else:
                key_rule = self._add_primitive("string", PRIMITIVE_RULES["string"])
            prop_kv_rule_names["*"] = self._add_rule(sub_name + "-kv", key_rule + ' ":" space ' + value_rule)
            optional_props.append("*")

        if not required_props and not optional_props:
            return '"{" space "}"'

        rule = '"{" space ' + ' "," space '.join(prop_kv_rule_names[p] for p in required_props)

        if optional_props:
            rule += " ("
            if required_props:
                rule += ' "," space ( '

            def get_recursive_refs(ks: list[str], first_is_optional: bool) -> str:
                if not ks:
                    return ""
                k = ks[0]
                kv_rule_name = prop_kv_rule_names[k]
                comma_ref = f'( "," space {kv_rule_name} )'
                if first_is_optional:
                    res = comma_ref + ("*" if k == "*" else "?")
                else:
                    res = kv_rule_name + (" " + comma_ref + "*" if k == "*" else "")
                if len(ks) > 1:
                    res += " " + self._add_rule(name + dash + k + "-rest", get_recursive_refs(ks[1:], True))
                return res

            rule += " | ".join(get_recursive_refs(optional_props[i:], False) for i in range(len(optional_props)))
            if required_props:
                rule += " )"
            rule += " )?"

        rule += ' space "}"'
        return rule

    def _add_primitive(self, name: str, rule: BuiltinRule) -> str:
        """Adds a built-in rule and, unless already there, the built-in rules it uses."""
        n = self._add_rule(name, rule.content)
        for dep in rule.deps:
            dep_rule = PRIMITIVE_RULES.get(dep) or STRING_FORMAT_RULES.get(dep)
            if dep_rule is None:
                self._errors.append(f"Rule {dep} not known")
                continue
            if dep not in self._rules:
                self._add_primitive(dep, dep_rule)
        return n

    def add_schema(self, name: str, schema: Node) -> str:
        return self.visit(schema, name)

    @staticmethod
    def _generate_constant_rule(value) -> str:
        return format_literal(_dump(value))

    def _visit_primitive(self, rule_name: str, type_: str) -> str:
        return self._add_primitive("root" if rule_name == "root" else type_, PRIMITIVE_RULES[type_])

    def _visit_all_of(self, schema: Node, name: str, rule_name: str) -> str:
        """The properties of every component merged into one object (those of anyOf alternatives optional), or
        the enum values every component shares."""
        required: set[str] = set()
        properties: list = []
        enum_values: dict[str, int] = {}

        def add_component(comp: Node, is_required: bool):
            if comp.kind == "ref":
                if comp.target is not None:
                    add_component(comp.target, is_required)
            elif comp.kind == "object":
                for prop_name, prop_schema, _ in comp.properties:
                    properties.append((prop_name, prop_schema))
                    if is_required:
                        required.add(prop_name)
            elif comp.kind == "enum":
                for v in comp.values:
                    key = self._generate_constant_rule(v)
                    enum_values[key] = enum_values.get(key, 0) + 1

        for child in schema.children:
            if child.kind == "anyOf":
                for alt in child.children:
                    add_component(alt, False)
            else:
                add_component(child, True)
        if enum_values:
            enum_intersection = [v for v in sorted(enum_values) if enum_values[v] == len(schema.children)]
            if enum_intersection:
                return self._add_rule(rule_name, "(" + " | ".join(enum_intersection) + ")")
        return self._add_rule(rule_name, self._build_object_rule(properties, required, name, None))

    def visit(self, schema: Node, name: str) -> str:
        """Adds the rules of a schema node under `name` ("" for the root) and gives the name of its rule."""
        rule_name = name + "-" if name in RESERVED_NAMES else (name or "root")
        sub_name = name + ("-" if name else "")
        kind = schema.kind

        if kind == "ref":
            return self._add_rule(rule_name, self._resolve_ref(schema))
        if kind == "anyOf":
            return self._add_rule(rule_name, self._generate_union_rule(name, schema.children))
        if kind == "allOf":
            return self._visit_all_of(schema, name, rule_name)
        if kind == "const":
            return self._add_rule(rule_name, self._generate_constant_rule(schema.value))
        if kind == "enum":
            return self._add_rule(rule_name, "(" + " | ".join(self._generate_constant_rule(v)
                                                             for v in schema.values) + ")")
        if kind == "object":
            additional = schema.additional_properties
            if not schema.properties and additional is not None and additional.kind == "any":
                return self._add_rule(rule_name, self._add_primitive("object", PRIMITIVE_RULES["object"]))
            required = {prop_name for prop_name, _, is_required in schema.properties if is_required}
            properties = [(prop_name, prop_schema) for prop_name, prop_schema, _ in schema.properties]
            return self._add_rule(rule_name, self._build_object_rule(properties, required, name, additional))
        if kind == "tuple":
            rule = '"[" space ' + ' "," space '.join(self.visit(item, f"{sub_name}tuple-{i}")
                                                     for i, item in enumerate(schema.items))
            return self._add_rule(rule_name, rule + ' space "]"')
        if kind == "array":
            if schema.items.kind == "any" and schema.min_items == 0 and schema.max_items < 0:
                return self._visit_primitive(rule_name, "array")
            item_rule_name = self.visit(schema.items, sub_name + "item")
            max_items = INT_MAX if schema.max_items < 0 else schema.max_items
            return self._add_rule(rule_name, '"[" space ' + build_repetition(item_rule_name, schema.min_items,
                                                                             max_items, '"," space') + ' space "]"')
        if kind == "string":
            if schema.pattern:
                return self._visit_pattern(schema.pattern, rule_name)
            if schema.format == FORMAT_UUID:
                return self._visit_primitive(rule_name, "uuid")
            if schema.format != FORMAT_NONE:
                prim_name = {FORMAT_DATE: "date", FORMAT_TIME: "time"}.get(schema.format, "date-time") + "-string"
                return self._add_rule(rule_name, self._add_primitive(prim_name, STRING_FORMAT_RULES[prim_name]))
            if schema.min_length > 0 or schema.max_length >= 0:
                char_rule = self._add_primitive("char", PRIMITIVE_RULES["char"])
                max_len = INT_MAX if schema.max_length < 0 else schema.max_length
                return self._add_rule(rule_name, '"\\"" ' + build_repetition(char_rule, schema.min_length, max_len)
                                      + ' "\\""')
            return self._visit_primitive(rule_name, "string")
        if kind == "integer":
            if schema.minimum == INT64_MIN and schema.maximum == INT64_MAX:
                return self._visit_primitive(rule_name, "integer")
            out = ["("]
            build_min_max_int(schema.minimum, schema.maximum, out)
            out.append(")")
            return self._add_rule(rule_name, "".join(out))
        if kind in ("number", "boolean", "null"):
            return self._visit_primitive(rule_name, kind)
        # any
        return self._add_rule(rule_name, self._add_primitive("value", PRIMITIVE_RULES["value"]))

    def check_errors(self) -> None:
        """Errors fail the conversion; warnings (unsupported patterns) go to stderr, as llama.cpp prints them."""
        if self._errors:
            raise JsonSchemaError("JSON schema conversion failed:\n" + "\n".join(self._errors))
        if self._warnings:
            print("WARNING: JSON schema conversion was incomplete: " + "; ".join(self._warnings),
                  file=sys.stderr, flush=True)

    def format_grammar(self) -> str:
        return "".join(f"{name} ::= {rule}\n" for name, rule in sorted(self._rules.items()))


def _stoi(s: str) -> int:
    """std::stoi: leading blanks, a sign, decimal digits, the rest ignored; ValueError where it throws."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", s)
    if not m or not -(2**31) <= int(m.group(1)) <= INT_MAX:
        raise ValueError(s)
    return int(m.group(1))


# --- entry points ----------------------------------------------------------------------------------------------

def json_schema_to_grammar(schema, force_gbnf: bool = False) -> str:
    """The GBNF grammar of a JSON schema (a value as json.loads gives it), as llama.cpp's
    `json_schema_to_grammar(const common_json & schema, bool force_gbnf = false)`. `force_gbnf` is accepted and
    ignored: it only matters in a build with LLGuidance, which llama.cpp's reference build is not. Raises
    JsonSchemaError with llama.cpp's message ("JSON schema conversion failed:\\n...") when the schema cannot be
    converted; warns on stderr when a pattern is not supported (that string is then unconstrained)."""
    del force_gbnf
    try:
        root = SchemaBuilder(schema).build()
        converter = SchemaConverter(dotall=False)
        converter.visit(root, "")
    except _SchemaFailure as e:
        raise JsonSchemaError(f"JSON schema conversion failed:\n{e}") from None
    except RecursionError:
        # (llama.cpp recurses on the C stack, which holds far deeper schemas than Python's default limit)
        raise JsonSchemaError("JSON schema conversion failed:\nschema nested too deeply") from None
    converter.check_errors()
    return converter.format_grammar()


class _NotJson(ValueError):
    pass


def _parse_int(s: str):
    """nlohmann keeps an integer that fits int64 or uint64, else reads it as a double (which may overflow)."""
    if len(s) <= 20 and INT64_MIN <= int(s) <= UINT64_MAX:
        return int(s)
    return _parse_float(s)


def _parse_float(s: str) -> float:
    v = float(s)
    if math.isinf(v):
        raise _NotJson(f"number overflow parsing '{s}'")
    return v


def _parse_constant(s: str):
    raise _NotJson(f"invalid literal {s}")


def _check_no_surrogates(value) -> None:
    """nlohmann rejects a \\uD800-\\uDFFF escape that is not half of a surrogate pair; json.loads keeps it."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            strings = [v]
        elif isinstance(v, list):
            stack.extend(v)
            continue
        elif isinstance(v, dict):
            stack.extend(v.values())
            strings = list(v)
        else:
            continue
        for s in strings:
            if re.search("[\ud800-\udfff]", s):
                raise _NotJson("invalid string: surrogate \\uD800..\\uDFFF not part of a surrogate pair")


def parse_json(text: str | bytes):
    """common_json::parse (nlohmann::ordered_json::parse) of a schema text: strict JSON (no NaN/Infinity, no
    number overflow, no lone surrogate), keys in their order (a repeated key keeps its first place and its last
    value), an optional UTF-8 BOM, and the text ending at a NUL byte as nlohmann's lexer ends it. A str may hold
    undecodable bytes as surrogate escapes (as sys.argv does); they are invalid UTF-8, hence no JSON."""
    try:
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:
        raise JsonSchemaError(f"invalid JSON schema: invalid UTF-8 at offset {e.start}") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    data = data.split(b"\0", 1)[0]
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JsonSchemaError(f"invalid JSON schema: invalid UTF-8 at offset {e.start}") from None
    try:
        value = json.loads(decoded, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
        _check_no_surrogates(value)
    except json.JSONDecodeError as e:
        raise JsonSchemaError(f"invalid JSON schema: {e}") from None
    except _NotJson as e:
        raise JsonSchemaError(f"invalid JSON schema: {e}") from None
    except RecursionError:
        raise JsonSchemaError("invalid JSON schema: nested too deeply") from None
    return value


def schema_text_to_grammar(text: str | bytes) -> str:
    """`-j SCHEMA` / `-jf FILE` (common/arg.cpp): `json_schema_to_grammar(json::parse(text))`. Raises
    JsonSchemaError (a SynapseError) for a text that is no JSON ("invalid JSON schema: <reason>") or a schema the
    converter rejects (llama.cpp's "JSON schema conversion failed:\\n<reasons>")."""
    return json_schema_to_grammar(parse_json(text))
