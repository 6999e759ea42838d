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


def resolve_flash_attn(value: str | None) -> bool:
    """-fa on / auto: flash attention (llama.cpp's CPU backend resolves auto to enabled); off or no flag: not."""
    return value in ("on", "auto")
