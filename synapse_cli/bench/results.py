"""One benchmark row: llama-bench's avg/stdev templates, its fields (names, types, order) and the facts about
this machine and build it reports."""

from __future__ import annotations

import math
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .matrix import Instance

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
        return [to_string(self.value(f)) for f in FIELDS]


def to_string(v) -> str:
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


