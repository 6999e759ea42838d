"""--prompt-cache, --prompt-cache-all, --prompt-cache-ro (synapse_cli/prompt_cache.py).

Each case of tests/reference/prompt_cache is a sequence of llama-completion runs sharing one session file (made by
harness/record_prompt_cache.py, commands in tests/reference/README.md): `synapse decode` must print each run's
stdout byte for byte, end with its exit code, and leave a session file with llama.cpp's bytes (its sha256) after
every step, so each step also starts from llama.cpp's own file. Then: the batch-invariant default resumes a
prompt from the file with the bits of decoding it whole, and files llama.cpp would refuse, hostile ones included,
are one error line."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import TINY_MODELS, bits, completion_args

REF = Path(__file__).resolve().parent / "reference"
CASES = sorted((REF / "prompt_cache").glob("*.json"))


def _decode(*args, stdin: bytes = b""):
    from kernels import config
    from synapse_cli.cli import cli

    threads = config.work_chunks()
    try:
        return CliRunner().invoke(cli, ["decode", *args], input=stdin)
    finally:
        config.set_num_threads(threads)


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_steps_print_and_save_what_llama_completion_does(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (the file is ./prompt.cache, as recorded)
    cache = tmp_path / "prompt.cache"
    for i, step in enumerate(json.loads(case.read_text())["steps"]):
        r = _decode(*completion_args(step["args"]), stdin=step["stdin"].encode())
        assert r.exit_code == (1 if step["returncode"] else 0), (i, r.stderr)
        assert r.stdout_bytes == step["stdout"].encode("utf-8", "surrogateescape"), i
        sha = hashlib.sha256(cache.read_bytes()).hexdigest() if cache.exists() else None
        assert sha == step["cache_sha256"], i


def _context(model: str, **kw):
    from synapse_cli.model import Context, Model

    return Context(Model.load(str(TINY_MODELS / model)), n_ctx=256, **kw)


@pytest.mark.parametrize("model,kw", [("tiny-llama-Q4_K_M.gguf", {}),
                                      ("tiny-qwen2-Q8_0.gguf", {"flash_attn": False, "cache_type_k": "q4_0"}),
                                      ("tiny-mistral3-F32.gguf", {"cache_type_k": "q8_0", "cache_type_v": "q8_0"})])
def test_a_resumed_prompt_has_the_bits_of_a_whole_one(model, kw, tmp_path):
    """synapse's default (batch-invariant) order: a prompt whose prefix comes from a session file (saved before
    its last token, as llama-completion saves it, then cut back to the shared prefix and that token replayed) gives
    the logits of the prompt decoded in one go, bit for bit."""
    from synapse_cli.prompt_cache import PromptCache

    rng = np.random.default_rng(7)
    first = rng.integers(3, 200, 40).tolist()
    second = first[:25] + rng.integers(3, 200, 12).tolist()  # shares 25 tokens with the first
    path = str(tmp_path / "s.cache")
    ctx = _context(model, **kw)
    cache = PromptCache(path)
    cache.load(ctx)
    cache.match(ctx, first, False)
    cache.decode(ctx, first, True)  # (saves the state before its last token)
    assert cache.saved == len(first)

    ctx = _context(model, **kw)
    cache = PromptCache(path)
    cache.load(ctx)
    assert cache.tokens == first and ctx.n_past == len(first) - 1
    cache.match(ctx, second, False)
    assert cache.n_match == 25 and ctx.n_past == 25  # (the 25th token replayed)
    rest = cache.skip(list(second))
    assert rest == second[25:]
    resumed = cache.decode(ctx, rest, True)

    whole = _context(model, **kw).decode(second)
    assert np.array_equal(bits(resumed), bits(whole))


def _saved_file(tmp_path, *flags) -> tuple[list[str], bytes]:
    """A session file of the tiny llama (prompt "Hello world", saved by synapse) and the args that made it."""
    args = ["-m", str(TINY_MODELS / "tiny-llama-Q8_0.gguf"), "-p", "Hello world, the fox", "-n", "2", "--temp", "0",
            "--prompt-cache", str(tmp_path / "ok.cache"), *flags]
    r = _decode(*args)
    assert r.exit_code == 0, r.stderr
    return args, (tmp_path / "ok.cache").read_bytes()


def test_files_llama_cpp_refuses_are_one_error_line(tmp_path):
    """llama_state_load_file's checks, each llama.cpp's reason on one line and exit 1; hostile counts are bounded
    by the file's size, never allocated."""
    args, good = _saved_file(tmp_path)
    n_tok = struct.unpack_from("<I", good, 8)[0]
    arch_at = 12 + 4 * n_tok  # u32 length, "llama"
    cells_at = arch_at + 4 + 5 + 4  # (after n_stream) u32 cell_count
    meta_at = cells_at + 4  # the first cell's i32 pos, u32 n_seq_id

    def patched(at, fmt, value):
        b = bytearray(good)
        struct.pack_into("<" + fmt, b, at, value)
        return bytes(b)

    cases = [(b"", None),  # (an empty file: a new session, no error)
             (b"garbage\n", "unknown (magic, version) for session file: 62726167, 0a656761"),
             (patched(4, "I", 9), "unknown (magic, version)"),
             (patched(8, "I", 2**32 - 1), "token count in session file exceeded capacity! 4294967295 > "),
             (patched(arch_at, "I", 2**31), "wrong model arch: a name of 2147483648 bytes"),
             (patched(arch_at, "I", 200), "wrong model arch: 'llama\\x01"),  # (what follows, escaped)
             (patched(arch_at + 4, "5s", b"qwen2"), None),  # (a 5-letter arch: "wrong model arch: 'qwen2'")
             (patched(cells_at - 4, "I", 3), "n_stream mismatch"),
             (patched(cells_at, "I", 10**6), "not enough cells in kv cache"),
             (patched(meta_at + 4, "I", 2**31), "invalid seq_id count 2147483648"),
             (patched(meta_at + 8, "i", 5), "invalid seq_id, 5 is out of range [0, 1)"),
             (good[:-7], "unexpectedly reached end of file"),
             (good + b"\0", f"did not read all of the session file data! size {len(good) - arch_at + 1}, "
                           f"got {len(good) - arch_at}")]
    for data, needle in cases:
        f = tmp_path / "bad.cache"
        f.write_bytes(data)
        a = list(args)
        a[a.index("--prompt-cache") + 1] = str(f)
        r = _decode(*a)
        if not data:
            assert r.exit_code == 0 and "The session file is empty" in r.stderr
            continue
        assert r.exit_code == 1 and "Traceback" not in r.stderr, r.stderr
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith(f"Error: failed to load session file '{f}': "), last
        assert (needle or "wrong model arch: 'qwen2' instead of 'llama'") in last, last


def test_a_file_of_other_cache_settings_is_refused(tmp_path):
    args, _ = _saved_file(tmp_path)
    for flags, needle in ((["-ctk", "q8_0"], "mismatched key type (8 != 1, layer 0)"),
                          (["-ctv", "f32", "-fa", "off"], "incompatible V transposition"),
                          (["-ctv", "q4_0"], "mismatched value type (2 != 1, layer 0)")):
        r = _decode(*args, *flags)
        assert r.exit_code == 1 and needle in r.stderr.strip().splitlines()[-1], r.stderr


def test_json_says_what_the_cache_did_and_an_unwritable_file_is_a_warning(tmp_path):
    args, _ = _saved_file(tmp_path)
    r = _decode(*args, "--json")
    obj = json.loads(r.stdout)
    n = len(obj["prompt_ids"])
    assert obj["prompt_cache"] == {"path": str(tmp_path / "ok.cache"), "loaded_tokens": n, "reused_tokens": n,
                                   "saved_tokens": None}
    a = list(args)
    a[a.index("--prompt-cache") + 1] = str(tmp_path / "no" / "such" / "dir.cache")
    r = _decode(*a)
    assert r.exit_code == 0 and "error saving session file" in r.stderr  # (llama.cpp logs it and goes on)
    r = _decode(*args, "--prompt-cache-all", "-i")
    assert r.exit_code == 1 and "--prompt-cache-all not supported in interactive mode yet" in r.stderr
