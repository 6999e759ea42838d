"""The other half of a cold first run's kernel compilation, in a second process.

Compilation is single-threaded, and a first run (empty kernel cache) compiles every kernel the model uses. So
`session.open_session` starts this process (`python -m synapse_cli.warm ...`) before it loads the model: it
opens the same model and context settings, with the weights' packed arrays allocated but not filled
(kernels.quants.base.layout_only: the main process compiles and runs the repacks), and

  * in the batch-invariant order (the default): runs the one-token graph's products (model.WARM_PRODUCTS of
    Context.warm_steps), compiling their kernels into the shared numba cache while the main process compiles
    the other steps', then says so on stdout (the main process waits for that line, then loads them); then, at
    the lowest CPU priority, a 16-token and a 48-token batch, which compile the batch kernels for the next runs
    (the main process decodes short prompts token by token meanwhile: the same bits, Context.single_token_batches),
    then one token, which compiles its blocks as one call (kernels/layer.py; the main process runs them
    op by op meanwhile, Context.one_call_blocks) - this part may outlive the main process;
  * with --llama-batch-order (whose batches must use the batch kernels): the 16-token batch only, which the
    main process waits for.

Nothing it computes is used.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path


ONE_TOKEN_DONE = "one-token products compiled"


def wait_one_token(helper) -> None:
    """Until the helper started by start() has compiled its one-token steps (or has ended)."""
    if helper.stdout is not None:
        helper.stdout.readline()  # its line, or b"" when it ends without it


def _marker(model_path: str, settings: list[str]) -> Path:
    """This model file and these settings' marker stem in the kernel cache folder: `.done` once a warm-up
    process has compiled everything, `.pid` while one runs."""
    import kernels.config  # noqa: F401  (sets NUMBA_CACHE_DIR)

    st = os.stat(model_path)
    key = "\0".join([os.path.realpath(model_path), str(st.st_size), str(st.st_mtime_ns), *settings])
    root = Path(os.environ.get("NUMBA_CACHE_DIR", ".cache/numba")) / "synapse-warm"
    return root / hashlib.sha1(key.encode()).hexdigest()[:16]


def _running(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


def start(model_path: str, n_ctx: int, n_ubatch: int, cache_type_k: str, cache_type_v: str,
          batch_invariant: bool, flash_attn: bool, cold: bool):
    """Before the main process loads the model: (helper process or None, whether the batch kernels are still
    to come). A helper starts on a cold cache (`cold`: the first run only, so that a test suite's many
    settings do not each start one); (None, True) while an earlier run's helper still works on this model and
    these settings."""
    settings = ["--n-ctx", str(min(n_ctx, 512) or 512), "--n-ubatch", str(n_ubatch), "--ctk", cache_type_k,
                "--ctv", cache_type_v, "--batch-invariant", str(int(batch_invariant)),
                "--flash-attn", str(int(flash_attn))]
    try:
        stem = _marker(model_path, settings)
    except OSError:
        return None, False
    if stem.with_suffix(".done").exists():
        return None, False
    if _running(stem.with_suffix(".pid")):
        return None, True
    if not cold:
        return None, False
    env = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    try:
        stem.parent.mkdir(parents=True, exist_ok=True)
        p = subprocess.Popen([sys.executable, "-m", "synapse_cli.warm", model_path, *settings,
                              "--marker", str(stem)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, env=env)
    except OSError:
        return None, False
    return p, True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--n-ubatch", type=int, default=512)
    ap.add_argument("--ctk", default="f16")
    ap.add_argument("--ctv", default="f16")
    ap.add_argument("--batch-invariant", type=int, default=1)
    ap.add_argument("--flash-attn", type=int, default=1)
    ap.add_argument("--marker", default=None)
    a = ap.parse_args(argv)
    stem = Path(a.marker) if a.marker else None
    if stem is not None:
        stem.with_suffix(".pid").write_text(str(os.getpid()))
    from kernels.config import set_work_chunks
    from kernels.quants.base import layout_only

    from .model import WARM_PRODUCTS, Context, Model

    with layout_only():
        model = Model.load(a.model)
    ctx = Context(model, n_ctx=a.n_ctx, n_ubatch=a.n_ubatch, cache_type_k=a.ctk, cache_type_v=a.ctv, n_threads=1,
                  batch_invariant=bool(a.batch_invariant), flash_attn=bool(a.flash_attn))
    if ctx.batch_invariant:
        for name, step in ctx.warm_steps():
            if name in WARM_PRODUCTS:
                step()
        ctx.reset()
        print(ONE_TOKEN_DONE, flush=True)  # (session.warm_up waits for this line)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the main process may be gone by the next output
        os.nice(19)  # the batch kernels are for later runs: yield to the main process's computation
        # the paths of the main process's default threads, one per core (the parallel forms: the batch
        # attention's above all), on the one thread this process has (start: NUMBA_NUM_THREADS=1)
        set_work_chunks(os.cpu_count() or 1)
    ctx.decode([0] * 16)  # (a 16-token batch: every batch path a short prompt takes)
    if ctx.batch_invariant:
        ctx.decode([0] * 48)  # a longer prompt's: the K-quant gemms with the tokens in the lanes (5-8 s each)
        ctx.decode([0])  # one token's blocks as one call, in one parallel region (kernels/layer.py)
        from kernels import layer

        layer.ONE_REGION = False
        ctx.decode([0])  # ... and with a region per product, as tokens over long views take them
    if stem is not None:
        stem.with_suffix(".done").touch()
        stem.with_suffix(".pid").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
