"""Single-token matmul speed when weights stream from memory vs when they sit in cache.

Runs the fused T=1 matmul over all 28 `ffn_up` matrices of Qwen2.5-Coder-1.5B in turn (1.1 GB model,
so each matrix is cold when it comes round again), and over one matrix repeatedly (hot), for 1 and 2
threads. Needs `make models-large`.

    .venv/bin/python benchmarks/gemv_stream.py
"""

from __future__ import annotations

from _common import REPO  # first: the repository root on the import path

import datetime
import os
import platform
import sys
import time

import numpy as np

from kernels.config import set_num_threads
from kernels.matmul import Weight, matmul
from kernels.gguf import GGUFReader

MODEL = REPO / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def main() -> None:
    print(f"# {' '.join(sys.argv)}  {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC  "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    r = GGUFReader(MODEL)
    ws = []
    for il in range(28):
        t = r.tensor(f"blk.{il}.ffn_up.weight")
        ws.append(Weight(t.ggml_type, t.data, t.ne[0], t.ne[1], name=t.name))
    x = np.random.default_rng(0).standard_normal((1, ws[0].ne0)).astype(np.float32)
    out = np.empty((1, ws[0].ne1), np.float32)
    nbytes = sum(w.packed[0].nbytes for w in ws)
    for nt in (1, 2):
        set_num_threads(nt)
        for w in ws:  # first call of each weight, untimed
            matmul(w, x, out)
        best = 0.0
        for _ in range(3):
            t0 = time.perf_counter()
            for w in ws:
                matmul(w, x, out)
            best = max(best, nbytes / (time.perf_counter() - t0) / 1e9)
        ts = []
        for _ in range(20):
            t0 = time.perf_counter()
            matmul(ws[0], x, out)
            ts.append(time.perf_counter() - t0)
        hot = ws[0].packed[0].nbytes / np.median(ts) / 1e9
        print(f"threads {nt}: streaming {best:5.1f} GB/s   in cache {hot:5.1f} GB/s   ({ws[0].fmt.name}, "
              f"{ws[0].ne0}x{ws[0].ne1})")


if __name__ == "__main__":
    main()
