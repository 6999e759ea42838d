"""What a numba parallel region costs against a spin barrier inside one (issue #20; kernels/spin.py).

    python benchmarks/region_cost.py [--threads 2] [--n 200000]

Times, from compiled code, (1) n empty parallel regions (a prange of one iteration a thread, as the single-token
products start one), and (2) n barriers (kernels/spin.barrier) met by the threads of ONE region. Prints us each.
"""

from __future__ import annotations

from _common import REPO  # noqa: F401  (first: the repository root on the import path)

import argparse
import time

import numpy as np

from kernels import config
from kernels.spin import STATE_SIZE, barrier


@config.pjit
def _empty_region(a, nt):
    for c in config.numba.prange(nt):
        a[16 * c] += 1.0


@config.jit
def _regions(a, nt, n):
    for _ in range(n):
        _empty_region(a, nt)


@config.pjit
def _barriers(a, nt, n):
    st = np.zeros(STATE_SIZE, np.int64)
    for c in config.numba.prange(nt):
        gen = 0
        for _ in range(n):
            a[16 * c] += 1.0
            gen = barrier(st, nt, gen)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=200000)
    args = ap.parse_args()
    config.set_num_threads(args.threads)
    nt = config.get_num_threads()
    a = np.zeros(16 * nt)
    _regions(a, nt, 10)
    _barriers(a, nt, 10)
    best = {}
    for _ in range(3):
        for name, f in (("empty parallel region", _regions), ("barrier in one region", _barriers)):
            t0 = time.perf_counter()
            f(a, nt, args.n)
            best[name] = min(best.get(name, 1e9), (time.perf_counter() - t0) / args.n)
    print(f"# {time.strftime('%H:%M', time.gmtime())} UTC, {nt} threads, best of 3 x {args.n}")
    for name, t in best.items():
        print(f"{name:22s} {t * 1e6:6.2f} us")


if __name__ == "__main__":
    main()
