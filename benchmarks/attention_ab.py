"""Flash attention's one-row kernel (the default path of every token) at two builds in ONE process: this
tree's kernels/flash_attn.py against the same file of an older commit, alternating calls, best of N. On a
noisy VM, separate processes differ by more than a kernel change; side by side they see the same machine.

    python benchmarks/attention_ab.py --base 8206d73 [--cases smol,smol_d,q15,q15_d,smol1,q151] [--cold]
                                      [--rows-kernel]

The base commit's kernels/flash_attn.py, flash_attn_rows.py and attention.py are written to a temporary directory as
the modules fa_base / fa_rows_base / attn_base (the rest of kernels/ is this tree's). Cases (heads, KV heads, head dim, tokens,
cells already in the cache): SmolLM2 9/3/64 and Qwen2.5-1.5B 12/2/128, a 512-token prompt at depth 0 and
2048, and one token at depth 700. Prints ms per call and whether the two builds gave the same bits. --rows-kernel:
a prompt's rows by the batch kernel (flash_attn_rows.one_row_tiles) even where flash_attn_ext would not take it.
"""

from __future__ import annotations

from _common import base_module  # first: the repository root on the import path

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CASES = {  # name: (H, Hkv, D, T, depth)
    "smol": (9, 3, 64, 512, 0), "smol_d": (9, 3, 64, 512, 2048), "smol1": (9, 3, 64, 1, 700),
    "smol1_d": (9, 3, 64, 1, 2111), "q151_d": (12, 2, 128, 1, 2111),
    "q15": (12, 2, 128, 512, 0), "q15_d": (12, 2, 128, 512, 2048), "q151": (12, 2, 128, 1, 700),
}


def _base_modules(rev: str, into: Path):
    """fa_base (rev's kernels/flash_attn.py, importing fa_rows_base = rev's kernels/flash_attn_rows.py and attn_base
    = rev's kernels/attention.py)."""
    to_attn = ("from kernels.attention import", "from attn_base import")
    base_module(rev, "kernels/attention.py", "attn_base", into)
    base_module(rev, "kernels/flash_attn_rows.py", "fa_rows_base", into, [to_attn])
    return base_module(rev, "kernels/flash_attn.py", "fa_base", into,
                       [to_attn, ("from kernels.flash_attn_rows import", "from fa_rows_base import")])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="git revision to compare with")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows-kernel", action="store_true", help="call flash_attn_rows.one_row_tiles directly")
    ap.add_argument("--cold", action="store_true", help="evict the caches (read 64 MB) before every call, as "
                    "in decoding, where a layer's weights stream between two attention calls")
    args = ap.parse_args()
    evict = np.ones(64 << 20, np.uint8)

    from kernels import flash_attn as head
    from kernels import flash_attn_rows as head_rows
    from kernels.order import Order

    with tempfile.TemporaryDirectory() as tmp:
        base = _base_modules(args.base, Path(tmp))
        rows = {base: sys.modules["fa_rows_base"], head: head_rows}
        rng = np.random.default_rng(0)
        print(f"# {' '.join(sys.argv)}, {time.strftime('%H:%M', time.gmtime())} UTC, ms per call (best of N)")
        for name in args.cases.split(","):
            H, G, D, T, depth = CASES[name]
            n_kv = depth + T  # not a multiple of 16 for the one-token cases
            q = rng.standard_normal((T, H, D)).astype(np.float32) * 2
            k16 = rng.standard_normal((n_kv, G, D)).astype(np.float16).view(np.uint16)
            v16 = rng.standard_normal((n_kv, G, D)).astype(np.float16).view(np.uint16)
            kv_pos = np.arange(n_kv, dtype=np.int32)
            q_pos = np.arange(depth, depth + T, dtype=np.int32)
            outs = {m: np.zeros((T, H * D), np.float32) for m in (base, head)}
            best = {m: float("inf") for m in outs}
            for _ in range(7 if T > 1 else (60 if args.cold else 300)):
                for m, out in outs.items():
                    if args.cold:
                        evict.sum()
                    t0 = time.perf_counter()
                    if args.rows_kernel and T > 1:
                        rows[m].one_row_tiles(q, k16, v16, n_kv, kv_pos, q_pos, np.float32(0.125), out, args.threads)
                    else:
                        m.flash_attn_ext(q, k16, v16, n_kv, kv_pos, q_pos, 0.125, out, Order.SINGLE, args.threads)
                    best[m] = min(best[m], time.perf_counter() - t0)
            same = np.array_equal(outs[base].view(np.uint32), outs[head].view(np.uint32))
            print(f"{name:7s} H/Hkv/D {H}/{G}/{D} T {T} depth {depth}: base {best[base] * 1e3:8.3f}  "
                  f"this tree {best[head] * 1e3:8.3f}  ({best[head] / best[base]:.2f}x time)  "
                  f"{'same bits' if same else 'DIFFERENT bits'}")


if __name__ == "__main__":
    main()
