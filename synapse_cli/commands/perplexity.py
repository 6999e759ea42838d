"""`synapse perplexity`: llama-perplexity's perplexity over a text file (synapse_cli/perplexity.py).

stdout as llama-perplexity writes it: the tail of its ETA line ("%.2f minutes"), then `[1]x,[2]y,...,` (or with
--ppl-output-type 1 one line per chunk) and two newlines; on stderr the log lines (chunk count, time per pass,
`Final estimate: PPL = X +/- Y`, which the strided mode, --ppl-stride, does not print). `--json` prints one object
instead.
"""

from __future__ import annotations

import json
import sys
import time

import click

from kernels.errors import SynapseError

from .llama_flags import (announce_load_mode, cache_type_options, flash_attn_option, ignored_llama_options,
                          note_prompt_source, given_prompt, batch_sizes, threads_value,
                          load_mode_option, resolve_flash_attn, rope_options, rope_params, kv_override_option,
                          kv_overrides, control_vector_options, control_vector_spec, lora_options, lora_spec,
                          repack_option, repack_setting)


def _open(model_path, ctx_size, batch_size, ubatch_size, threads, cache_type_k, cache_type_v, flash_attn,
          llama_batch_order, json_output, n_cells=None, n_batch=None, load_mode="auto"):
    """The session both modes run on, with llama-perplexity's batch geometry: n_seq = max(1, b / c) chunks per
    batch and n_batch = min(b, n_seq * c), so each chunk is decoded in batches of min(b, c) tokens (micro-batches
    of ub). Returns (session, min(b, c), n_seq). n_cells / n_batch: the context's cells and batch size instead
    (--ppl-stride). The default (batch-invariant) mode computes every row with llama.cpp's kernels of large batches
    (kernels/order.py) when llama-perplexity's micro-batches are large (FA_TILE_Q rows, where its flash attention
    takes its tiled kernel), so that it agrees with llama-perplexity's arithmetic."""
    from kernels.flash_attn import FA_TILE_Q

    from ..session import open_session
    from .decode import default_threads

    n_batch = min(batch_size, ctx_size) if n_batch is None else n_batch
    n_ubatch = min(ubatch_size, n_batch)
    sess = open_session(model_path, n_ctx=n_cells or ctx_size, n_batch=n_batch, n_ubatch=n_ubatch,
                        n_threads=threads or default_threads(), cache_type_k=cache_type_k, cache_type_v=cache_type_v,
                        show_progress=not json_output, batch_invariant=not llama_batch_order,
                        flash_attn=resolve_flash_attn(flash_attn), batched_kernels=n_ubatch >= FA_TILE_Q,
                        load_mode=load_mode, rope=rope_params(),
                        kv_overrides=kv_overrides(), control_vectors=control_vector_spec(),
                        loras=lora_spec(), repack=repack_setting())
    return sess, n_batch, _ppl_sequences(batch_size, ctx_size)


def _ppl_sequences(batch_size: int, ctx_size: int) -> int:
    """main(): perplexity and KL divergence run n_parallel = max(1, b / c) chunks side by side."""
    return max(1, batch_size // ctx_size)


def _eta(func: str, t: float, n_chunk: int, n_seq: int) -> None:
    """llama-perplexity's estimate after the first pass (its first batch: n_seq chunks, t their time): LOG_INF the
    time per pass (stderr), LOG the rest (stdout; perplexity_v2 computes it without the n_seq division, which is 1
    there)."""
    print(f"{func}: {t:.2f} seconds per pass - ETA ", file=sys.stderr, flush=True)
    total = int(t * n_chunk / n_seq)
    if total >= 3600:
        sys.stdout.write(f"{total // 3600} hours ")
        total %= 3600
    sys.stdout.write(f"{total / 60.0:.2f} minutes\n")


@click.command("perplexity", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-m", "--model", "model_path", required=True, type=click.Path(dir_okay=False), help="GGUF model file.")
@click.option("-f", "--file", "prompt_file", default=None, callback=note_prompt_source,
              help="Text to score (one trailing newline stripped; escapes processed only with -e).")
@click.option("-p", "--prompt", default=None, callback=note_prompt_source,
              help="Text to score, given on the command line (of -p, -f and -bf, the one given last counts).")
@click.option("-c", "--ctx-size", default=512, show_default=True,
              help="Tokens per chunk (llama-perplexity's default: 512; it must be > 0).")
@click.option("-b", "--batch-size", default=2048, show_default=True, help="Logical batch size.")
@click.option("-ub", "--ubatch-size", default=512, show_default=True, help="Physical (micro) batch size (0 or less: -b).")
@click.option("--chunks", "n_chunks", default=-1, show_default=True, help="Chunks to score at most (-1: all).")
@click.option("-t", "--threads", default=None, type=int, callback=threads_value,
              help="Threads (default, or 0 or less: available CPUs).")
@cache_type_options
@flash_attn_option
@rope_options
@kv_override_option
@control_vector_options
@lora_options
@repack_option
@ignored_llama_options
@load_mode_option
@click.option("-e", "--escape/--no-escape", default=False, show_default=True,
              help="Process escapes (\\n, \\t, ...) in the text; off by default, as llama-perplexity sets it.")
@click.option("--llama-batch-order", is_flag=True,
              help="Compute batches in llama.cpp's batch orders (as decode): the logits, and so the perplexity, "
                   "are then llama-perplexity's.")
@click.option("--kl-divergence-base", "--save-all-logits", "kld_base", default=None, metavar="FILE",
              help="Save the log-probabilities of every scored position to FILE (llama-perplexity's format), or, "
                   "with --kl-divergence, read them as the base model's.")
@click.option("--kl-divergence", "kld", is_flag=True,
              help="Compare with the base model's FILE: KL divergence, top-token agreement, probability deltas (the "
                   "text and -c come from FILE).")
@click.option("--ppl-stride", "stride", default=0, show_default=True, metavar="N",
              help="Strided perplexity (llama-perplexity's perplexity_v2): chunks of the whole context (-c + N/2, "
                   "padded to 256) every N tokens, the last N of each scored, no BOS but the text's first. 0: the "
                   "default mode.")
@click.option("--ppl-output-type", "output_type", default=0, show_default=True, metavar="<0|1>",
              help="0: `[1]x,[2]y,...`; any other value: a line per chunk, `%8d  %.4f` (its first token, the running "
                   "PPL), followed by the mean nll and its uncertainty without --ppl-stride.")
@click.option("--hellaswag", is_flag=True,
              help="HellaSwag score of the -f file (6 lines a task: context, right ending's index, 4 endings).")
@click.option("--hellaswag-tasks", default=400, show_default=True, metavar="N",
              help="Tasks drawn at random for --hellaswag.")
@click.option("--winogrande", is_flag=True,
              help="Winogrande score of the -f CSV file (index,sentence with a _,choice1,choice2,answer 1|2).")
@click.option("--winogrande-tasks", default=0, show_default=True, metavar="N",
              help="Tasks drawn at random for --winogrande (0: all, in file order).")
@click.option("--multiple-choice", is_flag=True,
              help="Multiple-choice score (ARC, MMLU, TruthfulQA, ...) of the -bf/-f file in llama.cpp's binary format.")
@click.option("--multiple-choice-tasks", default=0, show_default=True, metavar="N",
              help="Tasks drawn at random for --multiple-choice (0: all).")
@click.option("-np", "--parallel", "n_parallel", default=1, show_default=True, metavar="N",
              help="Sequences per batch of the task scores (at least 4 there, as llama-perplexity sets; their context "
                   "is N * -c): a multiple-choice task needs one per answer.")
@click.option("-bf", "--binary-file", default=None, metavar="FNAME", callback=note_prompt_source,
              help="Read the text or tasks from a file as it is (no trailing newline stripped).")
@click.option("--json", "json_output", is_flag=True, help="Print one JSON object: every chunk's value and the summary.")
def command(model_path, prompt_file, prompt, ctx_size, batch_size, ubatch_size, n_chunks, threads, cache_type_k,
            cache_type_v, flash_attn, load_mode, escape, llama_batch_order, kld_base, kld, stride, output_type, hellaswag,
            hellaswag_tasks, winogrande, winogrande_tasks, multiple_choice, multiple_choice_tasks, n_parallel,
            binary_file, json_output):
    """Perplexity of a model over a text, as llama-perplexity computes and prints it."""
    load_mode = announce_load_mode(load_mode)
    if ctx_size <= 0:
        raise SynapseError("perplexity tool requires '--ctx-size' > 0")
    batch_size, ubatch_size = batch_sizes(batch_size, ubatch_size)
    from ..model import LLAMA_MAX_SEQ

    # main(): n_parallel sequences, max(4, -np) for the task scores, b / c for perplexity and KL divergence
    tasks = hellaswag or winogrande or multiple_choice
    n_par = max(4, n_parallel)  # main(): the task scores run n_parallel = max(4, -np) sequences of -c cells
    n_seq_max = n_par if tasks else _ppl_sequences(batch_size, ctx_size)
    if n_seq_max > LLAMA_MAX_SEQ:  # llama_context refuses them: llama-perplexity's "failed to create context"
        raise SynapseError(f"failed to create context: n_seq_max must be <= {LLAMA_MAX_SEQ}, got {n_seq_max} "
                           f"({'-np' if tasks else '-b / -c'})")
    geo = None
    if stride > 0:  # llama-perplexity's main() grows the context by stride/2 (in every mode)
        from ..perplexity import StrideGeometry

        geo = StrideGeometry.of(ctx_size, batch_size, stride)
        if not json_output:
            print(f"Will perform strided perplexity calculation -> adjusting context size from {geo.ctx_from} to "
                  f"{geo.ctx_to}", file=sys.stderr)
    text = given_prompt(prompt, prompt_file, binary_file, escape)  # (escapes only with -e here)
    if text is None and not (kld and not (hellaswag or winogrande or multiple_choice)):  # (KL: the tokens are in the file)
        raise SynapseError("give the " + ("tasks" if hellaswag or winogrande or multiple_choice else "text")
                           + " with -f/--file, -bf/--binary-file or -p/--prompt")

    def task_text() -> bytes:
        return text

    if multiple_choice and not (hellaswag or winogrande):  # (llama-perplexity: --hellaswag, then --winogrande win)
        return _multiple_choice(model_path, task_text(), n_par, ctx_size, batch_size, ubatch_size, threads, cache_type_k,
                                cache_type_v, flash_attn, llama_batch_order, multiple_choice_tasks, json_output,
                                load_mode)
    if winogrande and not hellaswag:
        return _winogrande(model_path, task_text(), n_par * ctx_size, batch_size, ubatch_size,
                           threads, cache_type_k, cache_type_v, flash_attn, llama_batch_order, winogrande_tasks,
                           json_output, load_mode)
    if hellaswag:
        return _hellaswag(model_path, task_text(), n_par * ctx_size, batch_size, ubatch_size,
                          threads, cache_type_k, cache_type_v, flash_attn, llama_batch_order, hellaswag_tasks,
                          json_output, load_mode)
    if kld:
        return _kl_divergence(model_path, kld_base, ctx_size, batch_size, ubatch_size, threads, cache_type_k,
                              cache_type_v, flash_attn, llama_batch_order, json_output,
                              n_cells=None if geo is None else max(ctx_size, geo.n_ctx_seq), load_mode=load_mode)
    if geo is not None:
        if kld_base is not None:  # perplexity_v2 never opens the logits file
            print(f"note: --kl-divergence-base is ignored with --ppl-stride (llama-perplexity writes no {kld_base} "
                  "in that mode)", file=sys.stderr)
        return _strided(model_path, text, geo, stride, ubatch_size, n_chunks, threads, cache_type_k, cache_type_v,
                        flash_attn, llama_batch_order, output_type, json_output, load_mode)
    from ..perplexity import _div, perplexity

    sess, n_batch, n_seq = _open(model_path, ctx_size, batch_size, ubatch_size, threads, cache_type_k, cache_type_v,
                                 flash_attn, llama_batch_order, json_output, load_mode=load_mode)
    err, out = sys.stderr, sys.stdout
    bar = _Progress(json_output)

    def on_start(n_chunk):
        print(f"perplexity: calculating perplexity over {n_chunk} chunks, n_ctx={ctx_size}, "
              f"batch_size={min(batch_size, n_seq * ctx_size)}, n_seq={n_seq}", file=err, flush=True)
        bar.start(n_chunk)

    pending = []  # this pass's values: llama.cpp prints a batch of n_seq chunks after decoding all of them

    def on_chunk(run):
        bar.advance()
        k = len(run.chunk_ppl)
        if output_type == 0:
            pending.append(f"[{k}]{run.running()},")
        else:  # llama.cpp prints i*n_ctx, i the batch's first chunk
            pending.append(run.running_type1((k - 1) // n_seq * n_seq * ctx_size) + "\n")
        if k % n_seq and k < run.n_chunk:
            return
        if k <= n_seq:
            _eta("perplexity", bar.seconds(), run.n_chunk, n_seq)
        out.write("".join(pending))
        out.flush()
        pending.clear()

    if not json_output:
        print("perplexity: tokenizing the input ..", file=err)
    base_out = None
    if kld_base is not None:
        try:
            base_out = open(kld_base, "wb")
        except OSError as e:
            raise SynapseError(f"failed to open {kld_base} for writing: {e.strerror or e}") from None
        if not json_output:
            print(f"perplexity: saving all logits to {kld_base}", file=err)
    try:
        run = perplexity(sess.ctx, sess.tokenizer, text, ctx_size, n_batch, n_chunks, base_out=base_out,
                         **_progress_callbacks(json_output, on_start, on_chunk))
    finally:
        bar.stop()
        if base_out is not None:
            base_out.close()
    ppl, ppl_err = run.final()
    if json_output:
        print(json.dumps({"n_ctx": ctx_size, "n_chunk": run.n_chunk, "n_tokens": run.n_tokens,
                          "chunks": run.chunk_ppl, "ppl": ppl, "ppl_err": ppl_err, "nll": _div(run.nll, run.count),
                          "count": run.count, "seconds": bar.seconds()}))
        return
    out.write("\n")
    if ppl_err is None:
        print("Unexpected negative standard deviation of log(prob)", file=err)
    else:
        print(f"Final estimate: PPL = {ppl:.4f} +/- {ppl_err:.5f}", file=err)
    out.write("\n")
    out.flush()


def _task_lines(json_output: bool):
    """A task score's printed lines: kept (for --json) and, without --json, written to stdout as they come."""
    lines = []

    def on_task(line):
        lines.append(line)
        if not json_output:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    return lines, on_task


def _hellaswag(model_path, text, n_ctx, batch_size, ubatch_size, threads, cache_type_k, cache_type_v, flash_attn,
               llama_batch_order, n_tasks, json_output, load_mode):
    """--hellaswag: llama-perplexity's hellaswag_score and its output (stdout: the table header, a line per task
    with the running accuracy and its 95 % interval, blank lines; the log lines on stderr). n_ctx: llama.cpp's
    context (n_parallel sequences of -c cells), which a task must fit into."""
    from ..task_scores import getlines, hellaswag_score, load_hellaswag

    sess, _, _ = _open(model_path, n_ctx, batch_size, ubatch_size, threads, cache_type_k, cache_type_v,
                       flash_attn, llama_batch_order, json_output, load_mode=load_mode)
    tok = sess.tokenizer
    err, out = sys.stderr, sys.stdout
    tasks = load_hellaswag(text, n_tasks, lambda b: tok.encode(b, add_special=True, parse_special=False))
    if not json_output:
        print(f"hellaswag_score : loaded {len(getlines(text)) // 6} tasks from prompt.", file=err)
        print(f"================================= is_spm = {int(tok.vocab.type == 'spm')}", file=err)
        print(f"hellaswag_score : selecting {len(tasks)} randomized tasks.", file=err)
        print("hellaswag_score : calculating hellaswag score over selected tasks.", file=err)
        out.write("\ntask\tacc_norm\t95% confidence interval\n")
        out.flush()
    lines, on_task = _task_lines(json_output)
    acc = hellaswag_score(sess.ctx, tasks, sess.ctx.n_ctx, on_task)
    if json_output:
        print(json.dumps({"tasks": len(tasks), "acc_norm": acc * 100.0, "lines": lines}))
        return
    out.write("\n\n")
    out.flush()


def _winogrande(model_path, text, n_ctx, batch_size, ubatch_size, threads, cache_type_k, cache_type_v, flash_attn,
                llama_batch_order, n_tasks, json_output, load_mode):
    """--winogrande: llama-perplexity's winogrande_score and its output (stdout: a line per task with the running
    accuracy, both sentences' scores, the model's answer and the right one; a blank line; the final score on stderr
    from 100 tasks on)."""
    from ..task_scores import (load_winogrande, select_winogrande, tokenize_winogrande, winogrande_final,
                               winogrande_score)

    err, out = sys.stderr, sys.stdout
    tasks = load_winogrande(text, lambda msg: print(msg, file=err))
    if not tasks:
        raise SynapseError("winogrande_score: no tasks")
    sess, _, _ = _open(model_path, n_ctx, batch_size, ubatch_size, threads, cache_type_k, cache_type_v,
                       flash_attn, llama_batch_order, json_output, load_mode=load_mode)
    if not json_output:
        print(f"winogrande_score : loaded {len(tasks)} tasks from prompt.", file=err)
    if 0 < n_tasks < len(tasks):
        if not json_output:
            print(f"winogrande_score : selecting {n_tasks} random tasks", file=err)
        tasks = select_winogrande(tasks, n_tasks)
    if not json_output:
        print("winogrande_score : tokenizing selected tasks", file=err)
    tok = sess.tokenizer
    tokenize_winogrande(tasks, lambda b: tok.encode(b, add_special=True, parse_special=False))
    if not json_output:
        print("winogrande_score : calculating winogrande score over selected tasks.", file=err)
    lines, on_task = _task_lines(json_output)

    n_correct, n_done = winogrande_score(sess.ctx, tasks, sess.ctx.n_ctx, on_task)
    final = winogrande_final(n_correct, n_done)
    if json_output:
        print(json.dumps({"tasks": n_done, "correct": n_correct, "lines": lines, "final": final}))
        return
    out.write("\n")
    out.flush()
    if final:
        print(final, file=err)
    out.write("\n")
    out.flush()


def _multiple_choice(model_path, data, n_seq_max, ctx_size, batch_size, ubatch_size, threads, cache_type_k, cache_type_v,
                     flash_attn, llama_batch_order, n_tasks, json_output, load_mode):
    """--multiple-choice: llama-perplexity's multiple_choice_score and its output (stdout: progress dots and
    `done`, the table of the running accuracy; the result and random chance on stderr)."""
    from ..task_scores import (load_multiple_choice, multiple_choice_final, multiple_choice_score,
                               prepare_multiple_choice)

    err, out = sys.stderr, sys.stdout
    sess, _, _ = _open(model_path, n_seq_max * ctx_size, batch_size, ubatch_size, threads, cache_type_k,
                       cache_type_v, flash_attn, llama_batch_order, json_output, load_mode=load_mode)

    def log(text, to_stdout):  # llama.cpp's LOG (stdout: the progress dots) or LOG_INF (a stderr line)
        if json_output:
            return
        if to_stdout:
            out.write(text)
            out.flush()
        else:
            print(text, file=err)

    tasks = load_multiple_choice(data, n_tasks, log)
    tok = sess.tokenizer
    prepare_multiple_choice(tasks, lambda b: tok.encode(b, add_special=True, parse_special=False), log)
    if not json_output:
        print(f"multiple_choice_score : calculating TruthfulQA score over {len(tasks)} tasks.", file=err)
        out.write("\ntask\tacc_norm\n")
    lines, on_task = _task_lines(json_output)

    n_correct, n_done, n_answers = multiple_choice_score(sess.ctx, tasks, sess.ctx.n_ctx, n_seq_max, on_task)
    # (llama.cpp's early return for fewer than 100 drawn tasks compares the count with itself: never taken)
    final = multiple_choice_final(n_correct, n_done, n_answers)
    if json_output:
        print(json.dumps({"tasks": n_done, "correct": n_correct, "lines": lines, "final": final}))
        return
    out.write("\n")
    out.flush()
    for line in final:
        print(line, file=err)
    print("", file=err)
    out.write("\n")
    out.flush()


def _strided(model_path, text, geo, stride, ubatch_size, n_chunks, threads, cache_type_k, cache_type_v, flash_attn,
             llama_batch_order, output_type, json_output, load_mode="auto"):
    """--ppl-stride: llama-perplexity's perplexity_v2 and its output (stdout: the ETA tail, `[i]x,` or
    `%8d  %.4lf` lines, two newlines; no final estimate)."""
    from ..perplexity import _div, _f, perplexity_v2

    sess, _, _ = _open(model_path, geo.n_ctx_seq, geo.n_batch, ubatch_size, threads, cache_type_k, cache_type_v,
                       flash_attn, llama_batch_order, json_output, n_batch=geo.n_batch, load_mode=load_mode)
    err, out = sys.stderr, sys.stdout
    bar = _Progress(json_output)

    def on_start(run):
        print(f"perplexity_v2: have {run.n_tokens} tokens. Calculation chunk = {run.n_ctx}", file=err)
        print(f"perplexity_v2: computing over {run.n_chunk} chunks, n_ctx={run.n_ctx}, batch_size={geo.n_batch}, "
              f"n_seq={max(1, geo.n_batch // run.n_ctx)}", file=err, flush=True)
        bar.start(run.n_chunk)

    def on_chunk(run):
        bar.advance()
        k = len(run.chunk_ppl)
        if k == 1:
            _eta("perplexity_v2", bar.seconds(), run.n_chunk, 1)
        if output_type == 0:
            out.write(f"[{k}]{_f(run.chunk_ppl[-1], '.4f')},")
        else:
            out.write(f"{(k - 1) * stride:8d}  {_f(run.chunk_ppl[-1], '.4f')}\n")
        out.flush()

    if not json_output:
        print("perplexity_v2: tokenizing the input ..", file=err)
    try:
        run = perplexity_v2(sess.ctx, sess.tokenizer, text, geo, stride, n_chunks,
                            **_progress_callbacks(json_output, on_start, on_chunk))
    finally:
        bar.stop()
    if json_output:
        print(json.dumps({"n_ctx": run.n_ctx, "stride": stride, "n_chunk": run.n_chunk, "n_tokens": run.n_tokens,
                          "chunks": run.chunk_ppl, "ppl": run.ppl(), "nll": _div(run.nll, run.count),
                          "count": run.count, "seconds": bar.seconds()}))
        return
    out.write("\n\n")
    out.flush()


def _progress_callbacks(json_output, on_start, on_chunk) -> dict:
    """The callbacks that print progress lines and move the bar: none with --json (which prints neither)."""
    return {} if json_output else {"on_start": on_start, "on_chunk": on_chunk}


class _Progress:
    """A Rich progress bar of the chunks (elapsed, ETA) on stderr when it is a terminal; and the run's clock."""

    def __init__(self, json_output: bool):
        self.t0 = time.perf_counter()
        self.bar = None
        if json_output or not sys.stderr.isatty():
            return
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.bar = Progress(TextColumn("perplexity"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TimeRemainingColumn(), console=Console(stderr=True), transient=True)

    def seconds(self) -> float:
        return time.perf_counter() - self.t0

    def start(self, n_chunk: int) -> None:
        if self.bar is not None:
            self.bar.start()
            self.bar.add_task("chunks", total=n_chunk)

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.advance(self.bar.task_ids[0])

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _kl_divergence(model_path, base, ctx_size, batch_size, ubatch_size, threads, cache_type_k, cache_type_v,
                   flash_attn, llama_batch_order, json_output, n_cells=None, load_mode="auto"):
    """--kl-divergence: llama-perplexity's table per chunk and its statistics (stdout), as it prints them."""
    from ..perplexity import KLD_TABLE_HEADER, kl_divergence, kld_statistics, kld_table_row

    if base is None:
        raise SynapseError("you must provide a name of a file containing the log probabilities of the base model "
                           "(--kl-divergence-base)")
    sess, n_batch, n_seq = _open(model_path, ctx_size, batch_size, ubatch_size, threads, cache_type_k, cache_type_v,
                                 flash_attn, llama_batch_order, json_output, n_cells=n_cells, load_mode=load_mode)
    err, out = sys.stderr, sys.stdout
    rows = []
    bar = _Progress(json_output)

    def on_start(run):
        if not json_output:
            print(f"kl_divergence: computing over {run.n_chunk} chunks, n_ctx={run.n_ctx}, batch_size={n_batch}, "
                  f"n_seq={n_seq}", file=err, flush=True)
        bar.start(run.n_chunk)

    def on_chunk(run, i):
        bar.advance()
        rows.append(kld_table_row(run, i + 1))
        if json_output or ((i + 1) % n_seq and i + 1 < run.n_chunk):
            return  # (a pass of n_seq chunks is printed at once, as llama.cpp's batch)
        first = (i // n_seq) * n_seq  # the pass's first chunk
        if first == 0:
            _eta("kl_divergence", bar.seconds(), run.n_chunk, n_seq)
            out.write(f"\n{KLD_TABLE_HEADER}\n")
        out.write("".join(r + "\n" for r in rows[first:]))
        out.flush()

    try:
        run = kl_divergence(sess.ctx, sess.tokenizer, base, batch_size, on_start=on_start, on_chunk=on_chunk)
    finally:
        bar.stop()
    stats = kld_statistics(run)
    if json_output:
        print(json.dumps({"n_ctx": run.n_ctx, "n_chunk": run.n_chunk, "count": run.count, "table": rows,
                          "statistics": stats, "sums": run.sums, "n_same_top": run.n_same_top}))
        return
    out.write("\n")
    if stats:
        out.write("\n".join(stats) + "\n")
    out.write("\n")
    out.flush()
