"""Where a decoded token's time goes: one layer's products against the whole token (issue #20).

    python benchmarks/decode_products.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf] [--threads 2]

Times, with a warm kernel cache, (a) `Context.decode` of one token at a short depth and (b) each product of
layer 0 for one token through kernels.matmul / matmul_many (its weights hot in cache, 2000 calls each), then
prints the layers' share of the token: what is left is the output product, the small element-wise kernels and
the Python between the calls. Run it on an idle machine.
"""

from __future__ import annotations

from _common import REPO  # first: the repository root on the import path

import argparse
import time

import numpy as np


def per_call_us(f, n: int) -> float:
    for _ in range(50):
        f()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()

    from kernels.matmul import matmul, matmul_many
    from synapse_cli.session import open_session

    sess = open_session(args.model, n_ctx=512, n_threads=args.threads, show_progress=False)
    ctx, hp = sess.ctx, sess.ctx.hp
    ctx.decode([1, 2, 3])
    token_ms = per_call_us(lambda: ctx.decode([42]), 64) / 1e3

    L = ctx.model.layers[0]
    E, F, D = hp.n_embd, hp.n_ff, hp.n_embd_head
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, E)).astype(np.float32)
    h = rng.standard_normal((1, F)).astype(np.float32)
    q, k, v = (np.empty((1, n * D), np.float32) for n in (hp.n_head, hp.n_head_kv, hp.n_head_kv))
    gate, up, o = np.empty((1, F), np.float32), np.empty((1, F), np.float32), np.empty((1, E), np.float32)
    xo = rng.standard_normal((1, hp.n_head * D)).astype(np.float32)
    parts = {
        "qkv": per_call_us(lambda: matmul_many(L.qkv, x, [q, k, v]), args.calls),
        "attn_output": per_call_us(lambda: matmul(L.attn_output, xo, o), args.calls),
        "gate_up": per_call_us(lambda: matmul_many(L.gate_up, x, [gate, up]), args.calls),
        "ffn_down": per_call_us(lambda: matmul(L.ffn_down, h, o), args.calls),
    }
    layer_us = sum(parts.values())
    print(f"token: {token_ms:.2f} ms ({args.model}, depth ~{ctx.n_past}, {args.threads or 'default'} threads)")
    print("layer 0 products, one token, weights hot: "
          + ", ".join(f"{k} {v:.1f} us" for k, v in parts.items()) + f"; {layer_us:.1f} us a layer")
    all_ms = layer_us * hp.n_layer / 1e3
    print(f"x {hp.n_layer} layers: {all_ms:.2f} ms ({100 * all_ms / token_ms:.0f} % of the token)")


if __name__ == "__main__":
    main()
