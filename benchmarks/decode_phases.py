"""Decode speed over time inside ONE process (issue #20's stability question): is a slow run a slow process
(memory placement, page size, thread placement: fixed at start) or a slow moment of the machine?

Every window restarts the context, decodes a 59-token prompt, then times up to 100 single tokens (at most 4 s)
at the same depths, so the windows differ only in time. Prints t/s per window.

    python benchmarks/decode_phases.py [--model M] [--seconds 60] [--threads 2]
"""

from __future__ import annotations

from _common import REPO  # first: the repository root on the import path

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    from synapse_cli.session import open_session

    ctx = open_session(args.model, n_ctx=512, n_threads=args.threads, show_progress=False).ctx
    rates = []
    end = time.time() + args.seconds
    while time.time() < end:
        ctx.reset()
        ctx.decode(list(range(1, 60)))
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 4 and n < 100:
            ctx.decode([42])
            n += 1
        rates.append(n / (time.perf_counter() - t0))
    print(f"{args.model}, {args.threads} threads, t/s per window: " + " ".join(f"{r:.1f}" for r in rates))
    print(f"min {min(rates):.1f}  max {max(rates):.1f}  ({max(rates) / min(rates) - 1:.0%} apart)")


if __name__ == "__main__":
    main()
