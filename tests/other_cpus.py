"""Products compiled for CPUs other than this one, each in a child process with its own numba cache:

    python tests/other_cpus.py avx2      # SYNAPSE_NO_AVX512=1: the 256-bit kernels of a CPU without AVX-512
    python tests/other_cpus.py no-bmi2   # the host's features minus BMI2: the i-quants' scalar grid indices

Each prints "BAD" and the cases whose bits differ from the references ("BAD []": none). The tests run them
(tests/test_matmul.py, tests/test_iq_grid.py, through `run`): each is one to two minutes of compiling on one core
on an empty cache, seconds on a warm one (both modes keep their own cache folders). Running them from
tests/precompile.py on the second core did not shorten the clean-clone suite (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def applies(mode: str) -> bool:
    """Whether `mode` is another CPU than this one: AVX2 is one where this one has AVX-512 (else the 256-bit
    kernels are the default ones, which the other tests check), no-BMI2 one where this one has BMI2."""
    from kernels.quants._simd import HAS_AVX2, HAS_BMI2
    from kernels.quants._simd512 import HAS_AVX512

    return HAS_AVX2 and (HAS_AVX512 if mode == "avx2" else HAS_BMI2)


def _env(mode: str) -> dict:
    env = dict(os.environ)
    if mode == "avx2":
        env["SYNAPSE_NO_AVX512"] = "1"
        env.pop("NUMBA_CACHE_DIR", None)  # kernels/config.py picks the mode's own folder
        return env
    from kernels import config

    env.update(NUMBA_CPU_NAME="host", NUMBA_CPU_FEATURES=",".join(f"+{f}" for f in sorted(config.CPU_FEATURES -
                                                                                          {"bmi2"})),
               NUMBA_CACHE_DIR=str(REPO / ".cache" / "numba-nobmi2"))
    return env


def run(mode: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """This script for `mode` in a child process (its environment: _env), output captured."""
    return subprocess.run([sys.executable, str(Path(__file__)), mode], cwd=REPO, env=_env(mode),
                          capture_output=True, text=True, timeout=timeout)


def _avx2_products() -> list:
    """gemm and gemv of the formats whose fast paths differ between 256 and 512 bits (q32 8-row groups, the Q4_K /
    Q6_K ymm gemms, Q4_K's tokens in the lanes in both orders), on shapes with partial tiles, against the
    reference."""
    import numpy as np

    import quant_reference as R
    from kernels.ggml_type import GGMLType as G
    from kernels.matmul import Weight, matmul
    from kernels.order import Order
    from kernels.quants._simd import HAS_AVX2
    from kernels.quants._simd512 import HAS_AVX512

    assert HAS_AVX2 and not HAS_AVX512
    bad = []
    for t in [G.Q4_0, G.Q4_1, G.Q5_0, G.Q5_1, G.Q8_0, G.Q4_K, G.Q6_K]:
        K, N, T = 512, 37, 35
        raw = R.random_weight_bytes(t, N, K, np.random.default_rng(900 + int(t)))
        w = Weight(t, raw.reshape(-1), K, N, "w")
        x = np.random.default_rng(901 + int(t)).standard_normal((T, K)).astype(np.float32)
        ref = R.matmul(t, raw, x, "x86")
        out = np.empty((T, N), np.float32)
        matmul(w, x, out)
        one = np.empty((1, N), np.float32)
        matmul(w, x[3:4], one)
        if not (np.array_equal(out, ref) and np.array_equal(one[0], ref[3])):
            bad.append(t.name)
        if t == G.Q4_K:  # llama.cpp's batch order (repacked rows: N % 8 == 0): 32 tokens per 64-weight pair
            raw = R.random_weight_bytes(t, 40, K, np.random.default_rng(902))
            w = Weight(t, raw.reshape(-1), K, 40, "w")
            out = np.empty((T, 40), np.float32)
            matmul(w, x, out, Order.LLAMA)
            if not (np.array_equal(out[:32], R.matmul(t, raw, x[:32], "x86-sb"))
                    and np.array_equal(out[32:], R.matmul(t, raw, x[32:], "x86"))):
                bad.append("Q4_K llama order")
    return bad


def _no_bmi2_products() -> list:
    """Every IQ1_S, IQ1_M, IQ2_S and IQ3_S case of ggml's own products (tests/data), in both orders."""
    import numpy as np

    from conftest import harness_cases
    from kernels.matmul import Weight, matmul
    from kernels.order import Order
    from kernels.quants import iq1, iq_grid

    assert iq1.HAS_AVX2 and not iq1.HAS_BMI2
    bad = []
    for typ, K, N, T, raw, x, ref in harness_cases("iq1.bin") + harness_cases("iq_grid.bin"):
        if typ not in (iq1.IQ1_S, iq1.IQ1_M, iq_grid.IQ2_S, iq_grid.IQ3_S):
            continue
        for order in (Order.LLAMA,) if T > 1 else (Order.LLAMA, Order.SINGLE):
            out = np.empty((T, N), np.float32)
            matmul(Weight(typ, raw.copy(), K, N), x.copy(), out, order)
            if not np.array_equal(out.view(np.uint32), ref.view(np.uint32)):
                bad.append((typ, K, N, T, order.name))
    return bad


if __name__ == "__main__":
    sys.path[:0] = [str(REPO), str(REPO / "tests")]
    print("BAD", {"avx2": _avx2_products, "no-bmi2": _no_bmi2_products}[sys.argv[1]]())
