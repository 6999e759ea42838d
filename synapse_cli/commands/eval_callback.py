"""`synapse eval-callback`: print every tensor of a forward pass like llama-eval-callback, or diff two traces.

`synapse eval-callback -m M -p PROMPT` mirrors examples/eval-callback/eval-callback.cpp: the prompt
is tokenized (BOS per the vocabulary, special tokens parsed), `number of input tokens = N` and the
ids go to stderr (llama.cpp's LOG_INF stream), and every graph node is printed on stdout in
common_debug_cb_eval's format (common/debug.cpp), or as JSON lines with --json.

`synapse eval-callback diff A B` compares two traces (llama.cpp logs, synapse logs or synapse
--json); `diff --model M --prompt P LOG` runs synapse live as side A. Exit code 0: every compared
tensor within tolerance; 1: a divergence (or nothing in common); 2: unusable input.
The comparison rules are in synapse_cli/evalcb/diff.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .. import evalcb
from kernels.errors import SynapseError
from .llama_flags import (announce_flash_attn, cache_type_options, flash_attn_option, ignored_llama_options,
                          PERPLEXITY_ONLY, note_prompt_source, given_prompt, resolve_flash_attn, rope_options,
                          rope_params, kv_override_option, kv_overrides, control_vector_options, control_vector_spec,
                          lora_options, lora_spec, repack_option, repack_setting, batch_sizes, threads_value)



def _run_options(f):
    """Run options shared by the live print and the live side of diff (llama.cpp's spellings)."""
    opts = [
        click.option("-t", "--threads", type=int, default=None, callback=threads_value,
                     help="Threads (default, or 0 or less: all cores)."),
        click.option("-c", "--ctx-size", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Context size (KV cache cells); 0 = the model's training context, llama.cpp's default."),
        click.option("-b", "--batch-size", "batch", type=click.IntRange(min=1), default=2048, show_default=True,
                     help="Logical batch size."),
        click.option("-ub", "--ubatch-size", "ubatch", type=int, default=512, show_default=True,
                     help="Physical (micro-)batch size (0 or less: -b)."),
        cache_type_options,
        # accepted so that a llama-eval-callback command line can be pasted; llama-eval-callback ignores
        # -n and --temp too
        click.option("-n", "--n-predict", type=int, default=None, hidden=True),
        click.option("--temp", type=float, default=None, hidden=True),
        flash_attn_option,
        rope_options,
        kv_override_option,
        control_vector_options,
        lora_options,
        repack_option,
        ignored_llama_options(without=PERPLEXITY_ONLY),
        click.option("-e", "--escape/--no-escape", default=True, show_default=True,
                     help="Process escape sequences (\\n, \\t, \\xHH, ...) in the prompt, as llama.cpp does."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _live_trace(model, prompt, threads, ctx_size, batch, ubatch, cache_type_k, cache_type_v, recorder, flash_attn):
    tokens = evalcb.run_live(
        model,
        prompt,
        threads=threads,
        ctx_size=ctx_size,
        batch=batch,
        ubatch=batch_sizes(batch, ubatch)[1],
        cache_type_k=cache_type_k,
        cache_type_v=cache_type_v,
        hook=recorder,
        flash_attn=resolve_flash_attn(flash_attn),
        rope=rope_params(),
        kv_overrides=kv_overrides(),
        control_vectors=control_vector_spec(),
        loras=lora_spec(),
        repack=repack_setting(),
    )
    announce_flash_attn(flash_attn, cache_type_v)
    return tokens


def _check_complete(a, b, label_a: str, label_b: str) -> None:
    """A trace whose tensors are the first ones of the other's, in the same order, stopped early (a log cut
    off, a run that died): comparing what is there would report agreement that means nothing."""
    for short, long_, label in ((a, b, label_a), (b, a, label_b)):
        if len(short) < len(long_) and [r.name for r in short] == [r.name for r in long_[:len(short)]]:
            raise SynapseError(f"{label} is incomplete: it ends after {len(short)} of the other trace's "
                               f"{len(long_)} tensors (at {short[-1].name if short else 'the start'})")


@click.group(
    "eval-callback",
    invoke_without_command=True,
    subcommand_metavar="[diff A B | diff --model M --prompt P LOG]",
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option("-m", "--model", type=click.Path(dir_okay=False, path_type=Path), help="GGUF model.")
@click.option("-p", "--prompt", callback=note_prompt_source, help="Prompt, decoded as one batch.")
@click.option("-f", "--file", "prompt_file", default=None, callback=note_prompt_source,
              help="Read the prompt from a file (one trailing newline stripped; with -p, the last one given counts).")
@click.option("-bf", "--binary-file", default=None, callback=note_prompt_source,
              help="Read the prompt from a file as it is (no trailing newline stripped).")
@_run_options
@click.option("--tensor-filter", "tensor_filter", multiple=True, metavar="REGEX",
              help="Print only tensors whose name matches REGEX at its start (repeatable, like llama-debug).")
@click.option("--no-values", is_flag=True, help="Print the header and sum of each tensor only.")
@click.option("--dump-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also save each printed tensor as DIR/<graph position>-<name>.npy (numpy shape = reversed ne).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per tensor and line: name, op, type, shape (ne), srcs, sum, first, last, values.")
@click.pass_context
def command(ctx, model, prompt, prompt_file, binary_file, threads, ctx_size, batch, ubatch, cache_type_k, cache_type_v,
            n_predict, temp, flash_attn, escape, tensor_filter, no_values, dump_dir, as_json):
    """Print every tensor of the prompt's forward pass in llama-eval-callback's format.

    \b
    synapse eval-callback -m MODEL.gguf -p "Hello world" [-ctk f32 -ctv f32] [--tensor-filter 'kq']
    synapse eval-callback diff LLAMA.log SYNAPSE.log        (see: synapse eval-callback diff --help)
    """
    if ctx.invoked_subcommand is not None:
        return
    if model is None:
        raise click.UsageError("missing -m/--model (or use the 'diff' subcommand)")
    prompt = given_prompt(prompt, prompt_file, binary_file, escape)
    if prompt is None:
        raise click.UsageError("missing -p/--prompt")
    try:
        recorder = evalcb.TraceRecorder(tensor_filter=evalcb.compile_tensor_filter(tensor_filter), dump_dir=dump_dir)
        tokens = _live_trace(model, prompt, threads, ctx_size, batch, ubatch, cache_type_k, cache_type_v, recorder,
                             flash_attn)
    except OSError as e:  # --dump-dir that cannot be created or written
        raise SynapseError(f"--dump-dir {dump_dir}: {e.strerror or e}") from None
    if not tokens:
        raise SynapseError("there are no input tokens to process (try to provide a prompt with '-p')")
    err = sys.stderr  # llama-eval-callback logs the tokens with LOG_INF (stderr), the tensors with LOG (stdout)
    err.write(f"number of input tokens = {len(tokens)}\n")
    err.write("".join(f"  {t}\n" for t in tokens))
    err.flush()
    out = sys.stdout
    if as_json:
        out.write(recorder.json_lines(values=not no_values))
    else:
        out.write(recorder.text(values=not no_values))
    out.flush()


@command.command("diff")
@click.argument("traces", nargs=-1, type=click.Path(path_type=Path), metavar="A B")
@click.option("-m", "--model", type=click.Path(dir_okay=False, path_type=Path),
              help="Run synapse live on this model as side A (then give one trace, B).")
@click.option("-p", "--prompt", callback=note_prompt_source, help="Prompt of the live run.")
@click.option("-f", "--file", "prompt_file", default=None, callback=note_prompt_source,
              help="Read the live run's prompt from a file (one trailing newline stripped; with -p, the last one "
                   "given counts).")
@click.option("-bf", "--binary-file", default=None, callback=note_prompt_source,
              help="Read the live run's prompt from a file as it is (no trailing newline stripped).")
@_run_options
@click.option("--tolerance", type=click.FloatRange(min=0.0), default=1e-4, show_default=True,
              help="Largest relative sum difference counted as equal.")
@click.option("--occurrence", type=click.Choice(["last", "all"]), default="last", show_default=True,
              help="For names that occur several times: compare the last occurrence (the tensor's final "
                   "value) or pair every k-th occurrence.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.pass_context
def diff(ctx, traces, model, prompt, prompt_file, binary_file, threads, ctx_size, batch, ubatch, cache_type_k, cache_type_v,
         n_predict, temp, flash_attn, escape, tolerance, occurrence, as_json):
    """Compare two eval-callback traces tensor by tensor (sums, and printed values).

    A and B are logs of llama-eval-callback (`common_debug_cb_eval:` or older `ggml_debug:` lines)
    or of synapse eval-callback (text or --json). With --model/--prompt, synapse runs live as A:

    \b
    synapse eval-callback diff llama.log synapse.log
    synapse eval-callback diff --model M.gguf --prompt "Hello" -ctk f32 -ctv f32 llama.log
    synapse eval-callback diff -m M.gguf -f prompt.txt llama.log

    Sums are compared relatively, |a-b| / max(|a|, |b|, sqrt(N)*rms, 1e-6/tolerance): the floor keeps
    near-zero sums (cancellation) and the 1e-6 resolution of a logged sum from counting as divergences.
    Exit code: 0 all compared tensors within tolerance, 1 otherwise, 2 unreadable input.
    """
    if model is not None:
        if prompt is None and prompt_file is None and binary_file is None:
            raise click.UsageError("--model needs --prompt, --file or --binary-file")
        if len(traces) != 1:
            raise click.UsageError("with --model give exactly one trace (the llama.cpp log to compare with)")
    else:
        if prompt is not None or prompt_file is not None:
            raise click.UsageError("--prompt and --file need --model")
        if len(traces) != 2:
            raise click.UsageError("give two traces A and B (or --model M --prompt P and one trace)")
    try:
        if model is not None:
            b = evalcb.load_trace(traces[0])
            recorder = evalcb.TraceRecorder()
            _live_trace(model, given_prompt(prompt, prompt_file, binary_file, escape), threads, ctx_size, batch, ubatch,
                        cache_type_k, cache_type_v, recorder, flash_attn)
            a = recorder.records
            label_a, label_b = f"synapse {model.name}", str(traces[0])
        else:
            a = evalcb.load_trace(traces[0])
            b = evalcb.load_trace(traces[1])
            label_a, label_b = str(traces[0]), str(traces[1])
        _check_complete(a, b, label_a, label_b)
    except SynapseError as e:
        # exit code 1 means "diverged": anything that prevents a comparison is 2
        click.echo(f"Error: {e}", err=True)
        ctx.exit(2)
    result = evalcb.diff_traces(a, b, tolerance=tolerance, occurrence=occurrence)
    notes = [] if result.ok else (evalcb.cache_size_notes(result)
                                  + evalcb.build_notes([(str(p), evalcb.build_cpu_features(p)) for p in traces],
                                                       evalcb.host_has_avx512()))
    if as_json:
        click.echo(json.dumps({**result.to_json(), "notes": notes}, indent=1))
    else:
        from rich.console import Console
        from rich.text import Text

        console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200)
        evalcb.render_diff(result, console, label_a=label_a, label_b=label_b)
        for note in notes:
            console.print(Text(note))
    ctx.exit(0 if result.ok else 1)
