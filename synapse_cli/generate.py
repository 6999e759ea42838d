"""Generation over a `Context`: llama-completion's loop for a raw prompt.

`generate` prefills the prompt, then repeatedly picks a token, greedily (the argmax of the last logits, the
first maximum winning, as a strict `>` scan from id 0) or with a `sampling.CommonSampler`, and decodes it,
until an end-of-generation token, the `n_predict` limit, or a full context. It yields each generated id as soon as it is chosen, so a caller
can stream text; timings are kept the way `llama_perf_context_print` reports them.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from kernels.errors import SynapseError
from .model import Context


@dataclass
class Timings:
    load_ms: float = 0.0
    prompt_eval_ms: float = 0.0
    n_prompt: int = 0
    eval_ms: float = 0.0
    n_eval: int = 0
    sample_ms: float = 0.0
    t_start: float = field(default_factory=time.perf_counter)

    def as_dict(self) -> dict:
        return {"load_ms": self.load_ms, "prompt_eval_ms": self.prompt_eval_ms, "n_prompt": self.n_prompt,
                "eval_ms": self.eval_ms, "n_eval": self.n_eval}

    def perf_lines(self) -> list[str]:
        """`llama_perf_context_print`'s lines (src/llama-context.cpp)."""
        f = "llama_perf_context_print"
        total_ms = (time.perf_counter() - self.t_start) * 1e3

        def rate(ms, n):
            return (ms / n if n else float("nan"), 1e3 / ms * n if ms else float("nan"))

        pp, pt = rate(self.prompt_eval_ms, self.n_prompt)
        ep, et = rate(self.eval_ms, self.n_eval)
        return [
            f"{f}:        load time = {self.load_ms:10.2f} ms",
            f"{f}: prompt eval time = {self.prompt_eval_ms:10.2f} ms / {self.n_prompt:5d} tokens ({pp:8.2f} ms per token, {pt:8.2f} tokens per second)",
            f"{f}:        eval time = {self.eval_ms:10.2f} ms / {self.n_eval:5d} runs   ({ep:8.2f} ms per token, {et:8.2f} tokens per second)",
            f"{f}:       total time = {total_ms:10.2f} ms / {self.n_prompt + self.n_eval:5d} tokens",
        ]


@dataclass
class Generation:
    prompt_ids: list[int]
    generated_ids: list[int] = field(default_factory=list)
    stop: str = "limit"  # eos | limit | ctx | ctx_n_predict | reverse_prompt | interrupted
    timings: Timings = field(default_factory=Timings)
    undecoded: list[int] = field(default_factory=list)  # the tokens chosen last and never decoded (llama's embd)


class ReversePrompts:
    """llama-completion's reverse prompts (-r): after the prompt and after each generated token, whether the text of
    the last 32 tokens the sampler accepted (pieces with special tokens' text) holds one of them near its end (within
    2 extra bytes when not interactive, where a reverse prompt may be tokenized with what follows), or the last
    token is a reverse prompt that tokenizes to that one token."""
    N_PREV = 32  # common_sampler_prev_str(smpl, ctx, 32)

    def __init__(self, tok, prompts: list[bytes], interactive: bool):
        self.tok = tok
        self.texts = list(prompts)
        ids = [tok.encode(p, add_special=False, parse_special=True) for p in prompts]
        self.single_tokens = {i[0] for i in ids if len(i) == 1}
        self.padding = 0 if interactive else 2
        self.prev: deque[int] = deque(maxlen=self.N_PREV)  # the sampler's history (common_sampler_reset clears it)

    def first_tokens(self) -> list[int]:
        """The first reverse prompt's tokens (injected after an end-of-generation token in interactive mode)."""
        return self.tok.encode(self.texts[0], add_special=False, parse_special=True)

    def found(self) -> bool:
        text = b"".join(self.tok.token_to_piece(t, special=True) for t in self.prev)
        for rp in self.texts:
            start = len(text) - (len(rp) + self.padding) if len(text) > len(rp) + self.padding else 0
            if text.find(rp, start) != -1:
                return True
        return bool(text) and self.prev[-1] in self.single_tokens


@dataclass
class ContextLimit:
    """What llama-completion does before a decode that would fill the context: stop (its default), shift the
    context (--context-shift: keep the first n_keep positions, drop half of the rest), or, with self-extend
    (-gan > 1), group older positions by ga_n every ga_w tokens and never stop (a full cache fails the decode)."""
    ctx_shift: bool = False
    n_keep: int = 0  # --keep as given (-1: the whole prompt)
    ga_n: int = 1
    ga_w: int = 512
    keep: int = 0  # the positions a shift keeps (resolve())
    ga_i: int = 0  # self-extend: the positions grouped so far

    def __post_init__(self):
        if self.ga_n != 1:  # llama-completion's GGML_ASSERTs (and a width it would divide by zero with)
            if self.ga_n <= 0:
                raise SynapseError("grp_attn_n must be positive")
            if self.ga_w % self.ga_n:
                raise SynapseError("grp_attn_w must be a multiple of grp_attn_n")
            if self.ga_w <= 0:
                raise SynapseError("grp_attn_w must be positive")

    def resolve(self, prompt_ids: list[int], add_bos: bool) -> None:
        """Start of a generation: n_keep against the first prompt (-1 or more than the prompt keeps it all, else
        the BOS is kept too)."""
        self.keep = len(prompt_ids) if self.n_keep < 0 or self.n_keep > len(prompt_ids) else self.n_keep + int(add_bos)
        self.ga_i = 0

    def make_room(self, ctx: Context, n_tokens: int, n_predict: int, cache=None) -> str | None:
        """Before decoding n_tokens at ctx.n_past: None to go on (after a shift or self-extend's grouping, which
        move ctx.n_past back), or the stop reason: "ctx" (full, no context shift) or "ctx_n_predict" (-n -2).
        cache: the --prompt-cache session (prompt_cache.PromptCache), told of a shift; while a reused prompt
        prefix is being passed llama-completion's n_past lags behind the cache by what is still to pass."""
        lag = 0 if cache is None else cache.pending()
        if lag:  # (only within the prompt, which leaves 4 cells free: no shift, no stop)
            if self.ga_n != 1 and ctx.n_past - lag >= self.ga_i + self.ga_w:
                raise SynapseError("self-extend (-gan) would group positions inside the prompt --prompt-cache "
                                   "reuses: not supported")
            return None
        if self.ga_n == 1:
            if ctx.n_past + n_tokens < ctx.n_ctx_total:
                return None
            if not self.ctx_shift:
                return "ctx"
            if n_predict == -2:
                return "ctx_n_predict"
            n_past, n_keep = ctx.n_past, self.keep
            n_discard = int((n_past - n_keep) / 2)  # (C division)
            ctx.seq_rm(n_keep, n_keep + n_discard)
            ctx.seq_add(n_keep + n_discard, n_past, -n_discard)
            ctx.n_past = n_past - n_discard
            if cache is not None:
                cache.context_shifted()
            return None
        ga_n, ga_w = self.ga_n, self.ga_w
        while ctx.n_past >= self.ga_i + ga_w:
            n_past, ga_i = ctx.n_past, self.ga_i
            ib = (ga_n * ga_i) // ga_w
            bd = (ga_w // ga_n) * (ga_n - 1)
            dd = (ga_w // ga_n) - ib * bd - ga_w
            ctx.seq_add(ga_i, n_past, ib * bd)
            ctx.seq_div(ga_i + ib * bd, ga_i + ib * bd + ga_w, ga_n)
            ctx.seq_add(ga_i + ib * bd + ga_w, n_past + ib * bd, dd)
            ctx.n_past = n_past - bd
            self.ga_i += ga_w // ga_n
        return None


STOP_MESSAGES = {  # llama-completion's warnings when the context is full
    "ctx": "context full and context shift is disabled => stopping",
    "ctx_n_predict": "context full and n_predict == -2 => stopping",
}


def verbose_prompt_lines(tok, prompt: bytes, ids: list[int]) -> list[bytes]:
    """llama-completion's --verbose-prompt log: the prompt, its token count and each token with its text."""
    return [b"llama_completion: prompt: '" + prompt + b"'", b"llama_completion: number of tokens in prompt = %d" % len(ids)] + \
        [b"%6d -> '" % t + tok.token_to_piece(int(t), special=True) + b"'" for t in ids] + [b""]


def argmax_first(logits: np.ndarray) -> int:
    """Index of the largest logit, the first one on ties (np.argmax scans from 0 with a strict >)."""
    return int(np.argmax(logits))


def check_prompt(ctx: Context, prompt_ids: list[int]) -> None:
    """llama-completion's checks before anything is printed: a prompt, and room for it in the context."""
    if not prompt_ids:
        raise SynapseError("input is empty")
    if len(prompt_ids) > ctx.n_ctx_total - 4:
        raise SynapseError(f"prompt is too long ({len(prompt_ids)} tokens, max {ctx.n_ctx_total - 4})")


def _pick_greedy(logits: np.ndarray, is_eog: Callable[[int], bool], ignore_eos: bool) -> int:
    tok = argmax_first(logits)
    if ignore_eos and is_eog(tok):
        # llama.cpp's --ignore-eos biases EOG logits to -inf: take the best non-EOG token
        masked = logits.copy()
        while is_eog(tok):
            masked[tok] = -np.inf
            tok = argmax_first(masked)
    return tok


def generate(ctx: Context, prompt_ids: list[int], n_predict: int, is_eog: Callable[[int], bool],
             sampler=None, ignore_eos: bool = False, result: Generation | None = None,
             reverse: ReversePrompts | None = None, limit: ContextLimit | None = None,
             cache=None) -> Iterator[int]:
    """Yield generated ids; fill `result` (stop reason, timings) as it goes.

    `sampler` is a `sampling.CommonSampler` (llama-completion's chain: it sees every prompt token, then picks
    and accepts each generated one) or None for greedy argmax. n_predict < 0 means no limit (until end of
    generation or a full context), as llama.cpp's -n -1. `reverse`: stop once the text ends in a reverse prompt
    (checked before the prompt's last batch too, which may end in one: then that batch is not decoded and nothing
    is generated). `limit`: what a full context does (ContextLimit; by default generation stops, as
    llama-completion without --context-shift). `cache`: a prompt_cache.PromptCache already matched against the
    prompt (its reused prefix is not decoded again).
    """
    g = result if result is not None else Generation(list(prompt_ids))
    check_prompt(ctx, prompt_ids)
    if n_predict == 0:  # llama-completion -n 0 evaluates nothing
        g.stop = "limit"
        return
    limit = limit if limit is not None else ContextLimit()
    t0 = time.perf_counter()
    logits = None if cache is None else cache.logits
    if sampler is not None:
        for t in prompt_ids:  # the prompt enters the penalties' and DRY's history
            sampler.accept(int(t))
    for s in range(0, len(prompt_ids), ctx.n_batch):  # llama-completion feeds n_batch tokens per llama_decode
        batch = prompt_ids[s : s + ctx.n_batch]
        last = s + ctx.n_batch >= len(prompt_ids)
        if last and reverse is not None:
            reverse.prev.extend(int(t) for t in prompt_ids)
            if reverse.found():  # (llama-completion stops before decoding this batch)
                g.stop, g.undecoded = "reverse_prompt", list(batch)
                return
        limit.make_room(ctx, len(batch), n_predict, cache)  # (self-extend only: a prompt leaves 4 cells free)
        if cache is not None:
            batch = cache.skip(batch)
            if batch:
                logits = cache.decode(ctx, batch, last)
        else:
            logits = ctx.decode(batch)
    g.timings.prompt_eval_ms = (time.perf_counter() - t0) * 1e3
    g.timings.n_prompt = len(prompt_ids) - (0 if cache is None else cache.n_match)
    n_gen = 0
    while True:
        if sampler is None:
            tok = _pick_greedy(logits, is_eog, ignore_eos)
        else:
            t1 = time.perf_counter()
            tok = sampler.sample(logits)
            sampler.accept(tok, generated=True)
            g.timings.sample_ms += (time.perf_counter() - t1) * 1e3
        g.generated_ids.append(tok)
        g.undecoded = [tok]
        n_gen += 1
        # the stop reason is set before the id is handed out: a caller that stops at an end-of-generation
        # token (and so never resumes this generator) still finds it
        if reverse is not None:
            reverse.prev.append(tok)
        stop = "eos" if is_eog(tok) else "reverse_prompt" if reverse is not None and reverse.found() else \
            "limit" if 0 <= n_predict <= n_gen else limit.make_room(ctx, 1, n_predict, cache)
        if stop is not None:
            g.stop = stop
        yield tok
        if stop is not None:
            return
        t1 = time.perf_counter()
        logits = ctx.decode([tok]) if cache is None else cache.decode(ctx, [tok], True)
        g.undecoded = []
        g.timings.eval_ms += (time.perf_counter() - t1) * 1e3
        g.timings.n_eval += 1
