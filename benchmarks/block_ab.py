"""One token's blocks in one jitted call each (kernels/layer.py) against the op-by-op path, in ONE process
(issue #20). The machine's speed drifts by 20-40 % within a minute (benchmarks/decode_phases.py), so the two
paths alternate token by token in the order ABBA over one decode, both at the same depths; both give the same
bits (checked on every token).

    python benchmarks/block_ab.py [--model M] [--prompt 64] [--tokens 400] [--threads 2]

Prints the median and mean time of a token for each path.
"""

from __future__ import annotations

from _common import REPO  # first: the repository root on the import path

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--prompt", type=int, default=64, help="tokens decoded first (the depth)")
    ap.add_argument("--tokens", type=int, default=400, help="tokens timed, half on each path")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    from synapse_cli.graph_ops import GraphOps
    from synapse_cli.session import open_session

    ctx = open_session(args.model, n_ctx=args.prompt + args.tokens + 16, n_threads=args.threads,
                       show_progress=False).ctx
    blocks = GraphOps.block
    ops_only = lambda self, *a: False  # noqa: E731
    prompt = np.random.default_rng(0).integers(100, 5000, args.prompt)
    ctx.decode(prompt)
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(args.tokens):
        on = (i % 2 == 0) != ((i // 2) % 2 == 0)  # ABBA
        tok = np.array([1000 + i])
        before = ctx.save_state() if i < 16 else None
        GraphOps.block = blocks if on else ops_only
        t0 = time.perf_counter()
        got = ctx.decode(tok)
        times[on].append(time.perf_counter() - t0)
        if before is not None:  # the first tokens again on the other path, from the same state: the same logits
            after = ctx.save_state()
            ctx.load_state(before)
            GraphOps.block = ops_only if on else blocks
            assert np.array_equal(ctx.decode(tok), got), f"token {i}: the two paths differ"
            ctx.load_state(after)
    GraphOps.block = blocks
    print(f"{args.model}, {args.threads} threads, depth {args.prompt}..{args.prompt + args.tokens}")
    for on, name in ((False, "op by op       "), (True, "one call/block ")):
        ms = np.array(times[on]) * 1e3
        print(f"  {name} median {np.median(ms):.3f} ms  mean {ms.mean():.3f} ms  ({len(ms)} tokens)")
    a, b = np.median(times[False]), np.median(times[True])
    print(f"  blocks: {b / a:.3f}x the time a token ({a / b:.3f}x the speed)")


if __name__ == "__main__":
    main()
