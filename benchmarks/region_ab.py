"""A decoded token with its blocks in one parallel region or with a region per operation, in one process (issue #20).

kernels/layer.py runs a token's blocks in ONE parallel region (decode_layers_region_for) where the products are
32-weight formats, and with a parallel region per product and attention otherwise (decode_layers_for). This
times both on the same context, alternating, so that the machine's drift falls on both alike:

    python benchmarks/region_ab.py [--model M] [--tokens 64] [--rounds 11] [--threads 2]

Each round resets the context, decodes a 4-token prompt, then --tokens greedy tokens one at a time (depths 4 to
4 + tokens, as `synapse bench`'s tg); prints the best and median ms a token of each form over the rounds after
the first (which compiles), and whether their last logits have the same bits.
"""

from __future__ import annotations

from _common import REPO  # first: the repository root on the import path

import argparse
import collections
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    from kernels import layer
    from synapse_cli.session import open_session

    ctx = open_session(args.model, n_ctx=1024, n_threads=args.threads, show_progress=False).ctx
    spent = collections.defaultdict(list)
    last = {}
    for r in range(args.rounds):
        for form in (("per op", "one region") if r % 2 else ("one region", "per op")):
            layer.ONE_REGION = form == "one region"
            ctx.reset()
            logits = ctx.decode([1, 2, 3, 4])
            t0 = time.perf_counter()
            for _ in range(args.tokens):
                logits = ctx.decode([int(np.argmax(logits.reshape(-1, logits.shape[-1])[-1]))])
            if r:
                spent[form].append((time.perf_counter() - t0) / args.tokens)
            last[form] = logits.copy()
    layer.ONE_REGION = True
    print(f"# {time.strftime('%H:%M', time.gmtime())} UTC, {args.model}, {args.threads} threads, {args.tokens} tokens"
          f" from depth 4, {args.rounds - 1} rounds")
    for form, ts in spent.items():
        ts = sorted(ts)
        print(f"{form:10s}  best {ts[0] * 1e3:.3f} ms, median {ts[len(ts) // 2] * 1e3:.3f} ms a token")
    print("same logits" if np.array_equal(*last.values()) else "DIFFERENT logits")


if __name__ == "__main__":
    main()
