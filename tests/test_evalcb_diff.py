"""`synapse eval-callback diff`: alignment, tolerance, exit codes and JSON, on llama.cpp's fixture logs and
copies of them perturbed in known places."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from synapse_cli import evalcb
from synapse_cli.cli import cli

from conftest import FIXTURES

EVALCB = FIXTURES / "tiny" / "evalcb"
LOG32 = EVALCB / "tiny-llama-F32__pub__kvf32.log"
LOG16 = EVALCB / "tiny-llama-F32__pub__kvf16.log"
REAL = FIXTURES / "real" / "evalcb" / "SmolLM2-135M-Instruct.Q4_1__pub.log"

pytestmark = pytest.mark.skipif(not LOG32.exists(), reason="fixtures not present")


def run_diff(*args):
    result = CliRunner().invoke(cli, ["eval-callback", "diff", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def diff_json(*args):
    r = run_diff(*args, "--json")
    return r.exit_code, json.loads(r.stdout)


def header_index(lines, name, occurrence=-1):
    heads = [k for k, ln in enumerate(lines)
             if ln.startswith(("common_debug_cb_eval:", "ggml_debug:"))
             and ln.split(" = (", 1)[0].split(":", 1)[1].strip() == name]
    return heads[occurrence]


def shift_sum(text, name, delta, occurrence=-1):
    """The log with `delta` added to the printed sum of one occurrence of a tensor."""
    lines = text.splitlines(keepends=True)
    j = header_index(lines, name, occurrence) + 1
    while not lines[j].lstrip().startswith("sum = "):
        j += 1
    lines[j] = "    sum = %f\n" % (float(lines[j].split("=")[1]) + delta)
    return "".join(lines)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_log_against_itself_is_all_within():
    code, d = diff_json(LOG32, LOG32)
    assert code == 0
    assert d["n_compared"] == d["n_within"] > 0 and d["first_divergence"] is None and d["max_rel_diff"] == 0
    assert d["only_a"] == [] and d["only_b"] == []
    # one row per distinct name (last occurrence)
    names = [r.name for r in evalcb.load_trace(LOG32)]
    assert d["n_compared"] == len(set(names))
    r = run_diff(LOG32, LOG32)
    assert r.exit_code == 0
    assert f"no divergence; {len(set(names))} of {len(set(names))} tensors within 1e-4" in r.stdout
    assert "last occurrence" in r.stdout


@pytest.mark.skipif(not REAL.exists(), reason="real fixture logs not present")
def test_real_log_against_itself():
    recs = evalcb.load_trace(REAL)
    d = evalcb.diff_traces(recs, recs)
    assert d.ok and d.n_compared == len({r.name for r in recs})


def bound(r):
    """An upper bound of the scale a sum is compared against: |sum| + sqrt(N) * max|printed value|."""
    return abs(r.sum) + math.sqrt(r.n_elements) * float(np.max(np.abs(r.shown)))


def test_perturbed_copy_names_the_first_perturbed_tensor(tmp_path):
    text = LOG32.read_text()
    recs = {r.name: r for r in evalcb.load_trace(LOG32)}
    d_ffn = 2e-3 * bound(recs["ffn_out-0"])  # rel >= 2e-3
    bad = write(tmp_path, "b.log", shift_sum(shift_sum(text, "l_out-1", 10 * bound(recs["l_out-1"])), "ffn_out-0", d_ffn))
    code, d = diff_json(LOG32, bad)
    assert code == 1
    assert d["first_divergence"] == "ffn_out-0"
    assert [t["name"] for t in d["tensors"] if not t["within"]] == ["ffn_out-0", "l_out-1"]
    assert d["n_within"] == d["n_compared"] - 2
    row = next(t for t in d["tensors"] if t["name"] == "ffn_out-0")
    assert abs(row["sum_b"] - row["sum_a"] - d_ffn) < 2e-6 and 2e-3 <= row["rel_diff"] < 1e-2
    assert d["max_rel_diff"] == max(t["rel_diff"] for t in d["tensors"]) > 1
    r = run_diff(LOG32, bad)
    assert r.exit_code == 1
    assert f"first divergence: ffn_out-0 (rel {row['rel_diff']:.1e}); {d['n_within']} of {d['n_compared']} tensors within 1e-4" in r.stdout
    # a looser tolerance accepts the small shift but not the large one
    code, d = diff_json(LOG32, bad, "--tolerance", "1e-2")
    assert code == 1 and d["first_divergence"] == "l_out-1"


def test_divergence_from_a_build_without_avx512_is_explained(tmp_path, monkeypatch):
    """A log whose system_info line lacks AVX512 (a llama.cpp built on an AVX2 machine) gets a note on why it
    differs in the last bits; an AVX-512 build's log and a clean comparison do not. Logs without system_info
    (stdout only) get one note where this CPU has no AVX-512."""
    text = LOG32.read_text()
    assert "AVX512 = 1" in text
    recs = {r.name: r for r in evalcb.load_trace(LOG32)}
    diverged = shift_sum(text, "ffn_out-0", 2e-3 * bound(recs["ffn_out-0"]))
    avx2 = write(tmp_path, "avx2.log", diverged.replace("AVX512 = 1 | ", "").replace("AVX512_", "X_"))
    avx512 = write(tmp_path, "avx512.log", diverged)
    no_info = "".join(ln for ln in text.splitlines(keepends=True) if "system_info" not in ln)
    bare = write(tmp_path, "bare.log", no_info)
    bare_diverged = write(tmp_path, "bare2.log", shift_sum(no_info, "ffn_out-0", 2e-3 * bound(recs["ffn_out-0"])))
    assert evalcb.build_cpu_features(avx2) >= {"AVX2", "FMA"} and "AVX512" not in evalcb.build_cpu_features(avx2)
    assert evalcb.build_cpu_features(bare) is None
    for host in (True, False):
        monkeypatch.setattr(evalcb, "host_has_avx512", lambda: host)
        r = run_diff(LOG32, avx2)
        assert r.exit_code == 1
        assert "avx2.log comes from a llama.cpp build without AVX-512" in r.stdout.replace("\n", " ")
        code, d = diff_json(LOG32, avx2)
        assert len(d["notes"]) == 1 and "avx2.log" in d["notes"][0]
        assert diff_json(LOG32, avx512)[1]["notes"] == []
        assert diff_json(avx2, avx2)[1]["notes"] == []  # nothing to explain
        notes = diff_json(bare, bare_diverged)[1]["notes"]
        assert notes == ([] if host else [evalcb.build_notes([("x", None)], False)[0]])


def test_permuted_printed_values_are_a_divergence_even_with_equal_sums(tmp_path):
    lines = LOG32.read_text().splitlines(keepends=True)
    k = header_index(lines, "kqv_out-1") + 3  # first row of the block
    orig = lines[k]
    cells = orig.split(",")
    cells[0], cells[1] = "            [" + cells[1].strip().rjust(12), " " + cells[0].split("[", 1)[1]
    lines[k] = ",".join(cells)  # the first two printed values swapped: same sum, other layout
    assert lines[k] != orig and len(lines[k]) == len(orig) and sorted(lines[k]) == sorted(orig)
    bad = write(tmp_path, "b.log", "".join(lines))
    code, d = diff_json(LOG32, bad)
    assert code == 1 and d["first_divergence"] == "kqv_out-1"
    row = next(t for t in d["tensors"] if t["name"] == "kqv_out-1")
    assert row["rel_diff"] == 0 and row["max_abs_val_diff"] > 1e-3 and "printed values differ" in row["note"]


def test_repeated_names_compare_the_last_occurrence_unless_asked(tmp_path):
    text = LOG32.read_text()
    assert text.count("common_debug_cb_eval:                   Qcur-0 = ") == 3  # MUL_MAT, RESHAPE, ROPE
    bad = write(tmp_path, "b.log", shift_sum(text, "Qcur-0", 1.0, occurrence=0))  # the MUL_MAT only
    code, d = diff_json(LOG32, bad)
    assert code == 0 and d["repeated"]["Qcur-0"] == [3, 3]
    assert next(t for t in d["tensors"] if t["name"] == "Qcur-0")["occurrence"] == "3/3"
    code, d = diff_json(LOG32, bad, "--occurrence", "all")
    assert code == 1 and d["first_divergence"] == "Qcur-0"
    assert [t["occurrence"] for t in d["tensors"] if t["name"] == "Qcur-0"] == ["1/3", "2/3", "3/3"]
    assert d["n_compared"] == len(evalcb.load_trace(LOG32))


def test_tensors_on_one_side_only_are_listed(tmp_path):
    lines = LOG32.read_text().splitlines(keepends=True)
    k = header_index(lines, "node_65")
    end = k + 1
    while not lines[end].startswith("common_debug_cb_eval:"):
        end += 1
    del lines[k:end]
    text = "".join(lines).replace("                 ffn_up-1 = ", "               ffn_up_x-1 = ")
    b = write(tmp_path, "b.log", text)
    code, d = diff_json(LOG32, b)
    assert d["only_a"] == ["node_65", "ffn_up-1"] and d["only_b"] == ["ffn_up_x-1"]
    assert code == 0  # every tensor present on both sides agrees
    r = run_diff(LOG32, b)
    assert "only in A (2): node_65, ffn_up-1" in r.stdout and "only in B (1): ffn_up_x-1" in r.stdout
    # nothing in common is not a success
    renamed = write(tmp_path, "c.log", LOG32.read_text().replace("common_debug_cb_eval: ", "common_debug_cb_eval: z"))
    r = run_diff(LOG32, renamed)
    assert r.exit_code == 1 and "no tensor in common" in r.stdout


def test_json_fields():
    code, d = diff_json(LOG32, LOG16)
    assert code == 1
    assert {"tensors", "only_a", "only_b", "n_compared", "n_within", "max_rel_diff", "first_divergence"} <= set(d)
    for t in d["tensors"]:
        assert {"name", "op", "shape", "sum_a", "sum_b", "rel_diff", "within"} <= set(t)
        assert isinstance(t["within"], bool) and len(t["shape"]) == 4
    assert d["n_within"] == sum(t["within"] for t in d["tensors"])
    # F16 vs F32 KV cache: identical up to the first write to the cache, and they part at a cache tensor
    names = [t["name"] for t in d["tensors"]]
    first_cache = next(k for k, n in enumerate(names) if n.startswith("cache_") and d["tensors"][k]["rel_diff"] != 0)
    assert first_cache > 0 and all(t["rel_diff"] == 0 and t["within"] for t in d["tensors"][:first_cache])
    assert d["first_divergence"].startswith("cache_")


def test_other_formats_of_the_same_trace_agree(tmp_path):
    recs = evalcb.load_trace(LOG32)
    jl = write(tmp_path, "t.jsonl", "".join(json.dumps(evalcb.record_to_json(r)) + "\n" for r in recs))
    assert diff_json(LOG32, jl)[0] == 0
    old = "".join(
        ln.replace("common_debug_cb_eval: ", "ggml_debug: ").replace("   ..., ", "..., ").replace("  ],", "],")
        for ln in LOG32.read_text().splitlines(keepends=True)
    )
    code, d = diff_json(write(tmp_path, "old.log", old), LOG32)
    assert code == 0 and d["n_compared"] == d["n_within"] > 0


def test_2024_log_with_sums_of_printed_elements(tmp_path):
    """Old eval-callback summed only the printed elements; such a log is compared on that quantity."""
    lines = LOG32.read_text().splitlines(keepends=True)
    out, running = [], np.float32(0)
    for ln in lines:
        if ln.startswith("common_debug_cb_eval:"):
            running = np.float32(0)
            ln = ln.replace("common_debug_cb_eval:", "ggml_debug:")
        elif ln.startswith("            [") and ln.rstrip().endswith("],"):
            for t in ln.strip()[1:-2].split(","):
                if t.strip() and t.strip() != "...":
                    running = np.float32(running + np.float32(float(t)))
        elif ln.startswith("    sum = "):
            ln = "    sum = %f\n" % float(running)
        out.append(ln)
    old = write(tmp_path, "old.log", "".join(out))
    assert all(r.sum_kind == "printed" for r in evalcb.load_trace(old))
    code, d = diff_json(LOG32, old)
    assert code == 0 and d["n_within"] == d["n_compared"] > 0
    assert any("printed elements" in t["note"] for t in d["tensors"])
    code, d = diff_json(write(tmp_path, "old2.log", shift_sum("".join(out), "kqv-1", 0.01)), LOG32)
    assert code == 1 and d["first_divergence"] == "kqv-1"


def test_unreadable_input_exits_2_with_one_stderr_line(tmp_path):
    cases = [tmp_path / "missing.log", write(tmp_path, "junk.log", "no tensors here\n")]
    lines = LOG32.read_text().splitlines(keepends=True)
    k = header_index(lines, "embd") + 3
    lines[k] = lines[k].replace(",", " ", 1)  # a row that does not parse
    cases.append(write(tmp_path, "broken.log", "".join(lines)))
    for bad in cases:
        for args in ((bad, LOG32), (LOG32, bad)):
            r = run_diff(*args)
            assert r.exit_code == 2, (bad, r.stdout)
            assert r.stdout == "" and r.stderr.count("\n") == 1 and r.stderr.startswith("Error: ")
            assert bad.name in r.stderr


def test_usage_errors_exit_2():
    assert run_diff(LOG32).exit_code == 2
    assert run_diff("--model", LOG32, LOG32, LOG32).exit_code == 2  # --model needs --prompt and one trace
    assert run_diff(LOG32, LOG32, "--tolerance", "-1").exit_code == 2


# ------------------------------------------------------------------------------------------------
# the tolerance rule on constructed records


def rec(values, ne, s=None, name="t"):
    v = np.asarray(values, dtype=np.float32).reshape(tuple(reversed(ne)))
    r = evalcb.record_from_array(name, "ADD", v, [("a", ne)], "f32")
    if s is not None:
        r.sum = s
    return r


def test_floor_for_near_zero_sums():
    rng = np.random.default_rng(0)
    ne = (256, 7, 1, 1)
    v = rng.choice([-0.5, 0.5], size=256 * 7)  # sqrt(N) * rms = sqrt(1792) * 0.5 ~ 21
    a, b = rec(v, ne, 0.001), rec(v, ne, 0.003)
    t = evalcb.compare_records(a, b, 1e-4)
    # a plain relative difference would be 0.67; against the cancellation floor it is ~1e-4
    assert t.rel_diff == pytest.approx(0.002 / math.sqrt(1792 * 0.25), rel=1e-6) and t.within
    # a sum well above the floor is compared relatively
    t = evalcb.compare_records(rec(v, ne, 100.0), rec(v, ne, 100.02), 1e-4)
    assert t.rel_diff == pytest.approx(0.02 / 100.02) and not t.within
    # all-zero tensors: the resolution of `sum = %f` (1e-6) is never a divergence at the default tolerance
    z = np.zeros(128)
    t = evalcb.compare_records(rec(z, (128, 1, 1, 1), 0.0), rec(z, (128, 1, 1, 1), 1e-6), 1e-4)
    assert t.within and t.rel_diff == pytest.approx(1e-6 / (1e-6 / 1e-4))
    t = evalcb.compare_records(rec(z, (128, 1, 1, 1), 0.0), rec(z, (128, 1, 1, 1), 1e-3), 1e-4)
    assert not t.within


def test_nan_and_shape_mismatch():
    ne = (4, 1, 1, 1)
    n1, n2 = rec([1, 2, 3, 4], ne, math.nan), rec([1, 2, 3, 4], ne, math.nan)
    assert evalcb.compare_records(n1, n2, 1e-4).within
    t = evalcb.compare_records(n1, rec([1, 2, 3, 4], ne), 1e-4)
    assert not t.within and math.isinf(t.rel_diff)
    d = evalcb.diff_traces([n1], [rec([1, 2, 3, 4], ne, name="t")]).to_json()
    assert d["tensors"][0]["rel_diff"] is None and d["first_divergence"] == "t"
    t = evalcb.compare_records(rec([1, 2, 3, 4], ne), rec([1, 2, 3, 4], (2, 2, 1, 1)), 1e-4)
    assert not t.within and "shape" in t.note
