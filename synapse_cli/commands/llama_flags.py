"""llama.cpp flags that several commands accept with llama.cpp's meaning."""

from __future__ import annotations

import click


def flash_attn_option(f):
    """-fa/--flash-attn on|off|auto (llama.cpp's common argument, default auto)."""
    return click.option(
        "-fa", "--flash-attn", type=click.Choice(["on", "off", "auto"]), default="auto", show_default=True,
        help="Flash attention, as llama.cpp's -fa: on and auto (auto enables it on CPU, as llama.cpp does) "
             "compute llama.cpp's FLASH_ATTN_EXT graph, off its soft_max graph.")(f)


def resolve_flash_attn(value: str) -> bool:
    """-fa on / auto: flash attention (llama.cpp's CPU backend resolves auto to enabled); off: not (a quantized
    V cache then fails when the context is created, with llama.cpp's error)."""
    return value in ("on", "auto")


def announce_flash_attn(value: str, cache_type_v: str) -> None:
    """What llama.cpp logs on stderr when its context resolves -fa auto (call once the context exists)."""
    from kernels.kv_cache import QUANTIZED  # (numba: imported once a model is open)

    if value != "auto":
        return
    if cache_type_v in QUANTIZED:
        click.echo("llama_init_from_model: enabling flash_attn since it is required for quantized V cache", err=True)
    click.echo("resolve_fused_ops: Flash Attention enabled", err=True)


# llama.cpp's -ctk/-ctv values (common/arg.cpp kv_cache_types)
KV_CACHE_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


def cache_type_options(f):
    """-ctk/--cache-type-k and -ctv/--cache-type-v with llama.cpp's values (default f16)."""
    f = click.option("-ctv", "--cache-type-v", default="f16", show_default=True, type=click.Choice(KV_CACHE_TYPES),
                     help="KV cache type for V (quantized types need flash attention).")(f)
    return click.option("-ctk", "--cache-type-k", default="f16", show_default=True, type=click.Choice(KV_CACHE_TYPES),
                        help="KV cache type for K (types other than f16/f32 need flash attention).")(f)
