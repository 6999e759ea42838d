"""eval-callback traces: the log parser against llama.cpp's fixture logs, the printer (round trip and from
numpy arrays against a slow transcription of common_debug_print_tensor with glibc's printf as the
number formatter), the trace recorder, JSON."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import re

import numpy as np
import pytest

from synapse_cli import evalcb
from synapse_cli.evalcb import EvalCbError, TraceRecorder, format_records, load_trace, parse_log_text

from conftest import FIXTURES

LOGS = sorted(FIXTURES.glob("tiny/evalcb/*.log")) + sorted(FIXTURES.glob("real/evalcb/*.log"))
TINY = FIXTURES / "tiny" / "evalcb" / "tiny-llama-F32__pub__kvf16.log"

needs_fixtures = pytest.mark.skipif(not TINY.exists(), reason="fixtures not present")

_libc = ctypes.CDLL(ctypes.util.find_library("c"))


def c_printf(fmt: str, *args) -> str:
    """glibc snprintf: the formatter llama.cpp's LOG uses (an oracle independent of Python's %)."""
    conv = []
    for a in args:
        if isinstance(a, float):
            conv.append(ctypes.c_double(a))
        elif isinstance(a, str):
            conv.append(a.encode())
        else:
            conv.append(a)
    size = 4096
    buf = ctypes.create_string_buffer(size)
    _libc.snprintf(buf, size, fmt.encode(), *conv)
    return buf.value.decode()


def tensor_section(text: str) -> str:
    """Lines of the tensor dump: from the first header up to the blank line llama-eval-callback prints
    before llama_perf_context_print."""
    lines = text.splitlines(keepends=True)
    start = next(k for k, ln in enumerate(lines) if ln.startswith("common_debug_cb_eval:"))
    end = start
    while lines[end].strip():
        end += 1
    return "".join(lines[start:end])


def header_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("common_debug_cb_eval:")]


def header_srcs(right: str) -> list:
    """(name, ne) of the sources in a header's `type) OP(src0{ne}, src1{ne}}) = {ne}` part, read with plain string
    operations (the fixtures' headers are never cut by llama.cpp's 128-byte buffer)."""
    args = right.split(")", 1)[1].split("(", 1)[1].rsplit("}) = {", 1)[0]  # "src0{ne}, src1{ne}" or "src0{ne}, "
    srcs = []
    for part in args.split("}, ", 1):
        if part:
            name, _, ne = part.partition("{")
            srcs.append((name, tuple(int(x) for x in ne.removesuffix("}").split(", "))))
    return srcs


# ------------------------------------------------------------------------------------------------
# parser on the fixtures


@needs_fixtures
@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_parser_reads_every_fixture_log_completely(path):
    text = path.read_text()
    recs = parse_log_text(text, str(path))
    heads = header_lines(text)
    assert len(recs) == len(heads) > 0
    section = tensor_section(text)
    # sums: every `sum = ` line, in order (one per tensor: ne3 == 1 throughout these graphs)
    sum_lines = [float(m) for m in re.findall(r"^ +sum = (\S+)$", section, re.M)]
    assert [r.sum for r in recs] == sum_lines
    # values: every number printed in a row, in order
    row_numbers = [float(t) for ln in section.splitlines() if ln.lstrip().startswith("[") and ln.rstrip().endswith("],")
                   for t in ln.strip()[1:-2].replace("...,", "").split(",") if t.strip()]
    assert np.array_equal(np.concatenate([r.shown.reshape(-1) for r in recs]), np.array(row_numbers))
    for r, h in zip(recs, heads):
        # name, type, op and ne as written in the header, read with plain string operations
        left, right = h[len("common_debug_cb_eval:"):].split(" = (", 1)
        assert r.name == left.strip()
        assert r.type == right.split(")", 1)[0]
        assert r.op == right.split(")", 1)[1].split("(", 1)[0].strip()
        assert r.ne == tuple(int(x) for x in h.rsplit("{", 1)[1].rstrip("}").split(", "))
        assert r.srcs == header_srcs(right), h
        k = [min(n, 6) for n in r.ne[:3]]
        assert r.shown.shape == (r.ne[3], k[2], k[1], k[0])
        assert r.sum_kind == "full" and not r.truncated
    names = [r.name for r in recs]
    assert names[0] == "embd" and names[-1] == "result_output"
    assert "Vcur-0 (reshaped) (reshaped)" in names and "cache_k_l0 (view) (permuted)" in names
    kq = next(r for r in recs if r.name == "kq-0")
    assert kq.op == "MUL_MAT" and kq.srcs[0][0] == "cache_k_l0 (view) (permuted)"
    assert kq.srcs[1][0].startswith("Qcur") and kq.srcs[1][0].endswith(" (view) (permuted)")


@needs_fixtures
@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_printer_round_trip_is_byte_identical(path):
    text = path.read_text()
    recs = parse_log_text(text, str(path))
    assert format_records(recs) == tensor_section(text)


# ------------------------------------------------------------------------------------------------
# older formats, built from a fixture by rewriting it the way older eval-callback.cpp printed


def rewrite_legacy(section: str, *, prefix: str, name_width: int, indents: tuple[int, int, int],
                   printed_sums: bool = False) -> str:
    """The tensor section in an older eval-callback layout: `prefix:` headers with %<name_width>s names,
    i3/i2/row indentation `indents`, `..., ` without padding and `],` row ends (no double space). With
    printed_sums, each sum is replaced by the float32 running sum of the printed values (2024 versions)."""
    i3, i2, i1 = (" " * n for n in indents)
    out = []
    running = np.float32(0)
    for ln in section.splitlines():
        s = ln.strip()
        if ln.startswith("common_debug_cb_eval:"):
            name, rest = ln[len("common_debug_cb_eval:"):].split(" = (", 1)
            out.append(f"{prefix}: {name.strip():>{name_width}} = ({rest}")
            running = np.float32(0)
        elif ln.startswith("            [") and s.endswith("],"):
            vals = [t.strip() for t in s[1:-2].split(",") if t.strip()]
            for t in vals:
                if t != "...":
                    running = np.float32(running + np.float32(float(t)))
            row = s[1:-2].rstrip().replace("   ...,", "...,")
            out.append(f"{i1}[{row}],")
        elif ln.startswith("            ..."):
            out.append(f"{i1[:-1]}..., ")
        elif ln.startswith("        ...") or ln.startswith("        [") or ln.startswith("        ]"):
            out.append(i2 + s + (" " if s == "...," else ""))
        elif s.startswith("sum = "):
            out.append(f"{i3}sum = {float(running):f}" if printed_sums else i3 + s)
        else:
            out.append(i3 + s)
    return "\n".join(out) + "\n"


def same_records(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x.name, x.op, x.type, x.ne, x.srcs, x.sum) == (y.name, y.op, y.type, y.ne, y.srcs, y.sum)
        assert np.array_equal(x.shown, y.shown)


@needs_fixtures
@pytest.mark.parametrize(
    "prefix,width,indents",
    [("ggml_debug", 24, (4, 5, 6)), ("ggml_debug", 16, (4, 5, 6)), ("ggml_debug", 24, (37, 38, 39)),
     ("common_debug_cb_eval", 24, (2, 4, 6))],
)
def test_parser_reads_older_prefix_and_indentation(prefix, width, indents):
    section = tensor_section(TINY.read_text())
    legacy = rewrite_legacy(section, prefix=prefix, name_width=width, indents=indents)
    assert legacy != section and legacy.count(f"{prefix}:") == section.count("common_debug_cb_eval:")
    recs = parse_log_text("0.00.001 I some loader line\n" + legacy + "\nllama_perf_context_print: x\n")
    same_records(recs, parse_log_text(section))
    assert all(r.sum_kind == "full" for r in recs)


@needs_fixtures
def test_parser_recognises_2024_sums_of_printed_elements():
    section = tensor_section(TINY.read_text())
    legacy = rewrite_legacy(section, prefix="ggml_debug", name_width=24, indents=(37, 38, 39), printed_sums=True)
    recs = parse_log_text(legacy)
    assert len(recs) == section.count("common_debug_cb_eval:")
    assert all(r.sum_kind == "printed" for r in recs)
    # the unaltered log is not mistaken for one
    assert all(r.sum_kind == "full" for r in parse_log_text(section))


@needs_fixtures
def test_truncated_log_keeps_complete_tensors():
    section = tensor_section(TINY.read_text())
    lines = section.splitlines(keepends=True)
    last_header = max(k for k, ln in enumerate(lines) if ln.startswith("common_debug_cb_eval:"))
    cut = "".join(lines[: last_header + 3])  # header + 2 lines of its value block
    recs = parse_log_text(cut)
    assert len(recs) == section.count("common_debug_cb_eval:")
    assert recs[-1].truncated and recs[-1].sum is None and recs[-1].shown is None
    same_records(recs[:-1], parse_log_text(section)[:-1])  # the complete ones as in the whole log
    assert not any(r.truncated for r in recs[:-1])


@needs_fixtures
def test_malformed_block_is_an_error_with_its_line(tmp_path):
    lines = tensor_section(TINY.read_text()).splitlines(keepends=True)
    # drop the last value of the third row of the first tensor
    k = 4
    assert lines[k].startswith("            [")
    lines[k], n = re.subn(r",\s+-?\d+\.\d{4}  \],$", "  ],", lines[k])
    assert n == 1
    bad = tmp_path / "bad.log"
    bad.write_text("".join(lines))
    with pytest.raises(EvalCbError, match=r"bad\.log:5: row has 5 values"):
        load_trace(bad)
    # a '...' before a row's first N_SHOW values
    lines = tensor_section(TINY.read_text()).splitlines(keepends=True)
    lines[k], n = re.subn(r"^(\s+\[\s*)-?\d+\.\d{4},", r"\1...,", lines[k])
    assert n == 1
    bad.write_text("".join(lines))
    with pytest.raises(EvalCbError, match=r"bad\.log:5: misplaced '\.\.\.' along i0"):
        load_trace(bad)


def test_unreadable_inputs_raise_one_line_errors(tmp_path):
    with pytest.raises(EvalCbError, match="cannot read"):
        load_trace(tmp_path / "missing.log")
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\nworld\n")
    with pytest.raises(EvalCbError, match="no eval-callback tensor"):
        load_trace(junk)
    badjson = tmp_path / "bad.json"
    badjson.write_text('{"name": "x", "shape": [1,1,1,1]}\n{oops\n')
    with pytest.raises(EvalCbError, match="invalid JSON"):
        load_trace(badjson)


# ------------------------------------------------------------------------------------------------
# printing from numpy arrays


def reference_print(v: np.ndarray, n: int = 3) -> str:
    """common_debug_print_tensor transcribed loop for loop (C for-loops with the index jumps), numbers
    formatted by glibc. v: (ne3, ne2, ne1, ne0) float32."""
    ne3, ne2, ne1, ne0 = v.shape
    s = np.float32(0)
    for i3 in range(ne3):
        for i2 in range(ne2):
            for i1 in range(ne1):
                for i0 in range(ne0):
                    s = np.float32(s + v[i3, i2, i1, i0])
    out = ""
    for i3 in range(ne3):
        out += "    [\n"
        i2 = 0
        while i2 < ne2:
            if i2 == n and ne2 > 2 * n:
                out += "        ..., \n"
                i2 = ne2 - n
            out += "        [\n"
            i1 = 0
            while i1 < ne1:
                if i1 == n and ne1 > 2 * n:
                    out += "            ..., \n"
                    i1 = ne1 - n
                out += "            ["
                i0 = 0
                while i0 < ne0:
                    if i0 == n and ne0 > 2 * n:
                        out += "   ..., "
                        i0 = ne0 - n
                    out += c_printf("%12.4f", float(v[i3, i2, i1, i0]))
                    if i0 < ne0 - 1:
                        out += ", "
                    i0 += 1
                out += "  ],\n"
                i1 += 1
            out += "        ],\n"
            i2 += 1
        out += "    ]\n"
        out += c_printf("    sum = %f\n", float(s))
    return out


SHAPES = [(1, 1, 1, 1), (5, 1, 1, 1), (6, 1, 1, 1), (7, 1, 1, 1), (1, 9, 1, 1), (6, 6, 6, 1), (7, 7, 7, 1),
          (64, 4, 7, 1), (256, 2, 64, 1), (3, 7, 2, 2), (8, 1, 9, 3), (2, 6, 7, 1)]


@pytest.mark.parametrize("ne", SHAPES, ids=[str(s) for s in SHAPES])
def test_printing_an_array_matches_debug_cpp(ne):
    rng = np.random.default_rng(sum(ne))
    shape = tuple(reversed(ne))
    v = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 50.0], size=shape)).astype(np.float32)
    flat = v.reshape(-1)
    flat[:: max(1, flat.size // 5)] = np.float32(-0.0)
    if flat.size > 3:
        flat[1] = np.float32(12345.678)
        flat[-2] = np.float32(-0.00005)  # rounds to -0.0000 / -0.0001 at the %12.4f boundary
    rec_srcs = [("a", ne), ("b", (ne[1], 1, 1, 1))]
    got = evalcb.format_record(evalcb.record_from_array("t", "ADD", v.reshape(shape), rec_srcs, "f32"))
    body = got.split("\n", 1)[1]
    assert body == reference_print(v.reshape(ne[3], ne[2], ne[1], ne[0]))


def test_printing_nan_inf_and_f16_values():
    # one NaN per tensor: the sum then carries that NaN (and its sign), whatever the operand order
    for sign_bit in (0, 0x80000000):
        v = np.array([[1.0, 2.0, -np.inf], [np.nan, 0.5, 65504.0]], dtype=np.float32)  # ne {3, 2}
        bits = v.view(np.uint32)
        bits[1, 0] = (bits[1, 0] & np.uint32(0x7FFFFFFF)) | np.uint32(sign_bit)  # glibc prints nan / -nan
        rec = evalcb.record_from_array("x", "CPY", v, [("y", (3, 2, 1, 1))], "f32")
        text = evalcb.format_values(rec)
        assert text == reference_print(v.reshape(1, 1, 2, 3))
        assert ("-nan" in text) == bool(sign_bit)
    h = np.linspace(-3, 3, 2 * 9 * 8).astype(np.float16).reshape(2, 9, 8)  # ne {8, 9, 2}, F16 cache-like
    rec16 = evalcb.record_from_array("cache_k_l0 (view)", "VIEW", h, [("cache_k_l0", (8, 9, 2, 1))], "f16")
    assert evalcb.format_values(rec16) == reference_print(h.astype(np.float32).reshape(1, 2, 9, 8))


def test_sum_is_sequential_float32_in_index_order():
    rng = np.random.default_rng(7)
    # wide dynamic range so that the order and width of accumulation show
    v = (rng.standard_normal((5, 7, 300)) * 10.0 ** rng.integers(-3, 5, size=(5, 7, 300))).astype(np.float32)
    s = np.float32(0)
    for x in v.reshape(-1):
        s = np.float32(s + x)
    assert evalcb.ggml_sum(v) == float(s)
    # the data tells the accumulations apart: numpy's pairwise float32 sum and a float64 sum differ
    assert float(s) != float(np.sum(v, dtype=np.float32))
    assert float(s) != float(np.float32(np.sum(v, dtype=np.float64)))
    # a non-contiguous (permuted) tensor is summed in its logical index order
    p = v.transpose(1, 0, 2)
    s2 = np.float32(0)
    for x in np.ascontiguousarray(p).reshape(-1):
        s2 = np.float32(s2 + x)
    assert evalcb.ggml_sum(p) == float(s2)


# ------------------------------------------------------------------------------------------------
# header, recorder, JSON


def test_header_matches_c_format():
    rec = evalcb.TensorRecord(name="kq-0", op="MUL_MAT", type="f32", ne=(256, 7, 4, 1),
                              srcs=[("cache_k_l0 (view) (permuted)", (64, 256, 2, 1)), ("Qcur-0 (view) (permuted)", (64, 7, 4, 1))])
    fmt = "%s: %24s = (%s) %10s(%s{%s}, %s}) = {%s}"
    exp = c_printf(fmt, "common_debug_cb_eval", "kq-0", "f32", "MUL_MAT", "cache_k_l0 (view) (permuted)", "64, 256, 2, 1",
                   "Qcur-0 (view) (permuted){64, 7, 4, 1}", "256, 7, 4, 1")
    assert evalcb.format_header(rec) == exp
    # no src1; a name longer than 24; a src1 string longer than the 128-byte buffer
    long1 = "x" * 150
    rec2 = evalcb.TensorRecord(name="Vcur-0 (reshaped) (reshaped)", op="RESHAPE", type="f16", ne=(1, 896, 1, 1),
                               srcs=[("Vcur-0 (reshaped)", (128, 7, 1, 1))])
    assert evalcb.format_header(rec2) == c_printf(fmt, "common_debug_cb_eval", rec2.name, "f16", "RESHAPE",
                                                  "Vcur-0 (reshaped)", "128, 7, 1, 1", "", "1, 896, 1, 1")
    rec2.srcs.append((long1, (1, 2, 3, 4)))
    buf = ctypes.create_string_buffer(128)
    _libc.snprintf(buf, 128, b"%s{%s}", long1.encode(), b"1, 2, 3, 4")
    exp3 = c_printf(fmt, "common_debug_cb_eval", rec2.name, "f16", "RESHAPE", "Vcur-0 (reshaped)", "128, 7, 1, 1",
                    buf.value.decode(), "1, 896, 1, 1")
    assert evalcb.format_header(rec2) == exp3
    # and the parser reads the truncated src1 back to the same line
    assert evalcb.format_header(parse_log_text(exp3)[0]) == exp3


def test_recorder_hook_filter_dump_and_names(tmp_path):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((7, 4, 64)).astype(np.float32)  # ne {64, 4, 7, 1}
    kq = rng.standard_normal((4, 7, 256)).astype(np.float32)
    rec = TraceRecorder(tensor_filter=evalcb.compile_tensor_filter(["kq", "Q"]), dump_dir=tmp_path / "d")
    rec("Qcur-0", "ROPE", q, [("Qcur-0", (64, 4, 7, 1)), ("inp_pos", (7, 1, 1, 1))], "f32")
    rec(name="embd", op="GET_ROWS", value=q[0], srcs=[("token_embd.weight", (64, 10, 1, 1))], ggml_type="f32")
    rec("kq_soft_max-0", "SOFT_MAX", kq, [("kq-0", (256, 7, 4, 1)), ("attn_inp_kq_mask", (256, 7, 1, 1))], "f32")
    rec("x" * 80, "ADD", q, [("a", (64, 4, 7, 1))], "f32")
    assert [r.name for r in rec.records] == ["Qcur-0", "kq_soft_max-0"]  # anchored at the start like llama-debug
    assert rec.n_seen == 4
    r0 = rec.records[0]
    assert r0.ne == (64, 4, 7, 1) and r0.sum == evalcb.ggml_sum(q)
    files = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert files == ["0000-Qcur-0.npy", "0002-kq_soft_max-0.npy"]
    assert np.array_equal(np.load(tmp_path / "d" / files[1]), kq)
    # ggml names hold 63 bytes
    r = TraceRecorder()
    r("y" * 80, "ADD", q, [("a", (64, 4, 7, 1))], "f32")
    assert r.records[0].name == "y" * 63
    # explicit ne for shapes whose trailing extents are 1 (numpy shape (896,) of ne {1, 896})
    r("v", "RESHAPE", q.reshape(-1)[:896], [("a", (128, 7, 1, 1))], "f32", ne=(1, 896, 1, 1))
    assert r.records[1].ne == (1, 896, 1, 1) and r.records[1].shown.shape == (1, 1, 6, 1)
    with pytest.raises(EvalCbError, match="invalid --tensor-filter"):
        evalcb.compile_tensor_filter(["("])


def test_quantized_result_prints_header_only():
    rec = evalcb.record_from_array("w", "CPY", np.zeros((2, 32), np.float32), [("a", (32, 2, 1, 1))], "q8_0")
    assert rec.sum is None and rec.shown is None
    assert evalcb.format_record(rec) == evalcb.format_header(rec) + "\n"
    again = parse_log_text(evalcb.format_record(rec) + evalcb.format_record(rec))
    assert len(again) == 2 and again[0].sum is None


@pytest.mark.parametrize("shape", [(9, 1, 1, 2), (8, 7, 1, 9), (1,), (2,), (7, 2), (3, 1, 8, 1)])
def test_first_and_last_values_come_from_the_printed_block(shape):
    a = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    r = evalcb.record_from_array("x", "ADD", a, [("a", (1, 1, 1, 1))], "f32")
    flat = a.reshape(-1)
    assert r.first_values() == [float(x) for x in flat[:3]] and r.last_values() == [float(x) for x in flat[-3:]]


def test_json_and_no_values_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    r = TraceRecorder()
    arrays = [rng.standard_normal((7, 2, 64)).astype(np.float32), rng.standard_normal((1024,)).astype(np.float32),
              rng.standard_normal((2, 2, 3)).astype(np.float16)]
    for k, a in enumerate(arrays):
        ne = tuple(reversed(a.shape))
        r(f"t-{k}", "ADD", a, [("a", ne), ("b", ne)], "f16" if a.dtype == np.float16 else "f32")
    lines = r.json_lines().splitlines()
    assert len(lines) == 3
    objs = [json.loads(ln) for ln in lines]
    for o, a in zip(objs, arrays):
        assert set(o) >= {"name", "op", "type", "shape", "sum", "first", "last", "values"}
        assert o["shape"] == list(reversed(a.shape)) + [1] * (4 - a.ndim)
        flat = a.astype(np.float32).reshape(-1)
        assert o["first"] == [float(x) for x in flat[:3]] and o["last"] == [float(x) for x in flat[-3:]]
        assert o["sum"] == evalcb.ggml_sum(a)
    p = tmp_path / "t.jsonl"
    p.write_text(r.json_lines())
    back = load_trace(p)
    assert evalcb.format_records(back) == r.text()  # same printed text from JSON as from the arrays
    # --no-values text: header and sum only, and it reads back
    nv = tmp_path / "nv.log"
    nv.write_text(r.text(values=False))
    back2 = load_trace(nv)
    assert [x.sum for x in back2] == [float(c_printf("%f", x.sum)) for x in r.records]
    assert all(x.shown is None for x in back2)
