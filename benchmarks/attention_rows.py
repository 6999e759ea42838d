"""The one-row attention kernel's two forms in ONE process (issue #20): a prompt's rows one at a time
(`flash_attn._one_row_parallel`, the path of every row before the batch kernel ran on this CPU) against the batch
kernel (`flash_attn_rows.one_row_tiles`, which flash_attn_ext takes where `rows_kernel_applies`), alternating
calls; and one head's soft-max scalar (`_soft_max_row`) against 16 cells at a time (`_soft_max_row16`). Random
F16 caches; checks that each pair gives the same bits.

    python benchmarks/attention_rows.py [--cases smol,smol_d,q15,q15_d] [--threads 2] [--no-softmax]

Prints ms per call (median of 7 alternations) and ns per head and cell per thread; then the soft-max in ns per
head and cell (SmolLM2's 9 heads over 2,100 cells, one thread, median of 300). Run it on an idle machine.
"""

from __future__ import annotations

from _common import REPO  # noqa: F401  (first: the repository root on the import path)

import argparse
import time

import numpy as np

CASES = {  # name: (H, Hkv, D, T, depth)
    "smol": (9, 3, 64, 512, 0), "smol_d": (9, 3, 64, 512, 2048),
    "q15": (12, 2, 128, 512, 0), "q15_d": (12, 2, 128, 512, 2048),
}


def prompts(cases: str, threads: int) -> None:
    from kernels.config import set_num_threads
    from kernels.flash_attn import _one_row_parallel, head_parts
    from kernels.flash_attn_rows import one_row_tiles

    set_num_threads(threads)
    rng = np.random.default_rng(0)
    print(f"# {time.strftime('%H:%M', time.gmtime())} UTC, {threads} threads: ms per call, ns per head and cell "
          "and thread")
    for name in cases.split(","):
        H, G, D, T, depth = CASES[name]
        n_kv = depth + T
        q = (rng.standard_normal((T, H, D)) * 2).astype(np.float32)
        k16 = (rng.standard_normal((n_kv, G, D)) * 1.5).astype(np.float16).view(np.uint16)
        v16 = rng.standard_normal((n_kv, G, D)).astype(np.float16).view(np.uint16)
        kv_pos = np.arange(n_kv, dtype=np.int32)
        q_pos = np.arange(depth, depth + T, dtype=np.int32)
        scale = np.float32(0.125)
        parts = head_parts(T, G, H // G, threads)
        outs = [np.zeros((T, H * D), np.float32) for _ in range(2)]
        calls = (lambda: _one_row_parallel(q, k16, v16, n_kv, kv_pos, q_pos, scale, outs[0], parts, threads),
                 lambda: one_row_tiles(q, k16, v16, n_kv, kv_pos, q_pos, scale, outs[1], threads))
        times: list[list[float]] = [[], []]
        for f in calls:
            f()
        for _ in range(7):
            for i, f in enumerate(calls):
                t0 = time.perf_counter()
                f()
                times[i].append(time.perf_counter() - t0)
        cells = H * int(np.minimum(n_kv, q_pos + 1).sum())
        rows, batch = (float(np.median(t)) for t in times)
        same = np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
        print(f"{name:7s} H/Hkv/D {H}/{G}/{D} T {T} depth {depth}: rows one at a time {rows * 1e3:7.2f} "
              f"({rows / cells * 1e9 * threads:5.1f} ns), batch kernel {batch * 1e3:7.2f} "
              f"({batch / cells * 1e9 * threads:5.1f} ns): {batch / rows:.2f}x time, "
              f"{'same bits' if same else 'DIFFERENT bits'}")


def soft_max() -> None:
    from numba import njit

    from kernels.flash_attn import VEC_EXPF, _soft_max_row, _soft_max_row16

    H, n = 9, 2100
    rng = np.random.default_rng(1)
    sc = (rng.standard_normal(H * n) * 8).astype(np.float32)
    vis = np.arange(n, dtype=np.int64)
    ms = [np.empty((H, n + 16), np.float32) for _ in range(2)]
    vs = [np.empty((H, n + 16), np.float32) for _ in range(2)]
    xs = np.empty(n + 32, np.float32)

    @njit
    def scalar(ms, vs, xs):
        s = np.float32(0)
        for h in range(H):
            s += _soft_max_row(sc, h * n, vis, n, np.float32(0.125), ms[h], vs[h])
        return s

    @njit
    def lanes(ms, vs, xs):
        s = np.float32(0)
        for h in range(H):
            s += _soft_max_row16(sc, h * n, vis, n, np.float32(0.125), ms[h], vs[h], xs)
        return s

    same = scalar(ms[0], vs[0], xs) == lanes(ms[1], vs[1], xs) and all(
        np.array_equal(a[0][:, :n], a[1][:, :n]) for a in (ms, vs))
    times: list[list[float]] = [[], []]
    for _ in range(300):
        for i, (f, m, v) in enumerate(((scalar, ms[0], vs[0]), (lanes, ms[1], vs[1]))):
            t0 = time.perf_counter()
            f(m, v, xs)
            times[i].append(time.perf_counter() - t0)
    a, b = (float(np.median(t)) / (H * n) * 1e9 for t in times)
    print(f"soft-max, {H} heads x {n} cells: scalar {a:.2f} ns, 16 cells at a time {b:.2f} ns a head and cell "
          f"({b / a:.2f}x time), {'same bits' if same else 'DIFFERENT bits'}; the kernels use 16 lanes: {VEC_EXPF}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-softmax", action="store_true")
    args = ap.parse_args()
    prompts(args.cases, args.threads)
    if not args.no_softmax:
        soft_max()


if __name__ == "__main__":
    main()
