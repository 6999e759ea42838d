"""llama-perplexity and `synapse perplexity` on the same model, text and flags, one after the other in one run;
not a test. Prints each tool's wall time (process start to exit, model load included, as a user waits), its
final estimate, and the ratio. Run on an idle machine (two threads: any other process stalls them).

    .venv/bin/python benchmarks/perplexity_speed.py --llama /path/to/llama-perplexity \\
        -m models/SmolLM2-135M-Instruct.Q4_1.gguf -c 128 --chunks 8 [-t 2] [--reps 2]

Both run llama.cpp's defaults otherwise (flash attention auto, F16 cache); synapse in its default
(batch-invariant) order. The text is ../shared/fixtures/perplexity-corpus.txt unless -f is given.
"""

from __future__ import annotations

from _common import FIXTURES, REPO  # first: the repository root on the import path

import argparse
import os
import re
import subprocess
import sys
import time


def _run(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({p.returncode}): {p.stderr.strip().splitlines()[-1:]}")
    m = re.search(r"Final estimate: PPL = ([\d.]+) \+/- ([\d.]+)", p.stdout + p.stderr)
    return dt, m.group(0) if m else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama", required=True, help="llama-perplexity binary (llama.cpp 0c1e570)")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-f", "--file", default=str(FIXTURES / "perplexity-corpus.txt"))
    ap.add_argument("-c", "--ctx-size", type=int, default=128)
    ap.add_argument("--chunks", type=int, default=-1)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    a = ap.parse_args()
    common = ["-m", a.model, "-f", a.file, "-c", str(a.ctx_size), "--chunks", str(a.chunks), "-t", str(a.threads)]
    synapse = [sys.executable, "-m", "synapse_cli", "perplexity", *common]
    llama = [a.llama, *common]
    _run(synapse)  # the kernels compiled once (numba cache), not counted
    print(f"model {os.path.basename(a.model)}, -c {a.ctx_size}, --chunks {a.chunks}, -t {a.threads}")
    for r in range(a.reps):
        tl, fl = _run(llama)
        ts, fs = _run(synapse)
        print(f"rep {r + 1}: llama-perplexity {tl:6.2f} s ({fl})   synapse {ts:6.2f} s ({fs})   "
              f"synapse / llama.cpp speed {tl / ts:.2f}x")


if __name__ == "__main__":
    main()
