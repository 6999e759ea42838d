"""Against references made with a llama.cpp 0c1e570 built here (tests/reference, README there says how).

That build is AVX2-only (this project's machines have no AVX-512), so it is an exact reference only where
its code paths are the fixtures' AVX-512 build's:
- the K-quant and 32-weight-block products (ggml_vec_dot_*, llama.cpp's tiled K-quant matmul for batches of
  >= 8 tokens, tinyBLAS for Q5_0/Q8_0 batches, the repacked Q2_K gemv/gemm): the AVX-512 build compiles the
  same code, or code with the same per-output float order (see the kernel modules). Checked bit for bit on
  random rows (mulmat.bin, q2k_repack.bin);
- whole tiny models re-quantized to K-quant mixes: their attention (F16 tinyBLAS / ggml_vec_dot_f16, soft_max)
  sums in 8 lanes there and in 16 in the fixtures' build, which synapse follows, so traces agree within the
  eval-callback tolerance (1e-4, a clean `eval-callback diff`) rather than bit for bit, and greedy texts agree
  where no step is a near-tie for that ulp-level noise (all the files kept here; Q2_K is not, because the
  AVX2 build does not repack Q2_K and the AVX-512 build, which synapse follows, does).

flash_attn_avx512fp16.bin comes from a build on an AVX512-FP16 Xeon: flash attention bit for bit (the README).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_MODELS, bits, harness_cases

from kernels.ggml_type import GGMLType
from kernels.matmul import Weight, matmul
from kernels.order import Order
from kernels.quants.base import llama_repacks

REF = Path(__file__).resolve().parent / "reference"
PROMPT = "Hello world, the quick brown fox jumps over the lazy dog. Licensed under the Apache License, Version 2.0"


def _applies(typ: int, N: int) -> bool:
    """Whether the plain-context ggml MUL_MAT of mulmat.bin is the path synapse follows for this weight: not for
    the weights an AVX-512 llama.cpp repacks (Q4_0, Q4_K, Q2_K with ne1 % 8 == 0), whose repacked kernels synapse
    follows instead (Q2_K: q2k_repack.bin; Q4_0, Q4_K: the fixtures)."""
    return not llama_repacks(typ, N)


MULMAT = [c for c in harness_cases("mulmat.bin") if _applies(c[0], c[2])]
Q2K_REPACK = harness_cases("q2k_repack.bin")


def _ids(cases):
    return [f"{GGMLType(c[0]).name}-K{c[1]}-N{c[2]}-T{c[3]}" for c in cases]


@pytest.mark.parametrize("case", MULMAT + Q2K_REPACK, ids=_ids(MULMAT + Q2K_REPACK))
def test_products_equal_ggml_in_llama_batch_order(case):
    """llama.cpp's batch order (vec_dot below 8 tokens, the tiled K-quant matmul from 8 on, tinyBLAS_Q0 for
    Q5_0/Q8_0, the repacked Q2_K gemm on the first T - T % 4 tokens): every output bit for bit."""
    typ, K, N, T, raw, x, ref = case
    out = np.empty((T, N), np.float32)
    matmul(Weight(typ, raw.copy(), K, N), x.copy(), out, Order.LLAMA)
    assert np.array_equal(out.view(np.uint32), ref.view(np.uint32)), f"{int((out != ref).sum())} of {ref.size} differ"


@pytest.mark.parametrize("case", [c for c in MULMAT + Q2K_REPACK if c[3] == 1], ids=_ids([c for c in MULMAT + Q2K_REPACK if c[3] == 1]))
def test_single_token_equals_ggml_and_batches_equal_single_tokens(case):
    """One token: ggml's vec_dot (or the repacked gemv). The default, batch-invariant mode gives every row of
    a batch those same bits (here: the same row repeated in a batch of 9)."""
    typ, K, N, T, raw, x, ref = case
    w = Weight(typ, raw.copy(), K, N)
    out = np.empty((1, N), np.float32)
    matmul(w, x.copy(), out)
    assert np.array_equal(out.view(np.uint32), ref.view(np.uint32))
    xb = np.repeat(x, 9, axis=0)
    outb = np.empty((9, N), np.float32)
    matmul(w, xb, outb)
    assert all(np.array_equal(outb[t], out[0]) for t in range(9))


def _synapse(*args: str):
    """The command line in this process (CliRunner: stdout as bytes, exit code), as a user would run it."""
    from click.testing import CliRunner

    from kernels import config
    from synapse_cli.cli import cli

    threads = config.work_chunks()  # -t changes the process's thread count: restore it for the next tests
    try:
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)
    finally:
        config.set_num_threads(threads)


EVALCB = sorted((REF / "evalcb").glob("*.log"))


def _model_path(stem: str) -> str:
    """A re-quantized model of tests/reference/models, or a fixtures tiny model (tiny-llama-Q8_0)."""
    path = REF / "models" / f"{stem}.gguf"
    return str(path if path.exists() else TINY_MODELS / f"{stem}.gguf")


# the --rope-*/--yarn-* flags of the `__rope-<name>` references (tests/reference/README.md, "RoPE flags")
ROPE_FLAGS = {
    "rope-yarn4": ["--rope-freq-base", "20000", "--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "64"],
    "rope-linear2": ["--rope-scaling", "linear", "--rope-scale", "2", "--rope-freq-base", "5000"],
    "rope-yarn8": ["--rope-scale", "8", "--yarn-beta-fast", "16", "--yarn-beta-slow", "2", "--yarn-ext-factor", "0.5"],
    "rope-none": ["--rope-scaling", "none", "--rope-freq-scale", "0.25", "--yarn-attn-factor", "1.5"],
}


def _rope_args(stem: str) -> list[str]:
    return ROPE_FLAGS["rope-" + stem.split("__rope-")[1].split("__")[0]] if "__rope-" in stem else []


# the control vector flags of the `__cvec-<name>` references (files in tests/reference/adapters)
CVEC_FLAGS = {"cvec-ab": ["--control-vector-scaled", f"{REF}/adapters/cvec-256-a.gguf:2,{REF}/adapters/cvec-256-b.gguf:-1"]}
# the LoRA flags of the `__lora-<name>` references (files in tests/reference/adapters)
LORA_FLAGS = {"lora-two": ["--lora", f"{REF}/adapters/lora-llama-f32.gguf,{REF}/adapters/lora-llama-q8_0.gguf"],
              "lora-q8_0": ["--lora", f"{REF}/adapters/lora-llama-q8_0.gguf"],
              "lora-qwen2": ["--lora-scaled", f"{REF}/adapters/lora-qwen2-f32.gguf:0.5"]}


def _log_args(stem: str) -> list[str]:
    """The prompt and flags a reference log was made with (tests/reference/README.md)."""
    if "__license400" in stem:
        prompt = (REF / "prompts" / "license400.txt").read_text().removesuffix("\n")
    elif "__escapes" in stem:  # llama.cpp processes the escapes of -p (8 tokens, not 11)
        prompt = r"Hello world\n\tTab\x21"
    else:
        prompt = PROMPT
    args = ["--prompt", prompt]
    if stem.endswith("__ub8"):
        args += ["-ub", "8"]
    if stem.endswith("__nr"):
        args += ["-nr"]
    if stem.endswith("__fa"):
        args += ["-fa", "on"]
    elif "__ctk-" in stem:  # __fa__ctk-<type>__ctv-<type> (__nofa__...: -fa off)
        args += ["-fa", "off" if "__nofa__" in stem else "on", "-ctk", stem.split("__ctk-")[1].split("__")[0],
                 "-ctv", stem.split("__ctv-")[1]]
    else:
        args += ["-fa", "off"]
    cvec = CVEC_FLAGS["cvec-" + stem.split("__cvec-")[1].split("__")[0]] if "__cvec-" in stem else []
    lora = LORA_FLAGS["lora-" + stem.split("__lora-")[1].split("__")[0]] if "__lora-" in stem else []
    return args + _rope_args(stem) + cvec + lora


@pytest.mark.parametrize("log", EVALCB, ids=lambda p: p.stem)
def test_requantized_tiny_trace_diff_is_clean(log):
    """`synapse eval-callback diff --model M --prompt P LOG` against llama-eval-callback of the same tiny model
    re-quantized (or re-written with fused Q/K/V or weight scales: tests/reference/harness): same graph, every
    tensor within 1e-4 (exit 0). `__ub8`: -ub 8, four micro-batches, the first three without outputs; `__nr`: -nr
    (no weight repacked); `__license400__fa`: -fa on and 141 tokens, ggml's tiled flash-attention kernel;
    `__fa__ctk-A__ctv-B`: -fa on with those KV cache types (quantized ones with llama.cpp's Hadamard rotations of
    Q/K/V and the output, and no printed values); `__nofa__ctk-A__ctv-B`: the same with -fa off (a K type of its own: kq is that type's product); `__rope-<name>`: the
    --rope-*/--yarn-* flags of ROPE_FLAGS (llama, qwen2 and mistral3's own YaRN); `__cvec-<name>`: the control
    vectors of CVEC_FLAGS; `__lora-<name>`: the LoRA adapters of LORA_FLAGS (their products' nodes); made with -fa
    off otherwise."""
    stem = log.stem.split("__")[0]
    r = _synapse("eval-callback", "diff", "--model", _model_path(stem), *_log_args(log.stem),
                 "-t", "2", "--occurrence", "all", str(log))
    verdict = r.stdout.strip().splitlines()[-1]
    assert r.exit_code == 0 and verdict.startswith("no divergence"), verdict
    assert "only in" not in r.stdout.lower(), r.stdout[-3000:]  # (every node on both sides)


@pytest.mark.parametrize("model,loras", [
    ("tiny-llama-F32", [("lora-llama-f32.gguf", 1.0), ("lora-llama-q8_0.gguf", 0.5)]),
    ("tiny-qwen2-Q8_0", [("lora-qwen2-f32.gguf", 2.0)])])
def test_traced_pass_has_the_untraced_bits_with_lora(model, loras):
    """The eval-callback trace computes op by op (TracedGraphOps) what decode fuses (GraphOps): with LoRA adapters
    on the token embeddings, Q/K/V (qwen2: before their biases), the FFN and the output, its logits are decode's
    bit for bit, and the trace holds each adapted product's nodes (A, B, SCALE, ADD)."""
    from synapse_cli.evalcb import TraceRecorder
    from synapse_cli.session import open_session

    spec = ([(str(REF / "adapters" / f), s) for f, s in loras], True)
    logits = []
    for hook in (None, TraceRecorder()):
        sess = open_session(str(TINY_MODELS / f"{model}.gguf"), n_ctx=256, n_threads=2, show_progress=False,
                            batch_invariant=False, flash_attn=False, loras=spec)
        ids = sess.tokenizer.encode(PROMPT, add_special=True, parse_special=True)
        logits.append(sess.ctx.decode(ids, trace=hook))
    assert np.array_equal(bits(logits[0]), bits(logits[1]))
    ops = [(r.name, r.op) for r in hook.records]
    assert ("Qcur-0", "ADD") in ops and sum(op == "SCALE" for _, op in ops) >= 2 * len(loras)


COMPLETION = sorted((REF / "completion").glob("*.txt"))


@pytest.mark.parametrize("ref", COMPLETION, ids=lambda p: p.stem)
def test_requantized_tiny_decode_prints_llama_completion_stdout(ref):
    """`synapse decode ARGS --llama-batch-order` prints llama-completion ARGS's stdout byte for byte (ARGS as
    in tests/reference/README.md; `__ub8_b16`: -ub 8 -b 16; `__license2400__greedy__fa__tN`: a 600-token prompt
    file, -fa on, N threads, so that generation runs ggml's split-KV flash-attention kernel;
    `__fa__ctk-A__ctv-B`: -fa on and those KV cache types; `__rope-<name>`: ROPE_FLAGS)."""
    stem = ref.stem.split("__")[0]
    if "__ctk-" in ref.stem:  # __greedy__fa__ctk-<type>__ctv-<type>
        args = ["-p", PROMPT, "-n", "32", "-fa", "on", "-t", "2", "-ctk", ref.stem.split("__ctk-")[1].split("__")[0],
                "-ctv", ref.stem.split("__ctv-")[1]]
    elif "__license2400" in ref.stem:
        threads = ref.stem.rsplit("__t", 1)[1]
        args = ["-f", str(REF / "prompts" / "license2400.txt"), "-n", "24", "-fa", "on", "-t", threads]
    else:
        args = ["-p", PROMPT, "-n", "32", "-fa", "off", "-t", "2"] + _rope_args(ref.stem)
        if ref.stem.endswith("__ub8_b16"):
            args += ["-ub", "8", "-b", "16"]
    r = _synapse("decode", "-m", _model_path(stem), *args, "--temp", "0", "-no-cnv",
                 "-c", "4096", "--llama-batch-order")
    assert r.exit_code == 0, r.stderr
    assert r.stdout_bytes == ref.read_bytes()


# --- flash attention against ggml on an AVX512-FP16 CPU (flash_attn_avx512fp16.bin, harness/flash_attn.c)

FA_CASES = [(4, 2, 64, 3, 300), (12, 2, 128, 5, 300), (12, 2, 128, 1, 768), (8, 2, 256, 2, 300), (6, 2, 192, 1, 600),
            (12, 2, 128, 1, 300), (2, 1, 128, 64, 300)]  # (H, Hkv, D, T, n_kv), as the harness


class _XorShift:
    """The harness's random stream (xorshift64, Box-Muller normals through the C library's sqrt, log and cos,
    which Python's math calls too), to draw its inputs again instead of storing them."""

    def __init__(self, seed: int):
        self.s = seed

    def _urand(self) -> float:
        s = self.s
        s ^= (s << 13) & 0xFFFFFFFFFFFFFFFF
        s ^= s >> 7
        s ^= (s << 17) & 0xFFFFFFFFFFFFFFFF
        self.s = s
        return (s >> 11) * (1.0 / 9007199254740992.0)

    def normals(self, n: int) -> np.ndarray:
        import math

        out = np.empty(n, np.float32)
        for i in range(n):
            u = self._urand() + 1e-12
            v = self._urand()
            out[i] = math.sqrt(-2 * math.log(u)) * math.cos(6.283185307179586 * v)
        return out


def _fa_inputs(ic: int):
    H, G, D, T, n_kv = FA_CASES[ic]
    r = _XorShift(88172645463325252 + ic)
    q = (r.normals(T * H * D) * np.float32(1.5)).reshape(T, H, D)
    kv = r.normals(2 * n_kv * G * D).reshape(n_kv, G * D, 2)  # per cell, per (head, d): k then v
    ramp = np.float32(0.004) * np.arange(n_kv, dtype=np.float32)[:, None]
    k16 = (kv[:, :, 0] + ramp).astype(np.float16).view(np.uint16).reshape(n_kv, G, D)
    v16 = kv[:, :, 1].astype(np.float16).view(np.uint16).reshape(n_kv, G, D)
    n_used = n_kv - 21
    kv_pos = np.where(np.arange(n_kv) < n_used, np.arange(n_kv), -1).astype(np.int32)
    kv_pos[40:47] = -1
    return q, k16, v16, kv_pos, np.arange(n_used - T, n_used, dtype=np.int32)


@pytest.mark.parametrize("ic", range(len(FA_CASES)))
def test_flash_attn_equals_ggml_built_for_avx512_fp16(ic):
    """FLASH_ATTN_EXT in llama.cpp's batch order (one-row kernel, split-KV by thread for one query over >= 512
    cells, tiled from 64 rows) against ggml's own on an AVX512-FP16 Xeon (README: the native build there computes
    the first D & ~127 dimensions of the one-row kernel's F16 accumulator in FP16 arithmetic), bit for bit at 1
    and 2 threads. A head dimension of 64 and the tiled kernel take the same code on any AVX-512 build, so those
    cases run everywhere; the others where synapse runs on such a CPU too (kernels/_vec.py F16_ARITH)."""
    import math

    from kernels._vec import F16_ARITH, F16_ARITH_STEP
    from kernels.flash_attn import FA_TILE_Q, flash_attn_ext

    H, G, D, T, n_kv = FA_CASES[ic]
    if D >= F16_ARITH_STEP and T < FA_TILE_Q and not F16_ARITH:
        pytest.skip("made where ggml's F16 vector ops use FP16 arithmetic; this CPU has no AVX512-FP16")
    data = (REF / "flash_attn_avx512fp16.bin").read_bytes()
    o = 0
    for jc, (h, g, d, t, n) in enumerate(FA_CASES[: ic + 1]):
        for threads in (1, 2):
            hdr = tuple(int(x) for x in np.frombuffer(data, np.int32, 6, o))
            assert hdr == (h, g, d, t, n, threads)
            want = np.frombuffer(data, np.float32, t * h * d, o + 24).reshape(t, h * d)
            o += 24 + 4 * t * h * d
            if jc < ic:
                continue
            q, k16, v16, kv_pos, q_pos = _fa_inputs(ic)
            got = np.empty((T, H * D), np.float32)
            flash_attn_ext(q, k16, v16, n_kv, kv_pos, q_pos, np.float32(1.0 / math.sqrt(D)), got, Order.LLAMA, threads)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), threads
