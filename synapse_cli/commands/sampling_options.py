"""llama-completion's sampling flags (common/arg.cpp), with its names, defaults, checks and messages.

One difference, on purpose: without any sampling flag synapse decode is greedy (argmax), so that
`synapse decode -m M -p P` stays deterministic; as soon as one is given, every default is llama.cpp's
(`--temp` 0.8, top-k 40, ..., a random seed), so that a llama-completion command line samples the same. `sampling_params()` turns
the parsed options into `sampling.SamplingParams`, applying the model's recommended `general.sampling.*`
values for the flags not given, as common_init_sampler_from_model does.
"""

from __future__ import annotations

import re

import click
import numpy as np

from kernels.errors import SynapseError

# (flags, dest, type, help); defaults are SamplingParams' (None here = "not given")
_OPTIONS = [
    (("-s", "--seed"), "seed", str, "RNG seed (default: -1, a random seed, printed on stderr)."),
    (("--temp", "--temperature"), "temp", float,
     "Temperature (default 0.8 once any sampling flag is given; without one synapse decodes greedily)."),
    (("--top-k",), "top_k", int, "Top-k sampling (default 40, 0 = disabled)."),
    (("--top-p",), "top_p", float, "Top-p sampling (default 0.95, 1.0 = disabled)."),
    (("--min-p",), "min_p", float, "Min-p sampling (default 0.05, 0.0 = disabled)."),
    (("--top-nsigma", "--top-n-sigma"), "top_n_sigma", float, "Top-n-sigma sampling (default -1 = disabled)."),
    (("--xtc-probability",), "xtc_probability", float, "XTC probability (default 0 = disabled)."),
    (("--xtc-threshold",), "xtc_threshold", float, "XTC threshold (default 0.1, > 0.5 disables XTC)."),
    (("--typical", "--typical-p"), "typ_p", float, "Locally typical sampling p (default 1.0 = disabled)."),
    (("--repeat-last-n",), "penalty_last_n", int, "Last n tokens to penalize (default 64, 0 = disabled)."),
    (("--repeat-penalty",), "penalty_repeat", float, "Repeat penalty (default 1.0 = disabled)."),
    (("--presence-penalty",), "penalty_present", float, "Presence penalty (default 0 = disabled)."),
    (("--frequency-penalty",), "penalty_freq", float, "Frequency penalty (default 0 = disabled)."),
    (("--dry-multiplier",), "dry_multiplier", float, "DRY multiplier (default 0 = disabled)."),
    (("--dry-base",), "dry_base", float, "DRY base (default 1.75; values < 1 are ignored, as llama.cpp)."),
    (("--dry-allowed-length",), "dry_allowed_length", int, "DRY allowed length (default 2)."),
    (("--dry-penalty-last-n",), "dry_penalty_last_n", int, "DRY: last n tokens scanned (default 64, 0 = off)."),
    (("--adaptive-target",), "adaptive_target", float, "adaptive-p target probability (default -1 = off)."),
    (("--adaptive-decay",), "adaptive_decay", float, "adaptive-p decay (default 0.9)."),
    (("--dynatemp-range",), "dynatemp_range", float, "Dynamic temperature range (default 0 = disabled)."),
    (("--dynatemp-exp",), "dynatemp_exponent", float, "Dynamic temperature exponent (default 1.0)."),
    (("--mirostat",), "mirostat", int, "Mirostat: 0 = off (default), 1 = Mirostat, 2 = Mirostat 2.0."),
    (("--mirostat-lr",), "mirostat_eta", float, "Mirostat learning rate eta (default 0.1)."),
    (("--mirostat-ent",), "mirostat_tau", float, "Mirostat target entropy tau (default 5.0)."),
    (("--samplers",), "samplers", str, "Sampler order, ';'-separated (default penalties;dry;top_n_sigma;"
                                        "top_k;typ_p;top_p;min_p;xtc;temperature)."),
    (("--sampler-seq", "--sampling-seq"), "sampler_seq", str, "The order as letters (default edskypmxt)."),
]

# the grammar flags (common/arg.cpp): each sets the one grammar, so the last given counts
_GRAMMAR_OPTIONS = [
    (("--grammar",), "grammar", "GRAMMAR", "GBNF grammar the generated text must follow."),
    (("--grammar-file",), "grammar_file", "FNAME", "File to read the GBNF grammar from."),
    (("-j", "--json-schema"), "json_schema", "SCHEMA",
     "JSON schema the generated text must follow (made a grammar as llama.cpp makes it), e.g. '{\"type\": "
     "\"object\"}'."),
    (("-jf", "--json-schema-file"), "json_schema_file", "FILE", "File holding such a JSON schema."),
]


def _note_grammar(ctx, param, value):
    if value is not None:
        ctx.meta["synapse.grammar"] = param.name
    return value


def grammar_text(opts: dict) -> str | None:
    """The GBNF text of the grammar flag given last (a JSON schema converted), or None; bad input (an unreadable
    file, a schema that is no JSON or cannot be converted) raises SynapseError, before any model is loaded."""
    which = click.get_current_context().meta.get("synapse.grammar")
    if which is None:
        return None
    value = opts[which]
    if which in ("grammar_file", "json_schema_file"):
        try:
            with open(value, "rb") as f:
                value = f.read().decode("utf-8", "surrogateescape")
        except OSError:
            raise SynapseError(f"failed to open file '{value}'") from None
    if which in ("json_schema", "json_schema_file"):
        from ..sampling.json_schema import JsonSchemaError, schema_text_to_grammar

        try:
            return schema_text_to_grammar(value)
        except JsonSchemaError as e:  # (llama.cpp's conversion errors span lines: one line here)
            raise SynapseError(" ".join(str(e).split("\n"))) from None
    return value or None  # (an empty grammar is no grammar)


# the flags whose model-recommended value (general.sampling.<key>) llama.cpp applies when not given
_MODEL_KEYS = {"top_k": int, "top_p": float, "min_p": float, "xtc_probability": float, "xtc_threshold": float,
               "temp": float, "penalty_last_n": int, "penalty_repeat": float, "mirostat": int,
               "mirostat_tau": float, "mirostat_eta": float}


def sampling_options(f):
    """Adds the sampling flags (and -l/--logit-bias, --dry-sequence-breaker) to a click command."""
    f = click.option("-l", "--logit-bias", "logit_bias", multiple=True, metavar="TOKEN_ID(+/-)BIAS",
                     help="Add BIAS to a token's logit, e.g. 15043+1 or 15043-inf (repeatable).")(f)
    f = click.option("--dry-sequence-breaker", "dry_sequence_breaker", multiple=True, metavar="STRING",
                     help="DRY sequence breaker, replacing the defaults ('\\n', ':', '\"', '*'); 'none' for none "
                          "(repeatable).")(f)
    for flags, dest, metavar, hlp in reversed(_GRAMMAR_OPTIONS):
        f = click.option(*flags, dest, default=None, metavar=metavar, callback=_note_grammar, help=hlp)(f)
    for flags, dest, typ, hlp in reversed(_OPTIONS):
        f = click.option(*flags, dest, type=typ, default=None, help=hlp)(f)
    return f


def _seed(value: str) -> int:
    """std::stoul then the uint32_t assignment: -1 (or any value wrapping to 0xFFFFFFFF) means random."""
    try:
        v = int(value.strip(), 0) if value.strip().lower().startswith(("0x", "-0x")) else int(value.strip())
    except ValueError:
        raise SynapseError(f"--seed {value!r}: not an integer")
    return v & 0xFFFFFFFF


def _logit_bias(value: str) -> tuple[int, float]:
    """`ss >> key >> sign; getline(rest)`, then stof(rest) signed by sign."""
    m = re.fullmatch(r"\s*([+-]?\d+)\s*([+-])(.*)", value, re.S)
    if not m:
        raise SynapseError(f"-l/--logit-bias {value!r}: invalid input format (TOKEN_ID+BIAS or TOKEN_ID-BIAS)")
    fm = re.match(r"\s*([+-]?(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?))", m.group(3), re.I)
    if not fm:
        raise SynapseError(f"-l/--logit-bias {value!r}: invalid input format (TOKEN_ID+BIAS or TOKEN_ID-BIAS)")
    bias = float(np.float32(float(fm.group(1))))
    return int(m.group(1)), -bias if m.group(2) == "-" else bias


def sampling_given(opts: dict) -> bool:
    """Whether any sampling flag was given (synapse decode then samples with llama.cpp's chain)."""
    return any(opts.get(dest) is not None for _, dest, _, _ in _OPTIONS + _GRAMMAR_OPTIONS) \
        or bool(opts.get("logit_bias")) or bool(opts.get("dry_sequence_breaker"))


def sampling_params(opts: dict, model_meta=None, warn=lambda msg: click.echo(msg, err=True), escape: bool = True):
    """SamplingParams from the parsed options (`opts`: the command's keyword arguments); with `escape` the DRY
    sequence breakers get escape processing, as llama.cpp gives them."""
    from ..sampling import SamplingParams, samplers_from_chars, samplers_from_names

    p = SamplingParams()
    given = {dest for _, dest, _, _ in _OPTIONS if opts.get(dest) is not None}
    if model_meta is not None:  # common_init_sampler_from_model
        seq = model_meta.get("general.sampling.sequence")
        if isinstance(seq, str) and "samplers" not in given and "sampler_seq" not in given:
            names = samplers_from_names(seq, warn)
            if names:
                p.samplers = names
        for dest, typ in _MODEL_KEYS.items():
            if dest in given:
                continue
            v = model_meta.get("general.sampling." + dest)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                # llama.cpp reads the value back from its string form (std::to_string: 6 decimals for floats)
                setattr(p, dest, int(v) if typ is int else float(np.float32(f"{v:f}")))
    for _, dest, _, _ in _OPTIONS:
        v = opts.get(dest)
        if v is None:
            continue
        if dest == "seed":
            p.seed = _seed(v)
        elif dest == "temp":
            p.temp = max(float(np.float32(v)), 0.0)
        elif dest == "penalty_last_n":
            if v < 0:
                raise SynapseError(f"invalid repeat-last-n = {v}")
            p.penalty_last_n = v
        elif dest == "dry_penalty_last_n":
            if v < 0:
                raise SynapseError(f"invalid dry-penalty-last-n = {v}")
            p.dry_penalty_last_n = v
        elif dest == "dry_base":
            if np.float32(v) >= 1.0:  # llama.cpp ignores a base below 1
                p.dry_base = v
        elif dest == "samplers":
            p.samplers = samplers_from_names(v, warn)
        elif dest == "sampler_seq":
            p.samplers = samplers_from_chars(v, warn)
        else:
            setattr(p, dest, v)
    breakers = opts.get("dry_sequence_breaker") or ()
    if breakers:
        p.dry_sequence_breakers = []
        for b in breakers:
            if b == "none":
                p.dry_sequence_breakers = []
            else:
                if escape:
                    from ..text import process_escapes
                    b = process_escapes(b)
                p.dry_sequence_breakers.append(b.encode("utf-8", "surrogateescape"))
    p.logit_bias = [_logit_bias(v) for v in opts.get("logit_bias") or ()]
    p.check()
    return p
