"""The prompt-batch half of a cold first run's kernel compilation, in a second process.

On a first run (empty kernel cache) `session.warm_up` decodes one token to compile the single-token kernels;
the first prompt then compiles the batch kernels (gemm, batched attention). Compilation is single-threaded, so
while the main process compiles the first half, this process (`python -m synapse_cli.warm ...`) opens the same
model and context settings and decodes a 16-token batch, which compiles the second half into the shared
numba cache; the main process then loads it from there. Nothing it computes is used.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def spawn(model_path: str, n_ctx: int, n_ubatch: int, cache_type_k: str, cache_type_v: str,
          batch_invariant: bool, flash_attn: bool) -> subprocess.Popen | None:
    """Start the batch warm-up process (None if it cannot start)."""
    args = [sys.executable, "-m", "synapse_cli.warm", model_path, "--n-ctx", str(min(n_ctx, 512) or 512),
            "--n-ubatch", str(n_ubatch), "--ctk", cache_type_k, "--ctv", cache_type_v,
            "--batch-invariant", str(int(batch_invariant)), "--flash-attn", str(int(flash_attn))]
    env = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    try:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env)
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--n-ubatch", type=int, default=512)
    ap.add_argument("--ctk", default="f16")
    ap.add_argument("--ctv", default="f16")
    ap.add_argument("--batch-invariant", type=int, default=1)
    ap.add_argument("--flash-attn", type=int, default=1)
    a = ap.parse_args(argv)
    from .model import Context, Model

    model = Model.load(a.model)
    ctx = Context(model, n_ctx=a.n_ctx, n_ubatch=a.n_ubatch, cache_type_k=a.ctk, cache_type_v=a.ctv, n_threads=1,
                  batch_invariant=bool(a.batch_invariant), flash_attn=bool(a.flash_attn))
    ctx.decode([0] * 16)  # (a 16-token batch: every batch path a short prompt takes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
