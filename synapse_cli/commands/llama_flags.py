"""llama.cpp flags that several commands accept with llama.cpp's meaning."""

from __future__ import annotations

import re

import click
import numpy as np

from kernels.errors import SynapseError


# -fa's and -co's spellings as common/arg.cpp takes them (is_truthy / is_falsey / is_autoy, case-sensitive)
FLASH_ATTN_VALUES = {"on": "on", "enabled": "on", "true": "on", "1": "on",
                     "off": "off", "disabled": "off", "false": "off", "0": "off",
                     "auto": "auto", "-1": "auto"}


def threads_value(ctx, param, value):
    """-t as common/arg.cpp reads it: 0 or a negative value means every hardware thread (None: the command's
    default, the CPUs this process may run on)."""
    return None if value is None or value <= 0 else value


def batch_sizes(n_batch: int, n_ubatch: int) -> tuple[int, int]:
    """-b and -ub as llama_context takes them: -b at least 1; -ub 0, or a negative value (a uint32 there, past any
    -b), is -b."""
    if n_batch < 1:
        raise SynapseError(f"-b must be >= 1, got {n_batch}")
    return n_batch, n_batch if n_ubatch <= 0 else n_ubatch


def _flash_attn_value(ctx, param, value):
    if value not in FLASH_ATTN_VALUES:
        raise click.BadParameter(f"unknown value {value!r} (on|off|auto, or 1|true|enabled, 0|false|disabled, -1)")
    return FLASH_ATTN_VALUES[value]


def _color_value(ctx, param, value):
    """-co/--color on|off|auto (auto: when stdout is a terminal, tty_can_use_colors) -> whether to color."""
    import sys

    if value not in FLASH_ATTN_VALUES:
        raise click.BadParameter(f"unknown value for --color: {value!r} (on|off|auto)")
    v = FLASH_ATTN_VALUES[value]
    return v == "on" or (v == "auto" and sys.stdout.isatty())


def color_option(f):
    """-co/--color (llama-completion's; off unless given)."""
    return click.option("-co", "--color", "color", metavar="[on|off|auto]", default="off", callback=_color_value,
                        help="Color the prompt (yellow) and user input (bold green) with ANSI codes; auto: when "
                             "stdout is a terminal.")(f)


def note_prompt_source(ctx, param, value):
    """Callback of -p, -f (and -bf): each sets common_params' prompt, so the one given last counts. click calls the
    callbacks of the options given in command-line order; this records which came last."""
    if value is not None:
        ctx.meta["synapse.prompt_source"] = param.name
    return value


def prompt_source() -> str | None:
    """The parameter name of the prompt flag given last (prompt, prompt_file, binary_file), or None."""
    return click.get_current_context().meta.get("synapse.prompt_source")


def given_prompt(prompt: str | None, prompt_file: str | None, binary_file: str | None, escape: bool) -> bytes | None:
    """params.prompt as common_params_parse leaves it: -p (as given), -f (one trailing newline stripped) and -bf (the
    file's bytes as they are) each set it, so the one given last counts (every file given is read: an unreadable one
    is an error); then escapes, when on. None when none is given."""
    from ..text import process_escapes_bytes, read_prompt

    text = read_prompt(prompt, prompt_file, escape, prompt_file_last())
    if binary_file is not None:
        try:
            with open(binary_file, "rb") as fh:
                data = fh.read()
        except OSError:
            raise SynapseError(f"failed to open file '{binary_file}'") from None
        click.echo(f"Read {len(data)} bytes from binary file {binary_file}", err=True)
        if text is None or prompt_source() == "binary_file":
            text = process_escapes_bytes(data) if escape else data
    return text


def prompt_file_last() -> bool:
    """Whether -f came after -p on this command line (read_prompt's file_last)."""
    return prompt_source() == "prompt_file"


def flash_attn_option(f):
    """-fa/--flash-attn on|off|auto (llama.cpp's common argument, default auto), given as on|off|auto."""
    return click.option(
        "-fa", "--flash-attn", metavar="[on|off|auto]", default="auto", show_default=True, callback=_flash_attn_value,
        help="Flash attention, as llama.cpp's -fa: on and auto (auto enables it on CPU, as llama.cpp does) "
             "compute llama.cpp's FLASH_ATTN_EXT graph, off its soft_max graph.")(f)


def resolve_flash_attn(value: str) -> bool:
    """-fa on / auto: flash attention (llama.cpp's CPU backend resolves auto to enabled); off: not (a quantized
    V cache then fails when the context is created, with llama.cpp's error)."""
    return value in ("on", "auto")


def announce_flash_attn(value: str, cache_type_v: str) -> None:
    """What llama.cpp logs on stderr when its context resolves -fa auto (call once the context exists)."""
    from kernels.kv_cache import QUANTIZED  # (numba: imported once a model is open)

    if value != "auto":
        return
    if cache_type_v in QUANTIZED:
        click.echo("llama_init_from_model: enabling flash_attn since it is required for quantized V cache", err=True)
    click.echo("resolve_fused_ops: Flash Attention enabled", err=True)


# llama.cpp's -lm/--load-mode values (common/arg.cpp): whether the weights stay in the file mapping
LOAD_MODES = ["auto", "none", "mmap", "mlock", "mmap+mlock", "dio"]


def load_mode_option(f):
    """-lm/--load-mode (llama.cpp's common argument, default auto)."""
    return click.option(
        "-lm", "--load-mode", default="auto", show_default=True, type=click.Choice(LOAD_MODES),
        help="Model loading, as llama.cpp's -lm: auto and mmap map the file (the products' repacked weights are "
             "copies in memory); none and dio read every product's weights into memory advised for huge pages "
             "(a slower load, ~1 s for a 1 GB model here; tokens 4-5 % faster); the mlock modes map the file "
             "without locking it.")(f)


def announce_load_mode(mode: str) -> str:
    """A note on stderr for the mlock modes (nothing is locked); returns the mode (session.load_model maps it)."""
    if "mlock" in mode:
        click.echo(f"note: -lm {mode}: synapse does not lock the weights in memory (mapped as with -lm mmap)",
                   err=True)
    return mode


# llama.cpp's -ctk/-ctv values (common/arg.cpp kv_cache_types)
KV_CACHE_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


def cache_type_options(f):
    """-ctk/--cache-type-k and -ctv/--cache-type-v with llama.cpp's values (default f16)."""
    f = click.option("-ctv", "--cache-type-v", default="f16", show_default=True, type=click.Choice(KV_CACHE_TYPES),
                     help="KV cache type for V (quantized types need flash attention).")(f)
    return click.option("-ctk", "--cache-type-k", default="f16", show_default=True, type=click.Choice(KV_CACHE_TYPES),
                        help="KV cache type for K (types other than f16/f32 need flash attention).")(f)


# --rope-*/--yarn-* (common/arg.cpp): flag -> (RopeParams field, type, how the value is stored, help)
ROPE_FLAGS = {
    "--rope-scaling": ("rope_scaling_type", click.Choice(["none", "linear", "yarn"]), None,
                       "RoPE frequency scaling method (default: the model's, linear unless it says otherwise)."),
    "--rope-scale": ("rope_freq_scale", float, lambda v: _inverse_scale(v),
                     "RoPE context scaling factor: expands the context by N (sets --rope-freq-scale 1/N)."),
    "--rope-freq-base": ("rope_freq_base", float, None, "RoPE base frequency (default: the model's)."),
    "--rope-freq-scale": ("rope_freq_scale", float, None,
                          "RoPE frequency scaling factor: expands the context by 1/N (default: the model's)."),
    "--yarn-orig-ctx": ("yarn_orig_ctx", int, None, "YaRN: original context size (default 0: the model's)."),
    "--yarn-ext-factor": ("yarn_ext_factor", float, None,
                          "YaRN: extrapolation mix factor (default -1: 1 with yarn scaling, else 0)."),
    "--yarn-attn-factor": ("yarn_attn_factor", float, None, "YaRN: attention magnitude factor (default -1: 1)."),
    "--yarn-beta-slow": ("yarn_beta_slow", float, None, "YaRN: high correction dim or alpha (default -1: the model's)."),
    "--yarn-beta-fast": ("yarn_beta_fast", float, None, "YaRN: low correction dim or beta (default -1: the model's)."),
}


def _inverse_scale(v: float) -> float:
    if not v > 0:
        raise click.BadParameter(f"--rope-scale must be > 0, got {v}")
    return float(np.float32(1.0) / np.float32(v))


def rope_options(f):
    """The --rope-*/--yarn-* flags of llama.cpp's common arguments. Each given one is recorded in command-line
    order (--rope-scale and --rope-freq-scale set the same value: the last one counts); rope_params() reads them."""
    def record(ctx, param, value):
        if value is not None:
            field, _, convert, _ = ROPE_FLAGS[param.opts[0]]
            ctx.meta.setdefault("synapse.rope", {})[field] = convert(value) if convert else value
        return value

    for flag, (_, typ, _, help_) in reversed(ROPE_FLAGS.items()):
        f = click.option(flag, default=None, type=typ, callback=record, expose_value=False, metavar="N"
                         if typ in (float, int) else None, help=help_)(f)
    return f


def rope_params():
    """The RopeParams of this command line (all "not set" without a --rope-*/--yarn-* flag)."""
    from ..hparams import RopeParams

    return RopeParams(**click.get_current_context().meta.get("synapse.rope", {}))


def _csv_row(value: str) -> list[str]:
    """parse_csv_row (common/arg.cpp): comma-separated fields, a field may be quoted ("" is a quote inside)."""
    fields, field, in_quotes, i = [], "", False, 0
    while i < len(value):
        ch = value[i]
        if ch == '"':
            if not in_quotes:
                if field:
                    field += '"'  # a quote inside an unquoted field is a character
                else:
                    in_quotes = True
            elif value[i + 1:i + 2] == '"':
                field += '"'
                i += 1
            else:
                in_quotes = False
        elif ch == "," and not in_quotes:
            fields.append(field)
            field = ""
        else:
            field += ch
        i += 1
    fields.append(field)
    return fields


def _c_number(text: str, integer: bool):
    """std::atol / std::atof: the longest number at the start (after white space), 0 when there is none."""
    import re

    pat = r"\s*[+-]?\d+" if integer else r"\s*[+-]?(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    m = re.match(pat, text, re.I)
    if not m:
        return 0 if integer else 0.0
    return int(m.group(0)) if integer else float(m.group(0))


def parse_kv_overrides(values) -> dict[str, tuple[str, object]]:
    """--override-kv KEY=TYPE:VALUE,... (repeatable): string_parse_kv_override for each field."""
    out: dict[str, tuple[str, object]] = {}
    for value in values:
        for item in _csv_row(value):
            key, sep, rest = item.partition("=")
            if not sep or len(key.encode()) >= 128:
                raise click.BadParameter(f"malformed KV override '{item}'", param_hint="--override-kv")
            if rest.startswith("int:"):
                out[key] = ("int", _c_number(rest[4:], True))
            elif rest.startswith("float:"):
                out[key] = ("float", _c_number(rest[6:], False))
            elif rest.startswith("bool:"):
                if rest[5:] not in ("true", "false"):
                    raise click.BadParameter(f"invalid boolean value for KV override '{item}'",
                                             param_hint="--override-kv")
                out[key] = ("bool", rest[5:] == "true")
            elif rest.startswith("str:"):
                if len(rest[4:].encode()) > 127:
                    raise click.BadParameter(f"malformed KV override '{item}', value cannot exceed 127 chars",
                                             param_hint="--override-kv")
                out[key] = ("str", rest[4:])
            else:
                raise click.BadParameter(f"invalid type for KV override '{item}' (int, float, bool or str)",
                                         param_hint="--override-kv")
    return out


def _adapter_files(key: str, scaled: bool, flag: str):
    """The callback of --control-vector(-scaled) and --lora(-scaled): (file, scale) pairs appended to ctx.meta[key]
    in command-line order, each value a comma-separated list as parse_csv_row splits it, FNAME:SCALE when scaled."""
    def cb(ctx, param, values):
        files = ctx.meta.setdefault(key, [])
        for value in values or ():
            for item in _csv_row(value):
                if not scaled:
                    files.append((item, 1.0))
                    continue
                parts = item.split(":")
                if len(parts) != 2:
                    raise click.BadParameter(f"{flag} format: FNAME:SCALE")
                try:
                    files.append((parts[0], float(parts[1])))
                except ValueError:
                    raise click.BadParameter(f"not a number: {parts[1]!r}") from None
    return cb


def control_vector_options(f):
    """--control-vector, --control-vector-scaled, --control-vector-layer-range (llama.cpp's common arguments;
    synapse_cli/adapters.py)."""
    f = click.option("--control-vector-layer-range", "control_vector_layer_range", nargs=2, type=int, default=None,
                     metavar="START END", expose_value=False,
                     callback=lambda ctx, p, v: ctx.meta.__setitem__("synapse.cvec_range", v),
                     help="Layers to add the control vector(s) to, both inclusive (default: all from 1).")(f)
    f = click.option("--control-vector-scaled", multiple=True, metavar="FNAME:SCALE,...", expose_value=False,
                     callback=_adapter_files("synapse.cvec", True, "control-vector-scaled"),
                     help="Add a control vector times SCALE (repeatable).")(f)
    return click.option("--control-vector", multiple=True, metavar="FNAME,...", expose_value=False,
                        callback=_adapter_files("synapse.cvec", False, "control-vector"),
                        help="Add a control vector (GGUF of direction.N tensors; repeatable, or comma-separated).")(f)


def lora_options(f):
    """--lora, --lora-scaled, --lora-init-without-apply (llama.cpp's common arguments; synapse_cli/adapters.py)."""
    f = click.option("--lora-init-without-apply", is_flag=True, expose_value=False,
                     callback=lambda ctx, p, v: ctx.meta.__setitem__("synapse.lora_no_apply", v),
                     help="Load the LoRA adapters (and check them) without applying them, as llama.cpp.")(f)
    f = click.option("--lora-scaled", multiple=True, metavar="FNAME:SCALE,...", expose_value=False,
                     callback=_adapter_files("synapse.lora", True, "lora-scaled"),
                     help="Apply a LoRA adapter times SCALE (repeatable).")(f)
    return click.option("--lora", multiple=True, metavar="FNAME,...", expose_value=False,
                        callback=_adapter_files("synapse.lora", False, "lora"),
                        help="Apply a LoRA adapter (GGUF of <weight>.lora_a/.lora_b pairs; repeatable, or "
                             "comma-separated).")(f)


def lora_spec() -> tuple[list[tuple[str, float]], bool] | None:
    """The --lora/--lora-scaled files of this command line ((file, scale) in order, and whether to apply them),
    or None."""
    meta = click.get_current_context().meta
    if not meta.get("synapse.lora"):
        return None
    return list(meta["synapse.lora"]), not meta.get("synapse.lora_no_apply", False)


def control_vector_spec():
    """The ControlVectorSpec of this command line, or None without a control vector."""
    from ..adapters import ControlVectorSpec

    meta = click.get_current_context().meta
    if not meta.get("synapse.cvec"):
        return None
    start, end = meta.get("synapse.cvec_range") or (-1, -1)
    return ControlVectorSpec(list(meta["synapse.cvec"]), start, end)


def repack_option(f):
    """--repack / -nr, --no-repack (llama.cpp's common argument, default on): whether weights are repacked at load,
    which decides their products' kernels and so their float orders."""
    return click.option("--repack/--no-repack", " /-nr", "repack", default=True, show_default=True,
                        expose_value=False, callback=lambda ctx, p, v: ctx.meta.__setitem__("synapse.repack", v),
                        help="Repack weights at load as llama.cpp does (Q4_0, Q4_K, Q2_K, IQ4_NL, MXFP4); -nr: keep "
                             "them as stored, with llama.cpp's kernels for that.")(f)


def repack_setting() -> bool:
    """Whether this command line repacks weights (--repack, the default; -nr/--no-repack: not)."""
    return click.get_current_context().meta.get("synapse.repack", True)


def kv_override_option(f):
    """--override-kv (llama.cpp's common argument): model metadata overrides, read by the model loader."""
    def record(ctx, param, value):
        ctx.meta["synapse.kv_overrides"] = parse_kv_overrides(value)

    return click.option("--override-kv", "override_kv", multiple=True, metavar="KEY=TYPE:VALUE,...",
                        callback=record, expose_value=False,
                        help="Override model metadata by key (types int, float, bool, str), e.g. "
                             "tokenizer.ggml.add_bos_token=bool:false (repeatable, or comma-separated).")(f)


def kv_overrides() -> dict:
    """The --override-kv overrides of this command line (key -> (tag, value))."""
    return click.get_current_context().meta.get("synapse.kv_overrides", {})


# llama.cpp options that change nothing in a CPU-only build: accepted so that a llama.cpp command line works,
# with a note on stderr (name -> (takes a value, why))
IGNORED = {
    ("-ngl", "--gpu-layers", "--n-gpu-layers"): (True, "llama.cpp's CPU backend has no GPU layers"),
    ("-mg", "--main-gpu"): (True, "no GPU"),
    ("-sm", "--split-mode"): (True, "no GPU"),
    ("-ts", "--tensor-split"): (True, "no GPU"),
    ("-dev", "--device"): (True, "the CPU is the only device"),
    ("-lv", "--verbosity", "--log-verbosity"): (True, "synapse prints no llama.cpp log"),
    ("--log-disable",): (False, "synapse prints no llama.cpp log"),
    ("--no-mmap",): (False, "not an option of this llama.cpp: -lm none reads the weights into memory"),
    ("-lm", "--load-mode"): (True, "this command keeps the weights memory-mapped"),
    ("--mlock",): (False, "weights are not locked in memory"),
    ("-nkvo", "--no-kv-offload"): (False, "no GPU"),
    ("-kvo", "--kv-offload"): (False, "no GPU"),
    ("--no-op-offload",): (False, "no GPU"),
    ("--op-offload",): (False, "no GPU"),
    ("--no-host",): (False, "no GPU"),
    ("-cmoe", "--cpu-moe"): (False, "no GPU, and no mixture-of-experts architecture"),
    ("-ncmoe", "--n-cpu-moe"): (True, "no GPU, and no mixture-of-experts architecture"),
    ("-ncffn", "--n-cpu-ffn"): (True, "no GPU"),
    ("-fit", "--fit"): (True, "no GPU memory to fit"),
    ("-fitt", "--fit-target"): (True, "no GPU memory to fit"),
    ("-fitc", "--fit-ctx"): (True, "no GPU memory to fit"),
    ("-tb", "--threads-batch"): (True, "synapse computes prompt batches with the -t threads; the results do not "
                                       "depend on the thread count"),
    ("--poll",): (True, "how idle threads wait: speed only"),
    ("--poll-batch",): (True, "how idle threads wait: speed only"),
    ("--prio",): (True, "thread priority: speed only"),
    ("--prio-batch",): (True, "thread priority: speed only"),
    ("-C", "--cpu-mask"): (True, "CPU affinity is left to the system: speed only"),
    ("-Cr", "--cpu-range"): (True, "CPU affinity is left to the system: speed only"),
    ("-Cb", "--cpu-mask-batch"): (True, "CPU affinity is left to the system: speed only"),
    ("-Crb", "--cpu-range-batch"): (True, "CPU affinity is left to the system: speed only"),
    ("--cpu-strict",): (True, "CPU affinity is left to the system: speed only"),
    ("--cpu-strict-batch",): (True, "CPU affinity is left to the system: speed only"),
    ("--numa",): (True, "NUMA placement: speed only"),
    ("-dt", "--defrag-thold"): (True, "deprecated in llama.cpp, where it does nothing"),
    ("-kvu", "--kv-unified"): (False, "how the sequences share the cache's buffer; llama-perplexity prints the same "
                                      "numbers either way"),
    ("-rea", "--reasoning"): (True, "llama-completion sets it but formats its chat templates without it"),
    ("--reasoning-effort",): (True, "llama-completion sets it but formats its chat templates without it"),
    ("--reasoning-format",): (True, "llama-completion prints the raw text; it parses no thoughts"),
    ("--reasoning-budget",): (True, "llama-completion's sampler gets no thinking tags to budget"),
    ("--reasoning-budget-message",): (True, "llama-completion knows no thinking tags to budget"),
    ("--reasoning-preserve",): (False, "llama-completion keeps its chat history as text"),
    ("--no-reasoning-preserve",): (False, "llama-completion keeps its chat history as text"),
    ("--skip-chat-parsing",): (False, "llama-completion prints the raw text; it parses no chat output"),
    ("--no-skip-chat-parsing",): (False, "llama-completion prints the raw text; it parses no chat output"),
    ("-ctkd", "--cache-type-k-draft"): (True, "no draft model"),
    ("-ctvd", "--cache-type-v-draft"): (True, "no draft model"),
    ("--spec-draft-type-k",): (True, "no draft model"),
    ("--spec-draft-type-v",): (True, "no draft model"),
    ("--swa-full",): (False, "llama, qwen2 and mistral3 have no sliding-window layers"),
    ("-lzm", "--lazy-mode"): (True, "these architectures have no per-layer embedding tensors"),
    ("--warmup",): (False, "synapse always warms up (compiles) its kernels; it leaves no trace in the results"),
    ("--no-warmup",): (False, "synapse always warms up (compiles) its kernels; it leaves no trace in the results"),
    ("--simple-io",): (False, "synapse always reads input lines as llama.cpp's simple console does"),
    ("-v", "--verbose", "--log-verbose"): (False, "synapse prints no llama.cpp debug log"),
    ("--log-file",): (True, "synapse prints no llama.cpp log"),
    ("--log-colors",): (True, "synapse prints no llama.cpp log"),
    ("--log-prefix",): (False, "synapse prints no llama.cpp log"),
    ("--no-log-prefix",): (False, "synapse prints no llama.cpp log"),
    ("--log-timestamps",): (False, "synapse prints no llama.cpp log"),
    ("--no-log-timestamps",): (False, "synapse prints no llama.cpp log"),
    ("--offline",): (False, "synapse never downloads"),
    ("--check-tensors",): (False, "tensor data is not scanned for invalid values"),
    ("-ptc", "--print-token-count"): (True, "llama.cpp prints the count in its debug log only"),
    ("--perf",): (False, "synapse always prints its own timings on stderr"),
    ("--no-perf",): (False, "synapse always prints its own timings on stderr"),
}

# llama.cpp options synapse does not have (yet): refused by name instead of being misread (click would read
# `-cnv` as `-c nv`)
UNSUPPORTED = {
    "-cnv", "--conversation", "-st", "--single-turn", "-sys", "--system-prompt", "-sysf", "--system-prompt-file",
    "-i", "--interactive", "-if", "--interactive-first", "-r", "--reverse-prompt", "--jinja", "--chat-template",
    "-sp", "--special", "-mli", "--multiline-input", "--in-prefix-bos", "--chat-template-file", "-s", "--seed",
    "--top-k", "--top-p", "--min-p", "--typical", "--repeat-penalty", "--repeat-last-n", "--presence-penalty",
    "--frequency-penalty", "--mirostat", "--samplers", "-l", "--logit-bias", "-np", "--parallel", "-cb",
    "--cont-batching", "-nkvo", "--no-kv-offload", "-cmoe", "-ncmoe", "--lora", "-md", "--model-draft", "-hf",
    "-hfr", "-mu", "--model-url", "--grammar", "--grammar-file", "-j", "--json-schema", "--keep", "-gan", "-gaw",
    "--color", "-co", "--in-prefix", "--in-suffix", "--override-kv", "--numa", "-C", "-Cr", "--cpu-mask", "--prio",
    "--poll", "-tb", "--threads-batch", "--swa-full", "--spm-infill", "--prompt-cache",
    "--prompt-cache-all", "--prompt-cache-ro", "--lora-scaled",
}


# IGNORED options llama.cpp takes in llama-perplexity (and its server, batched and bench tools) but refuses in
# llama-completion and llama-eval-callback ("error: invalid argument"; common/arg.cpp's set_examples)
PERPLEXITY_ONLY = ("-kvu", "--kv-unified")


def ignored_llama_options(f=None, *, without=()):
    """Adds the IGNORED options (hidden) to a command, but for those it already defines (decorators below this
    one) and those named in `without` (as `@ignored_llama_options(without=PERPLEXITY_ONLY)`); each given one
    prints its note on stderr."""
    if f is None:
        return lambda g: ignored_llama_options(g, without=without)

    def note(ctx, param, value):
        if value not in (None, False):
            click.echo(f"note: {param.opts[0]} is ignored ({dict(IGNORED)[tuple(param.opts + param.secondary_opts)][1]})",
                       err=True)
        return value

    def override_tensor(ctx, param, values):
        """-ot PATTERN=BUFT,...: parse_tensor_buffer_overrides's checks. A CPU build's only buffer type is CPU, and a
        weight overridden to it still gets the extra (repacked) buffer types (llama_model_loader): nothing changes."""
        for value in values or ():
            for item in value.split(","):
                pattern, eq, buft = item.partition("=")
                if not eq:
                    raise click.BadParameter("invalid value", param=param)
                if buft != "CPU":
                    raise click.BadParameter(f"unknown buffer type {buft!r} (available buffer types: CPU)",
                                             param=param)
                try:
                    re.compile(pattern)
                except re.error as e:
                    raise click.BadParameter(f"invalid regular expression {pattern!r}: {e}", param=param) from None
        if values:
            click.echo("note: -ot is ignored (CPU is the only buffer type, and weights overridden to it are still "
                       "repacked, as in llama.cpp)", err=True)

    defined = {o for p in getattr(f, "__click_params__", []) for o in p.opts}  # a command's real option wins
    if not defined & {"-ot", "--override-tensor"}:
        f = click.option("-ot", "--override-tensor", "ignored_override_tensor", multiple=True, hidden=True,
                         callback=override_tensor, expose_value=False)(f)
    for names, (takes_value, _) in IGNORED.items():
        if defined & set(names) or set(without) & set(names):
            continue
        f = click.option(*names, f"ignored_{names[0].lstrip('-').replace('-', '_')}", hidden=True,
                         is_flag=not takes_value, default=None, callback=note, expose_value=False)(f)
    return f


def check_args(cmd: click.Command, args: list[str]) -> None:
    """Refuse, by name, single-dash words click would split into options with values (`-cnv` as `-c nv`):
    llama.cpp options synapse lacks ("unsupported llama.cpp option"), and other unknown ones."""
    def options(c):
        known = {}
        for p in c.params:
            if isinstance(p, click.Option):
                for o in p.opts + p.secondary_opts:
                    known[o] = not (p.is_flag or p.count)
        return known

    known = options(cmd)
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return
        name = a.split("=", 1)[0]
        if isinstance(cmd, click.Group) and not a.startswith("-") and cmd.get_command(None, a) is not None:
            cmd = cmd.get_command(None, a)
            known = options(cmd)
        elif name in UNSUPPORTED and name not in known:
            raise click.UsageError(f"unsupported llama.cpp option {name}")
        elif a.startswith("-") and not a.startswith("--") and len(a) > 2 and a not in known:
            try:
                float(a)
            except ValueError:
                raise click.UsageError(f"no such option: {a}") from None
        elif name in known and known[name] and "=" not in a:
            i += 1  # its value, whatever it looks like
        i += 1
