"""--compare: run a real llama-bench on each test of the matrix (JSON output) and add its speed and the ratio.

llama-bench runs once per row, right after synapse's run of that row: on a shared machine the speed of both
drifts by 10-30 % within a minute (benchmarks/RESULTS.md), so a ratio is only fair between runs close in time.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from typing import Iterable

from .matrix import BenchParams, Instance
from .results import Result

# ------------------------------------------------------------------------------------------------
# --compare: run llama-bench with the same parameters
# ------------------------------------------------------------------------------------------------

def _join(xs: Iterable) -> str:
    return ",".join(str(x) for x in xs)


def llama_bench_args(p: BenchParams) -> list[str]:
    """llama-bench arguments that reproduce `p`'s test matrix, with JSON on stdout."""
    args: list[str] = []
    for m in p.models:
        args += ["-m", m]
    args += ["-p", _join(p.n_prompt) if p.n_prompt else "0", "-n", _join(p.n_gen) if p.n_gen else "0"]
    for a, b in p.n_pg:
        args += ["-pg", f"{a},{b}"]
    args += ["-d", _join(p.n_depth), "-b", _join(p.n_batch), "-ub", _join(p.n_ubatch),
             "-ctk", _join(p.type_k), "-ctv", _join(p.type_v), "-t", _join(p.n_threads),
             "-r", str(p.reps), "-fa", ",".join({-1: "auto", 0: "off", 1: "on"}[v] for v in p.flash_attn), "-o", "json"]
    if p.load_mode != ["auto"]:
        args += ["-lm", ",".join(p.load_mode)]
    if p.repack != [True]:
        args += ["--repack", ",".join(str(int(r)) for r in p.repack)]
    if p.fixed.get("embeddings", [False]) != [False]:  # (the other fixed fields change nothing on a CPU build)
        args += ["-embd", ",".join(str(int(e)) for e in p.fixed["embeddings"])]
    if p.no_warmup:
        args.append("--no-warmup")
    if p.progress:
        args.append("--progress")
    return args


def row_params(p: BenchParams, inst: Instance) -> BenchParams:
    """p restricted to the one test `inst` (llama-bench's -p / -n / -pg with a single value, 0 for the others)."""
    pp, tg = inst.n_prompt, inst.n_gen
    return dataclasses.replace(
        p, models=[inst.model], n_threads=[inst.n_threads], n_prompt=[pp] if pp and not tg else [],
        n_gen=[tg] if tg and not pp else [], n_pg=[(pp, tg)] if pp and tg else [], n_depth=[inst.n_depth],
        n_batch=[inst.n_batch], n_ubatch=[inst.n_ubatch], cache_types=[(inst.type_k, inst.type_v)],
        flash_attn=[inst.flash_attn], load_mode=[inst.load_mode], repack=[inst.repack],
        fixed={k: [v] for k, v in inst.fixed})


def compare_key(d: dict, with_fa: bool = True) -> tuple:
    """The parameters that identify a row (flash_attn only when several -fa values are compared)."""
    key = (str(d["model_filename"]), int(d["n_prompt"]), int(d["n_gen"]), int(d["n_depth"]),
           int(d["n_threads"]), int(d["n_batch"]), int(d["n_ubatch"]), str(d["type_k"]), str(d["type_v"]))
    return key + (int(d.get("flash_attn", 0)),) if with_fa else key


class CompareError(Exception):
    pass


def run_llama_bench(exe: str, p: BenchParams) -> dict[tuple, dict]:
    """Run llama-bench (its stderr passes through) and index its JSON rows by compare_key."""
    cmd = [exe] + llama_bench_args(p)
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True)
    except OSError as e:
        raise CompareError(f"--compare: cannot run {exe!r}: {e.strerror or e}") from None
    if r.returncode != 0:
        raise CompareError(f"--compare: {exe} exited with status {r.returncode} ({' '.join(cmd[1:])})")
    try:
        rows = json.loads(r.stdout)
        return {compare_key(row, len(p.flash_attn) > 1): row for row in rows}
    except (ValueError, KeyError, TypeError) as e:
        raise CompareError(f"--compare: {exe} did not print llama-bench JSON on stdout ({e})") from None


def add_compare(res: Result, ref: dict[tuple, dict], with_fa: bool = True) -> None:
    row = ref.get(compare_key(res.fields, with_fa))
    if row is None:
        res.extras.update({"llamacpp_avg_ts": None, "vs_llamacpp": None})
        return
    ts = float(row["avg_ts"])
    res.extras["llamacpp_avg_ts"] = ts
    res.extras["vs_llamacpp"] = res.avg_ts / ts if ts > 0 else None


