"""`synapse inspect-gguf` against gguf-dump: the fixture dumps of llama.cpp's build for the real models,
gguf-py's own dump functions run live on every tiny model, vocab file and a synthetic edge-case file,
and the summary against llama.cpp's `print_info` lines in the eval-callback logs.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, REAL_MODELS, REPO, TINY_MODELS, VOCABS, real_model_path
from gguf.scripts import gguf_dump
from synapse_cli.cli import cli
from synapse_cli.commands.inspect_gguf import command, model_summary
from kernels.gguf import GGUFReader
from test_gguf_reader import VT, gguf_bytes, gguf_py_reader, kv, tensor_info
from kernels.ggml_type import GGMLType

TINY_FILES = sorted(TINY_MODELS.glob("*.gguf"))
VOCAB_FILES = sorted(VOCABS.glob("*.gguf"))


def run(*args: str):
    result = CliRunner().invoke(command, [str(a) for a in args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def assert_same_lines(ours: str, expected: str) -> None:
    """Line by line first (a readable failure), then byte for byte."""
    a, b = ours.split("\n"), expected.split("\n")
    for i, (x, y) in enumerate(zip(a, b)):
        assert x == y, f"line {i + 1} differs"
    assert len(a) == len(b)
    assert ours == expected


def gguf_dump_output(reader, fn, model: str, no_tensors: bool = False, json_array: bool = False) -> str:
    """Run one of gguf-py's dump functions (gguf/scripts/gguf_dump.py) and capture what it prints."""
    args = argparse.Namespace(model=model, no_tensors=no_tensors, json_array=json_array)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(reader, args)
    return buf.getvalue()


# --- the gguf-dump fixtures of the real models --------------------------------------------------------


@pytest.mark.real
@pytest.mark.parametrize("name", REAL_MODELS)
def test_real_model_text_matches_fixture(name, monkeypatch):
    real_model_path(name)
    monkeypatch.chdir(REPO)
    expected = (FIXTURES / "real" / "gguf-dump" / (Path(name).stem + ".txt")).read_text()
    assert_same_lines(run(f"models/{name}").stdout, expected)


@pytest.mark.real
@pytest.mark.parametrize("name", REAL_MODELS)
def test_real_model_json_matches_fixture(name, monkeypatch):
    real_model_path(name)
    monkeypatch.chdir(REPO)  # the fixture's "filename" is the path as given: models/<name>
    raw = (FIXTURES / "real" / "gguf-dump" / (Path(name).stem + ".json")).read_text()
    out = run("--json", f"models/{name}").stdout
    ours, expected = json.loads(out), json.loads(raw)
    assert ours.keys() == expected.keys()
    assert (ours["filename"], ours["endian"]) == (expected["filename"], expected["endian"])
    assert list(ours["metadata"]) == list(expected["metadata"])
    for key, d in expected["metadata"].items():
        assert ours["metadata"][key] == d, key
    assert list(ours["tensors"]) == list(expected["tensors"])
    for key, d in expected["tensors"].items():
        assert ours["tensors"][key] == d, key
    assert out == raw


# --- gguf-py's dump functions, live --------------------------------------------------------------


def _compare_all_modes(path: Path) -> None:
    reader = gguf_py_reader(path)
    model = str(path)
    assert_same_lines(run(path).stdout, gguf_dump_output(reader, gguf_dump.dump_metadata, model))
    assert_same_lines(run("--no-tensors", path).stdout,
                      gguf_dump_output(reader, gguf_dump.dump_metadata, model, no_tensors=True))
    for flags, json_array in ((["--json"], False), (["--json", "--json-array"], True)):
        out = run(*flags, path).stdout
        expected = gguf_dump_output(reader, gguf_dump.dump_metadata_json, model, json_array=json_array)
        if out != expected:  # point at the first differing key (dumps again: NaN != NaN after loads)
            ours, theirs = json.loads(out), json.loads(expected)
            for section in ("metadata", "tensors"):
                for key, value in theirs[section].items():
                    assert json.dumps(ours[section].get(key)) == json.dumps(value), (section, key)
        assert out == expected
    assert_same_lines(run("--markdown", path).stdout,
                      gguf_dump_output(reader, gguf_dump.dump_markdown_metadata, model))
    assert_same_lines(run("--markdown", "--no-tensors", path).stdout,
                      gguf_dump_output(reader, gguf_dump.dump_markdown_metadata, model, no_tensors=True))
    assert run("--data-offset", path).stdout == f"{reader.data_offset}\n"
    assert run("--data-alignment", path).stdout == f"{reader.alignment}\n"


@pytest.mark.parametrize("path", TINY_FILES + VOCAB_FILES, ids=lambda p: p.name)
def test_matches_gguf_dump_live(path):
    _compare_all_modes(path)


@pytest.mark.real
def test_smollm2_markdown_matches_gguf_dump_live():
    path = real_model_path(REAL_MODELS[0])
    reader = gguf_py_reader(path)
    assert_same_lines(run("--markdown", path).stdout,
                      gguf_dump_output(reader, gguf_dump.dump_markdown_metadata, str(path)))


def test_edge_cases_match_gguf_dump_live(tmp_path):
    """Nested and empty arrays, long strings with backticks, every scalar type, 0-d and empty tensors."""
    long = "`tick` " + "x" * 80 + " end``"
    kvs = [
        kv("general.architecture", VT.STRING, "llama"),
        kv("s.long", VT.STRING, long),
        kv("s.ticks", VT.STRING, "`a`"),
        kv("s.unicode", VT.STRING, "▁日本語 ü\n\t'\"" * 8),
        kv("v.u8", VT.UINT8, 200), kv("v.i8", VT.INT8, -3), kv("v.u16", VT.UINT16, 60000),
        kv("v.i16", VT.INT16, -300), kv("v.u32", VT.UINT32, 4_000_000_000), kv("v.i32", VT.INT32, -7),
        kv("v.f32", VT.FLOAT32, 1e-5), kv("v.f32_nan", VT.FLOAT32, float("nan")), kv("v.bool", VT.BOOL, False),
        kv("v.u64", VT.UINT64, 2**64 - 1), kv("v.i64", VT.INT64, -(2**63)), kv("v.f64", VT.FLOAT64, 0.1),
        kv("a.f32", VT.ARRAY, (VT.FLOAT32, [0.1, 2.5, -1e-5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])),
        kv("a.bool", VT.ARRAY, (VT.BOOL, [True, False])),
        kv("a.str_long", VT.ARRAY, (VT.STRING, ["short", "y" * 40 + "`", "z", "w", "v", "u", "t"])),
        kv("a.empty", VT.ARRAY, (VT.INT32, [])),
        kv("a.empty_str", VT.ARRAY, (VT.STRING, [])),
        kv("n.ints", VT.ARRAY, (VT.ARRAY, [(VT.INT32, [1, 2, 3]), (VT.INT32, [4, 5, 6, 7, 8])])),
        kv("n.strs", VT.ARRAY, (VT.ARRAY, [(VT.STRING, ["p", "q"]), (VT.STRING, ["r"])])),
        kv("n.deep", VT.ARRAY, (VT.ARRAY, [(VT.ARRAY, [(VT.UINT8, [9, 8])])])),
        kv("n.first_empty", VT.ARRAY, (VT.ARRAY, [(VT.UINT16, []), (VT.UINT16, [5])])),
        kv("n.none", VT.ARRAY, (VT.ARRAY, [])),
    ]
    infos = [
        tensor_info("token_embd.weight", (32, 4), GGMLType.Q8_0, 0),
        tensor_info("blk.0.attn_q.weight", (8, 8), GGMLType.F16, 160),
        tensor_info("blk.0.attn_q.bias", (), GGMLType.F32, 288),
        tensor_info("blk.1.ffn_up.weight", (0, 3), GGMLType.F32, 320),
        tensor_info("enc.blk.0.x", (4,), GGMLType.I32, 320),
        tensor_info("dec.output", (2, 2), GGMLType.F64, 352),
    ]
    path = tmp_path / "edge.gguf"
    path.write_bytes(gguf_bytes(kvs, infos, bytes(range(256)) * 2))
    _compare_all_modes(path)


def test_guessed_file_type_uses_llama_cpps_tensor_order(tmp_path):
    """Without general.file_type both inspect-gguf and bench take llama-model-loader's guess: the most frequent
    type counted in (layer, name) order, the first to lead keeps a 2:2 tie. Here blk.2 precedes blk.10 in that
    order (Q4_K leads first) but not in name order (where Q6_K would)."""
    from synapse_cli.bench import model_desc

    infos = [tensor_info(n, (256,), t, 256 * i) for i, (n, t) in enumerate([
        ("blk.10.attn_q.weight", GGMLType.Q6_K), ("blk.10.attn_k.weight", GGMLType.Q6_K),
        ("blk.2.attn_q.weight", GGMLType.Q4_K), ("blk.2.attn_k.weight", GGMLType.Q4_K)])]
    path = tmp_path / "tie.gguf"
    path.write_bytes(gguf_bytes([kv("general.architecture", VT.STRING, "llama")], infos, bytes(256 * 4)))
    reader = GGUFReader(path)
    s = model_summary(reader)
    assert (s["file_type"], s["ftype_enum"]) == ("(guessed) Q4_K - Medium", "LLAMA_FTYPE_MOSTLY_Q4_K_M")
    assert model_desc(reader).endswith(" (guessed) Q4_K - Medium")


# --- --key ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("patterns", [["tokenizer.ggml.*"], ["*.context_length", "general.name"], ["nothing*"]])
def test_key_filter_keeps_matching_lines_of_the_full_dump(patterns):
    path = TINY_MODELS / "tiny-qwen2-Q8_0.gguf"
    reader = gguf_py_reader(path)
    full = gguf_dump_output(reader, gguf_dump.dump_metadata, str(path), no_tensors=True).splitlines()
    names = [f.name for f in reader.fields.values()]
    keep = [i for i, n in enumerate(names) if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    args = [a for p in patterns for a in ("--key", p)]
    out = run(*args, "--no-tensors", path).stdout.splitlines()
    assert out[0] == full[0] and out[1] == f"* Dumping {len(keep)} key/value pair(s)"
    assert out[2:] == [full[2 + i] for i in keep]
    js = json.loads(run(*args, "--json", path).stdout)
    expected = json.loads(gguf_dump_output(reader, gguf_dump.dump_metadata_json, str(path)))
    assert js["metadata"] == {names[i]: expected["metadata"][names[i]] for i in keep}
    assert js["tensors"] == expected["tensors"]


# --- summary: llama.cpp's print_info ----------------------------------------------------------------------


def print_info(log: str) -> tuple[dict[str, str], dict[str, int]]:
    """`print_info: label = value` lines (first occurrence) and `- type  f32:   61 tensors` counts."""
    info: dict[str, str] = {}
    for m in re.finditer(r"print_info: (\S[^=\n]*?)\s+= (.*)", log):
        info.setdefault(m.group(1), m.group(2).strip())
    types = {m.group(1).upper(): int(m.group(2))
             for m in re.finditer(r"llama_model_loader: - type +(\w+): +(\d+) tensors", log)}
    return info, types


def _assert_summary_matches_log(model_path: Path, log_path: Path) -> None:
    info, types = print_info(log_path.read_text())
    s = model_summary(GGUFReader(model_path))
    assert s["file_format"] == info["file format"]
    assert s["file_type"] == info["file type"]
    assert f"{s['file_size']} ({s['bpw']} BPW)" == info["file size"]
    assert s["model_params"] == info["model params"]
    assert s["arch"] == info["arch"] and s["name"] == info["general.name"]
    for key in ("n_ctx_train", "n_embd", "n_layer", "n_head", "n_head_kv", "n_ff", "n_vocab"):
        assert str(s[key]) == info[key], key
    assert s["vocab_type"] == info["vocab type"]
    assert (s["n_merges"] or 0) == int(info["n_merges"])
    assert s["tensor_types"] == types


@pytest.mark.parametrize("path", TINY_FILES, ids=lambda p: p.name)
def test_summary_matches_llama_print_info_tiny(path):
    _assert_summary_matches_log(path, FIXTURES / "tiny" / "evalcb" / f"{path.stem}__pub__kvf32.log")


@pytest.mark.real
@pytest.mark.parametrize("name", REAL_MODELS)
def test_summary_matches_llama_print_info_real(name):
    _assert_summary_matches_log(real_model_path(name), FIXTURES / "real" / "evalcb" / f"{Path(name).stem}__pub.log")


def test_summary_on_stderr_only_when_asked():
    path = TINY_MODELS / "tiny-llama-Q4_K_M.gguf"
    plain = run(path)
    assert plain.stderr == ""  # stderr is not a terminal under CliRunner
    with_summary = run("--summary", path)
    assert with_summary.stdout == plain.stdout
    for text in ("llama", "Q4_K - Medium", "LLAMA_FTYPE_MOSTLY_Q4_K_M", "2.10 M", "5.00 bits per weight",
                 "Q4_K x13", "Q6_K x3", "F32 x6", "SPM, 1024 tokens", "4096"):
        assert text in with_summary.stderr, text


def test_summary_guesses_file_type_without_the_key(tmp_path):
    """No general.file_type: llama.cpp guesses from the most common tensor type and says so."""
    infos = [tensor_info(f"t{i}", (32,), GGMLType.Q8_0, 64 * i) for i in range(3)]
    infos.append(tensor_info("n", (4,), GGMLType.F32, 192))
    path = tmp_path / "g.gguf"
    path.write_bytes(gguf_bytes([kv("general.architecture", VT.STRING, "llama")], infos, b"\0" * 224))
    s = model_summary(GGUFReader(path))
    assert (s["file_type"], s["ftype_enum"]) == ("(guessed) Q8_0", "LLAMA_FTYPE_MOSTLY_Q8_0")
    assert s["tensor_types"] == {"F32": 1, "Q8_0": 3}


# --- errors, registration, imports ------------------------------------------------------------------------


def test_missing_file_is_one_line_exit_1(tmp_path):
    result = CliRunner().invoke(command, [str(tmp_path / "missing.gguf")])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "cannot open" in result.stderr and "missing.gguf" in result.stderr
    assert "Traceback" not in result.stderr


def test_malformed_file_is_one_line_exit_1(tmp_path):
    path = tmp_path / "bad.gguf"
    path.write_bytes(gguf_bytes([kv("a", VT.UINT8, 1)], n_kv=5))
    result = CliRunner().invoke(cli, ["inspect-gguf", str(path)])  # through the lazy `synapse` group
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: offset ") and result.stderr.count("\n") == 1


def test_registered_in_the_synapse_group():
    path = VOCABS / "ggml-vocab-tiny-spm.gguf"
    result = CliRunner().invoke(cli, ["inspect-gguf", "--no-tensors", str(path)])
    assert result.exit_code == 0
    assert result.stdout == gguf_dump_output(gguf_py_reader(path), gguf_dump.dump_metadata, str(path), True)


NO_NUMBA = """
import sys
from synapse_cli.cli import main
sys.argv = ["synapse", "inspect-gguf", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "llvmlite"))
print("RESULT", code, heavy, file=sys.stderr)
"""


@pytest.mark.parametrize("flags", [[], ["--summary", "--json"], ["--markdown"]])
def test_does_not_import_numba(flags):
    path = TINY_MODELS / "tiny-llama-Q4_K_M.gguf"
    proc = subprocess.run([sys.executable, "-c", NO_NUMBA, *flags, str(path)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert "RESULT 0 []" in proc.stderr, proc.stderr[-2000:]
