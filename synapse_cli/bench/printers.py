"""llama-bench's printers (markdown, csv, json, jsonl, sql): its field order, value spellings and column
widths; synapse-only fields after llama-bench's."""

from __future__ import annotations

import json
import math
from typing import Iterable, TextIO

from .matrix import DEFAULT_CACHE_TYPE, DEFAULT_N_BATCH, DEFAULT_N_UBATCH, BenchParams
from .results import FIELDS, FIXED_FIELDS, Result, field_type, to_string

# ------------------------------------------------------------------------------------------------
# printers
# ------------------------------------------------------------------------------------------------

class Printer:
    def __init__(self, out: TextIO, extras: list[str]):
        self.out = out
        self.extras = extras  # synapse-only fields this run has

    def header(self, p: BenchParams) -> None:
        pass

    def test(self, r: Result) -> None:
        raise NotImplementedError

    def footer(self, r_footer: dict | None = None) -> None:
        pass

    def _w(self, s: str) -> None:
        self.out.write(s)


def _extra_json(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, float):
        return "%f" % v if math.isfinite(v) else "null"
    return json.dumps(v)


def _extra_str(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "%f" % v
    return str(v)


class CsvPrinter(Printer):
    @staticmethod
    def escape(s: str) -> str:
        return '"' + s.replace('"', '""') + '"'

    def header(self, p):
        self._w(",".join(FIELDS + self.extras) + "\n")

    def test(self, r):
        vals = r.values() + [_extra_str(r.extras.get(k)) for k in self.extras]
        self._w(",".join(self.escape(v) for v in vals) + "\n")
        self.out.flush()


def escape_json(s: str) -> str:
    """llama-bench's escape_json: quote, backslash and control characters (as \\u00XX)."""
    out = []
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif ord(c) <= 0x1F:
            out.append("\\u%04x" % ord(c))
        else:
            out.append(c)
    return "".join(out)


def format_json_value(name: str, value: str) -> str:
    t = field_type(name)
    if t == "STRING":
        return '"' + escape_json(value) + '"'
    if t == "BOOL":
        return "false" if value == "0" else "true"
    return value


def _join_g(xs: Iterable[float]) -> str:
    # ostream << double: 6 significant digits, like %g
    return ", ".join("%g" % x for x in xs)


def _json_members(r, extras) -> tuple[list[str], list[str], list[str]]:
    """A test's `"name": value` members: llama-bench's fields, its two sample arrays, then synapse's extras."""
    fields = [f'"{name}": {format_json_value(name, v)}' for name, v in zip(FIELDS, r.values())]
    samples = [f'"samples_ns": [ {", ".join(str(x) for x in r.samples_ns)} ]',
               f'"samples_ts": [ {_join_g(r.samples_ts)} ]']
    return fields, samples, [f'"{k}": {_extra_json(r.extras.get(k))}' for k in extras]


class JsonPrinter(Printer):
    def __init__(self, out, extras):
        super().__init__(out, extras)
        self.first = True

    def header(self, p):
        self._w("[\n")

    def test(self, r):
        if self.first:
            self.first = False
        else:
            self._w(",\n")
        fields, samples, extras = _json_members(r, self.extras)
        self._w("  {\n" + ",\n".join("    " + m for m in fields + samples + extras) + "\n  }")
        self.out.flush()

    def footer(self, info=None):
        self._w("\n]\n")


class JsonlPrinter(Printer):
    def test(self, r):
        fields, (ns, ts), extras = _json_members(r, self.extras)
        # llama-bench's separators, no space after the samples_ns array's comma included
        self._w("{" + "".join(m + ", " for m in fields) + ns + "," + ts + "".join(", " + m for m in extras) + "}\n")
        self.out.flush()


class SqlPrinter(Printer):
    """llama-bench's exact llama_bench table (no synapse extras), so it appends to llama-bench databases."""

    @staticmethod
    def sql_type(name: str) -> str:
        return {"STRING": "TEXT", "BOOL": "INTEGER", "INT": "INTEGER", "FLOAT": "REAL"}[field_type(name)]

    def header(self, p):
        self._w("CREATE TABLE IF NOT EXISTS llama_bench (\n")
        for i, f in enumerate(FIELDS):
            self._w(f"  {f} {self.sql_type(f)}{',' if i < len(FIELDS) - 1 else ''}\n")
        self._w(");\n\n")

    def test(self, r):
        vals = ", ".join("'" + v.replace("'", "''") + "'" for v in r.values())
        self._w(f"INSERT INTO llama_bench ({', '.join(FIELDS)}) VALUES ({vals});\n")
        self.out.flush()


# markdown: llama-bench's markdown_printer widths (negative = left-aligned) and display names
_MD_WIDTHS = {"model": -30, "t/s": 20, "size": 10, "params": 10, "n_gpu_layers": 3, "n_threads": 7,
              "n_batch": 7, "n_ubatch": 8, "type_k": 6, "type_v": 6, "split_mode": 6, "load_mode": 10,
              "flash_attn": 3, "devices": -12, "test": 15, "no_op_offload": 4, "no_host": 4, "repack": 3,
              "roofline": 8, "vs llama.cpp": 12}
_MD_NAMES = {"n_threads": "threads", "n_gpu_layers": "ngl", "split_mode": "sm", "flash_attn": "fa",
             "no_kv_offload": "nkvo", "load_mode": "lm", "embeddings": "embd", "no_op_offload": "nopo",
             "no_host": "noh", "repack": "rpk", "devices": "dev", "tensor_split": "ts",
             "tensor_buft_overrides": "ot", "fit_target": "fitt", "fit_min_ctx": "fitc"}


def md_width(name: str) -> int:
    if name in _MD_WIDTHS:
        return _MD_WIDTHS[name]
    w = max(len(name), 10)
    return -w if field_type(name) == "STRING" else w


def _pad(value: str, width: int) -> str:
    """printf("%*s"): width counts bytes, so multi-byte UTF-8 takes more room (llama-bench's ± hack)."""
    n = width if width >= 0 else -width
    fill = " " * max(0, n - len(value.encode("utf-8")))
    return fill + value if width >= 0 else value + fill


def format_size(n_bytes: int) -> str:
    if n_bytes < 1024 ** 3:
        return "%.2f MiB" % (n_bytes / 1024.0 / 1024.0)
    return "%.2f GiB" % (n_bytes / 1024.0 / 1024.0 / 1024.0)


def format_params(n: int) -> str:
    if n < 1000 ** 3:
        return "%.2f M" % (n / 1e6)
    return "%.2f B" % (n / 1e9)


class MarkdownPrinter(Printer):
    def __init__(self, out, extras):
        super().__init__(out, extras)
        self.columns: list[str] = []

    def header(self, p):
        # llama-bench's markdown_printer: a column for each parameter given other than its default, in its order
        # (a CPU backend hides n_gpu_layers and always shows threads)
        fixed = {k for k, vs in p.fixed.items() if len(vs) > 1 or vs != [FIXED_FIELDS[k]]}
        cols = ["model", "size", "params", "backend"] + [c for c in ("n_cpu_moe",) if c in fixed] + ["n_threads"]
        cols += [c for c in ("cpu_mask", "cpu_strict", "poll") if c in fixed]
        if p.n_batch != DEFAULT_N_BATCH:
            cols.append("n_batch")
        if p.n_ubatch != DEFAULT_N_UBATCH:
            cols.append("n_ubatch")
        if p.type_k != DEFAULT_CACHE_TYPE:
            cols.append("type_k")
        if p.type_v != DEFAULT_CACHE_TYPE:
            cols.append("type_v")
        cols += [c for c in ("main_gpu", "split_mode", "no_kv_offload") if c in fixed]
        if p.flash_attn != [-1]:  # llama-bench: shown unless the default (auto) alone
            cols.append("flash_attn")
        cols += [c for c in ("devices", "tensor_split", "tensor_buft_overrides") if c in fixed]
        if p.load_mode != ["auto"]:
            cols.append("load_mode")
        cols += [c for c in ("lazy_mode", "embeddings", "no_op_offload", "no_host") if c in fixed]
        if p.repack != [True]:
            cols.append("repack")
        cols += [c for c in ("fit_target", "fit_min_ctx") if c in fixed]
        cols += ["test", "t/s"]
        if "roofline_pct" in self.extras:
            cols.append("roofline")
        if "vs_llamacpp" in self.extras:
            cols.append("vs llama.cpp")
        self.columns = cols
        self._w("|" + "".join(f" {_pad(_MD_NAMES.get(c, c), md_width(c))} |" for c in cols) + "\n")
        self._w("|" + "".join(f" {'-' * (abs(md_width(c)) - 1)}{':' if md_width(c) > 0 else '-'} |"
                              for c in cols) + "\n")

    def cell(self, r: Result, c: str) -> str:
        if c == "model":
            return str(r.fields["model_type"])
        if c == "size":
            return format_size(int(r.fields["model_size"]))
        if c == "params":
            return format_params(int(r.fields["model_n_params"]))
        if c == "backend":
            return str(r.fields["backends"])
        if c == "test":
            return r.test_name
        if c == "t/s":
            return "%.2f ± %.2f" % (r.avg_ts, r.stddev_ts)
        if c == "roofline":
            v = r.extras.get("roofline_pct")
            return "-" if v is None else "%.1f%%" % v
        if c == "vs llama.cpp":
            v = r.extras.get("vs_llamacpp")
            return "-" if v is None else "%.2fx" % v
        return to_string(r.value(c))

    def test(self, r):
        line = "|"
        for c in self.columns:
            w = md_width(c)
            if c == "t/s":
                w += 1  # llama-bench: "the utf-8 character is 2 bytes"
            line += f" {_pad(self.cell(r, c), w)} |"
        self._w(line + "\n")
        self.out.flush()

    def footer(self, info=None):
        info = info or {}
        self._w(f"\nbuild: {info.get('build_commit', 'unknown')} ({info.get('build_number', 0)})\n")
        for line in info.get("notes", []):
            self._w(line + "\n")


PRINTERS = {"md": MarkdownPrinter, "csv": CsvPrinter, "json": JsonPrinter, "jsonl": JsonlPrinter, "sql": SqlPrinter}


def make_printer(fmt: str, out: TextIO, extras: list[str]) -> Printer:
    if fmt not in PRINTERS:
        raise ValueError(f"unknown output format {fmt!r} (md, csv, json, jsonl, sql)")
    return PRINTERS[fmt](out, [] if fmt == "sql" else extras)


