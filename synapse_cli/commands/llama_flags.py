"""llama.cpp flags that several commands accept with llama.cpp's meaning."""

from __future__ import annotations

import click

from ..errors import SynapseError


def flash_attn_option(f):
    """-fa/--flash-attn on|off|auto (llama.cpp's common argument)."""
    return click.option(
        "-fa", "--flash-attn", type=click.Choice(["on", "off", "auto"]), default=None,
        help="Flash attention, as llama.cpp's -fa. synapse computes the -fa off graph; on and auto (llama.cpp's "
             "default, which enables it on CPU) are not implemented yet.")(f)


def check_flash_attn(value: str | None) -> None:
    """Refuse an explicit -fa on / -fa auto with one line; None (flag not given) and off compute the -fa off graph."""
    if value in (None, "off"):
        return
    raise SynapseError(f"-fa {value}: flash attention is not implemented yet; synapse computes llama.cpp's "
                       f"-fa off graph (pass -fa off, or leave -fa out)")
