"""Where a forward pass's time goes, operation by operation (issue #20): each GraphOps method of the untraced
forward pass (synapse_cli/graph_ops.py) timed around its calls.

    python benchmarks/decode_ops.py [--model M] [--threads 2] [--tokens 100]      decoded tokens at depth ~110
    python benchmarks/decode_ops.py --prefill 512                                  one batch (best of 3)

Prints, per operation, its time per token (or per batch), its calls and the time per call; what is left is
the Python between the operations. The wrapper adds well under a microsecond a call. Run on an idle machine.
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
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=100, help="decoded tokens timed")
    ap.add_argument("--prefill", type=int, default=0, help="time one batch of this many tokens instead")
    ap.add_argument("--op-by-op", action="store_true", help="decoded tokens op by op (not one call per block)")
    args = ap.parse_args()

    from synapse_cli import graph_ops
    from synapse_cli.session import open_session

    sess = open_session(args.model, n_ctx=max(1024, args.prefill + 16), n_threads=args.threads, show_progress=False)
    ctx = sess.ctx
    if args.op_by_op:
        ctx.one_call_blocks = False
    spent: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for name, f in list(vars(graph_ops.GraphOps).items()):
        if callable(f) and not name.startswith("_"):
            def timed(self, *a, _f=f, _n=name):
                t0 = time.perf_counter()
                r = _f(self, *a)
                spent[_n] += time.perf_counter() - t0
                calls[_n] += 1
                return r
            setattr(graph_ops.GraphOps, name, timed)

    if args.prefill:
        toks = np.random.default_rng(0).integers(100, 10000, args.prefill)
        best = None
        for _ in range(4):  # the first compiles and warms; best of the other 3
            ctx.reset()
            spent.clear()
            calls.clear()
            t0 = time.perf_counter()
            ctx.decode(toks)
            total = time.perf_counter() - t0
            if best is None or total < best[0]:
                best = (total, dict(spent), dict(calls))
        total, sp, cl = best
        n, unit = 1, f"pp{args.prefill}: {total * 1e3:.1f} ms ({args.prefill / total:.1f} t/s)"
    else:
        ctx.decode(list(range(1, 100)))
        for _ in range(10):
            ctx.decode([42])
        spent.clear()
        calls.clear()
        t0 = time.perf_counter()
        for _ in range(args.tokens):
            ctx.decode([42])
        total = time.perf_counter() - t0
        sp, cl, n = dict(spent), dict(calls), args.tokens
        unit = f"token: {total / n * 1e3:.3f} ms (depth {ctx.n_past - n}..{ctx.n_past})"
    print(f"{unit}, {args.model}, {args.threads} threads")
    for name, s in sorted(sp.items(), key=lambda kv: -kv[1]):
        print(f"  {name:10s} {s / n * 1e3:8.3f} ms  {cl[name] / n:5.0f} calls  {s / cl[name] * 1e6:8.1f} us/call")
    print(f"  {'the rest':10s} {(total - sum(sp.values())) / n * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
