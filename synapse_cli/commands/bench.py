"""`synapse bench`: prompt-processing and generation speed, measured and printed as llama-bench does.

Flags follow tools/llama-bench/llama-bench.cpp: -m (repeatable or comma list), -p, -n, -pg P,N, -d, -b,
-ub, -t, -ctk, -ctv (each repeatable, comma lists and ranges `first-last[+step|*mult]` allowed), -r,
-o md|csv|json|jsonl|sql, --no-warmup, --progress. Additions: `--no-roofline` (skip the bandwidth
probe and the roofline column) and `--compare PATH_TO_llama-bench` (run llama-bench on each test right
after synapse's run of it, and add a `vs llama.cpp` ratio column). Results go to stdout, progress to stderr.
The method and the output are described in synapse_cli/bench/ and benchmarks/RESULTS.md.

--repack 0|1, --delay and -embd 0|1 (embeddings: every prompt token an output, so the output head runs on each, as
in llama.cpp) as llama-bench; its GPU and thread-placement parameters (-ngl, -sm, -mg, -dev, -ts, -ot, -nkvo, -nopo,
--no-host, --poll, -C, --cpu-strict, ...) are accepted with a note: they change nothing on a CPU build, but each of
their values runs the tests again, as llama-bench's loops do, and goes to the results and to the table's columns
as llama-bench shows them.
"""

from __future__ import annotations

import os

import click

from .llama_flags import FLASH_ATTN_VALUES, KV_CACHE_TYPES, LOAD_MODES

from kernels.errors import SynapseError


def _ints(values: tuple[str, ...], flag: str, minimum: int) -> list[int] | None:
    """Concatenate the lists given to a repeatable flag; None when the flag was not given."""
    from ..bench import parse_int_range

    if not values:
        return None
    out: list[int] = []
    for v in values:
        try:
            got = parse_int_range(v.strip())
        except ValueError as e:
            raise click.ClickException(f"{flag}: {e}") from None
        if not got:
            raise click.ClickException(f"{flag}: range {v!r} is empty")
        out += got
    bad = [x for x in out if x < minimum]
    if bad:
        raise click.ClickException(f"{flag}: {bad[0]} is not allowed (must be >= {minimum})")
    return out


def _split(values: tuple[str, ...]) -> list[str]:
    return [x.strip() for v in values for x in v.split(",") if x.strip()]


def available_threads() -> tuple[int, int]:
    """(default -t, largest -t): the CPUs this process may use, capped by numba's thread pool."""
    import kernels.config  # noqa: F401  (sets NUMBA_CACHE_DIR before numba is imported)
    import numba

    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    max_threads = int(numba.config.NUMBA_NUM_THREADS)
    return max(1, min(cpus, max_threads)), max_threads


def _device(v: str) -> str:
    """-dev: llama-bench's parse_devices_arg on a CPU build, which has no device to pick (the CPU is not one)."""
    v = v.strip()
    if v in ("auto", "none"):
        return v
    names = [n.strip() for n in v.split("/")]
    raise ValueError(f"invalid device: {names[0]}" if all(names) else "invalid device specification")


def _tensor_split(v: str) -> str:
    """-ts: proportions split by ';' or '/', printed as llama-bench does (%.2f up to the last non-zero one)."""
    import re

    parts = [float(x) for x in re.split(r"[;/]+", v) if x != ""]
    if not parts or len(parts) > 16:
        raise ValueError(v)
    last = max([i for i, x in enumerate(parts) if x > 0], default=0)
    return "/".join("%.2f" % x for x in parts[:last + 1])


def _overrides(v: str) -> str:
    """-ot: `pattern=buffer type` pairs split by ';'; the CPU build's only buffer type is CPU."""
    if not v:
        return "none"
    for pair in v.split(";"):
        pattern, _, buft = pair.partition("=")
        if not pattern or buft != "CPU":
            raise ValueError(f"invalid tensor buffer type override {pair!r} (available buffer types: CPU)")
    return v


# llama-bench's parameters that change nothing on a CPU build, or (-embd) only which rows are outputs: (names, its
# field, parse). Each value is one more pass of the tests (a dimension of the test matrix, in llama-bench's loop
# order); it goes to the results' field, and to a markdown column where llama-bench would show one, with a note on
# stderr
_BOOL01 = {"0": False, "1": True}
CPU_IGNORED = {
    ("-ngl", "--n-gpu-layers"): ("n_gpu_layers", int, "no GPU: every layer runs on the CPU"),
    ("-ncmoe", "--n-cpu-moe"): ("n_cpu_moe", int, "no GPU, and no mixture-of-experts architecture"),
    ("-sm", "--split-mode"): ("split_mode", {v: v for v in ("none", "layer", "row", "tensor")}.__getitem__, "no GPU"),
    ("-mg", "--main-gpu"): ("main_gpu", int, "no GPU"),
    ("-nkvo", "--no-kv-offload"): ("no_kv_offload", _BOOL01.__getitem__, "no GPU"),
    ("-nopo", "--no-op-offload"): ("no_op_offload", lambda v: int(_BOOL01[v]), "no GPU"),
    ("-dev", "--device"): ("devices", _device, "no GPU"),
    ("-ts", "--tensor-split"): ("tensor_split", _tensor_split, "no GPU"),
    ("-ot", "--override-tensor"): ("tensor_buft_overrides", _overrides, "every tensor is in CPU memory"),
    ("-embd", "--embeddings"): ("embeddings", _BOOL01.__getitem__, None),
    ("--no-host",): ("no_host", _BOOL01.__getitem__, "no GPU"),
    ("-fitt", "--fit-target"): ("fit_target", int, "no GPU memory to fit"),
    ("-fitc", "--fit-ctx"): ("fit_min_ctx", int, "no GPU memory to fit"),
    ("--poll",): ("poll", int, "how idle threads wait: speed only"),
    ("-C", "--cpu-mask"): ("cpu_mask", str, "CPU affinity is left to the system"),
    ("--cpu-strict",): ("cpu_strict", _BOOL01.__getitem__, "CPU affinity is left to the system"),
    ("-lzm", "--lazy-mode"): ("lazy_mode", {v: v for v in ("on", "auto", "off")}.__getitem__,
                              "these architectures have no per-layer embedding tensors"),
    ("--prio",): (None, int, "thread priority: speed only"),
    ("--numa",): (None, str, "NUMA placement: speed only"),
}


def _cpu_ignored_options(f):
    def note(ctx, param, values):
        if not values:
            return
        names = tuple(param.opts)
        field_name, parse, why = CPU_IGNORED[names]
        vals = [x.strip() for v in values for x in v.split(",")]  # (an -ot group may be empty: "none")
        parsed = []
        for v in vals:
            try:
                parsed.append(parse(v))
            except (ValueError, KeyError) as e:
                msg = str(e) if isinstance(e, ValueError) and str(e) != v else f"invalid value {v!r}"
                raise click.BadParameter(msg, param=param) from None
        if field_name is not None:
            ctx.meta.setdefault("synapse.bench_fixed", {})[field_name] = parsed
        if why is not None:
            click.echo(f"note: {names[0]} is ignored ({why})", err=True)

    for names in CPU_IGNORED:
        f = click.option(*names, f"cpu_{names[-1].lstrip('-').replace('-', '_')}", multiple=True, hidden=True,
                         callback=note, expose_value=False)(f)
    return f


@click.command("bench", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-m", "--model", "models", multiple=True, metavar="FILE", help="GGUF model (repeatable, or comma list).")
@click.option("-p", "--n-prompt", "n_prompt", multiple=True, metavar="N", help="Prompt tokens per pp test (default 512).")
@click.option("-n", "--n-gen", "n_gen", multiple=True, metavar="N", help="Generated tokens per tg test (default 128).")
@click.option("-pg", "n_pg", multiple=True, metavar="P,N", help="Prompt + generation test (repeatable).")
@click.option("-d", "--n-depth", "n_depth", multiple=True, metavar="N", help="Tokens already in the KV cache (default 0).")
@click.option("-b", "--batch-size", "n_batch", multiple=True, metavar="N", help="Logical batch size (default 2048).")
@click.option("-ub", "--ubatch-size", "n_ubatch", multiple=True, metavar="N", help="Micro-batch size (default 512).")
@click.option("-ctk", "--cache-type-k", "type_k", multiple=True, metavar="TYPE",
              help="K cache types, comma list (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1; default f16).")
@click.option("-ctv", "--cache-type-v", "type_v", multiple=True, metavar="TYPE",
              help="V cache types, comma list (default f16; quantized types need flash attention).")
@click.option("-fa", "--flash-attn", "flash_attn", multiple=True, metavar="on|off|auto",
              help="Flash attention, comma list (default auto: on, as llama-bench on CPU).")
@click.option("-lm", "--load-mode", "load_mode", multiple=True, metavar="MODE",
              help="Model loading, comma list (auto, none, mmap, mlock, mmap+mlock, dio; default auto): none and dio "
                   "read the products' weights into memory advised for huge pages, as decode's -lm.")
@click.option("-t", "--threads", "n_threads", multiple=True, metavar="N", help="Threads, e.g. 2 or 1,2 or 1-2 (default: available CPUs).")
@click.option("-r", "--repetitions", "reps", default="5", metavar="N", help="Repetitions of each test (default 5).")
@click.option("-o", "--output", "output", default="md", metavar="md|csv|json|jsonl|sql", help="Output format on stdout (default md).")
@click.option("--repack", "repack", multiple=True, metavar="0|1",
              help="Repack weights at load (1, llama-bench's default) or keep them as stored (0); comma list.")
@click.option("--delay", default=0, type=click.IntRange(min=0), metavar="SECONDS",
              help="Cool off this long before each test (llama-bench's --delay).")
@click.option("-v", "--verbose", is_flag=True, hidden=True, expose_value=False,
              callback=lambda ctx, p, v: v and click.echo("note: -v is ignored (synapse prints no llama.cpp log)",
                                                           err=True))
@_cpu_ignored_options
@click.option("--no-warmup", is_flag=True, help="Skip the warm-up run before each test.")
@click.option("--progress", is_flag=True, help="Print llama-bench style progress lines on stderr.")
@click.option("--no-roofline", is_flag=True, help="Skip the read-bandwidth probe and the roofline column.")
@click.option("--compare", "compare", default=None, metavar="PATH", help="Run this llama-bench on each test right after synapse's run of it and add a 'vs llama.cpp' column.")
@click.option("--probe-mib", default=1024, type=int, hidden=True, help="Size of the bandwidth probe buffer (MiB).")
def command(models, n_prompt, n_gen, n_pg, n_depth, n_batch, n_ubatch, type_k, type_v, flash_attn, load_mode,
            n_threads, reps, output, repack, delay, no_warmup, progress, no_roofline, compare, probe_mib):
    """Measure prompt processing (pp) and generation (tg) speed, as llama-bench.

    Every N accepts a comma list and ranges first-last, first-last+step, first-last*mult
    (e.g. -t 1,2  -p 64-512*2); each combination is one test (one row).
    """
    from .. import bench as B

    if output not in B.PRINTERS:
        raise click.ClickException(f"-o: unknown output format {output!r} (use md, csv, json, jsonl or sql)")
    model_list = _split(models)
    if not model_list:
        raise click.ClickException("no model given: use -m <file.gguf>")
    for m in model_list:
        if not os.path.isfile(m):
            raise click.ClickException(f"failed to load model '{m}': file not found")
    try:
        r = int(reps)
    except ValueError:
        raise click.ClickException(f"-r: {reps!r} is not a number") from None
    if r < 1:
        raise click.ClickException(f"-r: must be >= 1, got {r}")

    pgs = []
    for v in n_pg:
        try:
            pgs.append(B.parse_pg(v))
        except ValueError as e:
            raise click.ClickException(f"-pg: {e}") from None

    tk, tv = _split(type_k) or ["f16"], _split(type_v) or ["f16"]
    for flag, lst in (("-ctk", tk), ("-ctv", tv)):
        bad = [t for t in lst if t not in KV_CACHE_TYPES]
        if bad:
            raise click.ClickException(f"{flag}: invalid cache type {bad[0]!r} ({', '.join(KV_CACHE_TYPES)})")
    pairs = [(a, b) for a in tk for b in tv]  # llama-bench: for type_k: for type_v

    fa_values = {k: {"on": 1, "off": 0, "auto": -1}[v] for k, v in FLASH_ATTN_VALUES.items()}
    fa = []
    for v in _split(flash_attn):
        if v.lower() not in fa_values:
            raise click.ClickException(f"-fa: {v!r} is not on, off or auto")
        fa.append(fa_values[v.lower()])

    load_modes = _split(load_mode) or ["auto"]
    bad = [m for m in load_modes if m not in LOAD_MODES]
    if bad:
        raise click.ClickException(f"-lm: invalid load mode {bad[0]!r} ({', '.join(LOAD_MODES)})")

    repacks = []
    for v in _split(repack):
        if v not in ("0", "1"):
            raise click.ClickException(f"--repack: {v!r} is not 0 or 1")
        repacks.append(v == "1")

    default_t, max_t = available_threads()
    threads = _ints(n_threads, "-t", 1) or [default_t]
    too_many = [t for t in threads if t > max_t]
    if too_many:
        raise click.ClickException(f"-t: {too_many[0]} threads requested but numba can run at most {max_t} "
                                   "(NUMBA_NUM_THREADS)")

    if compare is not None and not (os.path.isfile(compare) and os.access(compare, os.X_OK)):
        raise click.ClickException(f"--compare: {compare!r} is not an executable file")

    params = B.BenchParams(
        models=model_list, n_threads=threads,
        n_prompt=_ints(n_prompt, "-p", 0) or list(B.DEFAULT_N_PROMPT),
        n_gen=_ints(n_gen, "-n", 0) or list(B.DEFAULT_N_GEN),
        n_pg=pgs,
        n_depth=_ints(n_depth, "-d", 0) or list(B.DEFAULT_N_DEPTH),
        n_batch=_ints(n_batch, "-b", 1) or list(B.DEFAULT_N_BATCH),
        n_ubatch=_ints(n_ubatch, "-ub", 1) or list(B.DEFAULT_N_UBATCH),
        cache_types=pairs, flash_attn=fa or [-1], load_mode=load_modes, repack=repacks or [True],
        fixed=dict(click.get_current_context().meta.get("synapse.bench_fixed", {})), delay=delay,
        reps=r, no_warmup=no_warmup,
        progress=progress, output=output, roofline=not no_roofline, compare=compare,
    )
    if not B.make_instances(params):
        raise click.ClickException("no tests to run (every -p, -n and -pg is 0)")
    probe_bytes = max(1, probe_mib) << 20
    try:
        B.run_bench(params, bandwidth=lambda nt: B.read_bandwidth(nt, probe_bytes))
    except B.CompareError as e:
        raise click.ClickException(str(e)) from None
    except SynapseError as e:
        raise click.ClickException(str(e)) from None
