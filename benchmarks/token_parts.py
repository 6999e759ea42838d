"""Where a decoded token's time goes, by subtraction in ONE process (issue #20): the one-call token
(kernels/layer.decode_layers_for) with parts of every block left out, the variants taking turns token by token.

    python benchmarks/token_parts.py [--model M] [--depth 200] [--rounds 40]

A variant of kernels/layer.py is written to .cache/token_parts/layer_parts.py with each part of `_block` under a test of a
constant bit mask (1 Q/K/V product, 2 attention, 4 output product, 8 gate/up, 16 down, 32 rope, cache stores,
norms and SwiGLU); each variant runs 4 tokens from the same saved state, in turns, forward and back. Then the
products alone with every block reading layer 0's weights (hot: they stay in L2/L3) against their own (cold:
streamed from memory), on 2 threads and on 1. Prints the median token and what leaving each part out saves.
The left-out variants compute wrong tokens; nothing is checked but the time.
"""

from __future__ import annotations

from _common import REPO  # first: the repository root on the import path

import argparse
import importlib
import sys
import time
from pathlib import Path

import numpy as np

PARTS = {"Q/K/V": 1, "attention": 2, "output": 4, "gate/up": 8, "down": 16, "small ops": 32}
_GUARDED = [  # (first line of the statement in _block, its bit); each statement is one call
    ("    _product(QKV, qkv_pre,", 1), ("    one_row_attend(q_r,", 2), ("    _product(O, o_pre,", 4),
    ("    _product(GATE_UP, gu_pre,", 8), ("    _product(DOWN, down_pre,", 16), ("    _rope_qk_serial(", 32),
    ("    _store_float(F16, k_cache,", 32), ("    _store_float(F16, v_cache,", 32),
    ("    _add_rms_norm_mul_serial(attn_out,", 32), ("    _swiglu_serial(", 32),
    ("    _add_rms_norm_mul_serial(ffn_out,", 32),
]


def variant_module(into: Path):
    """kernels/layer.py with _block's parts under `if not (SKIP & bit)` and SKIP a constant of decode_layers_for."""
    src = (REPO / "kernels" / "layer.py").read_text()
    lines = src.splitlines()
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        bit = next((b for head, b in _GUARDED if line.startswith(head)), None)
        if bit is None:
            out.append(line)
            i += 1
            continue
        out.append(f"    if not (SKIP & {bit}):")
        depth = 0
        while True:  # the statement's lines (until its parentheses close), indented one level more
            depth += lines[i].count("(") - lines[i].count(")")
            out.append("    " + lines[i])
            i += 1
            if depth <= 0:
                break
    src = "\n".join(out) + "\n"
    for old, new in (("def _block(QKV,", "def _block(SKIP, QKV,"), ("_block(QKV, O,", "_block(SKIP, QKV, O,"),
                     ("def decode_layers_for(QKV: int, O: int, GATE_UP: int, DOWN: int):",
                      "def decode_layers_for(QKV: int, O: int, GATE_UP: int, DOWN: int, SKIP: int = 0):")):
        if old not in src:
            raise SystemExit(f"token_parts.py: kernels/layer.py changed ({old!r} not found); update the benchmark")
        src = src.replace(old, new)
    src = src.replace("        _block(SKIP, QKV, O, GATE_UP, DOWN, lw,", "        _block(0, QKV, O, GATE_UP, DOWN, lw,")
    if src.count("if not (SKIP &") != len(_GUARDED):
        raise SystemExit("token_parts.py: not every part of _block was found; update the benchmark")
    (into / "layer_parts.py").write_text(src)
    sys.path.insert(0, str(into))
    return importlib.import_module("layer_parts")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--depth", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()

    import kernels.layer as layer
    from kernels import config
    from synapse_cli.session import open_session

    # (the variant module's folder is kept: numba's cache then serves the next run)
    where = REPO / ".cache" / "token_parts"
    where.mkdir(parents=True, exist_ok=True)
    parts = variant_module(where)
    skip = [0]
    layer.decode_layers_for = lambda *kinds: parts.decode_layers_for(*kinds, skip[0])
    ctx = open_session(args.model, n_ctx=args.depth + 64, n_threads=2, show_progress=False).ctx
    ctx.decode(np.random.default_rng(0).integers(100, 5000, args.depth))
    state = ctx.save_state()
    if ctx.layer_list() is None:
        raise SystemExit("this model's blocks do not run as one call a token")

    def run(variants: dict, rounds: int) -> dict:
        """variant name -> (skip mask, layer list, threads): median seconds a token."""
        times: dict = {name: [] for name in variants}
        for r in range(rounds + 1):
            for name in (list(variants) if r % 2 else list(variants)[::-1]):
                skip[0], ctx._layer_list, threads = variants[name]
                config.set_num_threads(threads)
                ctx.load_state(state)
                for i in range(4):
                    t0 = time.perf_counter()
                    ctx.decode(np.array([1000 + i]))
                    if r:  # (round 0 compiles)
                        times[name].append(time.perf_counter() - t0)
        config.set_num_threads(2)
        return {name: float(np.median(t)) for name, t in times.items()}

    real = ctx.layer_list()
    print(f"# {Path(args.model).name}, depth {args.depth}, {time.strftime('%H:%M', time.gmtime())} UTC: "
          "median ms a token")
    variants = {"whole token": (0, real, 2)}
    variants.update({f"without {p}": (bit, real, 2) for p, bit in PARTS.items()})
    variants["without all six"] = (63, real, 2)
    got = run(variants, args.rounds)
    base = got["whole token"]
    for name, t in got.items():
        print(f"  {name:22s} {t * 1e3:7.3f}   {'' if t == base else f'saves {(base - t) * 1e3:6.3f}'}")

    hot = parts._list_of_one(real[0])
    for _ in range(len(real) - 1):
        parts._append(hot, real[0])
    products = 1 | 4 | 8 | 16
    rest = 63 & ~products
    variants = {"products, cold, 2 threads": (rest, real, 2), "products, hot, 2 threads": (rest, hot, 2),
                "products, cold, 1 thread": (rest, real, 1), "products, hot, 1 thread": (rest, hot, 1),
                "none": (63, real, 2)}
    got = run(variants, args.rounds // 2)
    nbytes = sum((w.packed[0] if w.packed else w.raw).nbytes for L in ctx.model.layers
                 for w in (L.attn_q, L.attn_k, L.attn_v, L.attn_output, L.ffn_gate, L.ffn_up, L.ffn_down))
    for name, t in got.items():
        if name != "none":
            dt = t - got["none"]
            print(f"  {name:26s} {dt * 1e3:7.3f} ms of products, {nbytes / dt / 1e9:5.1f} GB/s of weights")


if __name__ == "__main__":
    main()
