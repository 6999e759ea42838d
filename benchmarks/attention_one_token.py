"""Flash attention for one query token, serial against parallel (issue #20): `kernels.flash_attn`'s one-row kernel
on random F16 caches for the head shapes of SmolLM2 (9 heads / 3 KV / 64), Qwen2.5-1.5B (12 / 2 / 128) and
Qwen2.5-0.5B (14 / 2 / 64) at 20, 120 and 400 visible cells, on the calling thread (`_one_row_items`) and in a
parallel region (the form flash_attn_ext takes past ONE_ROW_PARALLEL_MIN_FLOPS: `_one_row_parallel`, or
`_one_token_phases` where `in_phases`). Best of 5 x 1000 calls, hot cache; checks the two give the same bits.

    python benchmarks/attention_one_token.py [--threads 2]
"""

from __future__ import annotations

from _common import REPO  # noqa: F401  (first: the repository root on the import path)

import argparse
import time

import numpy as np


def best_us(f, n: int = 1000) -> float:
    for _ in range(20):
        f()
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import kernels.flash_attn as fa
    from kernels.config import set_num_threads

    set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    for H, G, D in ((9, 3, 64), (12, 2, 128), (14, 2, 64)):
        for n_used, n_kv in ((20, 256), (120, 256), (400, 512)):
            q = rng.standard_normal((1, H, D)).astype(np.float32)
            k, v = (rng.standard_normal((n_kv, G, D)).astype(np.float16).view(np.uint16) for _ in range(2))
            kv_pos = np.where(np.arange(n_kv) < n_used, np.arange(n_kv), -1).astype(np.int32)
            pos = np.array([n_used - 1], np.int32)
            o1, o2 = np.empty((1, H * D), np.float32), np.empty((1, H * D), np.float32)
            # the two forms called directly: ONE_ROW_PARALLEL_MIN_FLOPS is a global numba froze into the jitted
            # on_calling_thread, so setting it from Python would change nothing
            parts = fa.head_parts(1, G, H // G, args.threads)
            scale = np.float32(0.125)
            serial = best_us(lambda: fa._one_row_items(q, k, v, n_kv, kv_pos, pos, scale, o1, 1, 0, 1))
            if fa.in_phases(1, n_kv, G, parts, args.threads):
                parallel = best_us(lambda: fa._one_token_phases(q, k, v, n_kv, kv_pos, pos, scale, o2, args.threads))
            else:
                parallel = best_us(lambda: fa._one_row_parallel(q, k, v, n_kv, kv_pos, pos, scale, o2, parts,
                                                                args.threads))
            same = np.array_equal(o1.view(np.uint32), o2.view(np.uint32))
            print(f"H {H:2d} Hkv {G} D {D:3d}, {n_used:3d} cells: serial {serial:6.1f} us, parallel {parallel:6.1f} us "
                  f"(head_parts {fa.head_parts(1, G, H // G, args.threads)}){'' if same else '  DIFFERENT BITS'}")


if __name__ == "__main__":
    main()
