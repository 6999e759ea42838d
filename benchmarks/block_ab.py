"""One token's blocks op by op, in one jitted call each, or all in one jitted call (kernels/layer.py), in ONE
process (issue #20). The machine's speed drifts by 20-40 % within a minute (benchmarks/decode_phases.py), so the
three paths take turns token by token, in the order ABC CBA over one decode, all at the same depths; they give
the same bits (checked on the first tokens).

    python benchmarks/block_ab.py [--model M] [--prompt 64] [--tokens 600] [--threads 2]

Prints the median and mean time of a token for each path.
"""

from __future__ import annotations

from _common import REPO  # first: the repository root on the import path

import argparse
import time

import numpy as np

PATHS = ("op by op", "one call a block", "one call a token")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--prompt", type=int, default=64, help="tokens decoded first (the depth)")
    ap.add_argument("--tokens", type=int, default=600, help="tokens timed, a third on each path")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    from synapse_cli.graph_ops import GraphOps
    from synapse_cli.session import open_session

    ctx = open_session(args.model, n_ctx=args.prompt + args.tokens + 64, n_threads=args.threads,
                       show_progress=False).ctx
    block, layers = GraphOps.block, GraphOps.layers
    off = lambda self, *a: False  # noqa: E731

    def use(path: int) -> None:
        GraphOps.block = block if path >= 1 else off
        GraphOps.layers = layers if path == 2 else off

    prompt = np.random.default_rng(0).integers(100, 5000, args.prompt)
    ctx.decode(prompt)
    times: dict[int, list[float]] = {p: [] for p in range(len(PATHS))}
    for i in range(args.tokens):
        cycle = i % 6
        path = cycle if cycle < 3 else 5 - cycle  # ABC CBA
        tok = np.array([1000 + i])
        before = ctx.save_state() if i < 12 else None
        use(path)
        t0 = time.perf_counter()
        got = ctx.decode(tok)
        times[path].append(time.perf_counter() - t0)
        if before is not None:  # the first tokens again on the other paths, from the same state: the same logits
            after = ctx.save_state()
            for other in range(len(PATHS)):
                ctx.load_state(before)
                use(other)
                assert np.array_equal(ctx.decode(tok), got), f"token {i}: {PATHS[path]} and {PATHS[other]} differ"
            ctx.load_state(after)
    use(2)
    print(f"{args.model}, {args.threads} threads, depth {args.prompt}..{args.prompt + args.tokens}")
    for p, name in enumerate(PATHS):
        ms = np.array(times[p]) * 1e3
        print(f"  {name:17s} median {np.median(ms):.3f} ms  mean {ms.mean():.3f} ms  ({len(ms)} tokens)")
    a = np.median(times[0])
    for p in (1, 2):
        print(f"  {PATHS[p]}: {np.median(times[p]) / a:.3f}x the time of op by op")


if __name__ == "__main__":
    main()
