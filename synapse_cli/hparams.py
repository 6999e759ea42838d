"""Hyper-parameters of a Llama-family GGUF, read with llama.cpp's keys and defaults.

Mirrors `llama_model::load_hparams` (src/llama-model.cpp), the per-arch `load_arch_hparams`
(src/models/llama.cpp, qwen2.cpp, mistral3.cpp) and the rope/YaRN parts of `llama_context`'s
constructor (src/llama-context.cpp), where the --rope-*/--yarn-* flags (`RopeParams`) meet the model's values. Float arithmetic that llama.cpp does in `float` is done in
np.float32 here so that derived factors (yarn_attn_factor, freq_scale) are the same bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from kernels.errors import ModelError
from kernels.gguf import GGUFReader

SUPPORTED_ARCHS = ("llama", "qwen2", "mistral3")
# llama.cpp's llama_model_rope_type: NEOX rotates (i, i + n_rot/2) pairs, NORM adjacent pairs
ROPE_NEOX_ARCHS = ("qwen2",)
# llama.cpp's rope scaling types (LLAMA_ROPE_SCALING_TYPE_*) that these architectures use
ROPE_SCALING_TYPES = ("none", "linear", "yarn")

f32 = np.float32


@dataclass
class HParams:
    arch: str
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_embd_head: int  # head_dim, `<arch>.attention.key_length` or n_embd / n_head
    n_ff: int
    n_rot: int  # rotated dims per head, `<arch>.rope.dimension_count` (must equal head_dim here)
    f_norm_rms_eps: float
    rope_neox: bool
    # the context's rope/YaRN values (llama_context's cparams: the model's, or the flags' through with_rope)
    rope_freq_base: float
    rope_freq_scale: float  # 1 / rope.scaling.factor (1 when no scaling)
    rope_scaling_type: str  # none | linear | yarn
    n_ctx_orig_yarn: int
    yarn_ext_factor: float  # 1 for yarn, else 0 (llama_context: "not set" -> by scaling type)
    yarn_attn_factor: float  # after llama_context's mscale correction
    yarn_beta_fast: float
    yarn_beta_slow: float
    # the model's own (llama_hparams: *_train, read from the GGUF), from which with_rope starts
    rope_freq_base_train: float = 10000.0
    rope_freq_scale_train: float = 1.0
    rope_scaling_type_train: str = "linear"
    n_ctx_orig_yarn_train: int = 0
    yarn_beta_fast_train: float = 32.0
    yarn_beta_slow_train: float = 1.0
    rope_yarn_log_mul: float = 0.0
    rope_attn_factor: float = 1.0
    f_attn_temp_scale: float = 0.0  # mistral3 (llama 4 style) temperature tuning, 0 = off
    n_attn_temp_floor_scale: int = 0
    f_attn_temp_offset: float = 0.0
    kq_scale: float = field(default=0.0)  # 1/sqrt(head_dim) unless `attention.scale`

    @property
    def n_embd_k_gqa(self) -> int:
        return self.n_embd_head * self.n_head_kv

    @property
    def n_gqa(self) -> int:
        return self.n_head // self.n_head_kv


def _get(r: GGUFReader, key: str, default=None, *, required: bool = False):
    v = r.get(key)
    if v is None:
        if required:
            raise ModelError(f"{r.path}: missing required key {key!r}")
        return default
    return v


def _get_int(r: GGUFReader, key: str, default=None, *, required=False) -> int:
    v = _get(r, key, default, required=required)
    if isinstance(v, np.ndarray):  # per-layer arrays (llama.cpp's get_key_or_arr)
        if len(v) == 0 or not (v == v[0]).all():
            raise ModelError(f"{r.path}: per-layer values of {key!r} differ; not supported")
        v = v[0]
    if v is None:
        return default
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
        raise ModelError(f"{r.path}: key {key!r} should be an integer, is {v!r}")
    return int(v)


def _get_float(r: GGUFReader, key: str, default: float) -> float:
    v = _get(r, key, None)
    if v is None:
        return default
    if not isinstance(v, (int, float, np.number)) or isinstance(v, bool):
        raise ModelError(f"{r.path}: key {key!r} should be a number, is {v!r}")
    return float(f32(v))


def _yarn_get_mscale(scale: np.float32, mscale: np.float32) -> np.float32:
    # llama-context.cpp: scale <= 1 ? 1 : 0.1f * mscale * logf(scale) + 1.0f  (all float)
    if scale <= f32(1.0):
        return f32(1.0)
    return f32(f32(f32(0.1) * mscale) * np.log(scale)) + f32(1.0)


def load_hparams(r: GGUFReader, n_ctx: int | None = None) -> HParams:
    arch = _get(r, "general.architecture", required=True)
    if arch not in SUPPORTED_ARCHS:
        raise ModelError(f"architecture {arch!r} is not supported (synapse runs {', '.join(SUPPORTED_ARCHS)})")
    a = arch
    n_embd = _get_int(r, f"{a}.embedding_length", required=True)
    n_layer = _get_int(r, f"{a}.block_count", required=True)
    n_head = _get_int(r, f"{a}.attention.head_count", required=True)
    n_head_kv = _get_int(r, f"{a}.attention.head_count_kv", n_head)
    n_ff = _get_int(r, f"{a}.feed_forward_length", required=True)
    n_ctx_train = _get_int(r, f"{a}.context_length", required=True)
    if _get(r, f"{a}.expert_count") not in (None, 0):
        raise ModelError(f"{arch}: mixture-of-experts models ({a}.expert_count) are not supported")
    if n_head <= 0 or n_head_kv <= 0 or n_head % n_head_kv or n_embd <= 0 or n_layer <= 0:
        raise ModelError(f"{arch}: inconsistent head counts n_head={n_head} n_head_kv={n_head_kv} n_embd={n_embd}")
    n_embd_head = _get_int(r, f"{a}.attention.key_length", n_embd // n_head)
    if _get_int(r, f"{a}.attention.value_length", n_embd_head) != n_embd_head:
        raise ModelError(f"{arch}: attention.value_length != key_length is not supported")
    n_rot = _get_int(r, f"{a}.rope.dimension_count", n_embd_head)
    if n_rot != n_embd_head:
        raise ModelError(f"invalid n_rot: {n_rot}, expected {n_embd_head}")
    tokens = r.get("tokenizer.ggml.tokens")
    n_vocab = _get_int(r, f"{a}.vocab_size", len(tokens) if tokens is not None else 0)

    eps = _get_float(r, f"{a}.attention.layer_norm_rms_epsilon", None)
    if eps is None:
        raise ModelError(f"{r.path}: missing required key '{a}.attention.layer_norm_rms_epsilon'")

    freq_base = _get_float(r, f"{a}.rope.freq_base", 10000.0)
    scaling = _get(r, f"{a}.rope.scaling.type", "linear")
    if scaling not in ROPE_SCALING_TYPES:
        raise ModelError(f"rope scaling type {scaling!r} is not supported (none, linear, yarn are)")
    ropescale = _get_float(r, f"{a}.rope.scaling.factor", 0.0)
    if ropescale == 0.0:
        ropescale = _get_float(r, f"{a}.rope.scale_linear", 0.0)
    freq_scale = float(f32(1.0) if ropescale == 0.0 else f32(1.0) / f32(ropescale))
    rope_attn_factor = _get_float(r, f"{a}.rope.scaling.attn_factor", 1.0)
    n_ctx_orig = _get_int(r, f"{a}.rope.scaling.original_context_length", n_ctx_train) or n_ctx_train

    beta_fast, beta_slow, log_mul = 32.0, 1.0, 0.0
    temp_scale, temp_floor = 0.0, 0
    if arch == "mistral3":
        temp_scale = _get_float(r, f"{a}.attention.temperature_scale", 0.0)
        beta_fast = _get_float(r, f"{a}.rope.scaling.yarn_beta_fast", beta_fast)
        beta_slow = _get_float(r, f"{a}.rope.scaling.yarn_beta_slow", beta_slow)
        log_mul = _get_float(r, f"{a}.rope.scaling.yarn_log_multiplier", 0.0)
        if temp_scale != 0.0:
            temp_floor = n_ctx_orig
            if temp_floor == 0:
                raise ModelError("invalid n_ctx_orig_yarn for attention temperature scaling")

    attn_scale = _get_float(r, f"{a}.attention.scale", 0.0)
    kq_scale = attn_scale if attn_scale != 0.0 else float(f32(1.0) / f32(math.sqrt(f32(n_embd_head))))

    hp = HParams(
        arch=arch, n_vocab=n_vocab, n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer,
        n_head=n_head, n_head_kv=n_head_kv, n_embd_head=n_embd_head, n_ff=n_ff, n_rot=n_rot,
        f_norm_rms_eps=eps, rope_neox=arch in ROPE_NEOX_ARCHS, rope_freq_base=freq_base,
        rope_freq_scale=freq_scale, rope_scaling_type=scaling, n_ctx_orig_yarn=n_ctx_orig,
        yarn_ext_factor=0.0, yarn_attn_factor=1.0, yarn_beta_fast=beta_fast, yarn_beta_slow=beta_slow,
        rope_freq_base_train=freq_base, rope_freq_scale_train=freq_scale, rope_scaling_type_train=scaling,
        n_ctx_orig_yarn_train=n_ctx_orig, yarn_beta_fast_train=beta_fast, yarn_beta_slow_train=beta_slow,
        rope_yarn_log_mul=log_mul, rope_attn_factor=rope_attn_factor,
        f_attn_temp_scale=temp_scale, n_attn_temp_floor_scale=temp_floor, kq_scale=kq_scale,
    )
    return with_rope(hp, RopeParams())


@dataclass(frozen=True)
class RopeParams:
    """The rope/YaRN fields of llama_context_params, as common/arg.cpp sets them from --rope-scaling, --rope-scale,
    --rope-freq-base, --rope-freq-scale and --yarn-*; the defaults mean "not set" (the model's value)."""
    rope_scaling_type: str | None = None  # none | linear | yarn
    rope_freq_base: float = 0.0
    rope_freq_scale: float = 0.0  # --rope-scale N sets 1/N
    yarn_orig_ctx: int = 0
    yarn_ext_factor: float = -1.0
    yarn_attn_factor: float = -1.0
    yarn_beta_fast: float = -1.0
    yarn_beta_slow: float = -1.0

    def is_default(self) -> bool:
        return self == RopeParams()


def with_rope(hp: HParams, rp: RopeParams) -> HParams:
    """The context's rope/YaRN values: llama_context's constructor (cparams from params and hparams), in float32."""
    freq_base = rp.rope_freq_base if rp.rope_freq_base != 0.0 else hp.rope_freq_base_train
    freq_scale = rp.rope_freq_scale if rp.rope_freq_scale != 0.0 else hp.rope_freq_scale_train
    n_ctx_orig = rp.yarn_orig_ctx or hp.n_ctx_orig_yarn_train or hp.n_ctx_train
    ext_factor = rp.yarn_ext_factor  # (llama_hparams' own yarn_ext_factor is -1, "not set", for these archs)
    attn_factor = f32(rp.yarn_attn_factor if rp.yarn_attn_factor >= 0.0 else 1.0)
    beta_fast = rp.yarn_beta_fast if rp.yarn_beta_fast >= 0.0 else hp.yarn_beta_fast_train
    beta_slow = rp.yarn_beta_slow if rp.yarn_beta_slow >= 0.0 else hp.yarn_beta_slow_train
    scaling = rp.rope_scaling_type or hp.rope_scaling_type_train
    if scaling == "none":
        freq_scale = 1.0  # never scale if scaling type is none
    if ext_factor < 0.0:  # negative: not set -> by scaling type
        ext_factor = 1.0 if scaling == "yarn" else 0.0
    if ext_factor != 0.0:  # the mscale correction (a given --yarn-attn-factor is replaced, as in llama.cpp)
        factor = f32(1.0) / f32(freq_scale)
        if hp.rope_yarn_log_mul != 0.0:
            attn_factor = _yarn_get_mscale(factor, f32(1.0)) / _yarn_get_mscale(factor, f32(hp.rope_yarn_log_mul))
        else:
            attn_factor = _yarn_get_mscale(factor, f32(1.0))
        attn_factor = f32(attn_factor * f32(f32(1.0) / f32(f32(1.0) + f32(f32(0.1) * np.log(factor)))))
    attn_factor = f32(attn_factor * f32(hp.rope_attn_factor))
    return replace(hp, rope_freq_base=float(f32(freq_base)), rope_freq_scale=float(f32(freq_scale)),
                   rope_scaling_type=scaling, n_ctx_orig_yarn=n_ctx_orig, yarn_ext_factor=float(f32(ext_factor)),
                   yarn_attn_factor=float(attn_factor), yarn_beta_fast=float(f32(beta_fast)),
                   yarn_beta_slow=float(f32(beta_slow)))


def n_ctx_train_after_yarn(hp: HParams) -> int:
    """llama_init_from_model: a custom YaRN scaling re-adjusts the model's n_ctx_train (n_ctx_orig / freq_scale)."""
    if hp.rope_scaling_type == "yarn" and hp.rope_freq_scale != hp.rope_freq_scale_train:
        return int(f32(hp.n_ctx_orig_yarn) / f32(hp.rope_freq_scale))
    return hp.n_ctx_train


def attn_temp_scale(hp: HParams, pos: np.ndarray) -> np.ndarray:
    """Per-position Q multiplier of mistral3's temperature tuning (llm_graph_input_attn_temp::set_input).

    log(floor((pos + offset) / floor_scale) + 1) * scale + 1, with the float/double mix of llama.cpp:
    the division and floor in float, log and the rest in double, stored as float.
    """
    out = np.empty(len(pos), dtype=np.float32)
    for i, p in enumerate(pos):
        q = np.floor(f32(f32(p) + f32(hp.f_attn_temp_offset)) / f32(hp.n_attn_temp_floor_scale))
        out[i] = f32(math.log(float(q) + 1.0) * float(f32(hp.f_attn_temp_scale)) + 1.0)
    return out
