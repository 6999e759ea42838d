"""`synapse bench` against llama-bench: its list syntax, statistics and output layout (the fixtures'
llama-bench markdown/JSON, reproduced byte for byte from their own samples), llama_model_desc / size /
params against llama.cpp's reports (bench JSON for the real models, print_info lines of the eval-callback
logs for the tiny ones), the timing method on a recording fake context, and end-to-end runs of the CLI
on a tiny model in every output format (parsed back; no assertion on speed).
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, REAL_MODELS, TINY_MODELS, real_model_path, spy_model_loads

from synapse_cli import bench as B
from synapse_cli.cli import cli
from kernels.gguf import GGUFReader

BENCH = FIXTURES / "real" / "bench"
BENCH_JSON = sorted(BENCH.glob("*.json"))
TINY = TINY_MODELS / "tiny-llama-Q4_K_M.gguf"


def _fixture_results(path):
    """Results rebuilt from a llama-bench JSON file: its fields and samples, statistics recomputed."""
    rows = json.loads(path.read_text())
    return rows, [B.Result({k: r[k] for k in B.FIELDS if k not in B.STATS_FIELDS}, r["samples_ns"]) for r in rows]


# ------------------------------------------------------------------------------------------------
# list syntax (llama-bench's parse_int_range)
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("8", [8]),
    ("1,2", [1, 2]),
    ("1-4", [1, 2, 3, 4]),
    ("16-64*2", [16, 32, 64]),
    ("0-512+128", [0, 128, 256, 384, 512]),
    ("1-3,8,10-30+10", [1, 2, 3, 8, 10, 20, 30]),
    ("1,", [1]),  # llama-bench's regex accepts a trailing comma
])
def test_parse_int_range(text, expected):
    assert B.parse_int_range(text) == expected


@pytest.mark.parametrize("text", ["", "a", "1,,2", "-1", "1-", "2-8*1", "1-4+0", "1-2|3", "1.5", " 1"])
def test_parse_int_range_rejects(text):
    with pytest.raises(ValueError):
        B.parse_int_range(text)


def test_parse_pg():
    assert B.parse_pg("512,128") == (512, 128)
    for bad in ("512", "1,2,3", "a,b", ""):
        with pytest.raises(ValueError):
            B.parse_pg(bad)


# ------------------------------------------------------------------------------------------------
# statistics and output layout against the fixtures
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", BENCH_JSON, ids=lambda p: p.stem)
def test_statistics_match_llama_bench(path):
    rows, results = _fixture_results(path)
    for row, res in zip(rows, results):
        assert B.avg_ns(res.samples_ns) == row["avg_ns"]
        assert B.stdev_ns(res.samples_ns) == row["stddev_ns"]
        assert res.avg_ts == pytest.approx(row["avg_ts"], abs=5e-7)
        assert res.stddev_ts == pytest.approx(row["stddev_ts"], abs=5e-7)
        assert ["%g" % x for x in res.samples_ts] == ["%g" % x for x in row["samples_ts"]]


@pytest.mark.parametrize("path", BENCH_JSON, ids=lambda p: p.stem)
def test_json_printer_reproduces_llama_bench_json(path):
    text = path.read_text()
    _, results = _fixture_results(path)
    out = io.StringIO()
    p = B.make_printer("json", out, [])
    p.header(None)
    for r in results:
        p.test(r)
    p.footer()
    assert out.getvalue() == text


@pytest.mark.parametrize("path", BENCH_JSON, ids=lambda p: p.stem)
def test_markdown_printer_reproduces_llama_bench_table(path):
    md = path.with_suffix(".md").read_text()
    _, results = _fixture_results(path)
    out = io.StringIO()
    p = B.make_printer("md", out, [])
    p.header(B.BenchParams(models=["x"], n_threads=[1]))  # llama-bench's defaults apart from -p/-n/-r
    for r in results:
        p.test(r)
    p.footer({"build_commit": "0c1e570", "build_number": 0})
    assert out.getvalue() == md


def test_jsonl_csv_sql_carry_llama_bench_fields():
    rows, results = _fixture_results(BENCH_JSON[0])
    # jsonl: one object per line with the same keys and values as llama-bench's JSON
    out = io.StringIO()
    p = B.make_printer("jsonl", out, [])
    for r in results:
        p.test(r)
    lines = out.getvalue().splitlines()
    assert [json.loads(line) for line in lines] == rows
    # csv: header = llama-bench's fields, values as llama-bench prints them (bools 0/1, %f doubles)
    out = io.StringIO()
    p = B.make_printer("csv", out, ["roofline_pct"])
    p.header(None)
    for r in results:
        p.test(r)
    recs = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert list(recs[0])[: len(B.FIELDS)] == B.FIELDS
    assert recs[0]["avg_ts"] == "%f" % rows[0]["avg_ts"] and recs[0]["repack"] == "1"
    assert recs[1]["model_type"] == rows[1]["model_type"] and recs[1]["n_gen"] == str(rows[1]["n_gen"])
    # sql: llama-bench's table exactly (no synapse extras), loadable by sqlite
    out = io.StringIO()
    p = B.make_printer("sql", out, ["roofline_pct"])
    p.header(None)
    for r in results:
        p.test(r)
    db = sqlite3.connect(":memory:")
    db.executescript(out.getvalue())
    cols = [c[1] for c in db.execute("PRAGMA table_info(llama_bench)")]
    assert cols == B.FIELDS
    got = db.execute("SELECT model_type, model_size, n_prompt, n_gen, avg_ns, stddev_ns FROM llama_bench").fetchall()
    assert got == [(r["model_type"], r["model_size"], r["n_prompt"], r["n_gen"], r["avg_ns"], r["stddev_ns"])
                   for r in rows]


def test_markdown_columns_follow_llama_bench_rules():
    """Non-default -b/-ub/-ctk/-ctv add llama-bench's columns; synapse's extras come after t/s."""
    p = B.BenchParams(models=["x"], n_threads=[2], n_batch=[256], n_ubatch=[128], cache_types=[("f32", "f32")])
    out = io.StringIO()
    pr = B.make_printer("md", out, B.ROOFLINE_FIELDS + B.COMPARE_FIELDS)
    pr.header(p)
    head = [c.strip() for c in out.getvalue().splitlines()[0].strip("|").split("|")]
    assert head == ["model", "size", "params", "backend", "threads", "n_batch", "n_ubatch", "type_k", "type_v",
                    "test", "t/s", "roofline", "vs llama.cpp"]


# ------------------------------------------------------------------------------------------------
# test matrix and names
# ------------------------------------------------------------------------------------------------

def test_instances_order_and_names():
    p = B.BenchParams(models=["a.gguf"], n_threads=[1, 2], n_prompt=[512, 0], n_gen=[128], n_pg=[(512, 128)],
                      n_depth=[0, 256])
    got = [(i.n_threads, i.test_name) for i in B.make_instances(p)]
    # llama-bench: threads outside depth, then every -p, every -n, every -pg; -p 0 is skipped
    assert got == [
        (1, "pp512"), (1, "tg128"), (1, "pp512+tg128"),
        (1, "pp512 @ d256"), (1, "tg128 @ d256"), (1, "pp512+tg128 @ d256"),
        (2, "pp512"), (2, "tg128"), (2, "pp512+tg128"),
        (2, "pp512 @ d256"), (2, "tg128 @ d256"), (2, "pp512+tg128 @ d256"),
    ]
    assert B.make_instances(p)[3].n_ctx == 768  # 512 + 256 padded to 256 (llama_context)
    assert B.make_instances(p)[1].n_ctx == 256


# ------------------------------------------------------------------------------------------------
# model description, size and parameters against llama.cpp
# ------------------------------------------------------------------------------------------------

@pytest.mark.real
@pytest.mark.parametrize("name", REAL_MODELS)
def test_real_model_desc_size_params(name):
    path = real_model_path(name)
    row = json.loads((BENCH / f"{path.stem}__t1.json").read_text())[0]
    r = GGUFReader(path)
    assert B.model_desc(r) == row["model_type"]
    assert B.model_size(r) == row["model_size"]
    assert B.model_n_params(r) == row["model_n_params"]


def _print_info(log_text: str, key: str) -> str:
    m = re.search(rf"print_info: {re.escape(key)}\s*= (.*?)\s*$", log_text, re.M)
    assert m, key
    return m.group(1)


@pytest.mark.parametrize("path", sorted(TINY_MODELS.glob("*.gguf")), ids=lambda p: p.stem)
def test_tiny_model_desc_matches_llama_cpp_print_info(path):
    log = (FIXTURES / "tiny" / "evalcb" / f"{path.stem}__pub__kvf16.log").read_text()
    r = GGUFReader(path)
    want = f"{_print_info(log, 'arch')} {_print_info(log, 'model type')} {_print_info(log, 'file type')}"
    assert B.model_desc(r) == want
    size, bpw = re.match(r"(.*) \((.*) BPW\)", _print_info(log, "file size")).groups()
    assert B.format_size(B.model_size(r)) == size
    assert "%.2f" % (B.model_size(r) * 8.0 / B.model_n_params(r)) == bpw
    assert B.format_params(B.model_n_params(r)) == _print_info(log, "model params")


class _FakeTensor:
    def __init__(self, name, ggml_type):
        self.name, self.ggml_type = name, ggml_type


class _FakeReader:
    def __init__(self, tensors, kv):
        self.tensors, self.kv = tensors, kv

    def get(self, key, default=None):
        return self.kv.get(key, default)


def test_ftype_guess_without_general_file_type():
    """llama-model-loader: most frequent type in (layer, name) order, the first to lead wins ties;
    the name gets "(guessed) "."""
    from kernels.ggml_type import GGMLType as T

    # 2 x Q6_K (token_embd, output sort first at layer -1), then blk.0: Q4_K, Q4_K  -> tie 2:2, Q6_K led first
    ts = [_FakeTensor("blk.0.attn_q.weight", T.Q4_K), _FakeTensor("token_embd.weight", T.Q6_K),
          _FakeTensor("blk.0.attn_k.weight", T.Q4_K), _FakeTensor("output.weight", T.Q6_K),
          _FakeTensor("blk.0.attn_norm.weight", T.F32)]
    r = _FakeReader(ts, {"general.architecture": "qwen2", "qwen2.block_count": 24, "qwen2.embedding_length": 896,
                         "qwen2.attention.head_count": 14})
    assert B.model_desc(r) == "qwen2 1B (guessed) Q6_K"
    ts.append(_FakeTensor("blk.1.attn_q.weight", T.Q4_K))
    assert B.ftype_name(B.file_ftype(r)) == "(guessed) Q4_K - Medium"
    r.kv["general.file_type"] = 3
    assert B.ftype_name(B.file_ftype(r)) == "Q4_1"
    assert B.ftype_name(999) == "unknown, may not work"


# ------------------------------------------------------------------------------------------------
# timing method on a recording fake context
# ------------------------------------------------------------------------------------------------

class _Clock:
    """Advances 1000 ns per decoded token, so a sample counts exactly the timed tokens."""

    def __init__(self):
        self.t = 0

    def __call__(self):
        return self.t


class _FakeCtx:
    def __init__(self, clock, n_ctx):
        import numpy as np

        self.clock, self.n_ctx = clock, n_ctx
        self.calls = []  # ("decode", n_past, ids) / ("reset",)
        self.n_past = 0
        self.k_cache = [np.zeros((n_ctx, 4), np.float32)]
        self.v_cache = [np.zeros((n_ctx, 4), np.float32)]

    def decode(self, ids):
        ids = [int(i) for i in ids]
        assert self.n_past + len(ids) <= self.n_ctx
        self.calls.append(("decode", self.n_past, ids))
        for i, t in enumerate(ids):
            self.k_cache[0][self.n_past + i] = t
        self.n_past += len(ids)
        self.clock.t += 1000 * len(ids)

    def reset(self):
        self.calls.append(("reset",))
        self.n_past = 0
        self.k_cache[0][...] = 0


def test_run_test_method():
    clock = _Clock()
    inst = B.Instance("m", n_prompt=10, n_gen=3, n_depth=5, n_batch=4, n_ubatch=4, type_k="f16", type_v="f16",
                      n_threads=1)
    ctx = _FakeCtx(clock, inst.n_ctx)
    toks = B.TokenSource(n_vocab=50, add_bos=True, bos_id=7)
    state = B.DepthState()
    samples = B.run_test(ctx, inst, reps=3, warmup=True, tokens=toks, progress=B.Progress(False, io.StringIO(), False),
                         depth_state=state, clock=clock, state_key=("m",))
    # only the prompt (10) and the generated tokens (3) are timed; the depth prefill is not
    assert samples == [13000, 13000, 13000]
    calls = ctx.calls
    # warm-up on the fresh context: the whole prompt in n_batch pieces, then one generated token
    assert [(c[1], len(c[2])) for c in calls[:4]] == [(0, 4), (4, 4), (8, 2), (10, 1)]
    assert calls[0][2][0] == 7 and calls[3][2] == [7]  # BOS starts the prompt and the generation
    # repetition 1: reset, depth 5 prefilled (BOS first), then prompt at 5.., then 3 single tokens
    rep1 = calls[4:]
    assert rep1[0] == ("reset",)
    assert [(c[1], len(c[2])) for c in rep1[1:9]] == [(0, 4), (4, 1), (5, 4), (9, 4), (13, 2), (15, 1), (16, 1), (17, 1)]
    # repetitions 2 and 3 restore the depth snapshot instead of prefilling again
    rest = calls[4 + 9:]
    assert rest[0] == ("reset",) and rest[1][1] == 5 and len(rest[1][2]) == 4
    assert sum(1 for c in calls if c[0] == "decode" and c[1] == 0) == 2  # warm-up + one depth prefill
    assert all(0 <= t < 50 for c in calls if c[0] == "decode" for t in c[2])


def test_depth_snapshot_restores_the_whole_context_state():
    """A restored depth snapshot on the real Context continues exactly like the prefilled context."""
    import numpy as np

    from synapse_cli.model import Context, Model

    model = Model.load(TINY)
    ctx = Context(model, n_ctx=256, n_batch=64, n_ubatch=64)
    ctx.decode([1, 300, 301, 302, 303, 304, 305, 306])
    state = B.DepthState()
    state.save(ctx, ("k",))
    want = ctx.decode([400])
    ctx.reset()
    assert not state.restore(ctx, ("other",))
    assert state.restore(ctx, ("k",)) and ctx.n_past == 8
    assert np.array_equal(ctx.decode([400]), want)


def test_no_warmup_and_tg_only():
    clock = _Clock()
    inst = B.Instance("m", 0, 4, 0, 2048, 512, "f16", "f16", 1)
    ctx = _FakeCtx(clock, inst.n_ctx)
    s = B.run_test(ctx, inst, 2, False, B.TokenSource(10, False, 1), B.Progress(False, io.StringIO(), False),
                   clock=clock)
    assert s == [4000, 4000]
    assert [c[0] for c in ctx.calls] == ["reset"] + ["decode"] * 4 + ["reset"] + ["decode"] * 4


# ------------------------------------------------------------------------------------------------
# roofline
# ------------------------------------------------------------------------------------------------

def test_read_bandwidth_probe_agrees_with_a_plain_numpy_read():
    """The probe's bytes per second against an independent measure of the same read (numpy's sum over the
    buffer, best of 5): within a factor of 3 either way (a probe off by a unit or a thread count is not)."""
    import time

    import numpy as np

    size = 64 << 20
    bw = B.read_bandwidth(1, size_bytes=size, repeats=3)
    a = np.ones(size // 8)
    best = min((lambda t0: (a.sum(), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(5))
    assert 1 / 3 < bw / (size / best) < 3, (bw, size / best)


def test_tg_bytes_per_token():
    # 2 layers, K and V rows of 128 values: f16 -> 2 * (256 + 256) bytes per filled cell; at depth 300 the
    # two generated tokens see 301 and 302 filled cells
    b = B.tg_bytes_per_token(1000, 2, 128, 128, "f16", "f16", n_depth=300, n_gen=2)
    assert b == 1000 + 2 * (128 * 2 + 128 * 2) * (301 + 302) / 2
    b = B.tg_bytes_per_token(1000, 1, 64, 64, "f32", "f32", n_depth=0, n_gen=1)
    assert b == 1000 + (64 * 4 + 64 * 4) * 1


def test_weight_bytes_per_token_tied_and_untied():
    for name, tied in (("tiny-qwen2-Q8_0", True), ("tiny-llama-Q4_K_M", False)):
        r = GGUFReader(TINY_MODELS / f"{name}.gguf")
        emb = r.tensor("token_embd.weight")
        n_vocab = emb.ne[1]
        row = emb.nbytes // n_vocab
        # tied: the table is read whole as the output head (plus the gathered row); untied: only the row
        want = B.model_size(r) + row if tied else B.model_size(r) - emb.nbytes + row
        assert B.weight_bytes_per_token(r, n_vocab) == want


# ------------------------------------------------------------------------------------------------
# the command
# ------------------------------------------------------------------------------------------------

def _invoke(args):
    return CliRunner().invoke(cli, ["bench", *args])


@pytest.mark.parametrize("args, needle", [
    ([], "no model given"),
    (["-m", "/nonexistent/model.gguf"], "file not found"),
    (["-m", str(TINY), "-t", "1,x"], "-t"),
    (["-m", str(TINY), "-t", "0"], "-t"),
    (["-m", str(TINY), "-t", "4-1"], "-t"),
    (["-m", str(TINY), "-t", "9999"], "-t"),
    (["-m", str(TINY), "-o", "xml"], "unknown output format"),
    (["-m", str(TINY), "-pg", "512"], "-pg"),
    (["-m", str(TINY), "-r", "0"], "-r"),
    (["-m", str(TINY), "-ctk", "q9_0"], "-ctk"),
    (["-m", str(TINY), "-p", "0", "-n", "0"], "no tests"),
    (["-m", str(TINY), "--compare", "/nonexistent/llama-bench"], "--compare"),
])
def test_bad_input_is_one_stderr_line(args, needle):
    r = _invoke(args)
    assert r.exit_code != 0
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_quantized_v_without_flash_attention_fails_as_llama_bench():
    """llama-bench prints its table header, then fails to create the context: one line on stderr, exit 1."""
    r = _invoke(["-m", str(TINY), "-ctv", "q8_0", "-fa", "off", "-p", "8", "-n", "0", "-r", "1", "--no-roofline"])
    assert r.exit_code == 1 and _md_rows(r.stdout)[0][-1] == "t/s" and len(_md_rows(r.stdout)) == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "quantized V cache requires flash_attn to be enabled" in lines[0]


def test_defaults_are_llama_bench_defaults(monkeypatch):
    seen = {}

    def fake_run(params, **kw):
        seen["p"] = params

    monkeypatch.setattr(B, "run_bench", fake_run)
    r = _invoke(["-m", str(TINY)])
    assert r.exit_code == 0, r.stderr
    p = seen["p"]
    assert [i.test_name for i in B.make_instances(p)] == ["pp512", "tg128"]
    assert (p.reps, p.output, p.n_batch, p.n_ubatch, p.cache_types, p.roofline) == (5, "md", [2048], [512],
                                                                                       [("f16", "f16")], True)
    assert len(p.n_threads) == 1 and p.n_threads[0] >= 1
    r = _invoke(["-m", f"{TINY},{TINY}", "-t", "1", "-t", "1-1", "-ctv", "f32", "-p", "8,16", "-pg", "4,2"])
    assert r.exit_code == 0, r.stderr
    p = seen["p"]
    assert p.models == [str(TINY)] * 2 and p.n_threads == [1, 1] and p.cache_types == [("f16", "f32")]
    assert p.flash_attn == [-1]  # auto
    assert p.n_prompt == [8, 16] and p.n_pg == [(4, 2)]


RUN = ["-m", str(TINY), "-r", "2", "-p", "16", "-n", "4", "-t", "1"]


def _md_rows(text):
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in rows]


@pytest.fixture(scope="module")
def tiny_runs():
    """One CLI run of the tiny model per output format (shared by the parse-back tests)."""
    out = {}
    for fmt in ("md", "json", "jsonl", "csv", "sql"):
        extra = ["--no-roofline"] if fmt in ("csv", "sql") else ["--probe-mib", "16"]
        r = _invoke(RUN + ["-o", fmt] + extra)
        assert r.exit_code == 0, r.stderr
        out[fmt] = r
    return out


def test_tiny_run_markdown(tiny_runs):
    r = tiny_runs["md"]
    rows = _md_rows(r.stdout)
    assert rows[0] == ["model", "size", "params", "backend", "threads", "test", "t/s", "roofline"]
    assert [row[5] for row in rows[2:]] == ["pp16", "tg4"]
    desc = B.model_desc(GGUFReader(TINY))
    for row in rows[2:]:
        assert row[0] == desc and row[3] == "CPU" and row[4] == "1"
        assert re.fullmatch(r"\d+\.\d\d ± \d+\.\d\d", row[6])
    assert rows[2][7] == "-" and re.fullmatch(r"\d+\.\d%", rows[3][7])
    assert re.search(r"^build: \S+ \(0\)$", r.stdout, re.M)
    # column widths are llama-bench's: every line of the table has the same length
    table = [line for line in r.stdout.splitlines() if line.startswith("|")]
    assert len({len(line.encode()) - line.count("±") for line in table}) == 1


def test_tiny_run_json_and_jsonl(tiny_runs):
    fixture_keys = list(json.loads(BENCH_JSON[0].read_text())[0])
    for fmt in ("json", "jsonl"):
        text = tiny_runs[fmt].stdout
        objs = json.loads(text) if fmt == "json" else [json.loads(line) for line in text.splitlines()]
        assert len(objs) == 2
        for o in objs:
            assert list(o)[: len(fixture_keys)] == fixture_keys
            assert list(o)[len(fixture_keys):] == B.ROOFLINE_FIELDS
            assert o["model_filename"] == str(TINY) and o["n_threads"] == 1 and o["backends"] == "CPU"
            assert len(o["samples_ns"]) == 2 and len(o["samples_ts"]) == 2
            assert o["avg_ns"] == sum(o["samples_ns"]) // 2
            n = o["n_prompt"] + o["n_gen"]
            assert o["avg_ts"] == pytest.approx(sum(1e9 * n / t for t in o["samples_ns"]) / 2, rel=1e-6)
            assert o["model_size"] == B.model_size(GGUFReader(TINY))
        assert [(o["n_prompt"], o["n_gen"]) for o in objs] == [(16, 0), (0, 4)]
        assert objs[0]["roofline_pct"] is None and objs[1]["roofline_pct"] > 0
        tg = objs[1]
        assert tg["roofline_pct"] == pytest.approx(
            100 * tg["roofline_bytes_per_token"] * tg["avg_ts"] / tg["roofline_read_bw"], rel=1e-4)


def test_tiny_run_csv_and_sql(tiny_runs):
    recs = list(csv.DictReader(io.StringIO(tiny_runs["csv"].stdout)))
    assert list(recs[0]) == B.FIELDS  # --no-roofline: exactly llama-bench's columns
    assert [(x["n_prompt"], x["n_gen"]) for x in recs] == [("16", "0"), ("0", "4")]
    db = sqlite3.connect(":memory:")
    db.executescript(tiny_runs["sql"].stdout)
    got = db.execute("SELECT n_prompt, n_gen, n_threads, type_k, avg_ns > 0 FROM llama_bench").fetchall()
    assert got == [(16, 0, 1, "f16", 1), (0, 4, 1, "f16", 1)]


def test_progress_goes_to_stderr():
    r = _invoke(["-m", str(TINY), "-r", "1", "-p", "8", "-n", "0", "-t", "1", "--progress", "--no-roofline",
                 "-d", "4"])
    assert r.exit_code == 0, r.stderr
    assert "synapse-bench: benchmark 1/1: starting" in r.stderr
    assert "depth run 1/1" in r.stderr and "prompt run 1/1" in r.stderr
    assert "synapse-bench" not in r.stdout
    assert [row[5] for row in _md_rows(r.stdout)[2:]] == ["pp8 @ d4"]


STUB = """#!{python}
import json, sys
args = sys.argv[1:]
open({log!r}, "a").write(json.dumps(args) + "\\n")
rows = json.load(open({fixture!r}))
for row in rows:
    row["model_filename"] = args[args.index("-m") + 1]
print(json.dumps(rows, indent=2))
"""


def test_compare_runs_llama_bench_with_same_parameters(tmp_path):
    fixture = BENCH / "SmolLM2-135M-Instruct.Q4_1__t1.json"  # pp128 and tg32 at 1 thread
    log = tmp_path / "argv.json"
    stub = tmp_path / "llama-bench"
    stub.write_text(STUB.format(python=sys.executable, log=str(log), fixture=str(fixture)))
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    args = ["-m", str(TINY), "-p", "128", "-n", "32", "-t", "1", "-r", "1", "--no-roofline", "--compare", str(stub)]
    r = _invoke(args + ["-o", "json"])
    assert r.exit_code == 0, r.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    # one llama-bench run per row, right after synapse's run of that row, with that row's test only
    assert [(c[c.index("-p") + 1], c[c.index("-n") + 1]) for c in calls] == [("128", "0"), ("0", "32")]
    for argv in calls:
        pairs = dict(zip(argv[::2], argv[1::2]))  # every llama-bench flag here takes one value
        assert pairs["-m"] == str(TINY) and pairs["-t"] == "1" and pairs["-d"] == "0" and pairs["-ub"] == "512"
        assert pairs["-r"] == "1" and pairs["-o"] == "json" and pairs["-fa"] == "auto" and pairs["-ctk"] == "f16"
    ref = {(x["n_prompt"], x["n_gen"]): x["avg_ts"] for x in json.loads(fixture.read_text())}
    ours = json.loads(r.stdout)
    for o in ours:
        want = ref[(o["n_prompt"], o["n_gen"])]
        assert o["llamacpp_avg_ts"] == pytest.approx(want, rel=1e-6)
        assert o["vs_llamacpp"] == pytest.approx(o["avg_ts"] / want, rel=1e-5)
    r = _invoke(args)
    assert r.exit_code == 0, r.stderr
    rows = _md_rows(r.stdout)
    assert rows[0][-1] == "vs llama.cpp"
    assert len(rows) == 4 and all(re.fullmatch(r"\d+\.\d\dx", row[-1]) for row in rows[2:])


def test_compare_runs_each_row_alone():
    """The llama-bench command line of each row (-p, -n, -pg, depth, threads, model) selects exactly that row."""
    from synapse_cli.bench.compare import llama_bench_args, row_params

    p = B.BenchParams(models=["a.gguf", "b.gguf"], n_threads=[1, 2], n_prompt=[128], n_gen=[32], n_pg=[(64, 16)],
                      n_depth=[0, 256])
    insts = B.make_instances(p)
    assert len(insts) == 2 * 2 * 2 * 3
    for inst in insts:
        argv = llama_bench_args(row_params(p, inst))
        pairs = dict(zip(argv[::2], argv[1::2]))
        pg = (inst.n_prompt, inst.n_gen) if inst.n_prompt and inst.n_gen else None
        assert (pairs["-m"], pairs["-t"], pairs["-d"]) == (inst.model, str(inst.n_threads), str(inst.n_depth))
        assert pairs.get("-pg") == (f"{pg[0]},{pg[1]}" if pg else None)
        assert (pairs["-p"], pairs["-n"]) == (("0", "0") if pg else (str(inst.n_prompt), str(inst.n_gen)))
        assert B.make_instances(row_params(p, inst)) == [inst]


def test_compare_failure_is_one_line(tmp_path):
    stub = tmp_path / "llama-bench"
    stub.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(3)\n")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    r = _invoke(["-m", str(TINY), "-p", "8", "-n", "0", "--compare", str(stub)])
    assert r.exit_code != 0 and len(r.stderr.strip().splitlines()) == 1 and "status 3" in r.stderr


def test_flash_attention_is_a_dimension_of_the_matrix():
    """-fa off,on: llama-bench's loop order (..., type_v, flash_attn, threads, depth), the fa column in md,
    llama_flash_attn_type in the fields (0 off, 1 on)."""
    r = _invoke(["-m", str(TINY), "-r", "1", "-p", "8", "-n", "2", "-t", "1", "--no-roofline", "-fa", "off,on",
                 "-o", "json"])
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["flash_attn"], x["n_prompt"], x["n_gen"]) for x in rows] == [(0, 8, 0), (0, 0, 2), (1, 8, 0), (1, 0, 2)]
    r = _invoke(["-m", str(TINY), "-r", "1", "-p", "8", "-n", "0", "-t", "1", "--no-roofline", "-fa", "on"])
    assert r.exit_code == 0 and " fa |" in r.stdout.splitlines()[0]
    r = _invoke(["-m", str(TINY), "-r", "1", "-p", "8", "-n", "0", "-fa", "maybe"])
    assert r.exit_code != 0 and "-fa" in r.stderr


def test_load_mode_is_a_dimension_of_the_matrix(monkeypatch):
    """-lm auto,none: llama-bench's loop order (model, load mode, ...), one model load per (model, mode) (none:
    the weights read into memory, use_mmap=False), the load_mode column in md and field in json, -lm on the
    llama-bench command line of each compared row."""
    from synapse_cli.bench.compare import llama_bench_args, row_params

    loads = spy_model_loads(monkeypatch)
    p = B.BenchParams(models=["a.gguf", "b.gguf"], n_threads=[2], n_prompt=[8], n_gen=[2], load_mode=["auto", "none"])
    insts = B.make_instances(p)
    assert [(i.model, i.load_mode, i.test_name) for i in insts] == [
        ("a.gguf", "auto", "pp8"), ("a.gguf", "auto", "tg2"), ("a.gguf", "none", "pp8"), ("a.gguf", "none", "tg2"),
        ("b.gguf", "auto", "pp8"), ("b.gguf", "auto", "tg2"), ("b.gguf", "none", "pp8"), ("b.gguf", "none", "tg2")]
    for inst in insts:
        argv = llama_bench_args(row_params(p, inst))
        assert dict(zip(argv[::2], argv[1::2])).get("-lm") == (None if inst.load_mode == "auto" else inst.load_mode)
    r = _invoke(["-m", str(TINY), "-r", "1", "-p", "8", "-n", "2", "-t", "1", "--no-roofline", "-lm", "auto,none",
                 "-o", "json"])
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["load_mode"], x["n_prompt"], x["n_gen"]) for x in rows] == [
        ("auto", 8, 0), ("auto", 0, 2), ("none", 8, 0), ("none", 0, 2)]
    assert loads == [True, False]
    r = _invoke(["-m", str(TINY), "-r", "1", "-p", "8", "-n", "0", "-t", "1", "--no-roofline", "-lm", "none"])
    assert r.exit_code == 0 and " lm |" in r.stdout.splitlines()[0]  # (llama-bench's display name)
    r = _invoke(["-m", str(TINY), "-r", "1", "-p", "8", "-n", "0", "-lm", "lazy"])
    assert r.exit_code != 0 and "-lm" in r.stderr


def test_repack_and_the_gpu_and_placement_parameters_as_llama_bench(monkeypatch):
    """--repack 0 loads the weights as stored (a dimension, after -lm); -ngl, -mg, -sm, -nkvo, --poll, -C, ... change
    nothing on a CPU build but are accepted with a note, their values reach the results and the table gets the
    columns llama-bench printed for the same command line (tests/reference/bench/tiny-llama__cpu_ignored.*)."""
    ref = Path(__file__).resolve().parent / "reference" / "bench"
    flags = ["-p", "8", "-n", "0", "-r", "1", "-lm", "none", "-fa", "off", "--repack", "0", "-ngl", "99", "-mg", "1",
             "-nkvo", "1", "--poll", "0", "-sm", "row", "-C", "0x3", "--cpu-strict", "1", "-nopo", "1", "--no-host", "1"]
    loads = []
    real = B.runner._default_load
    monkeypatch.setattr(B.runner, "_default_load", lambda *a: loads.append(a[3]) or real(*a))
    r = _invoke(["-m", str(TINY), *flags, "--no-roofline"])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[:2] == (ref / "tiny-llama__cpu_ignored.md").read_text().splitlines()[:2]
    assert "note: -ngl is ignored" in r.stderr and loads == [False]
    ours = json.loads(_invoke(["-m", str(TINY), *flags, "--no-roofline", "-o", "json"]).stdout)[0]
    theirs = json.loads((ref / "tiny-llama__cpu_ignored.json").read_text())[0]
    keys = ("n_gpu_layers", "main_gpu", "split_mode", "no_kv_offload", "poll", "cpu_mask", "cpu_strict",
            "no_op_offload", "no_host", "repack", "load_mode", "flash_attn")
    assert {k: ours[k] for k in keys} == {k: theirs[k] for k in keys}
    for bad in (["-sm", "rows"], ["--repack", "2"], ["-dev", "CPU"], ["-ot", "x=GPU"], ["-ts", "a"], ["-embd", "2"]):
        r = _invoke(["-m", str(TINY), "-p", "8", "-n", "0", "-r", "1", *bad])
        assert r.exit_code != 0 and bad[0] in r.stderr, r.stderr


def test_gpu_parameter_lists_and_embeddings_as_llama_bench(monkeypatch):
    """Lists of the GPU parameters run every test once per value, in llama-bench's loop order, with its columns and
    cells (-dev, -ts, -ot too): the table llama-bench printed for the same command line but its t/s
    (tests/reference/bench/tiny-llama__lists.md). -embd 1 makes every prompt token an output."""
    ref = (Path(__file__).resolve().parent / "reference" / "bench" / "tiny-llama__lists.md").read_text().splitlines()
    flags = ["-p", "8", "-n", "0", "-r", "1", "-t", "1", "-ngl", "0,99", "-mg", "1", "-ts", "1;2,3", "-dev", "none",
             "-ot", "exps=CPU", "-embd", "0,1"]
    from synapse_cli.model import Context

    rows = []  # per prompt batch: how many logit rows decode returned
    real = Context.decode
    monkeypatch.setattr(Context, "decode", lambda self, t, *a, **k: rows.append(
        len(np.atleast_2d(out := real(self, t, *a, **k)))) or out)
    r = _invoke(["-m", str(TINY_MODELS / "tiny-llama-Q8_0.gguf"), *flags, "--no-roofline"])
    assert r.exit_code == 0, r.stderr
    assert rows == [1, 1, 8, 8] * 4  # (warm-up and timed run; -embd 0, 1)
    ours = [line for line in r.stdout.splitlines() if line.startswith("|")]
    theirs = [line for line in ref if line.startswith("|")]
    assert ours[:2] == theirs[:2] and len(ours) == len(theirs) == 10
    assert [line.rsplit("|", 2)[0] for line in ours[2:]] == [line.rsplit("|", 2)[0] for line in theirs[2:]]
