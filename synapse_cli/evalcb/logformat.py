"""llama-eval-callback's text format both ways (printer and parser, old `ggml_debug:` logs included) and
synapse's one-object-per-line JSON."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np


from .record import (HEADER_PREFIX, INDENT, N_SHOW, PRINT_RES, SRC1_BUF, EvalCbError, TensorRecord, ggml_sum, pad_ne,
                     shown_indices)

# --------------------------------------------------------------------------------------------------
# printer


def ne_str(ne: Sequence[int]) -> str:
    return ", ".join(str(int(x)) for x in ne)


def c_float(v: float, spec: str) -> str:
    """printf("%<spec>f") of a float as glibc prints it (NaN keeps its sign: `-nan`)."""
    if math.isnan(v):
        s = "-nan" if math.copysign(1.0, v) < 0 else "nan"
        width = spec.split(".")[0]
        return s.rjust(int(width)) if width else s
    return ("%" + spec + "f") % v


def format_header(rec: TensorRecord) -> str:
    """The header line of common_debug_cb_eval, without the newline."""
    src0 = rec.srcs[0] if rec.srcs else ("", None)
    src0_str = f"{src0[0]}{{{ne_str(src0[1])}}}" if src0[1] is not None else src0[0]
    src1_str = ""
    if len(rec.srcs) > 1:
        s1, s1_ne = rec.srcs[1]
        src1_str = f"{s1}{{{ne_str(s1_ne)}}}" if s1_ne is not None else s1
        src1_str = src1_str[: SRC1_BUF - 1]  # snprintf into char[128]
    return f"{HEADER_PREFIX}: {rec.name:>24} = ({rec.type}) {rec.op:>10}({src0_str}, {src1_str}}}) = {{{ne_str(rec.ne)}}}"


def _sum_line(s: float) -> str:
    return f"{INDENT}sum = {c_float(s, '')}\n"


def format_values(rec: TensorRecord) -> str:
    """The value block and sum lines of common_debug_print_tensor, from `rec.shown` and `rec.sums`."""
    if rec.shown is None:
        return ""
    n = N_SHOW
    ne = rec.ne
    shown = rec.shown  # (ne3, k2, k1, k0)
    sums = rec.sums or ((rec.sum,) * ne[3] if rec.sum is not None else ())
    out: list[str] = []
    k2, k1, k0 = shown.shape[1:]
    for i3 in range(ne[3]):
        out.append(INDENT + "[\n")
        for p2 in range(k2):
            if p2 == n and ne[2] > 2 * n:
                out.append(INDENT * 2 + "..., \n")
            out.append(INDENT * 2 + "[\n")
            for p1 in range(k1):
                if p1 == n and ne[1] > 2 * n:
                    out.append(INDENT * 3 + "..., \n")
                row = [INDENT * 3 + "["]
                for p0 in range(k0):
                    if p0 == n and ne[0] > 2 * n:
                        row.append("   ..., ")
                    row.append(c_float(float(shown[i3, p2, p1, p0]), "12.4"))
                    if p0 < k0 - 1:  # i0 < ne[0] - 1: the last shown index is always ne0 - 1
                        row.append(", ")
                row.append("  ],\n")
                out.append("".join(row))
            out.append(INDENT * 2 + "],\n")
        out.append(INDENT + "]\n")
        if i3 < len(sums):
            out.append(_sum_line(sums[i3]))
    return "".join(out)


def format_record(rec: TensorRecord, *, values: bool = True) -> str:
    """One record as llama-eval-callback prints it. `values=False` (synapse --no-values): header and
    one `sum = ` line."""
    head = format_header(rec) + "\n"
    if values:
        return head + format_values(rec)
    if rec.sum is None:
        return head
    return head + _sum_line(rec.sum)


def format_records(records: Iterable[TensorRecord], *, values: bool = True) -> str:
    return "".join(format_record(r, values=values) for r in records)


# --------------------------------------------------------------------------------------------------
# JSON


def json_num(v: Optional[float]) -> Optional[float]:
    """JSON has no NaN/inf: those become null."""
    if v is None or not math.isfinite(v):
        return None
    return float(v)


def record_to_json(rec: TensorRecord, *, values: bool = True) -> dict:
    """One tensor of `synapse eval-callback --json`.

    shape = ggml ne, innermost first (as in the header); sum = the float32 sum (null if no values);
    first/last = the first and last 3 elements in index order; values = the printed corner block
    as nested lists [i3][i2][i1][i0] (omitted with values=False).
    """
    d = {
        "name": rec.name,
        "op": rec.op,
        "type": rec.type,
        "shape": list(rec.ne),
        "srcs": [[s, list(s_ne) if s_ne is not None else None] for s, s_ne in rec.srcs],
        "sum": json_num(rec.sum),
        "first": _json_list(rec.first_values()),
        "last": _json_list(rec.last_values()),
    }
    if rec.sumsq is not None:
        d["sumsq"] = json_num(rec.sumsq)
    if values and rec.shown is not None:
        d["values"] = _nested_json(rec.shown.tolist())  # [i3][i2][i1][i0]
    return d


def _nested_json(x):
    if isinstance(x, list):
        return [_nested_json(y) for y in x]
    return json_num(x)


def _flatten_json_numbers(x, out: list) -> list:
    if isinstance(x, list):
        for y in x:
            _flatten_json_numbers(y, out)
    else:
        out.append(math.nan if x is None else float(x))
    return out


def _json_list(vals: Optional[list[float]]) -> Optional[list]:
    return None if vals is None else [json_num(v) for v in vals]


def record_from_json(d: dict, where: str = "") -> TensorRecord:
    try:
        ne = pad_ne(d["shape"])
        rec = TensorRecord(
            name=str(d["name"]),
            op=str(d.get("op", "")),
            type=str(d.get("type", "f32")),
            ne=ne,
            srcs=[(str(s), pad_ne(s_ne) if s_ne is not None else None) for s, s_ne in d.get("srcs", [])],
        )
        s = d.get("sum")
        rec.sum = float(s) if s is not None else None
        if rec.sum is not None:
            rec.sums = (rec.sum,) * ne[3]
        if d.get("sumsq") is not None:
            rec.sumsq = float(d["sumsq"])
        if d.get("values") is not None:
            shown = np.array(_flatten_json_numbers(d["values"], []), dtype=np.float64)  # null (NaN/inf) -> NaN
            k = tuple(len(shown_indices(x)) for x in ne[:3])
            expect = (ne[3], k[2], k[1], k[0])
            if shown.size != int(np.prod(expect)):
                raise ValueError(f"'values' does not have the printed shape {expect} of ne {list(ne)}")
            rec.shown = shown.reshape(expect)
        return rec
    except (KeyError, TypeError, ValueError) as e:
        raise EvalCbError(f"{where}: not a synapse eval-callback JSON record ({e})") from None


# --------------------------------------------------------------------------------------------------
# log parser

_HEADER_RE = re.compile(
    r"(?P<prefix>common_debug_cb_eval|ggml_debug):\s+(?P<name>.*?) = "
    r"(?:\((?P<type>[A-Za-z0-9_]+)\)\s+)?(?P<op>[A-Za-z0-9_]+)\((?P<args>.*)\) = \{(?P<ne>[-0-9, ]*)\}\s*$"
)
_SRC0_RE = re.compile(r"^(?P<name>.*?)\{(?P<ne>-?\d+(?:, -?\d+)*)\}, (?P<rest>.*)$", re.S)
_SRC1_RE = re.compile(r"^(?P<name>.*)\{(?P<ne>-?\d+(?:, -?\d+)*)\}$", re.S)
_SUM_RE = re.compile(r"^\s*sum\s*=\s*(?P<v>\S+)\s*$")


def _parse_ne(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x.strip())


def _parse_header(m: re.Match, lineno: int, where: str) -> TensorRecord:
    args = m.group("args")
    if not args.endswith("}"):
        raise EvalCbError(f"{where}:{lineno}: malformed eval-callback header (sources)")
    args = args[:-1]  # the stray `}` of `%s})` in the format
    srcs: list[tuple[str, Optional[tuple[int, ...]]]] = []
    m0 = _SRC0_RE.match(args)
    if m0 is None:
        raise EvalCbError(f"{where}:{lineno}: malformed eval-callback header (src0)")
    srcs.append((m0.group("name"), pad_ne(_parse_ne(m0.group("ne")))))
    rest = m0.group("rest")
    if rest:
        m1 = _SRC1_RE.match(rest)
        # a src1 string cut at 127 characters has no closing ne: keep its text as printed
        srcs.append((m1.group("name"), pad_ne(_parse_ne(m1.group("ne")))) if m1 else (rest, None))
    ne = _parse_ne(m.group("ne"))
    if not ne or any(x < 0 for x in ne):
        raise EvalCbError(f"{where}:{lineno}: malformed eval-callback header (ne)")
    return TensorRecord(
        name=m.group("name").strip(),
        op=m.group("op"),
        type=m.group("type") or "f32",
        ne=pad_ne(ne),
        srcs=srcs,
        line=lineno,
    )


def _parse_float(tok: str) -> float:
    return float(tok)  # accepts nan, -nan, inf, -inf as glibc prints them


class _Truncated(Exception):
    pass


def _parse_values(lines: list[str], i: int, rec: TensorRecord, where: str) -> int:
    """Parse the value blocks and sums after a header at lines[i-1]; return the next line index.

    The structure is followed by bracket depth, not indentation, so every indentation style reads."""
    ne = rec.ne
    exp = [shown_indices(ne[d]) for d in range(3)]  # printed indices along i0, i1, i2
    k0, k1, k2 = (len(e) for e in exp)
    n_lines = len(lines)

    def line(j: int) -> str:
        if j >= n_lines:
            raise _Truncated
        return lines[j]

    def fail(j: int, what: str):
        raise EvalCbError(f"{where}:{j + 1}: {what} in the values of '{rec.name}' (header line {rec.line})")

    def ellipsis(j: int, items: list, saw: bool, axis: str) -> bool:
        """A '...' along an axis: once, after its first N_SHOW items (llama.cpp's print_tensor)."""
        if len(items) != N_SHOW or saw:
            fail(j, f"misplaced '...' along {axis}")
        return True

    def count(j: int, items: list, d: int, saw: bool, what: str) -> None:
        """All of an axis' shown items: k_d of them, with a '...' where ne[d] > 2 N_SHOW."""
        if len(items) != len(exp[d]) or saw != (ne[d] > 2 * N_SHOW):
            fail(j, f"{what}, expected {len(exp[d])} for ne{d}={ne[d]}")

    def row(j: int, s: str) -> list:
        """One printed row of i0 values, `[ v, v, ..., v ],`."""
        if not (s.startswith("[") and s.endswith("],")):
            fail(j, "expected a row '[ ... ],'")
        values = []
        saw = False
        for t in (t.strip() for t in s[1:-2].split(",")):
            if t == "...":
                saw = ellipsis(j, values, saw, "i0")
            elif t:
                try:
                    values.append(_parse_float(t))
                except ValueError:
                    fail(j, f"bad number '{t}'")
        count(j, values, 0, saw, f"row has {len(values)} values")
        return values

    def axis(j: int, d: int) -> tuple[list, int]:
        """The items along axis d (2: i2 blocks of rows, 1: rows) after an opening '[' at line j - 1, up to its
        closing bracket; returns them and the line after it."""
        items = []
        saw = False
        while True:
            s = line(j).strip()
            if s in (("]",) if d == 2 else ("],", "]")):
                count(j, items, d, saw, f"{len(items)} " + ("i2 blocks" if d == 2 else "rows"))
                return items, j + 1
            if s in ("...,", "..."):
                saw = ellipsis(j, items, saw, f"i{d}")
            elif d == 1:
                items.append(row(j, s))
            elif s != "[":
                fail(j, "expected '[' of an i2 block")
            else:
                sub, j = axis(j + 1, 1)
                items.append(sub)
                continue
            j += 1

    if i < n_lines and _SUM_RE.match(lines[i]):  # `--no-values` output: header + sum only
        try:
            rec.sum = _parse_float(_SUM_RE.match(lines[i]).group("v"))
        except ValueError:
            fail(i, "bad sum")
        rec.sums = (rec.sum,) * ne[3]
        return i + 1
    if i >= n_lines or lines[i].strip() != "[" or ne[3] == 0:
        return i  # no values: quantized type, or a filtered / other line follows
    blocks = []  # per i3: (k2, k1, k0) values
    sums = []
    try:
        for _ in range(ne[3]):
            if line(i).strip() != "[":
                fail(i, "expected '[' of an i3 block")
            block, i = axis(i + 1, 2)
            m = _SUM_RE.match(line(i))
            if m is None:
                fail(i, "expected 'sum = '")
            try:
                sums.append(_parse_float(m.group("v")))
            except ValueError:
                fail(i, "bad sum")
            i += 1
            blocks.append(block)
    except _Truncated:
        # the log ends inside this block (llama.cpp's async logger can lose the tail, issue #22142)
        rec.truncated = True
        return n_lines
    rec.shown = np.array(blocks, dtype=np.float64).reshape(ne[3], k2, k1, k0)
    rec.sums = tuple(sums)
    rec.sum = sums[-1]
    return i


def parse_log_text(text: str, where: str = "<log>") -> list[TensorRecord]:
    """Every tensor printed in an eval-callback log (other lines are ignored)."""
    lines = text.splitlines()
    records: list[TensorRecord] = []
    i = 0
    while i < len(lines):
        m = _HEADER_RE.search(lines[i])
        if m is None:
            i += 1
            continue
        rec = _parse_header(m, i + 1, where)
        i = _parse_values(lines, i + 1, rec, where)
        records.append(rec)
    kind = _detect_sum_kind(records)
    for r in records:
        r.sum_kind = kind
    return records


def printed_sum(shown: np.ndarray) -> float:
    """float32 sum of the printed elements in print order (what 2024's eval-callback logged)."""
    return ggml_sum(shown.astype(np.float32))


def _detect_sum_kind(records: list[TensorRecord]) -> str:
    """'printed' if the log's sums are those of the printed elements only (eval-callback before the
    full-tensor sum), else 'full'. Decided on the tensors where the two differ in what they cover
    (some elements elided): the 2024 sums equal the sum of the printed values within their
    rounding (each printed value is off by at most 5e-5), a full sum does so only by accident."""
    votes = matches = 0
    for r in records:
        if r.shown is None or r.sum is None or r.shown.size == r.n_elements:
            continue
        votes += 1
        tol = 5e-5 * r.shown.size + 2 * PRINT_RES + 1e-6 * abs(r.sum)
        if abs(float(np.sum(r.shown)) - r.sum) <= tol:
            matches += 1
    return "printed" if votes and matches >= 0.9 * votes else "full"


def _parse_json_text(text: str, where: str) -> list[TensorRecord]:
    """synapse --json output: one object per line (or a JSON array of the same objects)."""
    s = text.lstrip()
    items: list
    if s.startswith("["):
        items = json.loads(s)
    else:
        items = []
        for lineno, ln in enumerate(text.splitlines(), 1):
            if ln.strip():
                try:
                    items.append(json.loads(ln))
                except json.JSONDecodeError as e:
                    raise EvalCbError(f"{where}:{lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(items, list):
        raise EvalCbError(f"{where}: expected a list of tensor objects")
    return [record_from_json(d, f"{where}: tensor {k}") for k, d in enumerate(items)]


_SYSTEM_INFO = re.compile(r"system_info:.*?\|\s*CPU\s*:(?P<flags>[^\n]*)")


def build_cpu_features(path: str | Path) -> Optional[frozenset[str]]:
    """The CPU features a llama.cpp log's `system_info:` line lists as built in (`AVX2 = 1 | ...`), or None when
    the file has no such line (a log of stdout only, a synapse trace) or cannot be read."""
    try:
        text = Path(path).read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None
    m = _SYSTEM_INFO.search(text)
    if m is None:
        return None
    return frozenset(k.strip() for k, _, v in (f.partition("=") for f in m["flags"].split("|")) if v.strip() == "1")


def load_trace(path: str | Path) -> list[TensorRecord]:
    """A trace from a file: an eval-callback log (llama.cpp's or synapse's) or synapse's --json.

    Raises EvalCbError (one-line message) if the file cannot be read or holds no tensor."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise EvalCbError(f"cannot read {p}: {e.strerror or e}") from None
    text = data.decode("utf-8", errors="replace")  # names and values are ASCII; other lines don't matter
    where = str(p)
    if text.lstrip()[:1] in ("{", "["):
        try:
            records = _parse_json_text(text, where)
        except (json.JSONDecodeError, EvalCbError) as e:
            # not JSON after all? a log whose first line happens to start with a bracket
            records = parse_log_text(text, where)
            if not records:
                msg = f"{where}: invalid JSON ({e.msg} at line {e.lineno})" if isinstance(e, json.JSONDecodeError) else str(e)
                raise EvalCbError(msg) from None
    else:
        records = parse_log_text(text, where)
    if not records:
        raise EvalCbError(f"{where}: no eval-callback tensor found (expected 'common_debug_cb_eval:' or 'ggml_debug:' lines, or synapse --json)")
    return records


