"""`synapse bench`'s library: llama-bench's test matrix, timing method, statistics and printers.

Mirrors tools/llama-bench/llama-bench.cpp (llama.cpp commit 0c1e570):
  - `parse_int_range` is llama-bench's `first[-last[(+|*)step]]` list syntax for -p/-n/-d/-b/-ub/-t;
  - `make_instances` keeps llama-bench's loop order (model, batch, ubatch, cache types, threads, depth,
    then every -p, every -n, every -pg), so rows come out in the same order as llama-bench's;
  - `run_test` is llama-bench's main loop body: a warm-up (the whole prompt for pp tests, one token for
    tg tests), then per repetition a cleared KV cache, an untimed prefill of `n_depth` random tokens
    (restored from a snapshot when the previous test used the same depth), and the timed part: the
    prompt of random tokens in batches of n_batch (BOS first when the vocabulary adds one), then
    n_gen single-token decodes of random tokens. Nothing is tokenized or sampled (llama-bench draws
    random ids with std::rand; we draw them with numpy before the clock starts);
  - `avg`/`stdev_*` are llama-bench's `avg`/`stdev` templates (integer arithmetic for nanoseconds,
    double for tokens/s; sample standard deviation), t/s = 1e9 * (n_prompt + n_gen) / ns;
  - `model_desc` is llama_model_desc: `arch + " " + llm_type_name + " " + llama_ftype_name`, with the
    per-arch layer-count tables of src/models/{llama,qwen2,mistral3}.cpp and the file-type names and
    guessing rule of src/llama-model-loader.cpp; size/params are the sums of tensor bytes/elements
    (llama_model_size / llama_model_n_params);
  - the printers (markdown, csv, json, jsonl, sql) write llama-bench's fields, field order, value
    spellings and column widths, so scripts written for llama-bench output read ours.

Beyond llama-bench: a `roofline` figure for tg tests (bytes read per generated token times t/s, as a
share of this machine's read bandwidth measured by `read_bandwidth`) and `--compare`, which runs a real
llama-bench with the same parameters and adds the speed ratio. Synapse-only fields are appended after
llama-bench's in md/csv/json/jsonl; the sql output keeps llama-bench's exact table so it can be
appended to a llama-bench database.

Decisions (documented in benchmarks/RESULTS.md): `backends` is "CPU" (synapse computes what ggml's CPU
backend computes, so rows line up with llama-bench's CPU rows); `build_commit` is synapse's git commit;
`flash_attn` is what -fa asked for (llama_flash_attn_type; default -1, auto, which computes as on, as
llama-bench's does on CPU) and `repack` true (weights are repacked at load); the other GPU/placement fields keep llama-bench's
defaults.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, TextIO

import numpy as np

from kernels.ggml_type import GGMLType

# ------------------------------------------------------------------------------------------------
# command-line value parsing
# ------------------------------------------------------------------------------------------------

_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+)(?:([\+|\*])(\d+))?)?(?:,|$)")


def parse_int_range(s: str) -> list[int]:
    """llama-bench's parse_int_range: comma-separated `first[-last[(+|*)step]]` items.

    "1,2" -> [1, 2]; "1-4" -> [1, 2, 3, 4]; "16-64*2" -> [16, 32, 64]; "0-512+128" -> [0, 128, 256, 384, 512].
    Raises ValueError on anything else (as llama-bench's "invalid range format" / "invalid range").
    """
    pos = 0
    out: list[int] = []
    while pos < len(s):
        m = _RANGE_RE.match(s[pos:])
        if m is None:
            break
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        op = m.group(3) or "+"
        step = int(m.group(4)) if m.group(4) is not None else 1
        i = first
        while i <= last:
            out.append(i)
            prev = i
            if op == "+":
                i += step
            elif op == "*":
                i *= step
            else:  # the regex's class also admits '|'
                raise ValueError(f"invalid range format {s!r}")
            if i <= prev:
                raise ValueError(f"invalid range {s!r} (the step must move forward)")
        pos += m.end()
    if pos != len(s) or not s:
        raise ValueError(f"invalid range format {s!r} (expected e.g. 8 or 1,2 or 1-4 or 16-64*2)")
    return out


def parse_pg(s: str) -> tuple[int, int]:
    """-pg "P,N" -> (P, N)."""
    parts = s.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"invalid -pg value {s!r} (expected <n_prompt>,<n_gen>, e.g. 512,128)")
    return int(parts[0]), int(parts[1])


# ------------------------------------------------------------------------------------------------
# model description (llama_model_desc), size and parameter count
# ------------------------------------------------------------------------------------------------

def llm_type_name(arch: str, n_layer: int, n_embd: int, n_head: int, n_head_kv: int, n_vocab: int,
                  n_expert: int = 0) -> str:
    """The LLM_TYPE name llama.cpp's load_arch_hparams picks from the layer count ("?B" when unknown)."""
    L = n_layer
    if arch == "llama":
        if n_expert == 8:
            return {32: "8x7B", 56: "8x22B"}.get(L, "?B")
        if L == 32:  # granite uses a vocab of 49152
            return "3B" if n_vocab == 49152 else ("7B" if n_vocab < 40000 else "8B")
        if L == 80:
            return "65B" if n_head == n_head_kv else "70B"
        return {16: "1B", 22: "1B", 26: "3B", 28: "3B", 30: "256M", 36: "8B", 40: "13B", 48: "34B",
                60: "30B"}.get(L, "?B")
    if arch == "qwen2":
        if L == 24:
            return "0.5B" if n_embd == 1024 else "1B"
        if L == 28:
            return "1.5B" if n_embd == 1536 else "7B"
        if L == 40:
            return "4B" if n_head == 20 else "13B"
        return {32: "7B", 36: "3B", 48: "14B", 64: "32B", 80: "70B"}.get(L, "?B")
    if arch == "mistral3":
        return {26: "3B", 34: "8B", 40: "14B"}.get(L, "?B")
    return "?B"


# llama_ftype value -> llama_ftype_name (include/llama.h, src/llama-model-loader.cpp)
FTYPE_NAMES = {
    0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K - Medium", 11: "Q3_K - Small", 12: "Q3_K - Medium", 13: "Q3_K - Large",
    14: "Q4_K - Small", 15: "Q4_K - Medium", 16: "Q5_K - Small", 17: "Q5_K - Medium", 18: "Q6_K",
    19: "IQ2_XXS - 2.0625 bpw", 20: "IQ2_XS - 2.3125 bpw", 21: "Q2_K - Small", 22: "IQ3_XS - 3.3 bpw",
    23: "IQ3_XXS - 3.0625 bpw", 24: "IQ1_S - 1.5625 bpw", 25: "IQ4_NL - 4.5 bpw", 26: "IQ3_S - 3.4375 bpw",
    27: "IQ3_S mix - 3.66 bpw", 28: "IQ2_S - 2.5 bpw", 29: "IQ2_M - 2.7 bpw", 30: "IQ4_XS - 4.25 bpw",
    31: "IQ1_M - 1.75 bpw", 32: "BF16", 36: "TQ1_0 - 1.69 bpw ternary", 37: "TQ2_0 - 2.06 bpw ternary",
    38: "MXFP4 MoE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}
FTYPE_GUESSED = 1024

# the most common tensor type -> the llama_ftype llama.cpp guesses when general.file_type is absent
_GUESS_FTYPE = {
    GGMLType.F32: 0, GGMLType.F16: 1, GGMLType.BF16: 32, GGMLType.Q4_0: 2, GGMLType.Q4_1: 3,
    GGMLType.Q5_0: 8, GGMLType.Q5_1: 9, GGMLType.Q8_0: 7, GGMLType.Q2_K: 10, GGMLType.Q3_K: 12,
    GGMLType.Q4_K: 15, GGMLType.Q5_K: 17, GGMLType.Q6_K: 18, GGMLType.TQ1_0: 36, GGMLType.TQ2_0: 37,
    GGMLType.IQ2_XXS: 19, GGMLType.IQ2_XS: 20, GGMLType.IQ2_S: 28, GGMLType.IQ3_XXS: 23,
    GGMLType.IQ1_S: 24, GGMLType.IQ1_M: 31, GGMLType.IQ4_NL: 25, GGMLType.IQ4_XS: 30,
    GGMLType.IQ3_S: 26, GGMLType.NVFP4: 39, GGMLType.Q1_0: 40, GGMLType.Q2_0: 41,
}


def ftype_name(ftype: int) -> str:
    """llama_ftype_name, including the "(guessed) " prefix for guessed file types."""
    name = FTYPE_NAMES.get(ftype & ~FTYPE_GUESSED, "unknown, may not work")
    return "(guessed) " + name if ftype & FTYPE_GUESSED else name


def _weight_order_key(name: str):
    # llama_model_loader::weight_name_comparer: by "blk.%d." layer number (-1 for others), then name
    m = re.match(r"blk\.(-?\d+)\.", name)
    return (int(m.group(1)) if m else -1, name)


def file_ftype(reader) -> int:
    """general.file_type, or llama.cpp's guess (most frequent tensor type, first to lead wins) | GUESSED."""
    counts: dict[int, int] = {}
    n_max, type_max = 0, int(GGMLType.F32)
    for t in sorted(reader.tensors, key=lambda t: _weight_order_key(t.name)):
        counts[t.ggml_type] = counts.get(t.ggml_type, 0) + 1
        if n_max < counts[t.ggml_type]:
            n_max, type_max = counts[t.ggml_type], t.ggml_type
    try:
        guessed = _GUESS_FTYPE.get(GGMLType(type_max), 0)
    except ValueError:
        guessed = 0
    v = reader.get("general.file_type")
    if v is not None and isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    return guessed | FTYPE_GUESSED


def _first_int(v, default: int = 0) -> int:
    if v is None:
        return default
    if isinstance(v, np.ndarray):  # per-layer arrays: llama.cpp's n_head() is layer 0's
        return int(v[0]) if len(v) else default
    return int(v)


def model_desc(reader) -> str:
    """llama_model_desc: e.g. "llama 256M Q4_1", "qwen2 1B Q4_K - Medium", "llama ?B Q8_0"."""
    arch = reader.get("general.architecture") or "unknown"
    a = arch
    n_layer = _first_int(reader.get(f"{a}.block_count"))
    n_embd = _first_int(reader.get(f"{a}.embedding_length"))
    n_head = _first_int(reader.get(f"{a}.attention.head_count"))
    n_head_kv = _first_int(reader.get(f"{a}.attention.head_count_kv"), n_head)
    n_expert = _first_int(reader.get(f"{a}.expert_count"))
    tokens = reader.get("tokenizer.ggml.tokens")
    n_vocab = _first_int(reader.get(f"{a}.vocab_size"), len(tokens) if tokens is not None else 0)
    type_name = llm_type_name(arch, n_layer, n_embd, n_head, n_head_kv, n_vocab, n_expert)
    return f"{arch} {type_name} {ftype_name(file_ftype(reader))}"


def model_size(reader) -> int:
    """llama_model_size: the sum of every tensor's bytes (ggml_nbytes)."""
    return sum(t.nbytes for t in reader.tensors)


def model_n_params(reader) -> int:
    """llama_model_n_params: the sum of every tensor's element count."""
    return sum(t.n_elements for t in reader.tensors)


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


def vocab_add_bos(reader) -> bool:
    """llama_vocab_get_add_bos: `tokenizer.ggml.add_bos_token`, else the tokenizer type's default
    (SPM/WPM add one; BPE only for the pre-tokenizers llama-vocab.cpp lists)."""
    v = reader.get("tokenizer.ggml.add_bos_token")
    if v is not None:
        return bool(v)
    model = reader.get("tokenizer.ggml.model")
    if model in ("llama", "bert"):
        return True
    if model == "gpt2":
        return reader.get("tokenizer.ggml.pre") in (
            "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
            "jina-v5-nano", "tekken", "chameleon")
    return False


# ------------------------------------------------------------------------------------------------
# the test matrix
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Instance:
    """One row of results: llama-bench's cmd_params_instance restricted to what synapse varies."""

    model: str
    n_prompt: int
    n_gen: int
    n_depth: int
    n_batch: int
    n_ubatch: int
    type_k: str
    type_v: str
    n_threads: int
    flash_attn: int = -1  # llama_flash_attn_type: -1 auto (computes as on, as on llama.cpp's CPU backend), 0 off, 1 on

    @property
    def test_name(self) -> str:
        if self.n_prompt > 0 and self.n_gen == 0:
            name = f"pp{self.n_prompt}"
        elif self.n_gen > 0 and self.n_prompt == 0:
            name = f"tg{self.n_gen}"
        else:
            name = f"pp{self.n_prompt}+tg{self.n_gen}"
        if self.n_depth > 0:
            name += f" @ d{self.n_depth}"
        return name

    @property
    def n_ctx(self) -> int:
        # llama-bench asks for n_prompt + n_gen + n_depth; llama_context pads n_ctx to 256
        n = self.n_prompt + self.n_gen + self.n_depth
        return -(-n // 256) * 256

    @property
    def is_tg(self) -> bool:
        return self.n_prompt == 0 and self.n_gen > 0


DEFAULT_N_PROMPT = [512]
DEFAULT_N_GEN = [128]
DEFAULT_N_DEPTH = [0]
DEFAULT_N_BATCH = [2048]
DEFAULT_N_UBATCH = [512]
DEFAULT_CACHE_TYPE = ["f16"]
DEFAULT_REPS = 5


@dataclass
class BenchParams:
    """Parsed command line (llama-bench's cmd_params): every list is a dimension of the test matrix."""

    models: list[str]
    n_threads: list[int]
    n_prompt: list[int] = field(default_factory=lambda: list(DEFAULT_N_PROMPT))
    n_gen: list[int] = field(default_factory=lambda: list(DEFAULT_N_GEN))
    n_pg: list[tuple[int, int]] = field(default_factory=list)
    n_depth: list[int] = field(default_factory=lambda: list(DEFAULT_N_DEPTH))
    n_batch: list[int] = field(default_factory=lambda: list(DEFAULT_N_BATCH))
    n_ubatch: list[int] = field(default_factory=lambda: list(DEFAULT_N_UBATCH))
    # (type_k, type_v) pairs in llama-bench's `for tk: for tv:` order
    cache_types: list[tuple[str, str]] = field(default_factory=lambda: [("f16", "f16")])
    # -fa values as llama_flash_attn_type (-1 auto, 0 off, 1 on); auto computes as on (llama.cpp's CPU backend)
    flash_attn: list[int] = field(default_factory=lambda: [-1])
    reps: int = DEFAULT_REPS
    no_warmup: bool = False
    progress: bool = False
    output: str = "md"
    roofline: bool = True
    compare: Optional[str] = None

    @property
    def type_k(self) -> list[str]:
        return list(dict.fromkeys(k for k, _ in self.cache_types))

    @property
    def type_v(self) -> list[str]:
        return list(dict.fromkeys(v for _, v in self.cache_types))


def make_instances(p: BenchParams) -> list[Instance]:
    """llama-bench's get_cmd_params_instances order: model, n_batch, n_ubatch, type_k, type_v, flash_attn,
    threads, depth, then each -p (n_gen 0), each -n (n_prompt 0), each -pg; zero-sized tests are skipped."""
    out = []
    for m in p.models:
        for nb in p.n_batch:
            for nub in p.n_ubatch:
                for tk, tv in p.cache_types:
                    for fa in p.flash_attn:
                        for nt in p.n_threads:
                            for nd in p.n_depth:
                                base = dict(model=m, n_depth=nd, n_batch=nb, n_ubatch=nub, type_k=tk, type_v=tv,
                                            n_threads=nt, flash_attn=fa)
                                out += [Instance(n_prompt=n, n_gen=0, **base) for n in p.n_prompt if n != 0]
                                out += [Instance(n_prompt=0, n_gen=n, **base) for n in p.n_gen if n != 0]
                                out += [Instance(n_prompt=a, n_gen=b, **base) for a, b in p.n_pg
                                        if (a, b) != (0, 0)]
    return out


# ------------------------------------------------------------------------------------------------
# statistics (llama-bench's avg / stdev templates)
# ------------------------------------------------------------------------------------------------

def avg_ns(samples: list[int]) -> int:
    """uint64 average: integer division, as avg<uint64_t>."""
    return sum(samples) // len(samples) if samples else 0


def stdev_ns(samples: list[int]) -> int:
    """stdev<uint64_t>: sqrt(sq_sum/(n-1) - mean*mean*n/(n-1)) in integer arithmetic, truncated.
    (Python integers do not wrap at 2^64 as llama-bench's do for multi-second samples.)"""
    n = len(samples)
    if n <= 1:
        return 0
    mean = avg_ns(samples)
    sq_sum = sum(x * x for x in samples)
    var = sq_sum // (n - 1) - mean * mean * n // (n - 1)
    return int(math.sqrt(max(var, 0)))


def samples_ts(samples: list[int], n_tokens: int) -> list[float]:
    """Tokens per second of each repetition: 1e9 * n_tokens / ns."""
    return [1e9 * n_tokens / t for t in samples]


def avg_f(v: list[float]) -> float:
    s = 0.0
    for x in v:  # std::accumulate order
        s += x
    return s / len(v) if v else 0.0


def stdev_f(v: list[float]) -> float:
    """stdev<double>: the sample standard deviation, llama-bench's formula and summation order."""
    n = len(v)
    if n <= 1:
        return 0.0
    mean = avg_f(v)
    sq = 0.0
    for x in v:
        sq += x * x
    return math.sqrt(max(sq / (n - 1) - mean * mean * n / (n - 1), 0.0))


# ------------------------------------------------------------------------------------------------
# results and their llama-bench fields
# ------------------------------------------------------------------------------------------------

# test::get_fields(), in order
FIELDS = [
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends",
    "model_filename", "model_type", "model_size", "model_n_params", "n_batch",
    "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
    "type_k", "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode",
    "main_gpu", "no_kv_offload", "flash_attn", "devices", "tensor_split",
    "tensor_buft_overrides", "load_mode", "lazy_mode",
    "embeddings",
    "no_op_offload", "no_host", "repack", "fit_target", "fit_min_ctx",
    "n_prompt", "n_gen", "n_depth",
    "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
]
STATS_FIELDS = ("avg_ns", "stddev_ns", "avg_ts", "stddev_ts")

_INT_FIELDS = {"build_number", "n_batch", "n_ubatch", "n_threads", "poll", "model_size", "model_n_params",
               "n_gpu_layers", "main_gpu", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns",
               "no_op_offload", "n_cpu_moe", "fit_target", "fit_min_ctx", "flash_attn"}
_BOOL_FIELDS = {"no_kv_offload", "cpu_strict", "embeddings", "no_host", "repack"}
_FLOAT_FIELDS = {"avg_ts", "stddev_ts"}


def field_type(name: str) -> str:
    """test::get_field_type: "INT", "BOOL", "FLOAT" or "STRING"."""
    if name in _INT_FIELDS:
        return "INT"
    if name in _BOOL_FIELDS:
        return "BOOL"
    if name in _FLOAT_FIELDS:
        return "FLOAT"
    return "STRING"


# the fields llama-bench fills from options synapse does not have: llama-bench's defaults; like llama.cpp's
# CPU backend by default,
# synapse repacks weights at load (kernels/quants: the 32-weight formats and Q4_K), so repack is true
FIXED_FIELDS = {
    "gpu_info": "", "backends": "CPU", "cpu_mask": "0x0", "cpu_strict": False, "poll": 50,
    "n_gpu_layers": -1, "n_cpu_moe": 0, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": False,
    "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none",
    "load_mode": "auto", "lazy_mode": "auto", "embeddings": False, "no_op_offload": 0, "no_host": False,
    "repack": True, "fit_target": 0, "fit_min_ctx": 0,
}

# synapse-only fields, appended after llama-bench's (md/csv/json/jsonl; never in sql)
ROOFLINE_FIELDS = ["roofline_bytes_per_token", "roofline_read_bw", "roofline_pct"]
COMPARE_FIELDS = ["llamacpp_avg_ts", "vs_llamacpp"]


@dataclass
class Result:
    """One finished test: llama-bench's field values (statistics derived from samples_ns) + extras."""

    fields: dict  # every FIELDS entry except the four statistics, as python bool/int/str
    samples_ns: list[int]
    extras: dict = field(default_factory=dict)  # synapse-only fields; None = not applicable

    @property
    def n_prompt(self) -> int:
        return int(self.fields["n_prompt"])

    @property
    def n_gen(self) -> int:
        return int(self.fields["n_gen"])

    @property
    def samples_ts(self) -> list[float]:
        return samples_ts(self.samples_ns, self.n_prompt + self.n_gen)

    @property
    def avg_ts(self) -> float:
        return avg_f(self.samples_ts)

    @property
    def stddev_ts(self) -> float:
        return stdev_f(self.samples_ts)

    @property
    def test_name(self) -> str:
        f = self.fields
        return Instance("", f["n_prompt"], f["n_gen"], f["n_depth"], 0, 0, "", "", 0).test_name

    def value(self, name: str):
        if name == "avg_ns":
            return avg_ns(self.samples_ns)
        if name == "stddev_ns":
            return stdev_ns(self.samples_ns)
        if name == "avg_ts":
            return self.avg_ts
        if name == "stddev_ts":
            return self.stddev_ts
        return self.fields[name]

    def values(self) -> list[str]:
        """test::get_values(): C++ spellings (bools "0"/"1", doubles std::to_string's "%f")."""
        return [_to_string(self.value(f)) for f in FIELDS]


def _to_string(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return "%f" % v
    return str(v)


# ------------------------------------------------------------------------------------------------
# environment facts
# ------------------------------------------------------------------------------------------------

def cpu_info() -> str:
    """ggml's CPU device description: /proc/cpuinfo's first "model name", else "CPU"."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "CPU"


def build_commit() -> str:
    """synapse's short git commit (llama-bench reports llama.cpp's), or "unknown" outside a checkout."""
    root = Path(__file__).resolve().parents[1]
    try:
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=7", "HEAD"], capture_output=True,
                           text=True, timeout=5)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def test_time_now() -> str:
    """RFC 3339 UTC time, strftime("%FT%TZ") as llama-bench."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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
    if warmup:  # on the fresh context, as llama-bench (no clear before it)
        if inst.n_prompt > 0:
            progress.step(idx, count, "warmup prompt run", name)
            for batch in tokens.prompt(inst.n_prompt, inst.n_batch):
                ctx.decode(batch)
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
            ctx.decode(batch)
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
    r, hp = model.reader, model.hparams
    return LoadedModel(
        model=model, filename=filename, desc=model_desc(r), size=model_size(r), n_params=model_n_params(r),
        n_vocab=hp.n_vocab, add_bos=vocab_add_bos(r), bos_id=_first_int(r.get("tokenizer.ggml.bos_token_id"), 1),
        weight_bytes_per_token=weight_bytes_per_token(r, hp.n_vocab), n_layer=hp.n_layer,
        n_embd_k_gqa=hp.n_embd_k_gqa, n_embd_v_gqa=hp.n_embd_k_gqa,
    )


def make_result(inst: Instance, lm: LoadedModel, samples: list[int], test_time: str, env: dict) -> Result:
    f = {
        "build_commit": env["build_commit"], "build_number": env.get("build_number", 0),
        "cpu_info": env["cpu_info"], **FIXED_FIELDS,
        "model_filename": lm.filename, "model_type": lm.desc, "model_size": lm.size,
        "model_n_params": lm.n_params, "n_batch": inst.n_batch, "n_ubatch": inst.n_ubatch,
        "n_threads": inst.n_threads, "type_k": inst.type_k, "type_v": inst.type_v, "flash_attn": inst.flash_attn,
        "n_prompt": inst.n_prompt, "n_gen": inst.n_gen, "n_depth": inst.n_depth, "test_time": test_time,
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
    if p.no_warmup:
        args.append("--no-warmup")
    if p.progress:
        args.append("--progress")
    return args


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


# ------------------------------------------------------------------------------------------------
# printers
# ------------------------------------------------------------------------------------------------

class Printer:
    def __init__(self, out: TextIO, extras: list[str]):
        self.out = out
        self.extras = extras  # synapse-only fields this run has

    def header(self, p: BenchParams) -> None:
        pass

    def test(self, r: Result) -> None:
        raise NotImplementedError

    def footer(self, r_footer: dict | None = None) -> None:
        pass

    def _w(self, s: str) -> None:
        self.out.write(s)


def _extra_json(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, float):
        return "%f" % v if math.isfinite(v) else "null"
    return json.dumps(v)


def _extra_str(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "%f" % v
    return str(v)


class CsvPrinter(Printer):
    @staticmethod
    def escape(s: str) -> str:
        return '"' + s.replace('"', '""') + '"'

    def header(self, p):
        self._w(",".join(FIELDS + self.extras) + "\n")

    def test(self, r):
        vals = r.values() + [_extra_str(r.extras.get(k)) for k in self.extras]
        self._w(",".join(self.escape(v) for v in vals) + "\n")
        self.out.flush()


def escape_json(s: str) -> str:
    """llama-bench's escape_json: quote, backslash and control characters (as \\u00XX)."""
    out = []
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif ord(c) <= 0x1F:
            out.append("\\u%04x" % ord(c))
        else:
            out.append(c)
    return "".join(out)


def format_json_value(name: str, value: str) -> str:
    t = field_type(name)
    if t == "STRING":
        return '"' + escape_json(value) + '"'
    if t == "BOOL":
        return "false" if value == "0" else "true"
    return value


def _join_g(xs: Iterable[float]) -> str:
    # ostream << double: 6 significant digits, like %g
    return ", ".join("%g" % x for x in xs)


class JsonPrinter(Printer):
    def __init__(self, out, extras):
        super().__init__(out, extras)
        self.first = True

    def header(self, p):
        self._w("[\n")

    def test(self, r):
        if self.first:
            self.first = False
        else:
            self._w(",\n")
        self._w("  {\n")
        for name, v in zip(FIELDS, r.values()):
            self._w(f'    "{name}": {format_json_value(name, v)},\n')
        self._w(f'    "samples_ns": [ {", ".join(str(x) for x in r.samples_ns)} ],\n')
        self._w(f'    "samples_ts": [ {_join_g(r.samples_ts)} ]')
        for k in self.extras:
            self._w(f',\n    "{k}": {_extra_json(r.extras.get(k))}')
        self._w("\n  }")
        self.out.flush()

    def footer(self, info=None):
        self._w("\n]\n")


class JsonlPrinter(Printer):
    def test(self, r):
        parts = ["{"]
        for name, v in zip(FIELDS, r.values()):
            parts.append(f'"{name}": {format_json_value(name, v)}, ')
        parts.append(f'"samples_ns": [ {", ".join(str(x) for x in r.samples_ns)} ],')
        parts.append(f'"samples_ts": [ {_join_g(r.samples_ts)} ]')
        for k in self.extras:
            parts.append(f', "{k}": {_extra_json(r.extras.get(k))}')
        parts.append("}\n")
        self._w("".join(parts))
        self.out.flush()


class SqlPrinter(Printer):
    """llama-bench's exact llama_bench table (no synapse extras), so it appends to llama-bench databases."""

    @staticmethod
    def sql_type(name: str) -> str:
        return {"STRING": "TEXT", "BOOL": "INTEGER", "INT": "INTEGER", "FLOAT": "REAL"}[field_type(name)]

    def header(self, p):
        self._w("CREATE TABLE IF NOT EXISTS llama_bench (\n")
        for i, f in enumerate(FIELDS):
            self._w(f"  {f} {self.sql_type(f)}{',' if i < len(FIELDS) - 1 else ''}\n")
        self._w(");\n\n")

    def test(self, r):
        vals = ", ".join("'" + v.replace("'", "''") + "'" for v in r.values())
        self._w(f"INSERT INTO llama_bench ({', '.join(FIELDS)}) VALUES ({vals});\n")
        self.out.flush()


# markdown: llama-bench's markdown_printer widths (negative = left-aligned) and display names
_MD_WIDTHS = {"model": -30, "t/s": 20, "size": 10, "params": 10, "n_gpu_layers": 3, "n_threads": 7,
              "n_batch": 7, "n_ubatch": 8, "type_k": 6, "type_v": 6, "split_mode": 6, "load_mode": 10,
              "flash_attn": 3, "devices": -12, "test": 15, "no_op_offload": 4, "no_host": 4, "repack": 3,
              "roofline": 8, "vs llama.cpp": 12}
_MD_NAMES = {"n_threads": "threads", "n_gpu_layers": "ngl", "split_mode": "sm", "flash_attn": "fa"}


def md_width(name: str) -> int:
    if name in _MD_WIDTHS:
        return _MD_WIDTHS[name]
    w = max(len(name), 10)
    return -w if field_type(name) == "STRING" else w


def _pad(value: str, width: int) -> str:
    """printf("%*s"): width counts bytes, so multi-byte UTF-8 takes more room (llama-bench's ± hack)."""
    n = width if width >= 0 else -width
    fill = " " * max(0, n - len(value.encode("utf-8")))
    return fill + value if width >= 0 else value + fill


def format_size(n_bytes: int) -> str:
    if n_bytes < 1024 ** 3:
        return "%.2f MiB" % (n_bytes / 1024.0 / 1024.0)
    return "%.2f GiB" % (n_bytes / 1024.0 / 1024.0 / 1024.0)


def format_params(n: int) -> str:
    if n < 1000 ** 3:
        return "%.2f M" % (n / 1e6)
    return "%.2f B" % (n / 1e9)


class MarkdownPrinter(Printer):
    def __init__(self, out, extras):
        super().__init__(out, extras)
        self.columns: list[str] = []

    def header(self, p):
        cols = ["model", "size", "params", "backend", "n_threads"]  # CPU backend: threads always shown
        if p.n_batch != DEFAULT_N_BATCH:
            cols.append("n_batch")
        if p.n_ubatch != DEFAULT_N_UBATCH:
            cols.append("n_ubatch")
        if p.type_k != DEFAULT_CACHE_TYPE:
            cols.append("type_k")
        if p.type_v != DEFAULT_CACHE_TYPE:
            cols.append("type_v")
        if p.flash_attn != [-1]:  # llama-bench: shown unless the default (auto) alone
            cols.append("flash_attn")
        cols += ["test", "t/s"]
        if "roofline_pct" in self.extras:
            cols.append("roofline")
        if "vs_llamacpp" in self.extras:
            cols.append("vs llama.cpp")
        self.columns = cols
        self._w("|" + "".join(f" {_pad(_MD_NAMES.get(c, c), md_width(c))} |" for c in cols) + "\n")
        self._w("|" + "".join(f" {'-' * (abs(md_width(c)) - 1)}{':' if md_width(c) > 0 else '-'} |"
                              for c in cols) + "\n")

    def cell(self, r: Result, c: str) -> str:
        if c == "model":
            return str(r.fields["model_type"])
        if c == "size":
            return format_size(int(r.fields["model_size"]))
        if c == "params":
            return format_params(int(r.fields["model_n_params"]))
        if c == "backend":
            return str(r.fields["backends"])
        if c == "test":
            return r.test_name
        if c == "t/s":
            return "%.2f ± %.2f" % (r.avg_ts, r.stddev_ts)
        if c == "roofline":
            v = r.extras.get("roofline_pct")
            return "-" if v is None else "%.1f%%" % v
        if c == "vs llama.cpp":
            v = r.extras.get("vs_llamacpp")
            return "-" if v is None else "%.2fx" % v
        return _to_string(r.value(c))

    def test(self, r):
        line = "|"
        for c in self.columns:
            w = md_width(c)
            if c == "t/s":
                w += 1  # llama-bench: "the utf-8 character is 2 bytes"
            line += f" {_pad(self.cell(r, c), w)} |"
        self._w(line + "\n")
        self.out.flush()

    def footer(self, info=None):
        info = info or {}
        self._w(f"\nbuild: {info.get('build_commit', 'unknown')} ({info.get('build_number', 0)})\n")
        for line in info.get("notes", []):
            self._w(line + "\n")


PRINTERS = {"md": MarkdownPrinter, "csv": CsvPrinter, "json": JsonPrinter, "jsonl": JsonlPrinter, "sql": SqlPrinter}


def make_printer(fmt: str, out: TextIO, extras: list[str]) -> Printer:
    if fmt not in PRINTERS:
        raise ValueError(f"unknown output format {fmt!r} (md, csv, json, jsonl, sql)")
    return PRINTERS[fmt](out, [] if fmt == "sql" else extras)


# ------------------------------------------------------------------------------------------------
# the whole run
# ------------------------------------------------------------------------------------------------

def _default_load(path: str, show_progress: bool):
    from .session import load_model

    return load_model(path, show_progress)


def _default_context(model, inst: Instance):
    from .model import Context

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

    ref = None
    if p.compare:
        if p.progress:
            print(f"synapse-bench: running {p.compare} for --compare", file=err, flush=True)
        ref = run_llama_bench(p.compare, p)
        if not ref:
            print(f"warning: --compare: {p.compare} printed no results; the 'vs llama.cpp' column stays empty",
                  file=err, flush=True)

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
        tokens = None
        for idx, inst in enumerate(insts, 1):
            if lm is None or lm.filename != inst.model:
                lm = None  # drop the previous model before mapping the next
                prog.note(f"loading {inst.model}")
                lm = describe(load(inst.model, False), inst.model)
                tokens = TokenSource(lm.n_vocab, lm.add_bos, lm.bos_id)
                depth_state = DepthState()
            ctx = make_context(lm.model, inst)
            test_time = test_time_now()
            samples = run_test(ctx, inst, p.reps, not p.no_warmup, tokens, prog, idx, len(insts), depth_state,
                               clock, state_key=(inst.model, inst.type_k, inst.type_v, inst.n_ctx, inst.flash_attn))
            del ctx
            res = make_result(inst, lm, samples, test_time, env)
            if p.roofline:
                add_roofline(res, inst, lm, bw.get(inst.n_threads))
            if ref is not None:
                add_compare(res, ref, len(p.flash_attn) > 1)
            results.append(res)
            with prog.paused():
                printer.test(res)
    printer.footer({**env, "notes": notes})
    out.flush()
    return results
