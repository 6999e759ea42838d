"""Running the matrix: llama-bench's timing method per test (warm-up, cleared cache, untimed depth prefill,
timed prompt and generation), the read-bandwidth probe behind the roofline figure, and `run_bench`, which
loads each model once and prints each row as it is measured."""

from __future__ import annotations

import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, TextIO

import numpy as np

from .compare import add_compare, row_params, run_llama_bench
from .matrix import BenchParams, Instance, make_instances
from .printers import make_printer
from .results import (COMPARE_FIELDS, FIELDS, FIXED_FIELDS, ROOFLINE_FIELDS, STATS_FIELDS, Result, build_commit,
                      cpu_info, test_time_now)
from ..model_info import model_desc, model_n_params, model_size

# ------------------------------------------------------------------------------------------------
# memory read bandwidth and bytes per generated token (the roofline)
# ------------------------------------------------------------------------------------------------

def read_bandwidth(n_threads: int, size_bytes: int = 1 << 30, repeats: int = 3) -> float:
    """Best-of-`repeats` streaming-read bandwidth in bytes/s with `n_threads` threads.

    A `size_bytes` buffer (default 1 GiB, far larger than any cache) is filled once (so every page is
    mapped), split into n_threads contiguous chunks, and each thread reduces its chunk with
    np.bitwise_or.reduce over uint64 words (one OR per 8 bytes, far below memory speed; numpy drops
    the GIL inside the reduction). One untimed pass warms up, then the fastest of `repeats` timed
    passes counts: bytes / seconds.
    """
    n_threads = max(1, int(n_threads))
    n_words = max(n_threads, size_bytes // 8)
    buf = np.empty(n_words, dtype=np.uint64)  # (n_words,)
    buf.fill(0x0101010101010101)
    chunks = np.array_split(buf, n_threads)
    best = math.inf
    with ThreadPoolExecutor(max_workers=n_threads) as pool:
        list(pool.map(np.bitwise_or.reduce, chunks))
        for _ in range(max(1, repeats)):
            t0 = time.perf_counter()
            list(pool.map(np.bitwise_or.reduce, chunks))
            best = min(best, time.perf_counter() - t0)
    del chunks, buf
    return n_words * 8 / best


def weight_bytes_per_token(reader, n_vocab: int) -> int:
    """Weight bytes one generated token reads: every tensor once except the embedding table, of which
    one row is gathered; a tied output head (no output.weight) reads the whole table as the output."""
    emb = reader.tensor("token_embd.weight")
    emb_bytes = emb.nbytes if emb is not None else 0
    total = sum(t.nbytes for t in reader.tensors if t.name != "token_embd.weight")
    total += emb_bytes // max(1, n_vocab)
    if reader.tensor("output.weight") is None:
        total += emb_bytes
    return total


def tg_bytes_per_token(weight_bytes: int, n_layer: int, n_embd_k_gqa: int, n_embd_v_gqa: int,
                       type_k: str, type_v: str, n_depth: int, n_gen: int) -> float:
    """Average bytes a generated token of a tg test must read: all weights once (see
    weight_bytes_per_token) plus, per layer, the K and V rows of every filled cache cell
    (n_depth + i + 1 cells for the i-th token). Padding cells are not counted: this is the compulsory
    traffic, the same for synapse and llama.cpp, so the roofline compares them on one scale."""
    elem = {"f16": 2, "f32": 4}
    per_cell = n_layer * (n_embd_k_gqa * elem[type_k] + n_embd_v_gqa * elem[type_v])
    cells = sum(n_depth + i + 1 for i in range(n_gen))
    return weight_bytes + per_cell * cells / max(1, n_gen)


# ------------------------------------------------------------------------------------------------
# the runner
# ------------------------------------------------------------------------------------------------

class Progress:
    """Where progress goes (always stderr): llama-bench's `--progress` lines, or a transient Rich
    status line when stderr is a terminal, or nothing."""

    def __init__(self, lines: bool, err: TextIO | None = None, live: bool | None = None):
        self.lines = lines
        self.err = err if err is not None else sys.stderr
        self.live = (not lines) and (live if live is not None else self.err.isatty())
        self._status = None

    def __enter__(self):
        if self.live:
            from rich.console import Console

            self._status = Console(file=self.err).status("synapse bench")
            self._status.start()
        return self

    def __exit__(self, *exc):
        if self._status is not None:
            self._status.stop()
            self._status = None

    @contextmanager
    def paused(self):
        """Clear the status line while a result row is printed (stdout may be the same terminal)."""
        if self._status is None:
            yield
            return
        self._status.stop()
        try:
            yield
        finally:
            self._status.start()

    def step(self, idx: int, count: int, what: str, test: str = "") -> None:
        if self.lines:
            print(f"synapse-bench: benchmark {idx}/{count}: {what}", file=self.err, flush=True)
        elif self._status is not None:
            self._status.update(f"benchmark {idx}/{count} {test}: {what}")

    def note(self, text: str) -> None:
        if self.lines:
            print(f"synapse-bench: {text}", file=self.err, flush=True)
        elif self._status is not None:
            self._status.update(text)


class DepthState:
    """llama-bench's ctx_state: the KV cache after prefilling `n_depth` tokens, restored by the next
    repetition or test at the same depth instead of prefilling again (untimed either way). `key` says
    which model, cache types and context size the snapshot belongs to.

    Uses the context's save_state()/load_state(state) when it has them; otherwise copies the cache
    arrays (k_cache, v_cache lists), the cell positions (cell_pos) and n_past."""

    ARRAYS = ("cell_pos",)

    def __init__(self):
        self.key: tuple = ()
        self.state = None

    def save(self, ctx, key: tuple) -> None:
        if hasattr(ctx, "save_state"):
            self.key, self.state = key, ctx.save_state()
        elif hasattr(ctx, "k_cache"):
            extra = {a: getattr(ctx, a).copy() for a in self.ARRAYS if hasattr(ctx, a)}
            self.key = key
            self.state = ([a.copy() for a in ctx.k_cache], [a.copy() for a in ctx.v_cache], extra, ctx.n_past)

    def restore(self, ctx, key: tuple) -> bool:
        """Put the snapshot into ctx; False when there is none for `key` or it does not fit."""
        if key != self.key or self.state is None:
            return False
        if hasattr(ctx, "load_state"):
            ctx.load_state(self.state)
            return True
        k, v, extra, n_past = self.state
        if len(k) != len(ctx.k_cache) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(k, ctx.k_cache)):
            return False
        for dst, src in zip(ctx.k_cache, k):
            np.copyto(dst, src)
        for dst, src in zip(ctx.v_cache, v):
            np.copyto(dst, src)
        for name, arr in extra.items():
            np.copyto(getattr(ctx, name), arr)
        ctx.n_past = n_past
        return True


class TokenSource:
    """Random token ids as llama-bench draws them (BOS first in a prompt when the vocab adds one);
    drawn before the clock starts."""

    def __init__(self, n_vocab: int, add_bos: bool, bos_id: int, seed: int = 0):
        self.n_vocab = n_vocab
        self.add_bos = add_bos
        self.bos_id = bos_id
        self.rng = np.random.default_rng(seed)

    def prompt(self, n: int, n_batch: int) -> list[np.ndarray]:
        """Batches of a prompt of n tokens: [(<= n_batch,) int32, ...]."""
        ids = self.rng.integers(0, self.n_vocab, size=n, dtype=np.int32)
        if n and self.add_bos:
            ids[0] = self.bos_id
        return [ids[s : s + n_batch] for s in range(0, n, n_batch)]

    def gen(self, n: int) -> list[list[int]]:
        """n single-token batches; the first is BOS when the vocab adds one (llama-bench's test_gen)."""
        ids = self.rng.integers(0, self.n_vocab, size=n, dtype=np.int32)
        if n and self.add_bos:
            ids[0] = self.bos_id
        return [[int(t)] for t in ids]


def run_test(ctx, inst: Instance, reps: int, warmup: bool, tokens: TokenSource, progress: Progress,
             idx: int = 1, count: int = 1, depth_state: DepthState | None = None,
             clock: Callable[[], int] = time.perf_counter_ns, state_key: tuple = ()) -> list[int]:
    """llama-bench's per-instance loop on a fresh context; returns the timed nanoseconds per repetition.

    `ctx` needs decode(ids), reset(), n_past and (for depth snapshots) k_cache/v_cache lists of arrays.
    """
    name = inst.test_name
    progress.step(idx, count, "starting", name)
    # -embd 1: every prompt token an output (llama.cpp's embeddings, pooling none), into one buffer as llama.cpp's
    outputs = {} if not (inst.embeddings and inst.n_prompt) else dict(
        all_logits=True, out=np.empty((min(inst.n_prompt, inst.n_batch), ctx.model.hparams.n_vocab), np.float32))
    if warmup:  # on the fresh context, as llama-bench (no clear before it)
        if inst.n_prompt > 0:
            progress.step(idx, count, "warmup prompt run", name)
            for batch in tokens.prompt(inst.n_prompt, inst.n_batch):
                ctx.decode(batch, **outputs)
        if inst.n_gen > 0:
            progress.step(idx, count, "warmup generation run", name)
            for batch in tokens.gen(1):
                ctx.decode(batch)
    samples: list[int] = []
    for rep in range(reps):
        ctx.reset()
        if inst.n_depth > 0:
            key = state_key + (inst.n_depth,)
            if depth_state is not None and depth_state.restore(ctx, key):
                progress.step(idx, count, f"depth run {rep + 1}/{reps} (cached)", name)
            else:
                progress.step(idx, count, f"depth run {rep + 1}/{reps}", name)
                for batch in tokens.prompt(inst.n_depth, inst.n_batch):
                    ctx.decode(batch)
                if depth_state is not None:
                    depth_state.save(ctx, key)
        prompt = tokens.prompt(inst.n_prompt, inst.n_batch) if inst.n_prompt > 0 else []
        gen = tokens.gen(inst.n_gen) if inst.n_gen > 0 else []
        if prompt:
            progress.step(idx, count, f"prompt run {rep + 1}/{reps}", name)
        if gen:
            progress.step(idx, count, f"generation run {rep + 1}/{reps}", name)
        t0 = clock()
        for batch in prompt:
            ctx.decode(batch, **outputs)
        for batch in gen:
            ctx.decode(batch)
        samples.append(clock() - t0)
    return samples


@dataclass
class LoadedModel:
    """What the runner needs from a loaded model (a real `Model` or a test double)."""

    model: object
    filename: str
    desc: str
    size: int
    n_params: int
    n_vocab: int
    add_bos: bool
    bos_id: int
    weight_bytes_per_token: int
    n_layer: int
    n_embd_k_gqa: int
    n_embd_v_gqa: int


def describe_model(model, filename: str) -> LoadedModel:
    """Facts about a loaded synapse `Model` for the result fields and the roofline."""
    from tokenizer.vocab import load_vocab

    r, hp = model.reader, model.hparams
    vocab = load_vocab(r)  # llama_vocab_get_add_bos / llama_vocab_bos
    return LoadedModel(
        model=model, filename=filename, desc=model_desc(r), size=model_size(r), n_params=model_n_params(r),
        n_vocab=hp.n_vocab, add_bos=vocab.add_bos, bos_id=vocab.bos_id,
        weight_bytes_per_token=weight_bytes_per_token(r, hp.n_vocab), n_layer=hp.n_layer,
        n_embd_k_gqa=hp.n_embd_k_gqa, n_embd_v_gqa=hp.n_embd_k_gqa,
    )


def make_result(inst: Instance, lm: LoadedModel, samples: list[int], test_time: str, env: dict,
                fixed: dict | None = None) -> Result:
    f = {
        "build_commit": env["build_commit"], "build_number": env.get("build_number", 0),
        "cpu_info": env["cpu_info"], **FIXED_FIELDS, **(fixed or {}), "repack": inst.repack,
        "model_filename": lm.filename, "model_type": lm.desc, "model_size": lm.size,
        "model_n_params": lm.n_params, "n_batch": inst.n_batch, "n_ubatch": inst.n_ubatch,
        "n_threads": inst.n_threads, "type_k": inst.type_k, "type_v": inst.type_v, "flash_attn": inst.flash_attn,
        "load_mode": inst.load_mode, "n_prompt": inst.n_prompt, "n_gen": inst.n_gen, "n_depth": inst.n_depth,
        "test_time": test_time,
    }
    return Result({k: f[k] for k in FIELDS if k not in STATS_FIELDS}, samples)


def add_roofline(res: Result, inst: Instance, lm: LoadedModel, bandwidth: float | None) -> None:
    """roofline_pct = bytes per generated token * t/s / read bandwidth * 100 (tg tests only)."""
    if not inst.is_tg or not bandwidth:
        res.extras.update({k: None for k in ROOFLINE_FIELDS})
        return
    b = tg_bytes_per_token(lm.weight_bytes_per_token, lm.n_layer, lm.n_embd_k_gqa, lm.n_embd_v_gqa,
                           inst.type_k, inst.type_v, inst.n_depth, inst.n_gen)
    res.extras["roofline_bytes_per_token"] = int(round(b))
    res.extras["roofline_read_bw"] = int(round(bandwidth))
    res.extras["roofline_pct"] = 100.0 * b * res.avg_ts / bandwidth


# ------------------------------------------------------------------------------------------------
# the whole run
# ------------------------------------------------------------------------------------------------

def _default_load(path: str, show_progress: bool, load_mode: str = "auto", repack: bool = True):
    from ..session import load_model

    return load_model(path, show_progress, load_mode, repack=repack)


def _default_context(model, inst: Instance):
    from ..model import Context

    return Context(model, n_ctx=inst.n_ctx, n_batch=inst.n_batch, n_ubatch=inst.n_ubatch,
                   cache_type_k=inst.type_k, cache_type_v=inst.type_v, n_threads=inst.n_threads,
                   flash_attn=inst.flash_attn != 0)


def run_bench(p: BenchParams, out: TextIO | None = None, err: TextIO | None = None, *,
              load: Callable = None, describe: Callable = describe_model, make_context: Callable = None,
              bandwidth: Callable[[int], float] = read_bandwidth, env: dict | None = None,
              live_progress: bool | None = None, clock: Callable[[], int] = time.perf_counter_ns) -> list[Result]:
    """Run every test of `p`, printing rows to `out` as they finish and progress to `err`.

    The hooks (`load`, `describe`, `make_context`, `bandwidth`, `env`, `clock`) default to the real
    model, the numpy bandwidth probe and this machine; tests substitute doubles.
    """
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    load = load or _default_load
    make_context = make_context or _default_context
    env = env or {"build_commit": build_commit(), "build_number": 0, "cpu_info": cpu_info()}
    insts = make_instances(p)
    if not insts:
        raise ValueError("no tests to run (every -p, -n and -pg is 0)")

    bw: dict[int, float] = {}
    notes: list[str] = []
    with Progress(p.progress, err, live_progress) as prog:
        if p.roofline and any(i.is_tg for i in insts):
            for nt in dict.fromkeys(i.n_threads for i in insts if i.is_tg):
                prog.note(f"measuring read bandwidth with {nt} thread(s)")
                bw[nt] = bandwidth(nt)
                notes.append(f"roofline: read bandwidth {bw[nt] / 1e9:.2f} GB/s with {nt} thread(s) "
                             f"(numpy streaming read, best of 3)")
        extras = (ROOFLINE_FIELDS if p.roofline else []) + (COMPARE_FIELDS if p.compare else [])
        printer = make_printer(p.output, out, extras)
        with prog.paused():
            printer.header(p)
        results: list[Result] = []
        depth_state = DepthState()
        lm = None
        loaded_mode = None
        tokens = None
        for idx, inst in enumerate(insts, 1):
            if lm is None or (lm.filename, loaded_mode) != (inst.model, (inst.load_mode, inst.repack)):
                lm = None  # drop the previous model before mapping the next
                prog.note(f"loading {inst.model}")
                lm = describe(load(inst.model, False, inst.load_mode, inst.repack), inst.model)
                loaded_mode = (inst.load_mode, inst.repack)
                tokens = TokenSource(lm.n_vocab, lm.add_bos, lm.bos_id)
                depth_state = DepthState()
            ctx = make_context(lm.model, inst)
            if p.delay:  # llama-bench's --delay: cool off before each test
                time.sleep(p.delay)
            test_time = test_time_now()
            samples = run_test(ctx, inst, p.reps, not p.no_warmup, tokens, prog, idx, len(insts), depth_state,
                               clock, state_key=(inst.model, inst.type_k, inst.type_v, inst.n_ctx, inst.flash_attn))
            del ctx
            res = make_result(inst, lm, samples, test_time, env, dict(inst.fixed))
            if p.roofline:
                add_roofline(res, inst, lm, bw.get(inst.n_threads))
            if p.compare:  # llama-bench on the same test, now (compare.py: why per row)
                if p.progress:
                    print(f"synapse-bench: running {p.compare} for --compare ({inst.test_name})", file=err,
                          flush=True)
                with prog.paused():  # its stderr passes through
                    ref = run_llama_bench(p.compare, row_params(p, inst))
                if not ref:
                    print(f"warning: --compare: {p.compare} printed no result for {inst.test_name}; its 'vs "
                          "llama.cpp' cell stays empty", file=err, flush=True)
                add_compare(res, ref, len(p.flash_attn) > 1)
            results.append(res)
            with prog.paused():
                printer.test(res)
    printer.footer({**env, "notes": notes})
    out.flush()
    return results
