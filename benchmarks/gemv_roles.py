"""Single-token products of one model's matrices by role, streamed from memory and hot in cache (issue #20).

    python benchmarks/gemv_roles.py [--model models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf] [--threads 2]

For Qwen2.5-Coder-1.5B Q4_K_M (`make models-large`): the Q6_K and the Q4_K `ffn_down` matrices and the Q4_K
`ffn_up` matrices, each set run in turn (1.1 GB model: every matrix is cold when its turn comes round; best of
30 passes), one matrix of each set repeated (hot: in L2/L3), and the output matrix. GB/s of weight bytes.
The same product through `kernels.matmul` as decoding uses. Run on an idle machine.
"""

from __future__ import annotations

from _common import REPO  # first: the repository root on the import path

import argparse
import time

import numpy as np


def streamed(ws, x, out, passes: int = 30) -> float:
    from kernels.matmul import matmul

    for w in ws:
        matmul(w, x, out)
    best = min(_timed(lambda: [matmul(w, x, out) for w in ws]) for _ in range(passes))
    return sum(w.packed[0].nbytes for w in ws) / best / 1e9


def hot(w, x, out, calls: int = 300) -> float:
    from kernels.matmul import matmul

    for _ in range(20):
        matmul(w, x, out)
    best = min(_timed(lambda: [matmul(w, x, out) for _ in range(calls // 10)]) for _ in range(10)) / (calls // 10)
    return w.packed[0].nbytes / best / 1e9


def _timed(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    from kernels.config import set_num_threads
    from kernels.ggml_type import type_name
    from synapse_cli.model import Model

    set_num_threads(args.threads)
    m = Model.load(args.model)
    E, F = m.hparams.n_embd, m.hparams.n_ff
    rng = np.random.default_rng(0)
    xf, xe = (rng.standard_normal((1, n)).astype(np.float32) for n in (F, E))
    of, oe = np.empty((1, E), np.float32), np.empty((1, F), np.float32)
    sets = {}
    for L in m.layers:
        sets.setdefault(f"{type_name(L.ffn_down.ggml_type)} ffn_down", []).append(L.ffn_down)
        sets.setdefault(f"{type_name(L.ffn_up.ggml_type)} ffn_up", []).append(L.ffn_up)
    parts = []
    for name, ws in sorted(sets.items()):
        x, o = (xf, of) if "ffn_down" in name else (xe, oe)
        parts.append(f"{name} x{len(ws)} streamed {streamed(ws, x, o):.1f}, hot {hot(ws[0], x, o):.1f}")
    out = m.output
    parts.append(f"{type_name(out.ggml_type)} output {streamed([out], xe, np.empty((1, out.ne1), np.float32), 5):.1f}")
    print(f"{args.model}, {args.threads} threads, GB/s: " + "; ".join(parts))


if __name__ == "__main__":
    main()
