"""llama.cpp flags that several commands accept with llama.cpp's meaning."""

from __future__ import annotations

import click


def flash_attn_option(f):
    """-fa/--flash-attn on|off|auto (llama.cpp's common argument)."""
    return click.option(
        "-fa", "--flash-attn", type=click.Choice(["on", "off", "auto"]), default=None,
        help="Flash attention, as llama.cpp's -fa: on and auto (auto enables it on CPU) compute llama.cpp's "
             "FLASH_ATTN_EXT graph, off its soft_max graph. Without -fa synapse computes the -fa off graph "
             "(llama.cpp's default is auto; see README, \"Agreement with llama.cpp\").")(f)


def resolve_flash_attn(value: str | None, cache_type_v: str = "f16") -> bool:
    """-fa on / auto: flash attention (llama.cpp's CPU backend resolves auto to enabled); off: not; no flag: not,
    unless the V cache is quantized (llama.cpp's default auto then enables it: "enabling flash_attn since it is
    required for quantized V cache")."""
    if value is None:
        return cache_type_v in ("q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
    return value in ("on", "auto")


# llama.cpp's -ctk/-ctv values (common/arg.cpp kv_cache_types); iq4_nl is refused when a model is opened
KV_CACHE_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


def cache_type_options(f):
    """-ctk/--cache-type-k and -ctv/--cache-type-v with llama.cpp's values (default f16)."""
    f = click.option("-ctv", "--cache-type-v", default="f16", show_default=True, type=click.Choice(KV_CACHE_TYPES),
                     help="KV cache type for V (quantized types need flash attention).")(f)
    return click.option("-ctk", "--cache-type-k", default="f16", show_default=True, type=click.Choice(KV_CACHE_TYPES),
                        help="KV cache type for K (types other than f16/f32 need flash attention).")(f)
