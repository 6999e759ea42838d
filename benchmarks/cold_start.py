"""The first run on a fresh machine: `synapse decode` of the default model with an empty kernel cache.

    python benchmarks/cold_start.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf] [--runs 2]

Each run points NUMBA_CACHE_DIR at a new empty folder and times the whole command (`make run`'s decode:
-p "The capital of France is" -n 32) from process start to exit, then once more with that cache warm. Prints
one line per run and the machine's load average (run it on an idle machine: compilation is single-threaded per
process, and synapse compiles in two processes on a cold cache). The cold run's helper process goes on
compiling the batch kernels after the command has exited; each run waits for it before going on.
"""

from __future__ import annotations

from _common import REPO  # first: the repository root on the import path

import argparse
import os
import subprocess
import sys
import tempfile
import time


def run(model: str, cache: str) -> float:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "synapse_cli", "decode", "-m", model, "-p", "The capital of France is",
                        "-n", "32"], cwd=REPO, env=env, capture_output=True)
    if r.returncode != 0:
        sys.exit(r.stderr.decode())
    return time.perf_counter() - t0


def wait_for_helpers() -> None:
    """Until no synapse_cli.warm process is left (it would share the CPU with the next timing)."""
    while subprocess.run(["pgrep", "-f", "synapse_cli.warm"], capture_output=True).returncode == 0:
        time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}; CPUs: {len(os.sched_getaffinity(0))}")
    for i in range(a.runs):
        with tempfile.TemporaryDirectory() as cache:
            cold = run(a.model, cache)
            wait_for_helpers()
            warm = run(a.model, cache)
        print(f"run {i + 1}: cold cache {cold:6.1f} s, warm cache {warm:5.1f} s")


if __name__ == "__main__":
    main()
