"""Shared test paths and helpers: llama.cpp's fixtures (../shared/fixtures), the real models (`make models`),
float32 bit comparison, thread-count runs and vocabulary-only GGUF files.

Fixtures are read in place, never copied. Tests that need a real model call `real_model_path(name)`
(or use the `real_model` fixture), which skips the test cleanly when the file has not been fetched.
Test modules import these names with `from conftest import ...`: pytest puts tests/ on sys.path
(pyproject.toml: `pythonpath = ["tests"]`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures"
MODELS = REPO / "models"

TINY_MODELS = FIXTURES / "tiny" / "models"  # random-weight llama/qwen2/mistral3 files, all types
VOCABS = FIXTURES / "vocab"  # vocab-only GGUFs (no tensors)

# the real models of the fixtures, by file name (CI fetches the first two, the 1.5B only optionally)
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN_05B = "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf"
QWEN_15B = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
REAL_MODELS = (SMOLLM2, QWEN_05B, QWEN_15B)

needs_fixtures = pytest.mark.skipif(not TINY_MODELS.exists(), reason="fixtures not present")


_precompile = None


def pytest_sessionstart(session):
    """Start tests/precompile.py: the kernels later tests need compile on the second core meanwhile (a cold CI
    session spends most of its time compiling, on one core). SYNAPSE_NO_PRECOMPILE=1 turns it off."""
    global _precompile
    import os
    import subprocess
    import sys

    if os.environ.get("SYNAPSE_NO_PRECOMPILE") != "1":
        _precompile = subprocess.Popen([sys.executable, str(REPO / "tests" / "precompile.py")], cwd=REPO,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pytest_sessionfinish(session, exitstatus):
    if _precompile is not None and _precompile.poll() is None:
        _precompile.kill()
        _precompile.wait()


def real_model_path(name: str) -> Path:
    """Path of a real model fetched by `make models` (file name as in the fixtures), or skip the test."""
    path = MODELS / Path(name).name
    if not path.exists():
        pytest.skip(f"{path.name} not fetched (run `make models`, or `make models-large` for the 1.5B)")
    return path


@pytest.fixture
def real_model():
    """`real_model_path` as a fixture: `def test_x(real_model): path = real_model(SMOLLM2)`."""
    return real_model_path


def completion_args(args: list[str]) -> list[str]:
    """A recorded llama-completion command line (tests/reference/runs, prompt_cache) for `synapse decode`: -m
    points at a model of tests/reference/models (a path starting with "models/"), else the fixtures' tiny model of
    that name, else a real model of `make models` (or skip); --simple-io is how synapse always reads input (said on
    stderr); --llama-batch-order for llama.cpp's batch orders of the prompt."""
    args = list(args)
    i = args.index("-m") + 1
    name = Path(args[i]).name
    ref = REPO / "tests" / "reference"
    if (ref / args[i]).is_file() and args[i].startswith("models/"):
        args[i] = str(ref / args[i])
    else:
        args[i] = str(TINY_MODELS / name if (TINY_MODELS / name).exists() else real_model_path(name))
    return args + ["--llama-batch-order"]


def spy_model_loads(monkeypatch) -> list:
    """The use_mmap argument of every Model.load from now on (the model still loads), in a list."""
    from synapse_cli.model import Model

    loads, real = [], Model.load.__func__

    def load(cls, *args, **kw):
        loads.append(kw.get("use_mmap", True))
        return real(cls, *args, **kw)

    monkeypatch.setattr(Model, "load", classmethod(load))
    return loads


def bits(a) -> np.ndarray:
    """float32 values as their uint32 bit patterns: array_equal(bits(a), bits(b)) is bit-for-bit equality."""
    return np.asarray(a, np.float32).view(np.uint32)


def at_thread_counts(run, counts=(1, 2)) -> list:
    """[run() with n threads for n in counts] (kernels.config's thread count, restored afterwards)."""
    from kernels.config import get_num_threads, set_num_threads  # not at import: tokenizer tests stay numba-free

    old = get_num_threads()
    try:
        results = []
        for n in counts:
            set_num_threads(n)
            results.append(run())
        return results
    finally:
        set_num_threads(old)


def products_by_order(w, x) -> tuple:
    """(single, batch, llama): the weight w times the T tokens x (T, K) one token at a time, as one batch in
    synapse's default order and as one batch in llama.cpp's (T, N) float32 each."""
    from kernels.matmul import matmul
    from kernels.order import Order

    T, N = x.shape[0], w.ne1
    single = np.empty((T, N), np.float32)
    for t in range(T):
        matmul(w, x[t:t + 1].copy(), single[t:t + 1])
    batch, llama = np.empty((T, N), np.float32), np.empty((T, N), np.float32)
    matmul(w, x.copy(), batch)
    matmul(w, x.copy(), llama, Order.LLAMA)
    return single, batch, llama


def assert_fused_one_token_products(typ, K, raw, x, ref, sizes=(40, 16, 24)) -> None:
    """Decoding's fused call (up to 3 weights of rows raw[:n] for n in sizes, one activation conversion, one parallel
    region: FusedGemv, as for Q/K/V) and matmul_many give each weight the reference's bits ref[:, :n] (ggml's
    products of one token x (1, K)), at 1 and 2 threads."""
    import numpy as np

    from kernels.matmul import FusedGemv, Weight, matmul_many

    ws = [Weight(typ, raw[:n].copy(), K, n) for n in sizes]
    fused = FusedGemv.of(ws)
    assert fused is not None

    def run():
        outs = [np.empty((1, n), np.float32) for n in sizes]
        fused(x.copy(), outs)
        many = [np.empty((1, n), np.float32) for n in sizes]
        matmul_many(ws, x.copy(), many)
        return outs + many

    for outs in at_thread_counts(run, (1, 2)):
        for o, n in zip(outs, sizes + sizes):
            assert np.array_equal(o.view(np.uint32), ref[:, :n].view(np.uint32))


def write_vocab_gguf(path: Path, kv: dict) -> str:
    """A GGUF file (architecture llama) with the metadata `kv` and no tensors: str values as strings, lists
    as arrays (ints as int32, strings as strings). Returns the path as str."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    for k, v in kv.items():
        if isinstance(v, str):
            w.add_string(k, v)
        elif isinstance(v, list):
            w.add_array(k, v)
        else:
            raise TypeError(f"{k}: only str and list values")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return str(path)


def harness_cases(name: str) -> list:
    """The cases of a tests/reference harness file (harness/*.c): (type as written, K, N, T, raw (N, row bytes)
    uint8, x (T, K) f32, ggml's out (T, N) f32), little endian; a type written as 1000 + t is ggml type t (iq4.c's
    repacked cases), one written as 2000 + t holds no x and, as out, the rows dequantized by ggml (N, K) (iq3.c)."""
    import numpy as np

    from kernels.quants import get_format

    data = (REPO / "tests" / "reference" / name).read_bytes()
    o, out = 0, []
    while o < len(data):
        typ, K, N, T = (int(v) for v in np.frombuffer(data, np.int32, 4, o))
        o += 16
        rb = get_format(typ % 1000).row_bytes(K)
        raw = np.frombuffer(data, np.uint8, rb * N, o).reshape(N, rb)
        o += rb * N
        x = np.frombuffer(data, np.float32, K * T, o).reshape(T, K)
        o += 4 * K * T
        shape = (N, K) if typ >= 2000 else (T, N)
        out.append((typ, K, N, T, raw, x, np.frombuffer(data, np.float32, shape[0] * shape[1], o).reshape(shape)))
        o += 4 * shape[0] * shape[1]
    return out
