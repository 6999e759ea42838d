"""`synapse inspect-gguf FILE`: dump a GGUF file's metadata and tensors, as gguf-py's `gguf-dump` does.

stdout is byte-for-byte what `gguf-dump` prints (gguf-py 0.19, gguf/scripts/gguf_dump.py): the default
text listing, `--json` / `--json-array`, `--markdown`, `--data-offset`, `--data-alignment`, `--no-tensors`.
gguf-dump's output shows gguf-py's view of a field, which differs from our reader's in a few corners,
reproduced here on purpose: nested arrays are flattened to their leaves and typed by their first inner
array, and an empty array has no element type (shown as `ARRAY`).

Beyond gguf-dump:
* a summary (architecture, parameters, file type, bits per weight, tensor types, vocabulary, context)
  worded like llama.cpp's `print_info` (src/llama-model-loader.cpp, src/llama-model.cpp,
  src/llama-vocab.cpp), printed with Rich to stderr when stderr is a terminal or with `--summary`,
  so stdout stays comparable with gguf-dump;
* `--key GLOB` keeps only the key/value pairs whose name matches a shell-style glob (fnmatch, case
  sensitive; repeatable, any match keeps the pair). Kept pairs keep their gguf-dump position numbers
  (JSON "index") so a filtered line is identical to the same line of the full dump.

Errors (missing file, malformed GGUF) are one line on stderr and exit code 1. Imports no numba.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import sys
from collections import Counter
from typing import Any, Iterable

import click
import numpy as np

from kernels.errors import SynapseError
from kernels.ggml_type import GGMLType
from kernels.gguf import SCALAR_DTYPES, Field, GGUFReader, GGUFValueType, StringArray, TensorInfo

from ..model_info import FTYPE_GUESSED, LLAMA_FTYPES, file_ftype

# --- gguf-py's view of a field -----------------------------------------------------------------


def gguf_py_types(field: Field) -> list[GGUFValueType]:
    """Field types as gguf-py's ReaderField.types: arrays typed by their first element, [ARRAY] if empty."""
    if not field.is_array:
        return list(field.types)
    v = field.value
    if len(v) == 0:
        return [GGUFValueType.ARRAY]
    if isinstance(v, list):  # array of arrays (each item a Field)
        return [GGUFValueType.ARRAY] + gguf_py_types(v[0])
    return [GGUFValueType.ARRAY, field.types[1]]


def leaf_count(field: Field) -> int:
    """gguf-py's len(field.data): 1 for a scalar or string, the number of leaves of a (nested) array."""
    if not field.is_array:
        return 1
    v = field.value
    if isinstance(v, list):
        return sum(leaf_count(f) for f in v)
    return len(v)


def _flat_values(field: Field, limit: int | None) -> list[Any]:
    """The first `limit` (all if None) leaves of an array as python values (gguf-py's contents())."""
    v = field.value
    if isinstance(v, StringArray):
        n = len(v) if limit is None else min(limit, len(v))
        if n == len(v):
            return v.to_list()
        return [v.raw(i).decode("utf-8", errors="replace") for i in range(n)]
    if isinstance(v, np.ndarray):
        part = v if limit is None else v[:limit]
        if field.types[-1] == GGUFValueType.BOOL:
            return part.astype(bool).tolist()
        return part.tolist()
    out: list[Any] = []
    for item in v:  # nested: concatenate the leaves of each inner array
        if limit is not None and len(out) >= limit:
            break
        out.extend(_flat_values(item, None if limit is None else limit - len(out)))
    return out


def field_contents(field: Field, limit: int | None = None) -> Any:
    """gguf-py's `field.contents()` (scalars) or `field.contents(slice(limit))` (arrays)."""
    if not field.is_array:
        return field.value
    return _flat_values(field, limit)


def _pretty_type(types: list[GGUFValueType]) -> str:
    if types[0] == GGUFValueType.ARRAY:
        nest = len(types) - 1
        return "[" * nest + types[-1].name + "]" * nest
    return types[-1].name


def _np_str(vtype: GGUFValueType, value: Any) -> str:
    """str() of a numpy scalar of the value's GGUF type (how gguf-dump --markdown prints numbers)."""
    if vtype == GGUFValueType.BOOL:
        return str(np.bool_(value))
    return str(SCALAR_DTYPES[vtype].type(value))


def _endians() -> tuple[str, str]:
    # we only read little-endian files; gguf-dump names the host's own order
    return ("LITTLE" if sys.byteorder == "little" else "BIG"), "LITTLE"


# --- gguf-dump outputs -----------------------------------------------------------------------


def dump_text(reader: GGUFReader, fields: list[tuple[int, Field]], no_tensors: bool) -> str:
    """gguf-dump's default listing (dump_metadata)."""
    host, file = _endians()
    out = [f"* File is {file} endian, script is running on a {host} endian host."]
    out.append(f"* Dumping {len(fields)} key/value pair(s)")
    for idx, field in fields:
        types = gguf_py_types(field)
        n_leaves = leaf_count(field)
        line = f"  {idx + 1:5}: {_pretty_type(types):10} | {n_leaves:8} | {field.name}"
        if types[0] == GGUFValueType.STRING:
            content = field.value
            if len(content) > 60:
                content = content[:57] + "..."
            line += f" = {content!r}"
        elif types[0] != GGUFValueType.ARRAY:
            line += f" = {field.value}"
        else:
            content = repr(field_contents(field, 6))
            if n_leaves > 6:
                content = content[:-1] + ", ...]"
            line += f" = {content}"
        out.append(line)
    if not no_tensors:
        out.append(f"* Dumping {len(reader.tensors)} tensor(s)")
        for n, t in enumerate(reader.tensors, 1):
            dims = ", ".join(f"{d:5}" for d in _dims4(t))
            out.append(f"  {n:5}: {t.n_elements:10} | {dims} | {t.type_name:7} | {t.name}")
    return "\n".join(out) + "\n"


def _dims4(t: TensorInfo) -> list[int]:
    return list(t.ne) + [1] * (4 - len(t.ne))


def dump_json(reader: GGUFReader, fields: list[tuple[int, Field]], filename: str, no_tensors: bool,
              json_array: bool) -> str:
    """gguf-dump --json (dump_metadata_json): no trailing newline, like json.dump."""
    _, file = _endians()
    metadata: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    for idx, field in fields:
        types = gguf_py_types(field)
        cur: dict[str, Any] = {"index": idx, "type": types[0].name, "offset": field.offset}
        metadata[field.name] = cur
        if types[0] == GGUFValueType.ARRAY:
            cur["array_types"] = [t.name for t in types[1:]]
            if not json_array:
                continue
        cur["value"] = field_contents(field)
    if not no_tensors:
        for idx, t in enumerate(reader.tensors):
            tensors[t.name] = {"index": idx, "shape": list(t.ne), "type": t.type_name, "offset": t.info_offset}
    result = {"filename": filename, "endian": file, "metadata": metadata, "tensors": tensors}
    return json.dumps(result)


def _md_table(header_map: list[tuple[str, str, str]], rows: list[dict[str, Any]]) -> str:
    """gguf-dump's markdown_table_with_alignment_support; header_map = (key, header, align)."""

    def cell(width: int, align: str, s: str) -> str:
        if align == "center":
            return s.center(width)
        if align == "right":
            return s.rjust(width - 1) + " "
        return " " + s.ljust(width - 1)

    def dashes(width: int, align: str) -> str:
        if align == "center":
            return ":" + "-" * (width - 2) + ":"
        if align == "right":
            return "-" * (width - 1) + ":"
        if align == "left":
            return ":" + "-" * (width - 1)
        return "-" * width

    widths = []
    for key, header, _ in header_map:
        data_w = max((len(str(r[key])) for r in rows), default=0) + 2
        widths.append(max(data_w, len(header) + 2))
    lines = ["|".join(cell(w, a, h) for w, (_, h, a) in zip(widths, header_map))]
    lines.append("|".join(dashes(w, a) for w, (_, _, a) in zip(widths, header_map)))
    for r in rows:
        lines.append("|".join(cell(w, a, str(r[k])) for w, (k, _, a) in zip(widths, header_map)))
    return "".join(f"|{line}|\n" for line in lines)


def _rounded(count: int) -> str:
    """gguf-dump's element_count_rounded_notation: ~135M, ~2K, 576."""
    # scale factors written as gguf-dump writes them (count * 1e-9, not count / 1e9: rounding differs)
    for limit, scale, suffix in ((1e15, 1e-15, "Q"), (1e12, 1e-12, "T"), (1e9, 1e-9, "B"), (1e6, 1e-6, "M"),
                                 (1e3, 1e-3, "K")):
        if count > limit:
            return f"~{round(count * scale)}{suffix}"
    return f"{round(count)}"


_TENSOR_WORDS = {
    "token_embd": "Token embedding", "pos_embd": "Position embedding", "output_norm": "Output normalization",
    "output": "Output", "attn_norm": "Attention normalization", "attn_norm_2": "Attention normalization",
    "attn_qkv": "Attention query-key-value", "attn_q": "Attention query", "attn_k": "Attention key",
    "attn_v": "Attention value", "attn_output": "Attention output",
    "ffn_norm": "Feed-forward network normalization", "ffn_up": 'Feed-forward network "up"',
    "ffn_gate": 'Feed-forward network "gate"', "ffn_down": 'Feed-forward network "down"',
    "ffn_gate_inp": "Expert-routing layer for the Feed-forward network in Mixture of Expert models",
    "ffn_gate_exp": 'Feed-forward network "gate" layer per expert in Mixture of Expert models',
    "ffn_down_exp": 'Feed-forward network "down" layer per expert in Mixture of Expert models',
    "ffn_up_exp": 'Feed-forward network "up" layer per expert in Mixture of Expert models',
    "ssm_in": "State space model input projections", "ssm_conv1d": "State space model rolling/shift",
    "ssm_x": "State space model selective parametrization", "ssm_a": "State space model state compression",
    "ssm_d": "State space model skip connection", "ssm_dt": "State space model time step",
    "ssm_out": "State space model output projection", "blk": "Block", "enc": "Encoder", "dec": "Decoder",
}


def _translate_tensor_name(name: str) -> str:
    words = []
    for w in name.split("."):
        full = _TENSOR_WORDS.get(w.strip().lower())
        words.append(full.title() if full is not None else w.title())
    return " ".join(words)


def _md_code(s: str) -> str:
    """Inline code that survives backticks inside s (gguf-dump's escape_markdown_inline_code)."""
    ticks = max((len(m.group(0)) for m in re.finditer(r"`+", s)), default=0)
    marker = "`" * (ticks + 1)
    if s.startswith("`") or s.endswith("`"):
        s = f" {s} "
    return f"{marker}{s}{marker}"


def _md_string(s: str, limit: int) -> str:
    if len(s) > limit:
        return f"{_md_code(s[: limit // 2])}...{_md_code(s[-limit // 2 :])}"
    return _md_code(s)


def _md_value(field: Field, types: list[GGUFValueType], total: int) -> str:
    if len(types) == 1:
        if types[0] == GGUFValueType.STRING:
            return _md_string(field.value, 60)
        if types[0] in SCALAR_DTYPES:
            return _np_str(types[0], field.value)
        return ""  # an empty array
    elem_type = types[1]
    items: list[str] = []
    if elem_type == GGUFValueType.STRING:
        items = [_md_string(s, 30) for s in field_contents(field, 5)]
    elif elem_type in SCALAR_DTYPES:
        items = [_np_str(elem_type, x) for x in field_contents(field, 7)]
    more = ", ..." if total > len(items) else ""
    return f'[ {", ".join(items).strip()}{more} ]'


def dump_markdown(reader: GGUFReader, fields: list[tuple[int, Field]], filename: str, no_tensors: bool) -> str:
    """gguf-dump --markdown (dump_markdown_metadata), including its trailing print() newline."""
    _, file = _endians()
    md = f"# {filename} - GGUF Internal File Dump\n\n- Endian: {file} endian\n\n"
    md += f"## Key Value Metadata Store\n\nThere are {len(fields)} key-value pairs in this file\n\n"
    kv_rows = []
    for idx, field in fields:
        types = gguf_py_types(field)
        total = leaf_count(field)
        kv_rows.append({"n": idx + 1, "pretty_type": _pretty_type(types), "total_elements": total,
                        "field_name": field.name, "value": _md_value(field, types, total)})
    md += _md_table([("n", "POS", "right"), ("pretty_type", "TYPE", "left"), ("total_elements", "Count", "right"),
                     ("field_name", "Key", "left"), ("value", "Value", "left")], kv_rows)
    md += "\n"

    model_bytes = model_elements = 0
    if not no_tensors:
        groups: dict[str, list[tuple[int, TensorInfo]]] = {}
        for i, t in enumerate(reader.tensors):
            parts = t.name.split(".")
            group = "base"
            if parts[0] == "blk" and len(parts) > 1:
                group = f"{parts[0]}.{parts[1]}"
            elif parts[0] in ("enc", "dec") and len(parts) > 2 and parts[1] == "blk":
                group = f"{parts[0]}.{parts[1]}.{parts[2]}"
            elif parts[0] in ("enc", "dec"):
                group = parts[0]
            groups.setdefault(group, []).append((i, t))
        total_elements = sum(t.n_elements for t in reader.tensors)

        md += f"## Tensors Overview {_rounded(total_elements)} Elements\n\n"
        md += f"Total number of elements in all tensors: {total_elements} Elements\n\n"
        for group, members in groups.items():
            g_el = sum(t.n_elements for _, t in members)
            md += (f"- [{_translate_tensor_name(group)} Tensor Group - {_rounded(g_el)} Elements]"
                   f"(#{group.replace('.', '_')})\n")
        md += "\n### Tensor Data Offset\n\nThis table contains the offset and data segment relative to start of file\n\n"
        offset_rows = [{"t_id": i, "layer_name": t.name, "data_offset": f"{t.offset:#16x}",
                        "data_size": f"{t.nbytes:#16x}"} for i, t in enumerate(reader.tensors)]
        md += _md_table([("t_id", "T_ID", "right"), ("layer_name", "Tensor Layer Name", "left"),
                         ("data_offset", "Data Offset (B)", "right"), ("data_size", "Data Size (B)", "right")],
                        offset_rows)
        md += "\n"

        for group, members in groups.items():
            g_el = sum(t.n_elements for _, t in members)
            pct = g_el / total_elements * 100 if total_elements else float("nan")
            md += (f"### <a name=\"{group.replace('.', '_')}\">{_translate_tensor_name(group)} Tensor Group : "
                   f"{_rounded(g_el)} Elements</a>\n\n")
            est_w = max([1] + [len(_rounded(t.n_elements)) for _, t in members])
            cnt_w = max([1] + [len(str(t.n_elements)) for _, t in members])
            dim_w = [max([1] + [len(str(_dims4(t)[j])) for _, t in members]) for j in range(4)]
            rows = []
            g_bytes = 0
            for i, t in members:
                human = _translate_tensor_name(t.name.replace(".weight", ".(W)").replace(".bias", ".(B)"))
                dims = " x ".join(f"{str(d):>{dim_w[j]}}" for j, d in enumerate(_dims4(t)))
                count = f"({_rounded(t.n_elements):>{est_w}}) {t.n_elements:>{cnt_w}}"
                bpw = t.nbytes * 8 / t.n_elements if t.n_elements > 0 else float("nan")
                rows.append({"t_id": i, "layer_name": t.name, "human_layer_name": human, "element_count": count,
                             "pretty_dimension": dims, "tensor_type": t.type_name, "bpw": f"{bpw:.4f}"})
                g_bytes += t.nbytes
            md += _md_table([("t_id", "T_ID", "right"), ("layer_name", "Tensor Layer Name", "left"),
                             ("human_layer_name", "Human Friendly Tensor Layer Name", "left"),
                             ("element_count", "Elements", "left"), ("pretty_dimension", "Shape", "left"),
                             ("tensor_type", "Type", "left"), ("bpw", "BPW", "right")], rows)
            md += f"\n- Total elements in {group}: ({_rounded(g_el):>4}) {g_el}\n"
            md += f"- Percentage of total elements: {pct:.2f}%\n"
            if g_el > 0:
                md += f"- Bits per Weight (BPW) for {group}: {g_bytes * 8 / g_el:.4f} bits\n"
            else:
                md += f"- Bits per Weight (BPW) for {group}: undefined (no elements)\n"
            md += "\n\n"
            model_bytes += g_bytes
            model_elements += g_el

    base = os.path.basename(filename)
    if model_elements > 0:
        md += f"Total BPW for {base}: {model_bytes * 8 / model_elements:.4f} bits"
    else:
        md += f"Total BPW for {base}: undefined (no elements)"
    return md + "\n"


def gguf_py_data_offset(reader: GGUFReader) -> int:
    """gguf-dump --data-offset: gguf-py pads the end of the tensor infos even when there are no tensors."""
    a = reader.alignment
    return (reader.data_offset + a - 1) // a * a


# --- summary (llama.cpp print_info wording) ------------------------------------------------------

# llama-vocab.cpp: tokenizer.ggml.model -> vocab type name
_VOCAB_TYPES = {"no_vocab": "no vocab", "none": "no vocab", "llama": "SPM", "bert": "WPM", "gpt2": "BPE",
                "hybriddna": "BPE", "whitespace": "BPE", "gemma4": "BPE", "t5": "UGM", "rwkv": "RWKV",
                "plamo2": "PLaMo2", "test": "TEST"}

_FILE_VERSIONS = {1: "GGUF V1 (support until nov 2023)", 2: "GGUF V2", 3: "GGUF V3 (latest)"}


def _params_text(n: int) -> str:
    for limit, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if n >= limit:
            return f"{n / limit:.2f} {unit}"
    return f"{n * 1e-3:.2f} K"


def _scalar(reader: GGUFReader, key: str) -> Any:
    f = reader.fields.get(key)
    return None if f is None or f.is_array else f.value


def model_summary(reader: GGUFReader) -> dict[str, Any]:
    """Facts about a model file, each worded as llama.cpp's loader prints it (print_info)."""
    arch = _scalar(reader, "general.architecture")
    n_elements = sum(t.n_elements for t in reader.tensors)
    n_bytes = sum(t.nbytes for t in reader.tensors)
    by_type = Counter(t.ggml_type for t in reader.tensors)

    ftype = file_ftype(reader)
    guessed = bool(ftype & FTYPE_GUESSED)
    enum_name, text = LLAMA_FTYPES.get(ftype & ~FTYPE_GUESSED, (f"unknown ({ftype & ~FTYPE_GUESSED})",
                                                                 "unknown, may not work"))
    file_type = f"{'(guessed) ' if guessed else ''}{text}"
    ftype_enum = f"LLAMA_FTYPE_{enum_name}"

    gib = 1024**3
    if n_bytes < gib:
        size = f"{n_bytes / 1024 / 1024:.2f} MiB"
    else:
        size = f"{n_bytes / gib:.2f} GiB"
    bpw = f"{n_bytes * 8 / n_elements:.2f}" if n_elements else "-"

    def hp(name: str) -> Any:
        return _scalar(reader, f"{arch}.{name}") if arch else None

    n_head = hp("attention.head_count")
    n_head_kv = hp("attention.head_count_kv")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    merges = reader.fields.get("tokenizer.ggml.merges")
    tok_model = _scalar(reader, "tokenizer.ggml.model")
    return {
        "arch": arch,
        "name": _scalar(reader, "general.name"),
        "file_format": _FILE_VERSIONS.get(reader.version, "unknown"),
        "file_type": file_type,
        "ftype_enum": ftype_enum,
        "file_size": size,
        "bpw": bpw,
        "n_params": n_elements,
        "model_params": _params_text(n_elements),
        "n_ctx_train": hp("context_length"),
        "n_embd": hp("embedding_length"),
        "n_layer": hp("block_count"),
        "n_head": n_head,
        "n_head_kv": n_head_kv if n_head_kv is not None else n_head,
        "n_ff": hp("feed_forward_length"),
        "vocab_type": _VOCAB_TYPES.get(tok_model, "unknown") if tok_model is not None else None,
        "n_vocab": leaf_count(tokens) if tokens is not None and tokens.is_array else None,
        "n_merges": leaf_count(merges) if merges is not None and merges.is_array else None,
        # ggml type name -> tensor count, in type-id order (llama.cpp's "- type  f32:   61 tensors")
        "tensor_types": {GGMLType(k).name: by_type[k] for k in sorted(by_type)},
    }


def print_summary(reader: GGUFReader, path: str) -> None:
    """The summary as a Rich table on stderr."""
    from rich.console import Console
    from rich.table import Table

    s = model_summary(reader)
    table = Table(title=f"{os.path.basename(path)}", show_header=False, title_justify="left")
    table.add_column(style="bold cyan")
    table.add_column()

    def row(label: str, value: Any) -> None:
        if value is not None:
            table.add_row(label, str(value))

    row("architecture", s["arch"])
    row("name", s["name"])
    row("file format", s["file_format"])
    row("file type", f"{s['file_type']}  ({s['ftype_enum']})")
    row("parameters", f"{s['model_params']}  ({s['n_params']:,})")
    row("size of tensors", f"{s['file_size']}  ({s['bpw']} bits per weight)")
    row("tensor types", ", ".join(f"{k} x{v}" for k, v in s["tensor_types"].items()) or "none")
    row("context length", s["n_ctx_train"])
    row("layers", s["n_layer"])
    row("embedding", s["n_embd"])
    row("heads (kv)", None if s["n_head"] is None else f"{s['n_head']} ({s['n_head_kv']})")
    row("feed-forward", s["n_ff"])
    if s["vocab_type"] is not None or s["n_vocab"] is not None:
        merges = f", {s['n_merges']} merges" if s["n_merges"] is not None else ""
        row("vocabulary", f"{s['vocab_type']}, {s['n_vocab']} tokens{merges}")
    Console(file=sys.stderr).print(table)


# --- the command ---------------------------------------------------------------------------------


def select_fields(reader: GGUFReader, patterns: Iterable[str]) -> list[tuple[int, Field]]:
    """(gguf-dump position, field) of every field whose name matches one of the globs (all if none)."""
    patterns = list(patterns)
    return [(i, f) for i, f in enumerate(reader.fields.values())
            if not patterns or any(fnmatch.fnmatchcase(f.name, p) for p in patterns)]


@click.command("inspect-gguf")
@click.argument("file", metavar="FILE")
@click.option("--no-tensors", is_flag=True, help="Don't dump tensor metadata.")
@click.option("--json", "as_json", is_flag=True, help="Produce JSON output (gguf-dump --json).")
@click.option("--json-array", is_flag=True, help="Include full array values in JSON output (long).")
@click.option("--markdown", is_flag=True, help="Produce markdown output (gguf-dump --markdown).")
@click.option("--data-offset", is_flag=True, help="Print the start of the data section.")
@click.option("--data-alignment", is_flag=True, help="Print the data alignment.")
@click.option("--key", "keys", metavar="GLOB", multiple=True,
              help="Only key/value pairs whose name matches this shell-style glob (fnmatch, case-sensitive, "
                   "e.g. 'tokenizer.ggml.*'); repeatable. Positions/indexes stay those of the full dump.")
@click.option("--summary/--no-summary", default=None,
              help="Print a model summary to stderr (default: only when stderr is a terminal).")
def command(file: str, no_tensors: bool, as_json: bool, json_array: bool, markdown: bool, data_offset: bool,
            data_alignment: bool, keys: tuple[str, ...], summary: bool | None) -> None:
    """Dump a GGUF file's metadata and tensors; stdout is gguf-dump's output."""
    try:
        reader = GGUFReader(file)
    except SynapseError as e:
        raise click.ClickException(str(e)) from None

    if summary is None:
        summary = sys.stderr.isatty()
    if summary:
        print_summary(reader, file)

    fields = select_fields(reader, keys)
    if as_json:
        out = dump_json(reader, fields, file, no_tensors, json_array)
    elif markdown:
        out = dump_markdown(reader, fields, file, no_tensors)
    elif data_offset:
        out = f"{gguf_py_data_offset(reader)}\n"
    elif data_alignment:
        out = f"{reader.alignment}\n"
    else:
        out = dump_text(reader, fields, no_tensors)
    try:
        click.echo(out, nl=False)
        sys.stdout.flush()
    except BrokenPipeError:  # `synapse inspect-gguf m.gguf | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
