"""llama-completion's interactive loop (-cnv, -i, -if): tools/completion/completion.cpp's main loop, ported.

The chat-template-formatted prompt is echoed (pieces without control tokens), the reply streams, and then:
with `-st` (and a prompt) the run ends like a plain completion (` [end of text]` on an end-of-generation
token); otherwise the reply is added to the history, `\\n> ` asks for the next line, and each line becomes the
next turn's formatted delta, decoded on top of the KV cache as llama.cpp keeps it. Lines are read as
llama.cpp's simple console reads them (a trailing `\\` continues on the next line, a trailing `/` returns
control); an empty input (Ctrl-D / end of stdin) ends with "EOF by user". Ctrl-C during a reply ends the reply
(an end-of-turn token is inserted before the next input); Ctrl-C while waiting for input ends the session.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from kernels.errors import SynapseError
from .generate import ContextLimit, Generation, ReversePrompts, _pick_greedy, verbose_prompt_lines


@dataclass
class ConversationResult(Generation):
    turns: list[dict] = field(default_factory=list)


def read_input_line(readline: Callable[[], str | None], multiline: bool = False) -> str:
    """console::readline in simple-io mode, repeated while it asks for another line: the text (with its
    newlines) the user gave; "" at end of input."""
    buffer = ""
    while True:
        line = readline()
        if line is None:  # std::getline failed: end of input
            return buffer
        line = line.rstrip("\n")
        another = multiline
        if line.endswith("/"):  # always return control
            buffer += line[:-1] + "\n"
            return buffer
        if line.endswith("\\"):  # flips the default action
            line = line[:-1]
            another = not another
        buffer += line + "\n"
        if not another:
            return buffer


@contextmanager
def _sigint_flag(state: dict):
    """SIGINT sets state["sigint"] (checked between steps, as llama.cpp's handler sets is_interacting) except
    while a line is being read, where it raises KeyboardInterrupt (llama.cpp exits there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if state.get("reading") or not state.get("interactive"):
            raise KeyboardInterrupt
        state["sigint"] = True

    old = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


# console::set_display's ANSI codes (common/console.cpp)
ANSI = {"reset": b"\x1b[0m", "prompt": b"\x1b[33m", "user_input": b"\x1b[1m\x1b[32m"}


class Console:
    """console::set_display with -co: an ANSI code on stdout each time the kind of text shown changes (synapse's
    console is always llama.cpp's simple one, whose output is stdout); without -co nothing."""

    def __init__(self, write: Callable[[bytes], None], color: bool):
        self.write, self.color, self.current = write, color, "reset"

    def set_display(self, kind: str) -> None:
        if self.color and kind != self.current:
            self.write(ANSI[kind])
            self.current = kind


@dataclass
class LoopParams:
    """The common_params that llama-completion's interactive loop reads (defaults: llama.cpp's)."""
    n_predict: int = -1
    conversation: bool = False  # -cnv, with or without a chat template (converse's chat)
    interactive: bool = False  # -i (conversation mode sets it, as interactive_first)
    interactive_first: bool = False  # -if
    single_turn: bool = False  # -st
    reverse_prompts: list[bytes] = field(default_factory=list)  # -r (the flags' texts after escape processing)
    input_prefix: bytes = b""  # --in-prefix
    input_suffix: bytes = b""  # --in-suffix
    input_prefix_bos: bool = False  # --in-prefix-bos
    multiline_input: bool = False  # -mli
    special: bool = False  # -sp: print special tokens' text
    verbose_prompt: bool = False  # --verbose-prompt: the tokens of the prompt and of each input on `log`
    color: bool = False  # -co: the prompt in yellow, user input in bold green
    escape: bool = True
    display_prompt: bool = True
    limit: ContextLimit = field(default_factory=ContextLimit)  # --context-shift, --keep, -gan/-gaw


def converse(ctx, tok, chat, *, system_prompt: str, prompt: str, sampler, p: LoopParams,
             write: Callable[[bytes], None], readline: Callable[[], str | None], result: ConversationResult,
             process_escapes: Callable[[str], str], log: Callable[[bytes], None] = lambda line: None,
             cache=None) -> None:
    """Run the loop; stdout text goes through `write`, user lines come from `readline`. chat: a ChatSession
    (conversation mode with its chat template), or None for a raw prompt (-i / -if, or -cnv with the template
    turned off: p.conversation). cache: a --prompt-cache session (prompt_cache.PromptCache, loaded: the prompt is
    matched against it here)."""
    vocab = tok.vocab
    conversation = chat is not None or p.conversation  # llama-completion's conversation_mode
    if chat is not None:
        prompt_text, waiting = chat.start(system_prompt=system_prompt, prompt=prompt)
    else:
        prompt_text, waiting = prompt, False
    if conversation:
        interactive_first = not (p.single_turn and prompt)
        interactive = interactive_first
    else:
        interactive_first = p.interactive_first
        interactive = p.interactive or interactive_first
    if cache is not None and cache.use_session_prompt(not prompt_text, interactive_first):
        embd_inp = list(cache.tokens)  # (no prompt: the session's tokens are the prompt)
    else:
        embd_inp = tok.encode(prompt_text, add_special=True, parse_special=True)
    if not waiting and not embd_inp:
        if vocab.add_bos and not (chat is not None and chat.templates.use_jinja):
            embd_inp = [vocab.bos_id]
        else:
            raise SynapseError("input is empty")
    if len(embd_inp) > ctx.n_ctx_total - 4:
        raise SynapseError(f"prompt is too long ({len(embd_inp)} tokens, max {ctx.n_ctx_total - 4})")
    result.prompt_ids = list(embd_inp)
    if cache is not None:
        cache.match(ctx, embd_inp, not prompt)
    p.limit.resolve(embd_inp, vocab.add_bos)
    if p.verbose_prompt:
        text = prompt.encode("utf-8", "surrogateescape") if isinstance(prompt, str) else prompt
        for line in verbose_prompt_lines(tok, text, embd_inp):
            log(line)
    reverse = ReversePrompts(tok, p.reverse_prompts, interactive) if p.reverse_prompts else None

    is_interacting = interactive and interactive_first
    is_antiprompt = False
    need_insert_eot = False
    display = p.display_prompt
    input_echo = True
    n_past = n_consumed = 0
    n_remain = p.n_predict
    embd: list[int] = []
    last = None  # common_sampler_last: the last token the sampler accepted
    assistant = bytearray()
    logits = None if cache is None else cache.logits
    pending_prompt = conversation and bool(prompt_text)

    def accept(t, generated: bool):
        nonlocal last
        if sampler is not None:
            sampler.accept(int(t), generated)
        if reverse is not None:
            reverse.prev.append(int(t))
        last = int(t)

    console = Console(write, p.color)
    console.set_display("prompt")  # (the prompt's echo comes first)
    st = {"interactive": interactive, "sigint": False, "reading": False}
    with _sigint_flag(st):
        while (n_remain != 0 and not is_antiprompt) or interactive:
            st["interactive"] = interactive
            if st["sigint"]:  # Ctrl-C during a reply: end it, ask for the next input
                st["sigint"] = False
                if not is_interacting and interactive:
                    is_interacting = True
                    need_insert_eot = True
            if embd:
                if len(embd) > ctx.n_ctx_total - 4:
                    embd = embd[: ctx.n_ctx_total - 4]
                stop = p.limit.make_room(ctx, len(embd), p.n_predict, cache)
                if stop is not None:
                    result.stop = stop
                    break
                if cache is None:
                    logits = ctx.decode(embd)
                else:  # (a prefix the session holds is passed, not decoded)
                    embd = cache.skip(embd)
                    if embd:
                        logits = cache.decode(ctx, embd, len(embd_inp) <= n_consumed)
                n_past = ctx.n_past - (0 if cache is None else cache.pending())  # llama-completion's n_past
            embd = []
            if len(embd_inp) <= n_consumed and not is_interacting:
                t = _pick_greedy(logits, vocab.is_eog, False) if sampler is None else sampler.sample(logits)
                accept(t, True)
                embd.append(t)
                result.generated_ids.append(t)
                if chat is not None and not waiting and not vocab.is_eog(t):
                    assistant += tok.token_to_piece(t, special=False)
                input_echo = True
                n_remain -= 1
            else:
                while len(embd_inp) > n_consumed:
                    embd.append(embd_inp[n_consumed])
                    accept(embd_inp[n_consumed], False)
                    n_consumed += 1
                    if len(embd) == ctx.n_batch:
                        break
            if input_echo and display:
                for t in embd:
                    write(tok.token_to_piece(t, special=p.special))
            if input_echo and len(embd_inp) == n_consumed:  # no input pending: back to the default display
                console.set_display("reset")
                display = True
            if len(embd_inp) <= n_consumed:
                if reverse is not None:
                    is_antiprompt = reverse.found()
                    if is_antiprompt and interactive:
                        is_interacting = True
                if not waiting and last is not None and vocab.is_eog(last) and interactive:
                    if reverse is not None:  # the first reverse prompt is injected
                        embd_inp.extend(reverse.first_tokens())
                        is_antiprompt = True
                    if chat is not None:
                        reply = assistant.decode("utf-8", "replace")
                        chat.add_and_format("assistant", reply)
                        result.turns.append({"role": "assistant", "content": reply})
                    is_interacting = True
                    write(b"\n")
                if not waiting and pending_prompt:
                    pending_prompt = False
                    is_interacting = False
                if (n_past > 0 or waiting) and is_interacting:
                    if conversation:
                        write(b"\n> ")
                    if p.input_prefix_bos:
                        embd_inp.append(vocab.bos_id)
                    if p.input_prefix and not conversation:
                        write(p.input_prefix)
                    console.set_display("user_input")
                    display = p.display_prompt
                    st["reading"] = True
                    try:
                        buffer = read_input_line(readline, p.multiline_input)
                    finally:
                        st["reading"] = False
                    console.set_display("reset")
                    display = True
                    if not buffer:  # Ctrl-D on an empty line / end of input
                        write(b"EOF by user\n")
                        result.stop = "eof"
                        break
                    if buffer.endswith("\n"):
                        buffer = buffer[:-1]
                    if buffer:  # (an empty line passes control back)
                        if p.input_suffix and not conversation:
                            write(p.input_suffix)
                        if p.escape:
                            buffer = process_escapes(buffer)
                        result.turns.append({"role": "user", "content": buffer})
                        user_inp = chat.add_and_format("user", buffer) if chat is not None else buffer
                        line_pfx = tok.encode(p.input_prefix, add_special=False, parse_special=True)
                        line_inp = tok.encode(user_inp, add_special=False, parse_special=chat is not None)
                        line_sfx = tok.encode(p.input_suffix, add_special=False, parse_special=True)
                        if need_insert_eot and chat is not None:  # the interrupted reply gets its end-of-turn token
                            embd_inp.append(vocab.eot_id if vocab.eot_id != -1 else vocab.eos_id)
                            need_insert_eot = False
                        embd_inp.extend(line_pfx + line_inp + line_sfx)
                        if p.verbose_prompt:
                            added = line_pfx + line_inp + line_sfx
                            log(b"llama_completion: number of tokens in prompt = %d" % len(added))
                            for t in added:
                                log(b"%6d -> '" % t + tok.token_to_piece(int(t), special=True) + b"'")
                        assistant = bytearray()
                        n_remain -= len(line_inp)
                    input_echo = False
                if n_past > 0 or waiting:
                    if is_interacting:  # common_sampler_reset: its history too
                        if sampler is not None:
                            sampler.reset()
                        if reverse is not None:
                            reverse.prev.clear()
                    is_interacting = False
                    if waiting and p.single_turn:
                        interactive = False
                    waiting = False
            if embd and vocab.is_eog(embd[-1]) and not interactive:
                write(b" [end of text]\n")
                result.stop = "eos"
                break
            if interactive and n_remain <= 0 and p.n_predict >= 0:
                n_remain = p.n_predict
                is_interacting = True
        else:
            result.stop = "reverse_prompt" if is_antiprompt else "limit"
    result.undecoded = embd
    if cache is not None:  # --prompt-cache-all: its line is on stdout
        cache.finish(ctx, embd, write)
    write(b"\n\n")
    console.set_display("reset")  # (console::cleanup at exit)
