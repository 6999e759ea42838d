"""Traces of a forward pass in llama-eval-callback's text format: record type, recorder, printer, parser, differ.

Mirrors llama.cpp's `common_debug_cb_eval` / `common_debug_print_tensor` (common/debug.cpp), which
`llama-eval-callback` (examples/eval-callback) installs as the scheduler's eval callback:

  * header: `common_debug_cb_eval: %24s = (%s) %10s(%s{%s}, %s}) = {%s}` with the node name, its
    ggml type, `ggml_op_desc` (the op, or the unary/GLU sub-op), src0 `name{ne}`, src1 `name{ne}`
    (formatted into a 128-byte buffer, so at most 127 characters) and the node's ne, innermost first;
  * for non-quantized types the values, per i3: `[`, then per i2 `[`, per i1 a row of `%12.4f`
    values; along i2, i1 and i0 only the first n=3 and last n=3 indices are printed when the extent
    is > 2n, with a `..., ` marker in between; after each i3 block `sum = %f`, the sum of **all**
    elements accumulated in one float32 variable in index order (i3, i2, i1, i0; i0 fastest).

Formats read by the parser (`parse_log_text`, `load_trace`):
  * the current `common_debug_cb_eval:` prefix with 4/8/12-space indentation (the fixtures);
  * the older `ggml_debug:` prefix of examples/eval-callback/eval-callback.cpp, with `%16s` or
    `%24s` names and either 4/5/6- or 37/38/39-space indentation, `..., ` without padding. The
    2024 versions summed only the *printed* elements (and kept summing across i3 blocks); such
    files are recognised by their sums (see `_detect_sum_kind`) and marked `sum_kind="printed"`;
  * synapse's own output: the same text, `--no-values` text (header + `sum = `), and `--json`
    (one JSON object per tensor per line, see `record_to_json`).

A trace record keeps the header fields, the float32 sum and the *shown* block: the printed
corner values as an array (ne3, k2, k1, k0), k = 6 when ne > 6 else ne. A record made from a full
array (the model's trace hook) derives the same block, so one printer serves both; the tensor can
also be kept whole (`value`) for `--dump-dir`.

The differ aligns two traces by name. A name can occur several times (`Qcur-0` is the MUL_MAT,
then the RESHAPE, then the ROPE; `norm-0` is the attention and then the FFN norm); by default the
**last** occurrence, the tensor's final value, is compared (`occurrence="all"` pairs the k-th
occurrences instead). Sums are compared relatively:

    rel = |sum_a - sum_b| / max(|sum_a|, |sum_b|, sqrt(N) * rms, PRINT_RES / tolerance)

The floor `sqrt(N) * rms` (exact when a side has the full array, else estimated from the printed
corners, which overestimates it for sparse tensors such as KV-cache views) is the typical size of a sum of N terms of that magnitude when they cancel:
for a tensor whose sum is near zero by cancellation (embeddings, rotated heads) the relative
difference of the sum says nothing, while independent element errors of relative size e move
the sum by about e * sqrt(N) * rms, so against this floor `rel` reads as a per-element relative
error. `PRINT_RES / tolerance` (1e-2 at the default 1e-4) makes a difference of one unit of
`%f`'s last digit (1e-6, the resolution of a logged sum) never count as a divergence, e.g. for
all-zero cache tensors. Printed values are compared too where both sides have them: they must
agree within one unit of `%12.4f`'s last digit (1e-4) plus tolerance * max|value|, which catches
layout errors (a wrong permute keeps the sum).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from .errors import SynapseError

N_SHOW = 3  # common_debug_cb_eval prints n = 3 leading and trailing indices per dimension
GGML_MAX_NAME = 64  # ggml tensor names are char[64]: at most 63 bytes
SRC1_BUF = 128  # char src1_str[128] in common_debug_cb_eval: at most 127 characters
HEADER_PREFIX = "common_debug_cb_eval"
PRINT_RES = 1e-6  # resolution of a `sum = %f` line
VALUE_RES = 1e-4  # resolution of a `%12.4f` value
# types whose values common_ggml_get_float_value can read (others, the quantized ones, print a header only)
VALUE_TYPES = frozenset({"f32", "f16", "bf16", "i64", "i32", "i16", "i8"})

INDENT = "    "


class EvalCbError(SynapseError):
    """A trace (log or JSON) cannot be read, or a trace cannot be produced."""


# --------------------------------------------------------------------------------------------------
# record


@dataclass
class TensorRecord:
    """One graph node as common_debug_cb_eval reports it.

    `ne` is ggml's (innermost first, padded to 4). `shown` holds the printed corner values,
    shape (ne3, k2, k1, k0) float64, or None when no values were printed (quantized type,
    `--no-values`, truncated log). `sums` are the `sum = ` values, one per i3 block as printed
    (all equal to `sum` since llama.cpp sums the whole tensor first). `value` is the whole tensor
    (numpy shape = reversed ne) when it was kept.
    """

    name: str
    op: str
    type: str
    ne: tuple[int, int, int, int]
    srcs: list[tuple[str, Optional[tuple[int, ...]]]] = field(default_factory=list)
    sum: Optional[float] = None
    shown: Optional[np.ndarray] = None
    sums: tuple[float, ...] = ()
    sum_kind: str = "full"  # "full" or "printed" (2024 eval-callback: sum of the printed elements only)
    sumsq: Optional[float] = None  # sum of squares of all elements when known exactly (full array)
    value: Optional[np.ndarray] = None
    line: Optional[int] = None  # 1-based line of the header in the source log
    truncated: bool = False  # the log ended inside this record's value block

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.ne, dtype=np.int64))

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy shape of the tensor (reversed ne)."""
        return tuple(reversed(self.ne))

    def first_values(self) -> Optional[list[float]]:
        """The first min(3, N) elements in index order (all of them are among the printed ones)."""
        return self._flat_values(range(min(N_SHOW, self.n_elements)))

    def last_values(self) -> Optional[list[float]]:
        """The last min(3, N) elements in index order."""
        total = self.n_elements
        return self._flat_values(range(max(0, total - N_SHOW), total))

    def _flat_values(self, flat: Iterable[int]) -> Optional[list[float]]:
        if self.shown is None:
            return None
        # the first and last N_SHOW flat indices have every coordinate within N_SHOW of the start /
        # end of its dimension, so they are all in the shown block
        pos = [_shown_positions(self.ne[d]) for d in range(3)] + [{i: i for i in range(self.ne[3])}]  # i3: all
        out = []
        for f in flat:
            idx = []
            for d in range(4):
                idx.append(pos[d][f % self.ne[d]])
                f //= self.ne[d]
            out.append(float(self.shown[idx[3], idx[2], idx[1], idx[0]]))
        return out


def _shown_indices(extent: int, n: int = N_SHOW) -> list[int]:
    """Indices along one dimension that common_debug_print_tensor prints (i2, i1, i0)."""
    if extent > 2 * n:
        return list(range(n)) + list(range(extent - n, extent))
    return list(range(extent))


def _shown_positions(extent: int, n: int = N_SHOW) -> dict[int, int]:
    return {i: k for k, i in enumerate(_shown_indices(extent, n))}


def pad_ne(ne: Sequence[int]) -> tuple[int, int, int, int]:
    ne = tuple(int(x) for x in ne)
    if len(ne) > 4 or any(x < 0 for x in ne):
        raise ValueError(f"ggml tensors have at most 4 non-negative extents, got ne={ne}")
    return ne + (1,) * (4 - len(ne))  # type: ignore[return-value]


def ggml_sum(value: np.ndarray) -> float:
    """common_debug_print_tensor's sum: one float32 accumulator, elements in index order.

    `value` has numpy shape = reversed ne, so C order is ggml's (i3, i2, i1, i0) order. A cumulative
    sum is a sequential float32 recurrence (numpy's pairwise summation applies to reductions only).
    """
    if value.size == 0:
        return 0.0
    acc = np.cumsum(value.reshape(-1), dtype=np.float32)  # (N,) running float32 sums
    s = float(acc[-1])
    # C starts from +0.0f, so the sum is never -0.0 (cumsum starts from the first element, maybe -0.0)
    return 0.0 if s == 0 else s


def _as_4d(value: np.ndarray, ne: tuple[int, int, int, int]) -> np.ndarray:
    """View of `value` as (ne3, ne2, ne1, ne0)."""
    if value.size != int(np.prod(ne, dtype=np.int64)):
        raise ValueError(f"value of shape {value.shape} does not hold ne={ne}")
    return value.reshape(ne[3], ne[2], ne[1], ne[0])


def shown_block(value: np.ndarray, ne: tuple[int, int, int, int], n: int = N_SHOW) -> np.ndarray:
    """The printed corner values of a full tensor: (ne3, k2, k1, k0) float64 (of the float32 values)."""
    v4 = _as_4d(value, ne)
    block = v4[np.ix_(range(ne[3]), _shown_indices(ne[2], n), _shown_indices(ne[1], n), _shown_indices(ne[0], n))]
    return block.astype(np.float32).astype(np.float64)


def record_from_array(
    name: str,
    op: str,
    value: np.ndarray,
    srcs: Sequence[tuple[str, Sequence[int]]],
    ggml_type: str,
    *,
    ne: Optional[Sequence[int]] = None,
    keep_value: bool = False,
) -> TensorRecord:
    """A record from the model's trace hook arguments (see `TraceRecorder.__call__`)."""
    value = np.asarray(value)
    ne4 = pad_ne(ne) if ne is not None else pad_ne(tuple(reversed(value.shape)))
    name = _ggml_name(name)
    rec = TensorRecord(
        name=name,
        op=op,
        type=ggml_type,
        ne=ne4,
        srcs=[(_ggml_name(s), pad_ne(s_ne) if s_ne is not None else None) for s, s_ne in srcs],
    )
    if ggml_type in VALUE_TYPES:
        v32 = value.astype(np.float32, copy=False)  # ggml reads every printable type as float
        _as_4d(v32, ne4)  # validates the size
        rec.sum = ggml_sum(v32)
        rec.sums = (rec.sum,) * ne4[3]
        rec.shown = shown_block(v32, ne4)
        v64 = v32.astype(np.float64)
        rec.sumsq = float(np.sum(v64 * v64))
        if keep_value:
            rec.value = value
    return rec


def _ggml_name(name: str) -> str:
    """ggml_format_name / ggml_set_name keep at most GGML_MAX_NAME - 1 bytes."""
    raw = name.encode("utf-8")
    if len(raw) < GGML_MAX_NAME:
        return name
    return raw[: GGML_MAX_NAME - 1].decode("utf-8", errors="ignore")


# --------------------------------------------------------------------------------------------------
# tensor filter (llama-eval-callback / llama-debug --tensor-filter)


def compile_tensor_filter(patterns: Sequence[str]) -> Optional[Callable[[str], bool]]:
    """`--tensor-filter` patterns as common_debug_cb_user_data builds them: each anchored with `^`
    and searched (std::regex_search), so a pattern matches a prefix of the name. None = no filter."""
    if not patterns:
        return None
    compiled = []
    for p in patterns:
        try:
            compiled.append(re.compile("^" + p))
        except re.error as e:
            raise EvalCbError(f"invalid --tensor-filter regex '{p}': {e}") from None
    return lambda name: any(rx.search(name) for rx in compiled)


# --------------------------------------------------------------------------------------------------
# recorder (the model's trace hook)


class TraceRecorder:
    """Collects the forward pass's tensors; pass it as the model's trace hook.

    `hook(name, op, value, srcs, ggml_type)`: value has numpy shape = reversed ggml ne (float32, or
    float16 for an F16 cache); srcs are (name, ne) of the node's sources. Tensors not matching
    `tensor_filter` are skipped (they are still counted in `n_seen`, the graph position used in
    dump file names). With `dump_dir`, each recorded tensor is also saved as
    `<dump_dir>/<graph position:04d>-<name>.npy` when it arrives.
    """

    def __init__(
        self,
        *,
        tensor_filter: Optional[Callable[[str], bool]] = None,
        keep_values: bool = False,
        dump_dir: Optional[Path] = None,
        on_record: Optional[Callable[[TensorRecord], None]] = None,
    ):
        self.records: list[TensorRecord] = []
        self.tensor_filter = tensor_filter
        self.keep_values = keep_values
        self.dump_dir = Path(dump_dir) if dump_dir is not None else None
        self.on_record = on_record
        self.n_seen = 0
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)

    def __call__(
        self,
        name: str,
        op: str,
        value: np.ndarray,
        srcs: Sequence[tuple[str, Sequence[int]]],
        ggml_type: str,
        ne: Optional[Sequence[int]] = None,
    ) -> None:
        index = self.n_seen
        self.n_seen += 1
        if self.tensor_filter is not None and not self.tensor_filter(_ggml_name(name)):
            return
        rec = record_from_array(name, op, value, srcs, ggml_type, ne=ne, keep_value=self.keep_values)
        if self.dump_dir is not None:
            safe = re.sub(r"[^A-Za-z0-9._-]+", "_", rec.name).strip("_") or "tensor"
            np.save(self.dump_dir / f"{index:04d}-{safe}.npy", np.ascontiguousarray(value))
        self.records.append(rec)
        if self.on_record is not None:
            self.on_record(rec)

    def text(self, *, values: bool = True) -> str:
        return format_records(self.records, values=values)

    def json_lines(self, *, values: bool = True) -> str:
        return "".join(json.dumps(record_to_json(r, values=values)) + "\n" for r in self.records)


# --------------------------------------------------------------------------------------------------
# printer


def _ne_str(ne: Sequence[int]) -> str:
    return ", ".join(str(int(x)) for x in ne)


def _c_float(v: float, spec: str) -> str:
    """printf("%<spec>f") of a float as glibc prints it (NaN keeps its sign: `-nan`)."""
    if math.isnan(v):
        s = "-nan" if math.copysign(1.0, v) < 0 else "nan"
        width = spec.split(".")[0]
        return s.rjust(int(width)) if width else s
    return ("%" + spec + "f") % v


def format_header(rec: TensorRecord) -> str:
    """The header line of common_debug_cb_eval, without the newline."""
    src0 = rec.srcs[0] if rec.srcs else ("", None)
    src0_str = f"{src0[0]}{{{_ne_str(src0[1])}}}" if src0[1] is not None else src0[0]
    src1_str = ""
    if len(rec.srcs) > 1:
        s1, s1_ne = rec.srcs[1]
        src1_str = f"{s1}{{{_ne_str(s1_ne)}}}" if s1_ne is not None else s1
        src1_str = src1_str[: SRC1_BUF - 1]  # snprintf into char[128]
    return f"{HEADER_PREFIX}: {rec.name:>24} = ({rec.type}) {rec.op:>10}({src0_str}, {src1_str}}}) = {{{_ne_str(rec.ne)}}}"


def _sum_line(s: float) -> str:
    return f"{INDENT}sum = {_c_float(s, '')}\n"


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
                    row.append(_c_float(float(shown[i3, p2, p1, p0]), "12.4"))
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


def _json_num(v: Optional[float]) -> Optional[float]:
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
        "sum": _json_num(rec.sum),
        "first": _json_list(rec.first_values()),
        "last": _json_list(rec.last_values()),
    }
    if rec.sumsq is not None:
        d["sumsq"] = _json_num(rec.sumsq)
    if values and rec.shown is not None:
        d["values"] = _nested_json(rec.shown.tolist())  # [i3][i2][i1][i0]
    return d


def _nested_json(x):
    if isinstance(x, list):
        return [_nested_json(y) for y in x]
    return _json_num(x)


def _flatten_json_numbers(x, out: list) -> list:
    if isinstance(x, list):
        for y in x:
            _flatten_json_numbers(y, out)
    else:
        out.append(math.nan if x is None else float(x))
    return out


def _json_list(vals: Optional[list[float]]) -> Optional[list]:
    return None if vals is None else [_json_num(v) for v in vals]


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
            k = tuple(len(_shown_indices(x)) for x in ne[:3])
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
    exp = [_shown_indices(ne[d]) for d in range(3)]  # printed indices along i0, i1, i2
    k0, k1, k2 = (len(e) for e in exp)
    n_lines = len(lines)

    def line(j: int) -> str:
        if j >= n_lines:
            raise _Truncated
        return lines[j]

    def fail(j: int, what: str):
        raise EvalCbError(f"{where}:{j + 1}: {what} in the values of '{rec.name}' (header line {rec.line})")

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
            i += 1
            block = []
            saw2 = False
            while True:
                s = line(i).strip()
                if s == "]":
                    i += 1
                    break
                if s in ("...,", "..."):
                    if len(block) != N_SHOW or saw2:
                        fail(i, "misplaced '...' along i2")
                    saw2 = True
                    i += 1
                    continue
                if s != "[":
                    fail(i, "expected '[' of an i2 block")
                i += 1
                rows = []
                saw1 = False
                while True:
                    s = line(i).strip()
                    if s in ("],", "]"):
                        i += 1
                        break
                    if s in ("...,", "..."):
                        if len(rows) != N_SHOW or saw1:
                            fail(i, "misplaced '...' along i1")
                        saw1 = True
                        i += 1
                        continue
                    if not (s.startswith("[") and s.endswith("],")):
                        fail(i, "expected a row '[ ... ],'")
                    toks = [t.strip() for t in s[1:-2].split(",")]
                    toks = [t for t in toks if t]
                    row = []
                    saw0 = False
                    for t in toks:
                        if t == "...":
                            if len(row) != N_SHOW or saw0:
                                fail(i, "misplaced '...' along i0")
                            saw0 = True
                            continue
                        try:
                            row.append(_parse_float(t))
                        except ValueError:
                            fail(i, f"bad number '{t}'")
                    if len(row) != k0 or saw0 != (ne[0] > 2 * N_SHOW):
                        fail(i, f"row has {len(row)} values, expected {k0} for ne0={ne[0]}")
                    rows.append(row)
                    i += 1
                if len(rows) != k1 or saw1 != (ne[1] > 2 * N_SHOW):
                    fail(i - 1, f"{len(rows)} rows, expected {k1} for ne1={ne[1]}")
                block.append(rows)
            if len(block) != k2 or saw2 != (ne[2] > 2 * N_SHOW):
                fail(i - 1, f"{len(block)} i2 blocks, expected {k2} for ne2={ne[2]}")
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


def _printed_sum(shown: np.ndarray) -> float:
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


# --------------------------------------------------------------------------------------------------
# differ


@dataclass
class TensorDiff:
    name: str
    op: str
    shape: tuple[int, int, int, int]  # ne of A's tensor
    sum_a: Optional[float]
    sum_b: Optional[float]
    rel_diff: Optional[float]  # None when not compared (no values on a side)
    within: Optional[bool]
    max_abs_val_diff: Optional[float] = None  # printed corner values, when both sides have them
    occurrence: str = ""  # e.g. "3/3": which occurrence of the name (A side) was compared
    note: str = ""
    index_a: int = 0
    index_b: int = 0
    shape_b: Optional[tuple[int, int, int, int]] = None

    def __post_init__(self):
        if self.shape_b is None:
            self.shape_b = self.shape


@dataclass
class TraceDiff:
    tensors: list[TensorDiff]
    only_a: list[str]
    only_b: list[str]
    tolerance: float
    occurrence: str
    repeated: dict[str, tuple[int, int]]  # name -> (count in A, count in B) for names seen more than once

    @property
    def compared(self) -> list[TensorDiff]:
        return [t for t in self.tensors if t.within is not None]

    @property
    def n_compared(self) -> int:
        return len(self.compared)

    @property
    def n_within(self) -> int:
        return sum(1 for t in self.compared if t.within)

    @property
    def max_rel_diff(self) -> Optional[float]:
        vals = [t.rel_diff for t in self.compared if t.rel_diff is not None]
        return max(vals) if vals else None

    @property
    def first_divergence(self) -> Optional[TensorDiff]:
        return next((t for t in self.compared if not t.within), None)

    @property
    def ok(self) -> bool:
        """All compared tensors within tolerance (and at least one compared)."""
        return self.n_compared > 0 and self.n_within == self.n_compared

    def to_json(self) -> dict:
        first = self.first_divergence
        mrd = self.max_rel_diff
        return {
            "tensors": [
                {
                    "name": t.name,
                    "op": t.op,
                    "shape": list(t.shape),
                    "sum_a": _json_num(t.sum_a),
                    "sum_b": _json_num(t.sum_b),
                    "rel_diff": _json_num(t.rel_diff),
                    "within": t.within,
                    "max_abs_val_diff": _json_num(t.max_abs_val_diff),
                    "occurrence": t.occurrence,
                    "note": t.note,
                }
                for t in self.tensors
            ],
            "only_a": list(self.only_a),
            "only_b": list(self.only_b),
            "n_compared": self.n_compared,
            "n_within": self.n_within,
            "max_rel_diff": _json_num(mrd) if mrd is None or math.isfinite(mrd) else None,
            "first_divergence": first.name if first else None,
            "tolerance": self.tolerance,
            "occurrence": self.occurrence,
            "repeated": {k: list(v) for k, v in self.repeated.items()},
        }

    def summary(self) -> str:
        """One line: "first divergence: kqv_out-3 (rel 2.1e-02); 41 of 55 tensors within 1e-4"."""
        first = self.first_divergence
        counts = f"{self.n_within} of {self.n_compared} tensors within {_fmt_tol(self.tolerance)}"
        if self.n_compared == 0:
            return "no tensor in common to compare"
        if first is None:
            return f"no divergence; {counts}"
        why = f"rel {_fmt_rel(first.rel_diff)}"
        if first.shape != first.shape_b:
            why += ", shapes differ"
        elif first.rel_diff is not None and first.rel_diff <= self.tolerance and first.max_abs_val_diff is not None:
            why += f", printed values differ by up to {first.max_abs_val_diff:.1e}"
        return f"first divergence: {first.name} ({why}); {counts}"


def _fmt_tol(t: float) -> str:
    """1e-4 rather than 0.0001 or 1e-04."""
    if t == 0 or 1e-2 <= t < 1e4:
        return f"{t:g}"
    mant, exp = f"{t:.3e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


def _fmt_rel(r: Optional[float]) -> str:
    if r is None:
        return "-"
    if math.isinf(r):
        return "inf"
    return f"{r:.1e}"


def _noise_scale(rec: TensorRecord) -> float:
    """sqrt(N) * rms of the tensor's elements: exact from a full array, else from the printed values."""
    n = rec.n_elements
    if rec.sumsq is not None:
        return math.sqrt(rec.sumsq)
    if rec.shown is not None and rec.shown.size:
        finite = rec.shown[np.isfinite(rec.shown)]
        if finite.size:
            return math.sqrt(n * float(np.mean(finite * finite)))
    return 0.0


def rel_diff(sa: float, sb: float, floor: float) -> float:
    """|sa - sb| / max(|sa|, |sb|, floor); equal NaNs compare equal, one NaN is infinitely far."""
    if math.isnan(sa) or math.isnan(sb):
        return 0.0 if math.isnan(sa) and math.isnan(sb) else math.inf
    if sa == sb:
        return 0.0
    d = abs(sa - sb)
    if math.isinf(d):
        return math.inf
    scale = max(abs(sa), abs(sb), floor)
    return d / scale if scale > 0 else math.inf


def compare_records(a: TensorRecord, b: TensorRecord, tolerance: float) -> TensorDiff:
    """Compare one tensor of trace A with its counterpart in trace B."""
    td = TensorDiff(name=a.name, op=a.op, shape=a.ne, sum_a=a.sum, sum_b=b.sum, rel_diff=None, within=None, shape_b=b.ne)
    notes = []
    if a.op != b.op:
        notes.append(f"op {a.op} vs {b.op}")
    if a.ne != b.ne:
        notes.append(f"shape {{{_ne_str(a.ne)}}} vs {{{_ne_str(b.ne)}}}")
    if a.sum is None or b.sum is None:
        side = "A" if a.sum is None else "B"
        why = "truncated log" if (a.truncated if a.sum is None else b.truncated) else "no values"
        td.note = "; ".join(notes + [f"{why} on side {side}"])
        return td
    sa, sb = a.sum, b.sum
    if a.sum_kind != b.sum_kind and a.ne == b.ne and a.shown is not None and b.shown is not None:
        # one side is a 2024 log summing the printed elements only: compare that quantity
        sa = a.sum if a.sum_kind == "printed" else _printed_sum(a.shown)
        sb = b.sum if b.sum_kind == "printed" else _printed_sum(b.shown)
        notes.append("sums of printed elements")
        td.sum_a, td.sum_b = sa, sb
    # the exact scale when a side has the whole tensor; else the estimate from the printed corners
    # (it overestimates for sparse tensors such as cache views, whose corners show filled cells)
    exact = [r for r in (a, b) if r.sumsq is not None]
    noise = max(_noise_scale(r) for r in exact) if exact else min(_noise_scale(a), _noise_scale(b))
    floor = max(noise, PRINT_RES / tolerance if tolerance > 0 else 0.0)
    td.rel_diff = rel_diff(sa, sb, floor)
    ok = td.rel_diff <= tolerance and a.ne == b.ne
    if a.shown is not None and b.shown is not None and a.shown.shape == b.shown.shape and a.ne == b.ne:
        va, vb = a.shown, b.shown
        both_nan = np.isnan(va) & np.isnan(vb)
        with np.errstate(invalid="ignore"):
            diff = np.where(both_nan, 0.0, np.abs(va - vb))  # NaN where exactly one side is NaN
        diff = np.where(np.isnan(diff), np.inf, diff)
        td.max_abs_val_diff = float(diff.max()) if diff.size else 0.0
        mag = np.maximum(np.abs(np.nan_to_num(va)), np.abs(np.nan_to_num(vb)))
        # one unit of %12.4f's last digit (either side may be rounded) plus the relative tolerance
        allowed = VALUE_RES * 1.0001 + tolerance * mag
        if np.any(diff > allowed):
            ok = False
            notes.append("printed values differ")
    td.within = bool(ok)
    td.note = "; ".join(notes)
    return td


def diff_traces(
    a: Sequence[TensorRecord],
    b: Sequence[TensorRecord],
    *,
    tolerance: float = 1e-4,
    occurrence: str = "last",
) -> TraceDiff:
    """Align two traces by tensor name and compare them (see the module docstring).

    occurrence="last": each name is compared once, at its last occurrence on each side (the
    tensor's final value); "all": the k-th occurrence of a name in A is paired with the k-th in B.
    Rows are in A's order; names (or name#k) found on one side only go to only_a / only_b."""
    if occurrence not in ("last", "all"):
        raise ValueError(f"occurrence must be 'last' or 'all', not {occurrence!r}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")

    def groups(recs: Sequence[TensorRecord]) -> dict[str, list[int]]:
        g: dict[str, list[int]] = {}
        for k, r in enumerate(recs):
            g.setdefault(r.name, []).append(k)
        return g

    ga, gb = groups(a), groups(b)
    repeated = {n: (len(ga.get(n, ())), len(gb.get(n, ()))) for n in list(ga) + [n for n in gb if n not in ga]
                if len(ga.get(n, ())) > 1 or len(gb.get(n, ())) > 1}
    pairs: list[tuple[int, int, str]] = []  # (index in a, index in b, occurrence label)
    only_a: list[tuple[int, str]] = []
    only_b: list[tuple[int, str]] = []
    if occurrence == "last":
        for n, ia in ga.items():
            if n in gb:
                label = f"{len(ia)}/{len(ia)}" if len(ia) > 1 or len(gb[n]) > 1 else ""
                pairs.append((ia[-1], gb[n][-1], label))
            else:
                only_a.append((ia[-1], n))
        only_b = [(ib[-1], n) for n, ib in gb.items() if n not in ga]
    else:
        for n, ia in ga.items():
            ib = gb.get(n, [])
            for k, ka in enumerate(ia):
                label = f"{k + 1}/{len(ia)}" if len(ia) > 1 or len(ib) > 1 else ""
                if k < len(ib):
                    pairs.append((ka, ib[k], label))
                else:
                    only_a.append((ka, f"{n}#{k + 1}" if len(ia) > 1 else n))
        for n, ib in gb.items():
            na = len(ga.get(n, []))
            for k in range(na, len(ib)):
                only_b.append((ib[k], f"{n}#{k + 1}" if len(ib) > 1 else n))
    pairs.sort()
    rows = []
    for ka, kb, label in pairs:
        td = compare_records(a[ka], b[kb], tolerance)
        td.occurrence, td.index_a, td.index_b = label, ka, kb
        ca, cb = len(ga[a[ka].name]), len(gb[a[ka].name])
        if ca != cb:
            td.note = "; ".join(x for x in (td.note, f"occurs {ca}x in A, {cb}x in B") if x)
        rows.append(td)
    return TraceDiff(
        tensors=rows,
        only_a=[n for _, n in sorted(only_a)],
        only_b=[n for _, n in sorted(only_b)],
        tolerance=tolerance,
        occurrence=occurrence,
        repeated=repeated,
    )


def render_diff(diff: TraceDiff, console, *, label_a: str = "A", label_b: str = "B") -> None:
    """The diff as a Rich table, the one-side-only lists and the one-line summary."""
    from rich.table import Table
    from rich.text import Text

    first = diff.first_divergence
    table = Table(title=f"eval-callback diff: A = {label_a}, B = {label_b}", show_lines=False)
    table.add_column("name", no_wrap=True)
    table.add_column("op", no_wrap=True)
    table.add_column("shape", no_wrap=True)
    table.add_column("sum A", justify="right", no_wrap=True)
    table.add_column("sum B", justify="right", no_wrap=True)
    table.add_column("rel diff", justify="right", no_wrap=True)
    table.add_column("max |Δv|", justify="right", no_wrap=True)
    table.add_column("note")
    for t in diff.tensors:
        name = t.name + (f" [{t.occurrence}]" if t.occurrence else "")
        style = None
        if t is first:
            style = "bold white on red"
        elif t.within is False:
            style = "red"
        elif t.within is None:
            style = "dim"
        table.add_row(
            name,
            t.op,
            "{" + _ne_str(t.shape) + "}",
            "-" if t.sum_a is None else _c_float(t.sum_a, ""),
            "-" if t.sum_b is None else _c_float(t.sum_b, ""),
            _fmt_rel(t.rel_diff),
            "-" if t.max_abs_val_diff is None else f"{t.max_abs_val_diff:.1e}",
            ("FIRST DIVERGENCE" + ("; " if t.note else "") if t is first else "") + t.note,
            style=style,
        )
    console.print(table)
    if diff.repeated and diff.occurrence == "last":
        ex = ", ".join(f"{n} ×{ca}" for n, (ca, cb) in list(diff.repeated.items())[:4])
        console.print(
            Text(f"{len(diff.repeated)} names occur several times ({ex}, ...): each is compared at its last "
                 "occurrence, the tensor's final value (--occurrence all pairs every occurrence)")
        )
    elif diff.occurrence == "all":
        console.print(Text("names occurring several times: the k-th occurrences are paired ([k/n] after the name)"))
    if diff.only_a:
        console.print(Text(f"only in A ({len(diff.only_a)}): " + ", ".join(diff.only_a)))
    if diff.only_b:
        console.print(Text(f"only in B ({len(diff.only_b)}): " + ", ".join(diff.only_b)))
    console.print(Text(diff.summary(), style="bold red" if first is not None or diff.n_compared == 0 else "bold green"))


# --------------------------------------------------------------------------------------------------
# live run (implemented in the model layer)


def run_live(
    model_path: str | Path,
    prompt: str,
    *,
    threads: Optional[int],
    ctx_size: int,
    batch: int,
    ubatch: int,
    cache_type_k: str,
    cache_type_v: str,
    hook: Callable[..., None],
    flash_attn: bool = True,
) -> list[int]:
    """Decode `prompt` as one batch the way llama-eval-callback does and call `hook` for every graph
    node (see `TraceRecorder.__call__`). Tokenization: BOS added per the vocabulary, special tokens
    parsed. Returns the prompt's token ids (printed as `number of input tokens = N`).

    llama-eval-callback evaluates the whole prompt with one llama_decode (n_batch must hold it) and
    requests logits for the last token only, so the last layer reduces to that row (out_ids)."""
    from .session import open_session

    sess = open_session(str(model_path), n_ctx=ctx_size, n_batch=batch, n_ubatch=ubatch, n_threads=threads,
                        cache_type_k=cache_type_k, cache_type_v=cache_type_v, show_progress=True,
                        batch_invariant=False,  # llama.cpp's batch summation order, to line up with its logs
                        flash_attn=flash_attn)
    ids = sess.tokenizer.encode(prompt, add_special=True, parse_special=True)
    if not ids:
        raise EvalCbError("the prompt tokenizes to no tokens")
    if len(ids) > batch:
        raise EvalCbError(f"the prompt has {len(ids)} tokens, more than -b {batch}")
    sess.ctx.decode(ids, trace=hook)
    return [int(i) for i in ids]
