"""llama-completion runs beyond a plain completion: reverse prompts (-r) with and without interactive mode, -i and
-if on a raw prompt with --in-prefix/--in-suffix/--in-prefix-bos and -mli, -cnv with the chat template turned off by them, special tokens' text (-sp) and the prompt's tokens on stderr (--verbose-prompt), grammars
(--grammar, --grammar-file: greedy and sampled, characters, UTF-8 split over tokens, token elements) and JSON
schemas (-j), a full context (--context-shift, --keep, self-extend), control vectors. Each case of tests/reference/runs is a llama-completion run (args, piped stdin, stdout; made by
harness/record_completion.py, commands in tests/reference/README.md) that `synapse decode` must print byte for
byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TINY_MODELS, completion_args

REF = Path(__file__).resolve().parent / "reference"
CASES = sorted((REF / "runs").glob("*.json"))


def _args(rec) -> list[str]:
    return completion_args(rec["args"])


def _write_gguf(path, arch: str, strings: dict, tensors) -> str:
    """A small GGUF written with gguf-py (an adapter or control vector file for the checks below)."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    for key, value in strings.items():
        w.add_string(key, value)
    for name, arr in tensors:
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_decode_prints_llama_completions_stdout(case, monkeypatch):
    from click.testing import CliRunner

    from kernels import config
    from synapse_cli.cli import cli

    rec = json.loads(case.read_text())
    monkeypatch.chdir(REF)  # (grammar files are named relative to it)
    threads = config.work_chunks()
    try:
        r = CliRunner().invoke(cli, ["decode", *_args(rec)], input=rec["stdin"].encode())
    finally:
        config.set_num_threads(threads)
    assert r.exit_code == (1 if rec.get("returncode") else 0), r.stderr  # (a run llama.cpp ends with an error)
    assert r.stdout_bytes == rec["stdout"].encode("utf-8", "surrogateescape")
    if "stderr_lines" in rec:  # --verbose-prompt's log
        assert "\n".join(rec["stderr_lines"]).encode("utf-8", "surrogateescape") in r.stderr_bytes


def test_reverse_prompt_stops_and_says_so_in_json():
    """-r without -i: generation stops once the text ends in the reverse prompt (which is printed); --json says
    `reverse_prompt`; a reverse prompt that never comes leaves the -n limit."""
    from click.testing import CliRunner

    from synapse_cli.cli import cli

    rec = json.loads((REF / "runs" / "tiny-llama__r_two.json").read_text())
    args = _args(rec)
    r = CliRunner().invoke(cli, ["decode", *args, "--json"])
    obj = json.loads(r.stdout)
    assert obj["stop"] == "reverse_prompt" and obj["text"].endswith("only")
    i = args.index("-r")
    del args[i:i + 4]  # both -r
    obj = json.loads(CliRunner().invoke(cli, ["decode", *args, "-r", "never said", "--json"]).stdout)
    assert obj["stop"] == "limit" and len(obj["generated_ids"]) == 40


@pytest.mark.parametrize("flags,needle", [
    (["--grammar", "root ::= foo"], "Undefined rule identifier 'foo'"),
    (["--grammar", 'root ::= "a'], "unexpected end of input"),
    (["--grammar", 'expr ::= "a"'], "grammar does not contain a 'root' symbol"),
    (["--grammar", 'root ::= root "a" | "b"'], "left recursion"),
    (["--grammar", 'root ::= "a"{3,1}'], "repetition maximum below its minimum"),
    (["--grammar", 'root ::= "a"{5000}'], "number of repetitions exceeds sane defaults"),
    (["--grammar", 'root ::= [a-z'], "unexpected end of input"),
    (["--grammar", 'root ::= "\\q"'], "unknown escape"),
    (["--grammar", "root ::= <[99999]>"], None),  # a token the vocabulary lacks: nothing can be generated
    (["--grammar-file", "/nonexistent/grammar.gbnf"], "failed to open file"),
    (["-j", "{bad"], "invalid JSON schema"),
    (["-j", '{"type": "object", "properties": {"a": {"$ref": "http://x"}}}'], "unsupported $ref http://x"),
    (["-jf", "/nonexistent/schema.json"], "failed to open file"),
    (["-j", '{"type": "string", "pattern": "^\u00e9+$"}'], "failed to parse grammar"),  # (llama.cpp aborts too)
])
def test_bad_grammars_are_one_line(flags, needle):
    """llama.cpp's parser messages; llama-completion aborts where no stack survives a token, synapse says so."""
    from click.testing import CliRunner

    from synapse_cli.cli import cli

    r = CliRunner().invoke(cli, ["decode", "-m", str(TINY_MODELS / "tiny-llama-Q8_0.gguf"), "-p", "Hi", "-n", "4",
                                 "--temp", "0", *flags])
    assert r.exit_code == 1 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()[-1:]) == 1 and r.stderr.strip().splitlines()[-1].startswith("Error: ")
    if needle:
        assert needle in r.stderr


def test_control_vector_layer_range_and_bad_files(tmp_path):
    """--control-vector-layer-range picks the blocks that add their direction (a 2-layer model has a direction for
    layer 1 only: the range 1..1 prints the reference run, 2..2 the text without a vector); files llama.cpp refuses
    are one error line."""
    from click.testing import CliRunner

    from synapse_cli.cli import cli

    rec = json.loads((REF / "runs" / "tiny-llama__control_vector.json").read_text())
    args = [a for a in _args(rec) if a != "--simple-io"]  # (its note would be a second stderr line)
    i = args.index("--control-vector")
    path = str(REF / args[i + 1])
    args[i + 1] = path
    plain = args[:i] + args[i + 2:]

    def run(*a):
        r = CliRunner().invoke(cli, ["decode", *a])
        return r.exit_code, r.stdout_bytes, r.stderr

    want = rec["stdout"].encode("utf-8", "surrogateescape")
    assert run(*args, "--control-vector-layer-range", "1", "1")[1] == want
    assert run(*args, "--control-vector-layer-range", "2", "2")[1] == run(*plain)[1] != want

    import numpy as np

    def cvec(name, tensors):
        return _write_gguf(tmp_path / name, "controlvector", {}, tensors)

    v = np.ones(256, np.float32)
    for f, needle in ((cvec("zero.gguf", [("direction.0", v)]), "invalid (zero) direction tensor layer index"),
                      (cvec("name.gguf", [("dir.1", v)]), "invalid/unparsable direction tensor layer index"),
                      (cvec("f16.gguf", [("direction.1", v.astype(np.float16))]), "invalid (non-F32) direction"),
                      (cvec("2d.gguf", [("direction.1", np.ones((2, 128), np.float32))]), "invalid (non-1D)"),
                      (cvec("embd.gguf", [("direction.1", np.ones(128, np.float32))]), "n_embd does not match model"),
                      (str(tmp_path / "missing.gguf"), "failed to load control vector file")):
        code, out, err = run(*plain, "--control-vector", f)
        assert code == 1 and needle in err and len(err.strip().splitlines()) == 1, err
    code, _, err = run(*plain, "--control-vector-scaled", path)  # no :SCALE
    assert code == 2 and "FNAME:SCALE" in err
    # a direction for layer 10**9: llama.cpp's buffer would grow to it; no such layer is applied, nothing allocated
    far = cvec("far.gguf", [("direction.1000000000", v)])
    assert run(*plain, "--control-vector", far)[1] == run(*plain)[1]


def test_lora_files_llama_cpp_refuses_are_one_error_line(tmp_path):
    """The checks of llama_adapter_lora_init, each one error line (llama-completion: "failed to load lora adapter");
    a scale of 0 and --lora-init-without-apply load the adapter but print the text without it."""
    from click.testing import CliRunner

    import numpy as np

    from synapse_cli.cli import cli

    rec = json.loads((REF / "runs" / "tiny-llama__lora_scaled_f16.json").read_text())
    args = [a for a in _args(rec) if a != "--simple-io"]
    i = args.index("--lora-scaled")
    plain = args[:i] + args[i + 2:]
    good = str(REF / "adapters" / "lora-llama-f16.gguf")

    def run(*a):
        r = CliRunner().invoke(cli, ["decode", *a])
        return r.exit_code, r.stdout_bytes, r.stderr

    def lora(name, tensors, arch="llama", general_type="adapter", adapter_type="lora"):
        return _write_gguf(tmp_path / name, arch, {"general.type": general_type, "adapter.type": adapter_type},
                           tensors)

    a, b = np.ones((4, 256), np.float32), np.ones((256, 4), np.float32)  # attn_q's lora_a [256, 4], lora_b [4, 256]
    q = [("blk.0.attn_q.weight.lora_a", a), ("blk.0.attn_q.weight.lora_b", b)]
    cases = [(lora("type.gguf", q, general_type="model"), "expect general.type to be 'adapter', but got: model"),
             (lora("arch.gguf", q, arch="qwen2"), "model arch and LoRA arch mismatch"),
             (lora("kind.gguf", q, adapter_type="x"), "expect adapter.type to be 'lora', but got: x"),
             (lora("half.gguf", q[:1]), "LoRA tensor pair for 'blk.0.attn_q.weight' is missing one component"),
             (lora("suffix.gguf", q + [("blk.0.attn_q.weight", a)]), "has unexpected suffix"),
             (lora("absent.gguf", [("blk.7.attn_q.weight.lora_a", a), ("blk.7.attn_q.weight.lora_b", b)]),
              "does not exist in base model"),
             (lora("shape.gguf", [("blk.0.attn_k.weight.lora_a", a), ("blk.0.attn_k.weight.lora_b", b)]),
              "has incorrect shape"),
             (lora("transposed.gguf", [("blk.0.attn_q.weight.lora_a", a), ("blk.0.attn_q.weight.lora_b",
                                                                              np.ones((256, 8), np.float32))]),
              "lora_a tensor is not transposed"),
             (str(tmp_path / "missing.gguf"), "failed to load lora adapter")]
    for f, needle in cases:
        code, out, err = run(*plain, "--lora", f)
        assert code == 1 and needle in err and len(err.strip().splitlines()) == 1, (needle, err)
    want = run(*plain)[1]
    assert run(*plain, "--lora-scaled", good + ":0")[1] == want
    assert run(*plain, "--lora", good, "--lora-init-without-apply")[1] == want
    assert run(*plain, "--lora", good)[1] not in (want, rec["stdout"].encode("utf-8", "surrogateescape"))
    # qwen2's output head is token_embd: llama.cpp aborts on a token_embd adapter; synapse says why
    qwen = str(TINY_MODELS / "tiny-qwen2-F32.gguf")
    emb = lora("embd.gguf", [("token_embd.weight.lora_a", np.ones((1024, 4), np.float32)),
                             ("token_embd.weight.lora_b", np.ones((256, 4), np.float32))], arch="qwen2")
    code, _, err = run("-m", qwen, "-p", "Hello", "-n", "2", "--lora", emb)
    assert code == 1 and "output head is token_embd" in err


def test_no_repack_loads_every_weight_as_stored():
    """-nr/--no-repack (llama.cpp's no extra buffer types): no weight is repacked, so the products take the kernels
    of weights as stored, whose float orders differ: a batch's logits change in their last bits."""
    import numpy as np

    from kernels.order import Order
    from synapse_cli.model import Context, Model

    path = TINY_MODELS / "tiny-llama-Q4_K_M.gguf"
    logits = {}
    for repack in (True, False):
        m = Model.load(path, repack=repack)
        ctx = Context(m, n_ctx=256, batch_invariant=False)
        assert ctx.order is Order.LLAMA
        logits[repack] = ctx.decode(np.arange(1, 40), all_logits=True)
    assert not np.array_equal(logits[True], logits[False])
    assert np.abs(logits[True] - logits[False]).max() < 0.05  # (the same model: last-bit differences, grown)


@pytest.mark.parametrize("flags,needle", [(["-gan", "0"], "grp_attn_n must be positive"),
                                          (["-gan", "4", "-gaw", "6"], "grp_attn_w must be a multiple of grp_attn_n"),
                                          (["-gan", "2", "-gaw", "0"], "grp_attn_w must be positive")])
def test_self_extend_settings_llama_cpp_asserts_are_one_error_line(flags, needle):
    from click.testing import CliRunner

    from synapse_cli.cli import cli

    r = CliRunner().invoke(cli, ["decode", "-m", str(TINY_MODELS / "tiny-llama-F32.gguf"), "-p", "Hi", "-n", "2", *flags])
    assert r.exit_code == 1 and r.stderr.strip() == f"Error: {needle}"
