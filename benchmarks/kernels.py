"""Speed of the quantized matmul kernels (kernels/matmul.py); not a test.

Prints, for each weight type:
  * gemv (one token) throughput in GB/s of weight bytes streamed, at Qwen2.5-1.5B shapes
    K x N = 1536x1536 (attn_q/o), 8960x1536 (ffn_down), 1536x8960 (ffn_up/gate), 1536x151936 (output),
  * gemm GFLOP/s (2*K*N*T) for T = 64 and 512 tokens at K x N = 1536x8960 (--gemm-shape),
for 1 and 2 threads, next to the machine's read bandwidth measured in the same run (1 GB array sum), and
the first-call compile time of all kernels (cold numba cache, in a subprocess) and the warm-cache time of
"import + one gemv per type". The machine is shared with other jobs: expect noise of +-10-20 %.

    .venv/bin/python benchmarks/kernels.py                 # everything
    .venv/bin/python benchmarks/kernels.py --types Q4_K,Q8_0 --no-gemm --no-compile
"""

from __future__ import annotations

from _common import REPO  # first: the repository root on the import path (this file would shadow `kernels`)

import argparse
import os
import subprocess
import sys
import tempfile
import time

from kernels import config  # noqa: E402  (numba settings first)

import numpy as np  # noqa: E402
from numba import prange  # noqa: E402

from kernels.ggml_type import BLOCK_GEOMETRY, GGMLType  # noqa: E402

ALL = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
GEMV_SHAPES = [(1536, 1536), (8960, 1536), (1536, 8960), (1536, 151936)]  # (K, N)
GEMM_SHAPE = (1536, 8960)
# byte offsets of the fp16 scale fields inside a block (kept finite and small so sums stay sane)
SCALE_OFFSETS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q2_K": (80, 82),
                 "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_NL": (0,), "IQ4_XS": (0,),
                 "IQ2_XXS": (0,), "IQ2_XS": (0,), "IQ2_S": (0,), "IQ3_XXS": (0,), "IQ3_S": (0,), "IQ1_S": (0,),
                 "IQ1_M": (), "TQ1_0": (52,), "TQ2_0": (64,), "Q1_0": (0,), "Q2_0": (0,),
                 "MXFP4": (), "NVFP4": ()}
# the FP4 types' one-byte scales (E8M0, UE4M3): bytes of typical trained weights' magnitudes (random ones give many
# denormal products, whose microcode assists would be what is measured)
BYTE_SCALES = {"MXFP4": (1, 118, 126), "NVFP4": (4, 0x28, 0x48)}  # (scale bytes at the block's start, low, high)


@config.pjit
def _sum_u64(a):
    n = a.shape[0]
    chunk = (n + 63) // 64
    parts = np.zeros(64, np.uint64)
    for c in prange(64):
        s = np.uint64(0)
        for i in range(c * chunk, min(n, (c + 1) * chunk)):
            s += a[i]
        parts[c] = s
    return parts.sum()


def read_bandwidth(threads: int, nbytes: int = 1 << 30) -> float:
    config.set_num_threads(threads)
    a = np.ones(nbytes // 8, np.uint64)
    _sum_u64(a[:1024])
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        _sum_u64(a)
        best = max(best, nbytes / (time.perf_counter() - t0))
    return best / 1e9


def random_weight(tname: str, K: int, N: int, rng) -> np.ndarray:
    t = GGMLType[tname]
    qk, size = BLOCK_GEOMETRY[t]
    if tname == "F32":
        return rng.standard_normal((N, K), dtype=np.float32).view(np.uint8)
    if tname in ("F16", "BF16"):
        v = (rng.standard_normal((N, K), dtype=np.float32) * 0.1)
        return (v.astype(np.float16).view(np.uint8) if tname == "F16"
                else (v.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8))
    nb = K // qk
    raw = rng.integers(0, 256, (N, nb, size), dtype=np.uint8)
    for o in SCALE_OFFSETS[tname]:
        raw[:, :, o:o + 2] = rng.uniform(1e-3, 1e-2, (N, nb, 1)).astype(np.float16).view(np.uint8)
    if tname in BYTE_SCALES:
        n, lo, hi = BYTE_SCALES[tname]
        raw[:, :, :n] = rng.integers(lo, hi, (N, nb, n), dtype=np.uint8)
    return raw.reshape(N, nb * size)


def timeit(fn, min_time=0.3, max_reps=200):
    fn()
    reps, t0 = 0, time.perf_counter()
    best = float("inf")
    while reps < max_reps and (time.perf_counter() - t0 < min_time or reps < 3):
        t1 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t1)
        reps += 1
    return best


def compile_times(types) -> tuple[float, float]:
    """(cold: import + first gemv/gemm/get_rows of every type with an empty cache, warm: import + one gemv
    of every type with the normal cache)."""
    code = f"""
import time, numpy as np
t0 = time.perf_counter()
from kernels.matmul import Weight, matmul
from kernels.ggml_type import BLOCK_GEOMETRY, GGMLType
for name in {types!r}:
    t = GGMLType[name]; qk, size = BLOCK_GEOMETRY[t]
    K, N = 256, 8
    w = Weight(t, np.zeros(N * K // qk * size, np.uint8), K, N, name)
    matmul(w, np.ones((1, K), np.float32), np.empty((1, N), np.float32))
    if FULL:
        matmul(w, np.ones((3, K), np.float32), np.empty((3, N), np.float32))
        w.get_rows(np.array([1, 2]), np.empty((2, K), np.float32))
print(time.perf_counter() - t0)
"""
    res = []
    for cold in (True, False):
        env = dict(os.environ)
        if cold:
            tmp = tempfile.mkdtemp(prefix="numba-cold-")
            env["NUMBA_CACHE_DIR"] = tmp
        p = subprocess.run([sys.executable, "-c", code.replace("FULL", str(cold))], cwd=REPO, env=env,
                           capture_output=True, text=True)
        if p.returncode:
            print(p.stderr)
            res.append(float("nan"))
        else:
            res.append(float(p.stdout.strip().splitlines()[-1]))
    return res[0], res[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", default=",".join(ALL))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--no-gemv", action="store_true")
    ap.add_argument("--no-gemm", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--gemm-tokens", default="64,512")
    ap.add_argument("--gemm-shape", default="x".join(map(str, GEMM_SHAPE)), help="gemm K x N (default: %(default)s)")
    ap.add_argument("--shapes", default=None, help="gemv shapes as KxN,KxN (default: Qwen2.5-1.5B's)")
    args = ap.parse_args()
    types = args.types.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    shapes = GEMV_SHAPES if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]

    if not args.no_compile:
        cold, warm = compile_times(types)
        print(f"compile: cold cache import + first gemv/gemm/get_rows of {len(types)} types: {cold:.1f} s; "
              f"warm cache import + one gemv each: {warm:.2f} s")

    from kernels.matmul import Weight, matmul
    from kernels.quants.base import empty_aligned

    bw = {n: read_bandwidth(n) for n in threads}
    print("read bandwidth (1 GB uint64 sum): " + ", ".join(f"{n} thr {bw[n]:.1f} GB/s" for n in threads))
    rng = np.random.default_rng(0)
    if not args.no_gemv:
        print("\ngemv GB/s of weight bytes (% of read bandwidth with the same threads)")
        print(f"{'type':6}" + "".join(f"{f'{K}x{N}':>24}" for K, N in shapes))
        for tname in types:
            t = GGMLType[tname]
            cells = {n: [] for n in threads}
            for K, N in shapes:
                raw = random_weight(tname, K, N, rng)
                w = Weight(t, raw.reshape(-1), K, N, tname)
                x = rng.standard_normal((1, K), dtype=np.float32)
                out = np.empty((1, N), np.float32)
                for n in threads:
                    config.set_num_threads(n)
                    dt = timeit(lambda: matmul(w, x, out))
                    gbs = raw.nbytes / dt / 1e9
                    cells[n].append(f"{gbs:6.1f} ({100 * gbs / bw[n]:3.0f}%)")
                del w, raw
            for n in threads:
                print(f"{tname:6}" + "".join(f"{c:>24}" for c in cells[n]) + f"   [{n} thr]")
    if not args.no_gemm:
        K, N = (int(v) for v in args.gemm_shape.split("x"))
        toks = [int(v) for v in args.gemm_tokens.split(",")]
        print(f"\ngemm GFLOP/s at K x N = {K}x{N}")
        print(f"{'type':6}" + "".join(f"{f'T={T} {n}thr':>14}" for T in toks for n in threads))
        for tname in types:
            t = GGMLType[tname]
            raw = random_weight(tname, K, N, rng)
            w = Weight(t, raw.reshape(-1), K, N, tname)
            row = []
            for T in toks:
                x = rng.standard_normal((T, K), dtype=np.float32)
                out = empty_aligned((T, N), np.float32)  # as the forward pass's buffers (streaming stores)
                for n in threads:
                    config.set_num_threads(n)
                    dt = timeit(lambda: matmul(w, x, out), min_time=0.5, max_reps=10)
                    row.append(f"{2 * K * N * T / dt / 1e9:14.1f}")
            print(f"{tname:6}" + "".join(row))


if __name__ == "__main__":
    main()
