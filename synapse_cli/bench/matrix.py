"""llama-bench's test matrix: its `first[-last[(+|*)step]]` value lists, the parameters and their defaults, and
the instances in llama-bench's loop order (model, batch, ubatch, cache types, flash attention, threads, depth,
then every -p, -n, -pg)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Optional


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
    load_mode: str = "auto"  # -lm: auto / mmap / mlock modes map the file, none / dio read the weights into memory
    repack: bool = True  # --repack: weights repacked at load (llama.cpp's CPU "extra" buffer types), or as stored
    # llama-bench's fields that change nothing on a CPU build (BenchParams.fixed), and -embd: ((field, value), ...)
    fixed: tuple = ()

    @property
    def embeddings(self) -> bool:
        """-embd 1: every prompt token is an output (llama.cpp's embeddings with no pooling)."""
        return bool(dict(self.fixed).get("embeddings", False))

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
    load_mode: list[str] = field(default_factory=lambda: ["auto"])  # -lm values, a dimension per model
    repack: list[bool] = field(default_factory=lambda: [True])  # --repack values, a dimension per model
    # llama-bench's GPU and thread-placement fields and -embd: field (results.FIXED_FIELDS' names) -> its values,
    # each a dimension of the matrix (the same computation again, but -embd's)
    fixed: dict = field(default_factory=dict)
    delay: int = 0  # --delay: seconds to cool off before each test
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


# llama-bench's get_cmd_params_instances loops, outermost first (the (type_k, type_v) pairs are its two loops)
_LOOPS = ("model", "fit_target", "fit_min_ctx", "n_gpu_layers", "n_cpu_moe", "split_mode", "load_mode", "lazy_mode",
          "main_gpu", "devices", "tensor_split", "tensor_buft_overrides", "no_host", "repack", "embeddings",
          "no_op_offload", "n_batch", "n_ubatch", "cache_types", "no_kv_offload", "flash_attn", "n_threads",
          "cpu_mask", "cpu_strict", "n_depth", "poll")
_INSTANCE_FIELDS = ("model", "load_mode", "repack", "n_batch", "n_ubatch", "flash_attn", "n_threads", "n_depth")


def make_instances(p: BenchParams) -> list[Instance]:
    """llama-bench's get_cmd_params_instances order (_LOOPS), then each -p (n_gen 0), each -n (n_prompt 0), each
    -pg; zero-sized tests are skipped."""
    lists = {"model": p.models, "load_mode": p.load_mode, "repack": p.repack, "n_batch": p.n_batch,
             "n_ubatch": p.n_ubatch, "cache_types": p.cache_types, "flash_attn": p.flash_attn,
             "n_threads": p.n_threads, "n_depth": p.n_depth}
    axes = [(name, lists[name] if name in lists else p.fixed.get(name)) for name in _LOOPS]
    axes = [(name, values) for name, values in axes if values is not None]
    out = []
    for combo in itertools.product(*(values for _, values in axes)):
        v = dict(zip((name for name, _ in axes), combo))
        tk, tv = v["cache_types"]
        base = dict(**{k: v[k] for k in _INSTANCE_FIELDS}, type_k=tk, type_v=tv,
                    fixed=tuple((name, v[name]) for name, _ in axes if name in p.fixed))
        out += [Instance(n_prompt=n, n_gen=0, **base) for n in p.n_prompt if n != 0]
        out += [Instance(n_prompt=0, n_gen=n, **base) for n in p.n_gen if n != 0]
        out += [Instance(n_prompt=a, n_gen=b, **base) for a, b in p.n_pg if (a, b) != (0, 0)]
    return out


