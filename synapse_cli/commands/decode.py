"""`synapse decode`: generation as llama-completion prints it.

Flags follow llama.cpp's common arguments (-m -p -f -n -c -b -ub -t -ctk -ctv -fa --ignore-eos -e/--no-escape
--no-display-prompt -no-cnv, and every sampling flag). Without a sampling flag synapse decodes greedily
(argmax); with any, it samples with llama.cpp's chain and random engine (`synapse_cli.sampling`), so that the
same flags and seed give llama-completion's tokens. The prompt is tokenized with add_special and
parse_special (what llama-completion does); generated text streams to stdout; timings go to stderr in
llama_perf_context_print's format; `--json` prints one object instead.
"""

from __future__ import annotations

import json
import os
import sys

import click

from kernels.errors import SynapseError
from .llama_flags import (announce_load_mode, cache_type_options, flash_attn_option, ignored_llama_options,
                          PERPLEXITY_ONLY, load_mode_option, note_prompt_source, given_prompt, resolve_flash_attn,
                          rope_options, rope_params, kv_override_option, kv_overrides, color_option,
                          control_vector_options, control_vector_spec, lora_options, lora_spec,
                          repack_option, repack_setting, batch_sizes, threads_value)
from .sampling_options import grammar_text, sampling_given, sampling_options, sampling_params


class _BytesOut:
    """Writes bytes to a text stream's binary buffer (or, lacking one, decoded with replacement), flushing each."""

    def __init__(self, stream):
        self.stream = stream
        self.buffer = getattr(stream, "buffer", None)

    def write(self, data: bytes) -> None:
        if self.buffer is not None:
            self.stream.flush()
            self.buffer.write(data)
            self.buffer.flush()
        else:
            self.stream.write(data.decode("utf-8", errors="replace"))
            self.stream.flush()

    def flush(self) -> None:
        self.stream.flush()


def default_threads() -> int:
    """llama.cpp's default: the number of physical cores (here: CPUs available to the process)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


@click.command("decode", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-m", "--model", "model_path", required=True, type=click.Path(dir_okay=False), help="GGUF model file.")
@click.option("-p", "--prompt", default=None, callback=note_prompt_source,
              help="Prompt text (escapes such as \\n processed unless --no-escape).")
@click.option("-f", "--file", "prompt_file", default=None, callback=note_prompt_source,
              help="Read the prompt from a file (one trailing newline stripped; with -p, the last one given counts).")
@click.option("-bf", "--binary-file", default=None, callback=note_prompt_source,
              help="Read the prompt from a file as it is (no trailing newline stripped).")
@click.option("-n", "--predict", "--n-predict", "n_predict", default=-1, show_default=True,
              help="Tokens to generate; -1 = until end of generation (or a full context), -2 = until the context "
                   "is full.")
@click.option("-c", "--ctx-size", default=0, show_default=True, help="Context size; 0 = the model's training context.")
@click.option("-b", "--batch-size", default=2048, show_default=True, help="Logical batch size for prompt processing.")
@click.option("-ub", "--ubatch-size", default=512, show_default=True, help="Physical (micro) batch size (0 or less: -b).")
@click.option("-t", "--threads", default=None, type=int, callback=threads_value,
              help="Threads (default, or 0 or less: available CPUs).")
@click.option("-np", "--parallel", "n_parallel", default=1, show_default=True, metavar="N",
              help="Sequences the context is made for (llama.cpp's n_seq_max): without -kvu, this one sequence's "
                   "cache holds only n_ctx / N cells, while llama-completion still checks against n_ctx.")
@cache_type_options
@sampling_options
@click.option("--ignore-eos", is_flag=True, help="Keep generating past end-of-generation tokens (logit bias -inf).")
@click.option("-e", "--escape/--no-escape", default=True, show_default=True, help="Process escape sequences in -p.")
@click.option("--display-prompt/--no-display-prompt", default=True, show_default=True, help="Echo the prompt.")
@click.option("--context-shift/--no-context-shift", default=False, show_default=True,
              help="When the context is full, drop half of the positions after the first --keep and go on (as "
                   "llama-completion, whose default is to stop).")
@click.option("--keep", "n_keep", default=0, show_default=True, metavar="N",
              help="Tokens of the prompt a context shift keeps (-1: all of it; a BOS is always kept).")
@click.option("-gan", "--grp-attn-n", "ga_n", default=1, show_default=True, metavar="N",
              help="Self-extend: group-attention factor (1: off).")
@click.option("-gaw", "--grp-attn-w", "ga_w", default=512, show_default=True, metavar="N",
              help="Self-extend: group-attention width.")
@click.option("-r", "--reverse-prompt", "reverse_prompts", multiple=True, metavar="PROMPT",
              help="Stop generating at PROMPT (repeatable); in interactive mode, return control to the user.")
@click.option("-sp", "--special", is_flag=True, help="Print special tokens' text (e.g. end-of-turn markers).")
@color_option
@click.option("--verbose-prompt", is_flag=True, help="Log the prompt's tokens (and each input's) on stderr.")
@click.option("-i", "--interactive", is_flag=True,
              help="Interactive mode on a raw prompt: read further input from stdin when a reverse prompt or an "
                   "end-of-generation token comes (Ctrl-C interjects).")
@click.option("-if", "--interactive-first", is_flag=True, help="Interactive mode, reading input before generating.")
@click.option("--in-prefix", default=None, metavar="STRING",
              help="Interactive: text put before each user input (with -cnv: no chat template, as llama.cpp).")
@click.option("--in-suffix", default=None, metavar="STRING",
              help="Interactive: text put after each user input (with -cnv: no chat template, as llama.cpp).")
@click.option("--in-prefix-bos", is_flag=True,
              help="Interactive: a BOS token before each user input (with -cnv: no chat template, as llama.cpp).")
@click.option("-mli", "--multiline-input", is_flag=True,
              help="Interactive: input lines continue until one ends in '\\' (or '/').")
@click.option("--prompt-cache", "prompt_cache", default=None, metavar="FNAME",
              help="llama.cpp's session file: the state after the prompt is saved there, and a later run whose prompt "
                   "starts with the same tokens decodes only the rest (files are llama.cpp's, either tool reads them).")
@click.option("--prompt-cache-all", is_flag=True,
              help="With --prompt-cache: save the generated tokens too, at the end (not in interactive mode).")
@click.option("--prompt-cache-ro", is_flag=True, help="With --prompt-cache: read the file, never update it.")
@click.option("--llama-batch-order", is_flag=True,
              help="Compute prompt batches in llama.cpp's batch orders (tinyBLAS attention and F32/F16 products, the "
                   "repacked Q4_K gemm) instead of the batch-invariant single-token orders: prompt logits then "
                   "equal llama.cpp's bit for bit where our kernels follow its order (e.g. SmolLM2), but depend "
                   "on how the prompt is split into batches, as llama.cpp's do.")
@flash_attn_option
@rope_options
@kv_override_option
@control_vector_options
@lora_options
@repack_option
@ignored_llama_options(without=PERPLEXITY_ONLY)
@load_mode_option
@click.option("-cnv", "--conversation", "conversation", flag_value=True, default=None,
              help="Chat: format the prompt with the model's chat template, then (without -st) read further turns "
                   "from stdin. synapse's default is raw completion (llama-completion enables chat by itself "
                   "when the model has a template).")
@click.option("-no-cnv", "--no-conversation", "conversation", flag_value=False,
              help="Raw completion, no chat template (synapse's default).")
@click.option("-st", "--single-turn", is_flag=True, help="Chat: one reply to -p, then stop.")
@click.option("-sys", "--system-prompt", default=None, help="Chat: the system message.")
@click.option("-sysf", "--system-prompt-file", default=None, type=click.Path(dir_okay=False),
              help="Chat: the system message from a file (one trailing newline stripped).")
@click.option("--chat-template", default=None, metavar="NAME|TEMPLATE",
              help="Chat template: a built-in name (chatml, llama3, mistral-v7, ...) or a template text.")
@click.option("--chat-template-file", default=None, type=click.Path(dir_okay=False),
              help="Chat template from a file.")
@click.option("--jinja/--no-jinja", default=False, show_default=True,
              help="Render the model's chat template with Jinja (sandboxed); without it, llama.cpp's built-in "
                   "formatter for the detected template (llama-completion's default).")
@click.option("--json", "json_output", is_flag=True, help="Print one JSON object with ids, text, stop reason and timings.")
def command(model_path, prompt, prompt_file, binary_file, n_predict, ctx_size, batch_size, ubatch_size, threads,
            n_parallel,
            cache_type_k, cache_type_v, ignore_eos, escape, display_prompt, context_shift, n_keep, ga_n, ga_w,
            reverse_prompts, special, color,
            verbose_prompt,
            interactive,
            interactive_first, in_prefix, in_suffix, in_prefix_bos, multiline_input, prompt_cache, prompt_cache_all,
            prompt_cache_ro, llama_batch_order, flash_attn,
            load_mode, conversation, single_turn, system_prompt, system_prompt_file, chat_template, chat_template_file,
            jinja, json_output, **sampling_opts):
    """Generate text from a prompt as llama-completion does.

    Where synapse's defaults differ from llama-completion's: without any sampling flag it decodes greedily
    (llama-completion samples at --temp 0.8 with a random seed; give any sampling flag and all of its defaults
    apply), and it completes raw text unless -cnv is given (llama-completion starts a chat by itself when the
    model has a chat template)."""
    from ..generate import STOP_MESSAGES, ContextLimit

    limit = ContextLimit(ctx_shift=context_shift, n_keep=n_keep, ga_n=ga_n, ga_w=ga_w)
    grammar = None
    if sampling_given(sampling_opts):
        sampling_params(sampling_opts, warn=lambda msg: None, escape=escape)  # the flags' own checks, before the model loads
        grammar = grammar_text(sampling_opts)
    batch_size, ubatch_size = batch_sizes(batch_size, ubatch_size)
    import numba

    if threads is not None and threads > numba.config.NUMBA_NUM_THREADS:
        click.echo(f"note: -t {threads}: using {numba.config.NUMBA_NUM_THREADS} threads (NUMBA_NUM_THREADS, "
                   "numba's maximum)", err=True)
    if ctx_size < 0:
        raise SynapseError(f"-c must be >= 0 (0: the model's training context), got {ctx_size}")
    if prompt_cache_all and (interactive or interactive_first):  # (common/arg.cpp; -cnv passes)
        raise SynapseError("--prompt-cache-all not supported in interactive mode yet")
    from ..model import check_cache_types

    check_cache_types(cache_type_k, cache_type_v, resolve_flash_attn(flash_attn), None)  # before loading
    if not os.path.exists(model_path):
        raise SynapseError(f"failed to load model '{model_path}': file not found")
    text = given_prompt(prompt, prompt_file, binary_file, escape) or b""
    if conversation:
        if chat_template and chat_template_file:
            raise SynapseError("--chat-template and --chat-template-file are exclusive; give one")
        if system_prompt_file is not None:  # -sysf: the file minus one trailing newline
            from ..text import read_text_file

            system_prompt = read_text_file(system_prompt_file).decode("utf-8", "replace")

    from ..generate import Generation, ReversePrompts, check_prompt, generate
    from ..session import open_session

    sess = open_session(model_path, n_ctx=ctx_size, n_batch=batch_size, n_ubatch=ubatch_size,
                        n_threads=threads or default_threads(), cache_type_k=cache_type_k,
                        cache_type_v=cache_type_v, show_progress=not json_output,
                        batch_invariant=not llama_batch_order, flash_attn=resolve_flash_attn(flash_attn),
                        load_mode=announce_load_mode(load_mode), rope=rope_params(),
                        kv_overrides=kv_overrides(), control_vectors=control_vector_spec(),
                        loras=lora_spec(), repack=repack_setting(), n_seq_max=n_parallel)
    # (llama-completion logs "Flash Attention enabled" only with -v: nothing said here)
    hp = sess.ctx.hp
    if sess.ctx.n_ctx > hp.n_ctx_train:  # llama_context's warning
        click.echo(f"warning: n_ctx_seq ({sess.ctx.n_ctx}) > n_ctx_train ({hp.n_ctx_train}) -- possible training "
                   "context overflow", err=True)
    from ..hparams import n_ctx_train_after_yarn

    if sess.ctx.n_ctx_total > n_ctx_train_after_yarn(hp):  # llama-completion's (after a custom YaRN scaling's adjustment)
        click.echo(f"llama_completion: model was trained on only {n_ctx_train_after_yarn(hp)} context tokens "
                   f"({sess.ctx.n_ctx_total} specified)", err=True)
    tok = sess.tokenizer
    cache = None
    if prompt_cache:
        from ..prompt_cache import PromptCache

        cache = PromptCache(prompt_cache, save_all=prompt_cache_all, read_only=prompt_cache_ro,
                            log=(lambda line: None) if json_output else (lambda line: click.echo(line, err=True)))
        cache.load(sess.ctx)
    sampler = None
    if sampling_given(sampling_opts):
        sampler = make_sampler(sess, sampling_params(sampling_opts, sess.model.reader, escape=escape), ignore_eos,
                               grammar)
        if not json_output:  # llama-completion's log lines
            click.echo(f"sampler seed: {sampler.seed}", err=True)
            click.echo(f"sampler params: \n{sampler.params.print()}", err=True)
            click.echo(f"sampler chain: {sampler.describe()}", err=True)
    from ..text import process_escapes_bytes

    def flag_text(s: str) -> bytes:  # -r, --in-prefix, --in-suffix: escapes processed as in -p (common/arg.cpp)
        return process_escapes_bytes(s.encode("utf-8")) if escape else s.encode("utf-8")

    reverse_prompts = [flag_text(r) for r in reverse_prompts]
    if conversation or interactive or interactive_first:
        from ..conversation import LoopParams

        # common/arg.cpp: --in-prefix, --in-suffix and --in-prefix-bos each turn the chat template off
        template_off = in_prefix is not None or in_suffix is not None or in_prefix_bos
        if conversation and template_off and not json_output:
            click.echo("llama_completion: in-suffix/prefix is specified, chat template will be disabled", err=True)
        loop = LoopParams(n_predict=n_predict, conversation=bool(conversation), interactive=interactive,
                          interactive_first=interactive_first, single_turn=single_turn,
                          reverse_prompts=reverse_prompts, input_prefix=flag_text(in_prefix or ""),
                          input_suffix=flag_text(in_suffix or ""), input_prefix_bos=in_prefix_bos,
                          multiline_input=multiline_input,
                          special=special, escape=escape, display_prompt=display_prompt,
                          verbose_prompt=verbose_prompt, color=color and not json_output, limit=limit)
        chat = None if template_off or not conversation else (system_prompt or "", chat_template, chat_template_file,
                                                              jinja)
        return _interactive(sess, text, chat, loop, sampler, json_output, cache)
    if cache is not None and cache.use_session_prompt(not text):
        prompt_ids = list(cache.tokens)  # (no prompt: the session's tokens are the prompt)
    else:
        prompt_ids = tok.encode(text, add_special=True, parse_special=True)
    check_prompt(sess.ctx, prompt_ids)
    if cache is not None:
        cache.match(sess.ctx, prompt_ids, not text)
    limit.resolve(prompt_ids, tok.vocab.add_bos)
    if verbose_prompt:
        from ..generate import verbose_prompt_lines

        _BytesOut(sys.stderr).write(b"".join(line + b"\n" for line in verbose_prompt_lines(tok, text, prompt_ids)))
    result = Generation(list(prompt_ids))
    result.timings.load_ms = sess.load_ms
    result.timings.t_start = sess.t_start

    # the pieces' bytes as they are, like llama-completion (a multi-byte character split over tokens, or bytes
    # that are no valid UTF-8, reach stdout exactly as llama.cpp writes them)
    out = _BytesOut(sys.stdout)
    from ..conversation import Console

    console = Console(out.write, color and not json_output)
    console.set_display("prompt")
    if not json_output and display_prompt and n_predict != 0:  # -n 0: llama-completion runs no loop
        shown = b"".join(tok.token_to_piece(i, special=special) for i in prompt_ids)
        out.write(shown)
        out.flush()
    if n_predict != 0:  # (the prompt's echo is over)
        console.set_display("reset")
    gen_bytes = bytearray()
    try:
        reverse = ReversePrompts(tok, reverse_prompts, interactive=False) if reverse_prompts else None
        for t in generate(sess.ctx, prompt_ids, n_predict, tok.vocab.is_eog, sampler, ignore_eos, result, reverse,
                          limit, cache):
            if tok.vocab.is_eog(t) and not ignore_eos and not special:  # (its piece: empty unless -sp)
                break
            piece = tok.token_to_piece(t, special=special)
            gen_bytes += piece
            if not json_output:
                out.write(piece)
                out.flush()
    except KeyboardInterrupt:
        result.stop = "interrupted"
    if not json_output and result.stop == "eos":
        out.write(b" [end of text]\n")
    if cache is not None and result.stop != "interrupted":  # (--prompt-cache-all: its line is on stdout)
        cache.finish(sess.ctx, result.undecoded, (lambda b: None) if json_output else out.write)
    if not json_output:
        out.write(b"\n\n")  # llama-completion ends its output so
        console.set_display("reset")  # (console::cleanup at exit: after -n 0, the prompt's color is still on)
        out.flush()
        err = sys.stderr
        if result.stop in STOP_MESSAGES:
            print(f"\n\nllama_completion: {STOP_MESSAGES[result.stop]}", file=err)
        print("", file=err)
        for line in result.timings.perf_lines():
            print(line, file=err)
    else:
        obj = {
            "prompt_ids": [int(i) for i in prompt_ids],
            "generated_ids": [int(i) for i in result.generated_ids],
            "text": bytes(gen_bytes).decode("utf-8", errors="replace"),
            "stop": result.stop,
            "timings": result.timings.as_dict(),
        }
        if sampler is not None:
            obj["sampling"] = {"seed": sampler.seed, "chain": sampler.describe().strip(),
                               "params": sampler.params.as_dict()}
        if cache is not None:
            obj["prompt_cache"] = cache.summary()
        print(json.dumps(obj, ensure_ascii=False))
    if result.stop == "interrupted":
        sys.exit(130)


def _interactive(sess, text: bytes, chat, loop, sampler, json_output: bool, cache=None):
    """-cnv, -i, -if: llama-completion's interactive loop (synapse_cli.conversation) on stdout/stdin. chat: (system
    prompt, --chat-template, --chat-template-file, --jinja) in conversation mode, None for a raw prompt."""
    from ..chat import ChatSession, ChatTemplates
    from ..conversation import ConversationResult, converse
    from ..generate import STOP_MESSAGES
    from ..text import process_escapes

    tok = sess.tokenizer
    session, system_prompt, prompt = None, "", text
    if chat is not None:
        system_prompt, chat_template, chat_template_file, jinja = chat
        templates = ChatTemplates.from_gguf(sess.model.reader, tok, chat_template=chat_template,
                                            chat_template_file=chat_template_file, use_jinja=jinja)
        if not templates.has_explicit_template:  # llama-completion's warning
            click.echo("llama_completion: chat template is not available or is not supported. This may cause the model to "
                       "output suboptimal responses", err=True)
        session = ChatSession(templates)
        prompt = text.decode("utf-8", "replace")
    result = ConversationResult([])
    result.timings.load_ms = sess.load_ms
    result.timings.t_start = sess.t_start
    out = _BytesOut(sys.stdout)
    sink = bytearray()

    def write(data: bytes) -> None:
        if json_output:
            sink.extend(data)
        else:
            out.write(data)

    def readline():
        line = sys.stdin.readline()
        return line if line else None

    try:
        converse(sess.ctx, tok, session, system_prompt=system_prompt, prompt=prompt, sampler=sampler, p=loop,
                 write=write, readline=readline, result=result, process_escapes=process_escapes,
                 log=lambda line: _BytesOut(sys.stderr).write(line + b"\n"), cache=cache)
    except KeyboardInterrupt:
        result.stop = "interrupted"
    if json_output:
        obj = {"prompt_ids": [int(i) for i in result.prompt_ids],
               "generated_ids": [int(i) for i in result.generated_ids],
               "stdout": bytes(sink).decode("utf-8", "replace"), "turns": result.turns, "stop": result.stop}
        if sampler is not None:
            obj["sampling"] = {"seed": sampler.seed, "chain": sampler.describe().strip(),
                               "params": sampler.params.as_dict()}
        if cache is not None:
            obj["prompt_cache"] = cache.summary()
        print(json.dumps(obj, ensure_ascii=False))
    else:
        if result.stop in STOP_MESSAGES:
            print(f"\n\nllama_completion: {STOP_MESSAGES[result.stop]}", file=sys.stderr)
        if result.stop == "interrupted":
            print("\nInterrupted by user", file=sys.stderr)
    if result.stop == "interrupted":
        sys.exit(130)


def make_sampler(sess, params, ignore_eos: bool, grammar: str | None = None):
    """common_sampler_init for the session's vocabulary (DRY needs every token's text and the tokenizer; a
    grammar, every token's piece with special tokens' text)."""
    from ..sampling import CommonSampler
    from ..sampling.grammar import Grammar

    tok = sess.tokenizer
    v = tok.vocab
    params.ignore_eos = ignore_eos
    suppress = sess.model.reader.get("tokenizer.ggml.suppress_tokens") or []
    pieces = tokenize = None
    if params.dry_multiplier != 0:
        pieces = [tok.detokenize_bytes([i], unparse_special=True) for i in range(v.n_tokens)]
        tokenize = lambda b: tok.encode(b, add_special=False, parse_special=False)  # noqa: E731
    gram = None
    if grammar is not None:
        gram = Grammar(grammar.encode("utf-8", "surrogateescape"),
                       [tok.token_to_piece(i, special=True) for i in range(v.n_tokens)], sorted(v.eog_ids),
                       tokenize=lambda b: tok.encode(b, add_special=False, parse_special=True))
    return CommonSampler(params, v.n_tokens, sorted(v.eog_ids), pieces, tokenize,
                         suppress=[int(t) for t in suppress if 0 <= int(t) < v.n_tokens], grammar=gram)
