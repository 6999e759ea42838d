"""A decoded token at two builds of the single-token products in ONE process (issue #20): this tree's
kernels/layer.py, kernels/quants/gemv1.py, q32.py and _simd.py against the same files of an older commit, the
one-call token (kernels/layer.decode_layers_for) of each taking turns, 4 tokens at a time from the same state. On a noisy VM,
separate processes differ by more than such a change; side by side they see the same machine.

    python benchmarks/decode_ab.py --base 4ea709c [--model M] [--depth 200] [--rounds 40]

The base's files become the modules layer_base / gemv1_base / q32_base / _simd_base in .cache/decode_ab (the rest
of kernels/ is this tree's). Prints the median token of each and checks that the two gave the same logits.
"""

from __future__ import annotations

from _common import REPO, base_module, base_q32  # first: the repository root on the import path

import argparse
import time
from pathlib import Path

import numpy as np


def _base_modules(rev: str, into: Path):
    """layer_base (rev's kernels/layer.py), its products from gemv1_base (rev's kernels/quants/gemv1.py) on
    q32_base (rev's q32.py and _simd.py; the K-quant modules are this tree's)."""
    base_q32(rev, into)
    base_module(rev, "kernels/quants/gemv1.py", "gemv1_base", into,
                [("from . import q32, q4_k, q6_k", "import q32_base as q32\nfrom kernels.quants import q4_k, q6_k")])
    return base_module(rev, "kernels/layer.py", "layer_base", into,
                       [("from kernels.quants.gemv1 import", "from gemv1_base import")])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="git revision to compare with")
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--depth", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()

    import kernels.layer as head
    from synapse_cli.session import open_session

    where = REPO / ".cache" / "decode_ab"  # kept: numba's cache then serves the next run
    where.mkdir(parents=True, exist_ok=True)
    base = _base_modules(args.base, where)
    builds = {"base": base.decode_layers_for, "this tree": head.decode_layers_for}
    use = ["this tree"]
    head.decode_layers_for = lambda *kinds: builds[use[0]](*kinds)
    ctx = open_session(args.model, n_ctx=args.depth + 64, n_threads=2, show_progress=False).ctx
    if ctx.layer_list() is None:
        raise SystemExit("this model's blocks do not run as one call a token")
    ctx.decode(np.random.default_rng(0).integers(100, 5000, args.depth))
    state = ctx.save_state()
    times: dict = {name: [] for name in builds}
    logits: dict = {}
    for r in range(args.rounds + 1):
        for name in (list(builds) if r % 2 else list(builds)[::-1]):
            use[0] = name
            ctx.load_state(state)
            for i in range(4):
                t0 = time.perf_counter()
                got = ctx.decode(np.array([1000 + i]))
                if r:  # (round 0 compiles)
                    times[name].append(time.perf_counter() - t0)
                elif i == 0:
                    logits[name] = np.array(got, copy=True)
    same = np.array_equal(*(v.view(np.uint32) for v in logits.values()))
    t = {name: float(np.median(v)) for name, v in times.items()}
    print(f"# {Path(args.model).name}, depth {args.depth}, {time.strftime('%H:%M', time.gmtime())} UTC, median of "
          f"{len(times['base'])} tokens each: base {args.base} {t['base'] * 1e3:.3f} ms, this tree "
          f"{t['this tree'] * 1e3:.3f} ms ({t['this tree'] / t['base']:.3f}x time), "
          f"{'same logits' if same else 'DIFFERENT logits'}")


if __name__ == "__main__":
    main()
