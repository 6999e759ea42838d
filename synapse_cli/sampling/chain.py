"""common/sampling.cpp: llama-completion's sampling parameters, the chain they build, and sampling with it.

`SamplingParams` holds common_params_sampling with its defaults; `CommonSampler` is common_sampler: the
optional logit-bias sampler, then either the `samplers` sequence (default penalties;dry;top_n_sigma;top_k;
typ_p;top_p;min_p;xtc;temperature) closed by `dist` (or adaptive-p), or temperature + mirostat 1 / 2.
`sample(logits)` runs the chain on a fresh candidate list, `accept(token)` feeds every prompt and generated
token to each sampler (repetition penalties and DRY see the prompt), `reset()` reseeds as llama.cpp does
when a conversation turn begins. With a grammar (--grammar, -j), a sampled token the grammar rejects is sampled
again from the candidates the grammar allows, and only generated tokens advance the grammar.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernels.errors import SynapseError
from . import samplers as S
from .token_data import TokenDataArray

# common_sampler_type names (canonical) and their one-letter codes (--sampler-seq)
SAMPLER_TYPES = ["dry", "top_k", "typ_p", "top_p", "top_n_sigma", "min_p", "temperature", "xtc", "infill",
                 "penalties", "adaptive_p"]
SAMPLER_CHARS = {"d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma", "m": "min_p",
                 "t": "temperature", "x": "xtc", "i": "infill", "e": "penalties", "a": "adaptive_p"}
DEFAULT_SAMPLERS = ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]


def _aliases() -> dict[str, str]:
    """common_sampler_types_from_names: canonical names, kebab-case, no-dash, and three extra aliases."""
    names = {n: n for n in SAMPLER_TYPES}
    for n in SAMPLER_TYPES:
        if "_" in n:
            names[n.replace("_", "-")] = n
            names[n.replace("_", "")] = n
    names.update(nucleus="top_p", temp="temperature", typ="typ_p")
    return names


def samplers_from_names(value: str, warn) -> list[str]:
    """--samplers 'a;b;c' (case-insensitive; unknown names are skipped with llama.cpp's warning)."""
    table, out = _aliases(), []
    for name in value.split(";"):
        low = name.lower()
        if low in table:
            out.append(table[low])
        else:
            warn(f"common_sampler_types_from_names: unable to match sampler by name '{low}'")
    return out


def samplers_from_chars(value: str, warn) -> list[str]:
    """--sampler-seq 'edkypmxt'."""
    out = []
    for c in value:
        if c in SAMPLER_CHARS:
            out.append(SAMPLER_CHARS[c])
        else:
            warn(f"common_sampler_types_from_chars: unable to match sampler by char '{c}'")
    return out


@dataclass
class SamplingParams:
    """common_params_sampling (common/common.h), llama-completion's defaults."""
    seed: int = S.DEFAULT_SEED
    min_keep: int = 0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.10
    typ_p: float = 1.0
    temp: float = 0.80
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    penalty_last_n: int = 64
    penalty_repeat: float = 1.0
    penalty_freq: float = 0.0
    penalty_present: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.90
    mirostat: int = 0
    top_n_sigma: float = -1.0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.10
    ignore_eos: bool = False
    dry_sequence_breakers: list[bytes] = field(default_factory=lambda: [b"\n", b":", b'"', b"*"])
    samplers: list[str] = field(default_factory=lambda: list(DEFAULT_SAMPLERS))
    logit_bias: list[tuple[int, float]] = field(default_factory=list)

    def print(self) -> str:
        """common_params_sampling::print (the `sampler params:` block llama.cpp logs)."""
        f = lambda x: f"{float(np.float32(x)):.3f}"  # noqa: E731 (C's %.3f of a float)
        return (f"\trepeat_last_n = {self.penalty_last_n}, repeat_penalty = {f(self.penalty_repeat)}, "
                f"frequency_penalty = {f(self.penalty_freq)}, presence_penalty = {f(self.penalty_present)}\n"
                f"\tdry_multiplier = {f(self.dry_multiplier)}, dry_base = {f(self.dry_base)}, "
                f"dry_allowed_length = {self.dry_allowed_length}, dry_penalty_last_n = {self.dry_penalty_last_n}\n"
                f"\ttop_k = {self.top_k}, top_p = {f(self.top_p)}, min_p = {f(self.min_p)}, "
                f"xtc_probability = {f(self.xtc_probability)}, xtc_threshold = {f(self.xtc_threshold)}, "
                f"typical_p = {f(self.typ_p)}, top_n_sigma = {f(self.top_n_sigma)}, temp = {f(self.temp)}\n"
                f"\tmirostat = {self.mirostat}, mirostat_lr = {f(self.mirostat_eta)}, "
                f"mirostat_ent = {f(self.mirostat_tau)}, adaptive_target = {f(self.adaptive_target)}, "
                f"adaptive_decay = {f(self.adaptive_decay)}")

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items()}
        d["dry_sequence_breakers"] = [b.decode("utf-8", "replace") for b in self.dry_sequence_breakers]
        d["logit_bias"] = [[t, b] for t, b in self.logit_bias]
        return d

    def check(self) -> None:
        """common_sampler_init's and the argument parser's checks."""
        r = np.float32(self.penalty_repeat)
        with np.errstate(all="ignore"):
            if not np.isfinite(r) or r <= 0 or not np.isfinite(np.float32(1) / r):
                raise SynapseError("repeat-penalty must be finite and greater than 0")
        if not np.isfinite(np.float32(self.penalty_freq)):
            raise SynapseError("frequency-penalty must be finite")
        if not np.isfinite(np.float32(self.penalty_present)):
            raise SynapseError("presence-penalty must be finite")
        if self.mirostat not in (0, 1, 2):
            raise SynapseError(f"--mirostat {self.mirostat}: unknown mirostat version (0, 1 or 2)")
        if "infill" in self.samplers:
            raise SynapseError("the infill sampler is for llama-server's infill endpoint; synapse decode has none")


class CommonSampler:
    """common_sampler: the chain for one sequence, built from `params` for a vocabulary."""

    def __init__(self, params: SamplingParams, n_vocab: int, eog_ids: list[int],
                 vocab_pieces=None, tokenize=None, suppress: list[int] = (), grammar=None):
        params.check()
        self.params = params
        self.grammar = grammar  # a grammar.Grammar, or None
        p = params
        chain: list[S.Sampler] = []
        biases = list(p.logit_bias)
        if p.ignore_eos:  # --ignore-eos = logit bias -inf on every end-of-generation token
            biases += [(t, -np.inf) for t in eog_ids]
        biases += [(t, -np.inf) for t in suppress]  # the vocabulary's tokenizer.ggml.suppress_tokens
        if biases:
            chain.append(S.LogitBias(biases))
        if p.mirostat == 0:
            adaptive = False
            for name in p.samplers:
                if name == "dry":
                    chain.append(self._dry(p, vocab_pieces, tokenize))
                elif name == "top_k":
                    chain.append(S.TopK(p.top_k) if p.top_k > 0 else S.Empty("?top-k"))
                elif name == "top_p":
                    chain.append(S.TopP(p.top_p, p.min_keep) if np.float32(p.top_p) < 1 else S.Empty("?top-p"))
                elif name == "top_n_sigma":
                    chain.append(S.TopNSigma(p.top_n_sigma) if np.float32(p.top_n_sigma) > 0
                                 else S.Empty("?top-n-sigma"))
                elif name == "min_p":
                    chain.append(S.MinP(p.min_p, p.min_keep) if np.float32(p.min_p) > 0 else S.Empty("?min-p"))
                elif name == "xtc":
                    off = np.float32(p.xtc_probability) <= 0 or np.float32(p.xtc_threshold) > 0.5
                    chain.append(S.Empty("?xtc") if off else
                                 S.XTC(p.xtc_probability, p.xtc_threshold, p.min_keep, p.seed))
                elif name == "typ_p":
                    chain.append(S.Typical(p.typ_p, p.min_keep) if np.float32(p.typ_p) < 1 else S.Empty("?typical"))
                elif name == "temperature":
                    off = np.float32(p.temp) == 1 and np.float32(p.dynatemp_range) <= 0
                    chain.append(S.Empty("?temp-ext") if off else
                                 S.TempExt(p.temp, p.dynatemp_range, p.dynatemp_exponent))
                elif name == "penalties":
                    last_n = max(p.penalty_last_n, 0)
                    off = last_n == 0 or (np.float32(p.penalty_repeat) == 1 and np.float32(p.penalty_freq) == 0
                                          and np.float32(p.penalty_present) == 0)
                    chain.append(S.Empty("?penalties") if off else
                                 S.Penalties(n_vocab, last_n, p.penalty_repeat, p.penalty_freq, p.penalty_present))
                elif name == "adaptive_p":
                    adaptive = True
            chain.append(S.AdaptiveP(p.adaptive_target, p.adaptive_decay, p.seed) if adaptive else S.Dist(p.seed))
        else:
            chain.append(S.Temp(p.temp) if np.float32(p.temp) != 1 else S.Empty("?temp"))
            chain.append(S.Mirostat(n_vocab, p.seed, p.mirostat_tau, p.mirostat_eta, 100) if p.mirostat == 1
                         else S.MirostatV2(p.seed, p.mirostat_tau, p.mirostat_eta))
        self.chain = chain

    @staticmethod
    def _dry(p: SamplingParams, vocab_pieces, tokenize):
        last_n = max(p.dry_penalty_last_n, 0)
        if not (np.float32(p.dry_multiplier) != 0 and np.float32(p.dry_base) >= 1 and last_n != 0):
            return S.Empty("?dry")
        if vocab_pieces is None:
            raise SynapseError("DRY needs the vocabulary (pieces and a tokenizer)")
        return S.Dry(vocab_pieces, tokenize, p.dry_multiplier, p.dry_base, p.dry_allowed_length, last_n,
                     p.dry_sequence_breakers)

    @property
    def seed(self) -> int:
        """llama_sampler_get_seed: the seed in use of the last sampler that has one, else LLAMA_DEFAULT_SEED."""
        for s in reversed(self.chain):
            if isinstance(s, S._Seeded):
                return s.seed_cur
        return S.DEFAULT_SEED

    def describe(self) -> str:
        """common_sampler_print: `logits -> name -> name ...`."""
        return "logits " + "".join(f"-> {s.name} " for s in self.chain)

    def sample(self, logits: np.ndarray) -> int:
        """common_sampler_sample: the chain over every vocabulary entry; the selected id. With a grammar, the
        selected token is checked alone; if the grammar rejects it, the grammar filters every candidate and the
        chain runs again (its random engine and state go on from the first run, as in llama.cpp)."""
        cur = TokenDataArray.from_logits(logits)
        for s in self.chain:
            s.apply(cur)
        if not 0 <= cur.selected < cur.size:
            raise SynapseError("no selected token during sampling - check your sampling configuration")
        tok = int(cur.ids[cur.selected])
        if self.grammar is None:
            return tok
        single = TokenDataArray(np.array([tok], np.int32), np.array([1.0], np.float32))
        self.grammar.apply(single)
        if single.logit[0] != -np.inf:
            return tok
        cur = TokenDataArray.from_logits(logits)  # resampling: the grammar first, then the chain
        self.grammar.apply(cur)
        for s in self.chain:
            s.apply(cur)
        if not 0 <= cur.selected < cur.size:
            raise SynapseError("no selected token during sampling - check your sampling configuration")
        return int(cur.ids[cur.selected])

    def accept(self, token: int, generated: bool = False) -> None:
        """common_sampler_accept: every sampler sees the token; the grammar only a generated one."""
        if generated and self.grammar is not None:
            self.grammar.accept(token)
        for s in self.chain:
            s.accept(token)

    def reset(self) -> None:
        for s in self.chain:
            s.reset()
