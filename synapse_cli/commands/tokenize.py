"""`synapse tokenize`: llama.cpp's llama-tokenize (tools/tokenize/tokenize.cpp), plus JSON and batch modes.

    synapse tokenize -m MODEL -p "Hello world"            #     id -> 'piece' lines
    synapse tokenize -m MODEL -f prompt.txt --ids          # [1, 2, 3]
    cat prompt.txt | synapse tokenize -m MODEL --stdin --show-count
    synapse tokenize -m MODEL --jsonl requests.jsonl       # {"text", "add_special", "parse_special"} per line

As llama-tokenize: the prompt comes from --stdin, else -f (read verbatim, no newline stripped), else -p;
escape sequences (\\n \\r \\t \\' \\" \\\\ \\xHH, common's string_process_escapes) are processed unless
--no-escape; add_special = (the vocabulary's add_bos) and not --no-bos; special tokens are parsed unless
--no-parse-special; pieces are printed with special=true, as raw bytes, cut at a NUL byte (printf "%s").
Only the vocabulary is read; this command never imports numba or the compute kernels.
"""

from __future__ import annotations

import json
import os
import sys

import click

from kernels.errors import SynapseError
from synapse_cli.text import process_escapes_bytes as process_escapes


class InputError(SynapseError):
    """The prompt or batch input cannot be used."""


def _read_prompt(prompt: str | None, file: str | None, use_stdin: bool, escape: bool) -> bytes:
    if use_stdin:
        data = sys.stdin.buffer.read()
    elif file is not None:
        try:
            with open(file, "rb") as f:
                data = f.read()
        except OSError as e:
            raise InputError(f"could not open file '{file}' for reading: {e.strerror or e}") from None
    elif prompt:  # (an empty -p counts as none, as llama-tokenize's `params.prompt.empty()`)
        data = os.fsencode(prompt)  # the argv bytes (llama.cpp tokenizes bytes that are not valid UTF-8 too)
    else:
        raise InputError("must specify one of: --stdin, --file or --prompt")
    return process_escapes(data) if escape else data


def render_pieces(tok, ids: list[int]) -> bytes:
    """llama-tokenize's default output: `printf("%6d -> '%s'\\n", id, piece)` per token, with the piece of
    common_token_to_piece (special=true) written as raw bytes and, like %s, cut at a NUL byte."""
    lines = []
    for i in ids:
        piece = tok.token_to_piece(i, True)
        nul = piece.find(b"\0")
        if nul >= 0:
            piece = piece[:nul]
        lines.append(b"%6d -> '" % i + piece + b"'\n")
    return b"".join(lines)


def _lossy(b: bytes) -> str:
    from tokenizer.tokenizer import decode_utf8_lossy

    return decode_utf8_lossy(b)


def _run_jsonl(tok, src: str, default_add: bool, default_parse: bool) -> None:
    try:
        stream = sys.stdin.buffer if src == "-" else open(src, "rb")
    except OSError as e:
        raise InputError(f"could not open file '{src}' for reading: {e.strerror or e}") from None
    out = sys.stdout
    failed = []  # line numbers
    first_error = ""
    with stream:
        for lineno, raw in enumerate(stream, 1):
            try:
                ids = _jsonl_request(tok, raw, default_add, default_parse)
                out.write(json.dumps({"ids": ids}) + "\n")
            except InputError as e:  # one output line per input line: the error in place of the ids
                failed.append(lineno)
                out.write(json.dumps({"error": str(e)}) + "\n")
                first_error = first_error or f"{src}:{lineno}: {e}"
    out.flush()
    if failed:
        raise InputError(f"{len(failed)} of {lineno} lines failed (first: {first_error})")


_JSONL_KEYS = {"text", "add_special", "parse_special"}


def _jsonl_request(tok, raw: bytes, default_add: bool, default_parse: bool) -> list[int]:
    """One --jsonl line: {"text": str, "add_special"?: bool, "parse_special"?: bool} -> its ids."""
    if not raw.strip():
        raise InputError("empty line (expected a JSON object)")
    try:
        req = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"not a JSON object ({e})") from None
    if not isinstance(req, dict) or not isinstance(req.get("text"), str):
        raise InputError('expected an object with a string "text"')
    unknown = sorted(set(req) - _JSONL_KEYS)
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r} (keys: text, add_special, parse_special)")
    add = req.get("add_special", default_add)
    parse = req.get("parse_special", default_parse)
    if not isinstance(add, bool) or not isinstance(parse, bool):
        raise InputError("add_special / parse_special must be true or false")
    try:
        text = req["text"].encode("utf-8")
    except UnicodeEncodeError:
        raise InputError("text contains a lone surrogate") from None
    return tok.encode(text, add, parse)


@click.command("tokenize", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-m", "--model", "model", required=True, type=click.Path(dir_okay=False),
              help="GGUF file whose vocabulary to use (only the vocabulary is read).")
@click.option("-p", "--prompt", default=None, help="Text to tokenize.")
@click.option("-f", "--file", "file", default=None, type=click.Path(dir_okay=False),
              help="Read the text from a file, verbatim (takes precedence over -p).")
@click.option("--stdin", "use_stdin", is_flag=True, help="Read the text from standard input (takes precedence).")
@click.option("--ids", "ids_only", is_flag=True, help="Print only the ids, as a Python list: [1, 2, 3].")
@click.option("--no-bos", is_flag=True, help="Do not add BOS (nor EOS) even if the vocabulary asks for it.")
@click.option("--no-parse-special", is_flag=True, help="Treat special-token text (<|im_start|>, ...) as plain text.")
@click.option("-e", "--escape/--no-escape", default=True, show_default=True,
              help="Process escape sequences (\\n, \\r, \\t, \\', \\\", \\\\, \\xHH) in the text.")
@click.option("--show-count", is_flag=True, help="Print the total number of tokens.")
@click.option("--log-disable", is_flag=True, help="Accepted for llama-tokenize compatibility (synapse logs nothing here).")
@click.option("--json", "as_json", is_flag=True, help="Print {\"ids\": [...], \"pieces\": [...]} as one JSON line.")
@click.option("--jsonl", "jsonl", default=None, metavar="FILE",
              help="Batch mode: FILE (or - for stdin) holds one JSON object per line, {\"text\", \"add_special\", "
                   "\"parse_special\"} (llama_tokenize's flags; default true unless --no-bos / --no-parse-special); "
                   "one {\"ids\": [...]} line is written for each. The vocabulary is loaded once.")
def command(model, prompt, file, use_stdin, ids_only, no_bos, no_parse_special, escape, show_count, log_disable,
            as_json, jsonl):
    """Tokenize text with a GGUF model's vocabulary, exactly as llama-tokenize does."""
    try:
        _main(model, prompt, file, use_stdin, ids_only, no_bos, no_parse_special, escape, show_count, as_json, jsonl)
    except BrokenPipeError:  # e.g. `| head`: stop quietly, as llama-tokenize does on SIGPIPE
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)


def _main(model, prompt, file, use_stdin, ids_only, no_bos, no_parse_special, escape, show_count, as_json, jsonl):
    from tokenizer import load_tokenizer

    data = None
    if jsonl is None:  # read the prompt first: a missing file fails before the model is read
        data = _read_prompt(prompt, file, use_stdin, escape)
    tok = load_tokenizer(model)
    parse_special = not no_parse_special
    if jsonl is not None:
        _run_jsonl(tok, jsonl, not no_bos, parse_special)
        return
    add_special = tok.vocab.add_bos and not no_bos
    ids = tok.encode(data, add_special, parse_special)
    out = sys.stdout.buffer
    if as_json:
        pieces = [_lossy(tok.token_to_piece(i, True)) for i in ids]
        out.write((json.dumps({"ids": ids, "pieces": pieces}, ensure_ascii=False) + "\n").encode("utf-8"))
    elif ids_only:
        out.write(("[" + ", ".join(map(str, ids)) + "]\n").encode())
    else:
        out.write(render_pieces(tok, ids))
    if show_count:
        out.write(b"Total number of tokens: %d\n" % len(ids))
    out.flush()
