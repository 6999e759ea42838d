"""One query token's flash attention, the two parallel forms side by side in ONE process (issue #20): work cut
by heads (`flash_attn._one_row_parallel`, each thread whole heads) against three phases
(`flash_attn._one_token_phases`: scores cut by cells, soft-max by heads, the F16 accumulator by 16-lane units).
Random F16 caches, 24 of them in turn so that K and V come from memory as in decoding; alternating the two forms,
median of 6 rounds; checks they give the same bits. `in_phases` picks between them in the model.

    python benchmarks/one_token_phases.py [--shapes 9/3/64,14/2/64,12/2/128] [--cells 256,512,1024,2048]
"""

from __future__ import annotations

from _common import REPO  # noqa: F401  (first: the repository root on the import path)

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="9/3/64,14/2/64,12/2/128", help="heads/KV heads/head dim, comma-separated")
    ap.add_argument("--cells", default="256,512,1024,2048")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import kernels.flash_attn as fa
    from kernels.config import set_num_threads

    set_num_threads(args.threads)
    nt = args.threads
    rng = np.random.default_rng(0)
    for H, G, D in (tuple(map(int, s.split("/"))) for s in args.shapes.split(",")):
        parts = fa.head_parts(1, G, H // G, nt)
        for n in (int(c) for c in args.cells.split(",")):
            caches = [tuple(rng.standard_normal((n, G, D)).astype(np.float16).view(np.uint16) for _ in range(2))
                      for _ in range(24)]
            kv_pos = np.arange(n, dtype=np.int32)
            q = rng.standard_normal((1, H, D)).astype(np.float32)
            qp = np.array([n - 1], np.int32)
            outs = [np.empty((1, H * D), np.float32) for _ in range(2)]
            scale = np.float32(0.125)
            forms = (lambda k, v, o: fa._one_row_parallel(q, k, v, n, kv_pos, qp, scale, o, parts, nt),
                     lambda k, v, o: fa._one_token_phases(q, k, v, n, kv_pos, qp, scale, o, nt))
            for form, o in zip(forms, outs):
                form(*caches[0], o)
            assert np.array_equal(outs[0], outs[1]), "the two forms differ"
            times: list[list[float]] = [[], []]
            for r in range(6):
                for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                    t0 = time.perf_counter()
                    for k16, v16 in caches:
                        forms[i](k16, v16, outs[i])
                    times[i].append((time.perf_counter() - t0) / len(caches) * 1e6)
            a, b = np.median(times[0]), np.median(times[1])
            chosen = "phases" if fa.in_phases(1, n, G, parts, nt) else "heads"
            print(f"{H}/{G}/{D}, {n} cells, {nt} threads: by heads {a:.1f} us, in phases {b:.1f} us "
                  f"({b / a:.2f}x); the model takes: {chosen}", flush=True)


if __name__ == "__main__":
    main()
