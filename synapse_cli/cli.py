"""The `synapse` command: a Click group whose subcommands live one per module in `commands/`.

Subcommand modules are imported only when invoked, so `synapse tokenize` and `synapse inspect-gguf`
never import numba or compile a kernel. Domain errors (`SynapseError`) become one line on stderr and
exit code 1 here, at the edge; nothing below prints a traceback for bad input.
"""

from __future__ import annotations

import importlib
import sys

import click

from kernels.errors import SynapseError

# command name -> (module in synapse_cli.commands, one-line help shown by `synapse --help`)
COMMANDS = {
    "decode": ("decode", "Generate text greedily from a prompt (llama-completion / llama-simple)."),
    "tokenize": ("tokenize", "Tokenize text with a GGUF vocabulary (llama-tokenize)."),
    "inspect-gguf": ("inspect_gguf", "Dump a GGUF file's metadata and tensors (gguf-dump)."),
    "eval-callback": ("eval_callback", "Print every graph tensor, or diff traces (llama-eval-callback)."),
    "bench": ("bench", "Measure prompt and generation speed (llama-bench)."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module_name, short_help = COMMANDS[name]
        try:
            module = importlib.import_module(f"synapse_cli.commands.{module_name}")
        except ModuleNotFoundError as e:
            if e.name != f"synapse_cli.commands.{module_name}":
                raise

            @click.command(name, short_help=f"{short_help} [not built yet]")
            def missing():
                raise click.ClickException(f"'{name}' is not implemented in this build yet")

            return missing
        cmd = module.command
        cmd.short_help = short_help
        return cmd

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SynapseError as e:
            raise click.ClickException(str(e)) from None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="synapse", prog_name="synapse")
def cli():
    """synapse: llama.cpp's tools for Llama-family GGUF models, computed the way ggml's CPU backend does."""


def main() -> None:
    try:
        cli(standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
