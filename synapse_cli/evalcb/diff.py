"""Comparing two traces by tensor name: relative sum differences against a noise floor, printed values,
the first divergence, and its Rich rendering."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np


from .logformat import c_float, json_num, ne_str, printed_sum
from .record import PRINT_RES, VALUE_RES, TensorRecord

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
                    "sum_a": json_num(t.sum_a),
                    "sum_b": json_num(t.sum_b),
                    "rel_diff": json_num(t.rel_diff),
                    "within": t.within,
                    "max_abs_val_diff": json_num(t.max_abs_val_diff),
                    "occurrence": t.occurrence,
                    "note": t.note,
                }
                for t in self.tensors
            ],
            "only_a": list(self.only_a),
            "only_b": list(self.only_b),
            "n_compared": self.n_compared,
            "n_within": self.n_within,
            "max_rel_diff": json_num(mrd) if mrd is None or math.isfinite(mrd) else None,
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
        notes.append(f"shape {{{ne_str(a.ne)}}} vs {{{ne_str(b.ne)}}}")
    if a.sum is None or b.sum is None:
        side = "A" if a.sum is None else "B"
        why = "truncated log" if (a.truncated if a.sum is None else b.truncated) else "no values"
        td.note = "; ".join(notes + [f"{why} on side {side}"])
        return td
    sa, sb = a.sum, b.sum
    if a.sum_kind != b.sum_kind and a.ne == b.ne and a.shown is not None and b.shown is not None:
        # one side is a 2024 log summing the printed elements only: compare that quantity
        sa = a.sum if a.sum_kind == "printed" else printed_sum(a.shown)
        sb = b.sum if b.sum_kind == "printed" else printed_sum(b.shown)
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
        # (by name without surrounding blanks: a log right-aligns its names, so " (reshaped)", ggml's name of a
        # reshaped unnamed node, reads back as "(reshaped)")
        g: dict[str, list[int]] = {}
        for k, r in enumerate(recs):
            g.setdefault(r.name.strip(), []).append(k)
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
        ca, cb = len(ga[a[ka].name.strip()]), len(gb[a[ka].name.strip()])
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


def host_has_avx512() -> Optional[bool]:
    """Whether this CPU has AVX-512, as kernels/config.py's CPU_FEATURES sees it (None where that names no x86
    feature at all, e.g. NUMBA_CPU_NAME=generic)."""
    from kernels.config import CPU_FEATURES  # (imports numba: called only when a comparison diverged)

    return "avx512f" in CPU_FEATURES if CPU_FEATURES else None


_WHY = ("synapse computes the AVX-512 build's order, whose exp in soft-max and SiLU and whose F32/F16 dot products "
        "differ from such a build's in the last bits, more so layer after layer (tests/reference/README.md)")


def cache_size_notes(diff: TraceDiff) -> list[str]:
    """A note when the KV cache tensors' shapes differ: the two runs had other context sizes (-c), e.g. a log of
    llama-eval-callback's default (the model's training context) against a run with -c 4096."""
    cells = {(t.shape, t.shape_b) for t in diff.tensors if t.name.startswith("cache_") and t.shape != t.shape_b}
    if not cells:
        return []
    return ["note: the KV cache tensors' shapes differ, so the two runs had other context sizes: run with the -c "
            "the log was made with (llama.cpp's default, as synapse's, is the model's training context)"]


def build_notes(logs: list[tuple[str, Optional[frozenset[str]]]], host_avx512: Optional[bool]) -> list[str]:
    """Why a log of a llama.cpp build without AVX-512 differs from synapse in the last bits (README, "Agreement
    with llama.cpp"). logs: (label, the CPU features of its system_info line or None). A note for each log whose
    system_info lacks AVX512; when no log has that line (stdout only), one note if this CPU has no AVX-512, as
    then a llama.cpp built here has none either."""
    with_info = [(label, features) for label, features in logs if features is not None]
    if with_info:
        return [f"note: {label} comes from a llama.cpp build without AVX-512 (its system_info line); {_WHY}"
                for label, features in with_info if "AVX512" not in features]
    if host_avx512 is False:
        return [f"note: this CPU has no AVX-512, so a llama.cpp built on it has none either; if the log comes from "
                f"one, {_WHY}"]
    return []


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
            "{" + ne_str(t.shape) + "}",
            "-" if t.sum_a is None else c_float(t.sum_a, ""),
            "-" if t.sum_b is None else c_float(t.sum_b, ""),
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


