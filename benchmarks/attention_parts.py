"""The batch attention kernel's parts measured by subtraction (issue #20): kernels/flash_attn_rows.py run as it is
and with one part left out, in one process, alternating calls.

Each variant is the module's source with one part's loop emptied (the text replaced is checked to be there), loaded
from a temporary folder with its own numba cache; the outputs of the variants are wrong by design, only their time
counts. Parts: `scores` (the raw scores, _scores64; the scratch zeroed so the soft-max sees finite values),
`softmax` (online_soft_max16 over the chunk), `vkq` (the F16 accumulator chains), `convert` (the chunk's K and V
to F32), and `softmax+vkq`. A prompt of SmolLM2's shape (9 query heads, 3 KV heads, D 64, 512 tokens from depth
0, random F16 caches) on one thread.

    python benchmarks/attention_parts.py [--tokens 512] [--rounds 9]

Prints each variant's best time and ns per (row, cell), and what leaving the part out saved.
"""

from __future__ import annotations

from _common import REPO  # noqa: F401  (first: the repository root on the import path)

import argparse
import importlib
import os
import sys
import tempfile
import time

import numpy as np

_SCORES = ("        if D == 64:\n            _scores64(", "        if D == 64:\n            pass\n        elif D == -1:\n"
           "            _scores64(")
_SC_ZERO = ("    sc = np.empty((rows, ROWS_CHUNK), np.float32)", "    sc = np.zeros((rows, ROWS_CHUNK), np.float32)")
_SOFTMAX = ("            for c in range(0, cn16, 16):\n                x = add16",
            "            for c in range(0, 0, 16):\n                x = add16")
_VKQ = ("        na = f16_arith_dims(D) // 64\n        for i in range(nt):",
        "        na = f16_arith_dims(D) // 64\n        for i in range(0):")
_CONVERT = ("            for d in range(0, D, 16):\n                store16(kb", "            for d in range(0, 0, 16):\n"
            "                store16(kb")
VARIANTS = {"all": [], "scores": [_SCORES, _SC_ZERO], "softmax": [_SOFTMAX], "vkq": [_VKQ], "convert": [_CONVERT],
            "softmax+vkq": [_SOFTMAX, _VKQ]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="attention_parts-")
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(tmp, "cache")  # before kernels.config imports numba
    from kernels.config import set_num_threads

    set_num_threads(1)
    source = open(os.path.join(REPO, "kernels", "flash_attn_rows.py")).read()
    sys.path.insert(0, tmp)
    mods = {}
    for name, edits in VARIANTS.items():
        text = source
        for old, new in edits:
            if old not in text:
                sys.exit(f"attention_parts: kernels/flash_attn_rows.py no longer has the loop of {name!r}")
            text = text.replace(old, new)
        module = "attention_parts_" + name.replace("+", "_")
        with open(os.path.join(tmp, module + ".py"), "w") as f:
            f.write(text)
        mods[name] = importlib.import_module(module)

    H, G, D, T = 9, 3, 64, args.tokens
    rng = np.random.default_rng(0)
    q = (rng.standard_normal((T, H, D)) * 2).astype(np.float32)
    k16 = (rng.standard_normal((T, G, D)) * 1.5).astype(np.float16).view(np.uint16)
    v16 = rng.standard_normal((T, G, D)).astype(np.float16).view(np.uint16)
    pos = np.arange(T, dtype=np.int32)
    out = np.zeros((T, H * D), np.float32)
    cells = H * T * (T + 1) // 2  # (row, visible cell) pairs of the causal mask

    def call(m):
        m.one_row_tiles(q, k16, v16, T, pos, pos, np.float32(0.125), out, 1)

    for m in mods.values():
        call(m)  # compile
    best = dict.fromkeys(mods, float("inf"))
    for _ in range(args.rounds):
        for name, m in mods.items():
            t0 = time.perf_counter()
            call(m)
            best[name] = min(best[name], time.perf_counter() - t0)
    print(f"# {time.strftime('%H:%M', time.gmtime())} UTC, {H}/{G} heads, D {D}, {T} tokens, one thread, best of "
          f"{args.rounds}")
    for name, t in best.items():
        saved = "" if name == "all" else f"   without it: {(best['all'] - t) * 1e3:6.2f} ms saved " \
                                          f"({(best['all'] - t) / cells * 1e9:.2f} ns)"
        print(f"{name:12s} {t * 1e3:7.2f} ms {t / cells * 1e9:6.2f} ns per (row, cell){saved}")


if __name__ == "__main__":
    main()
