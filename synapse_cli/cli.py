"""The `synapse` command: a Click group whose subcommands live one per module in `commands/`.

Subcommand modules are imported only when invoked, so `synapse tokenize` and `synapse inspect-gguf`
never import numba or compile a kernel. Domain errors (`SynapseError`) become one line on stderr and
exit code 1 here, at the edge; nothing below prints a traceback for bad input.
"""

from __future__ import annotations

import importlib
import signal
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
    "perplexity": ("perplexity", "Perplexity of a model over a text (llama-perplexity)."),
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

    def resolve_command(self, ctx, args):
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:
            from .commands.llama_flags import check_args

            check_args(cmd, rest)
        return name, cmd, rest

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SynapseError as e:
            raise click.ClickException(str(e)) from None


def _version(ctx, param, value):
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    from .bench import build_commit

    try:
        v = version("synapse")
    except PackageNotFoundError:
        v = "unknown"
    click.echo(f"synapse, version {v} (build {build_commit()})")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version and the build commit, and exit.")
def cli():
    """synapse: llama.cpp's tools for Llama-family GGUF models, computed the way ggml's CPU backend does."""


def main() -> None:
    """One exit convention for every command: 0 done, 1 bad input or failure (one `Error:` line), 2 usage error
    (and eval-callback diff's "cannot compare"), 130 interrupted (Ctrl-C, quietly), and a closed output pipe
    ends the process quietly as it ends llama.cpp's tools (SIGPIPE). Output is UTF-8 whatever the locale says,
    as llama.cpp writes its bytes."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(encoding="utf-8", errors="surrogateescape")
        except (AttributeError, ValueError):
            pass
    try:
        rv = cli.main(standalone_mode=False)
    except (KeyboardInterrupt, click.exceptions.Abort):
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
