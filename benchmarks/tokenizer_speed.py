"""Tokenizer speed: MB/s of mixed text for the Llama 3 and Qwen2 vocabularies; not a test.

The text (--mb, default 3 MB) interleaves 4 KB blocks of Python source (the standard library of the
running interpreter), English prose (licence texts), CJK prose (CPython's test/cjkencodings/*-utf8.txt)
and the fixtures' 44 tokenizer cases (accents, Arabic, Russian, emoji, special-token strings, ...), in the
ratio 5:3:1:1. Per vocabulary it prints the load time (load_tokenizer on a GGUF already in the page
cache), the first encode (cold word cache; includes the lazily built merge table), a warm encode, in CPU
seconds (time.process_time, one core; the machine is shared, so wall time is noisy) and MB/s, and, if the
`tokenizers` package is installed, the same text through a HuggingFace tokenizer built from the same GGUF
vocabulary and merges, with whether its ids agree.

    .venv/bin/python benchmarks/tokenizer_speed.py
    .venv/bin/python benchmarks/tokenizer_speed.py --mb 1 --vocab ggml-vocab-qwen2 --no-hf
"""

from __future__ import annotations

from _common import FIXTURES, REPO, cpu_name  # first: the repository root on the import path

import argparse
import datetime
import gc
import glob
import json
import os
import platform
import sys
import sysconfig
import time
from pathlib import Path

from tokenizer import load_tokenizer

HF_REGEX = {  # the pre-tokenizer regexes of the original tokenizer.json files
    "llama3": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "qwen2": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
}


def _read(paths, limit: int) -> str:
    out, n = [], 0
    for p in paths:
        try:
            t = Path(p).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        out.append(t)
        n += len(t)
        if n >= limit:
            break
    return "".join(out)


def build_corpus(mb: float) -> tuple[str, dict[str, int]]:
    target = int(mb * 1e6)
    lib = Path(sysconfig.get_paths()["stdlib"])
    sources = {
        "python": _read(sorted(glob.glob(str(lib / "*.py"))), target),
        "english": _read([lib / "LICENSE.txt"] + sorted(glob.glob("/usr/share/common-licenses/*")), target),
        "cjk": _read(sorted(glob.glob(str(lib / "test" / "cjkencodings" / "*-utf8.txt"))), target),
        "fixtures": "\n".join(d["text"] for d in json.loads((FIXTURES / "tokenizer" / "texts.json").read_text("utf-8"))),
    }
    weights = {"python": 5, "english": 3, "cjk": 1, "fixtures": 1}
    pos = {k: 0 for k in sources}
    used = {k: 0 for k in sources}
    parts, size = [], 0
    while size < target:
        for k, w in weights.items():
            src = sources[k]
            if not src:
                continue
            for _ in range(w):
                block = src[pos[k] : pos[k] + 4096]
                pos[k] = (pos[k] + 4096) % len(src)
                if not block:
                    continue
                b = len(block.encode())
                parts.append(block)
                used[k] += b
                size += b
    return "".join(parts), used


def timed(fn):
    gc.collect()
    c, w = time.process_time(), time.perf_counter()
    r = fn()
    return time.process_time() - c, time.perf_counter() - w, r


def hf_tokenizer(tok):
    """A HuggingFace tokenizers.Tokenizer with the GGUF's vocabulary, merges and pre-tokenizer regex."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    v = tok.vocab
    kind = v.pre_tokenizer.regexes
    vocab = {t.decode("utf-8", "surrogateescape"): i for i, t in enumerate(v.texts)}
    merges = [tuple(m.decode("utf-8", "surrogateescape").split(" ", 1)) for m in v.merges]
    hf = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=v.ignore_merges))
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(HF_REGEX[kind]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([AddedToken(v.texts[i].decode(), special=True, normalized=False) for i in v.special_ids])
    return hf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=3.0, help="size of the text in MB (default 3)")
    ap.add_argument("--vocab", action="append", help="vocab file stem in ../shared/fixtures/vocab (repeatable; "
                    "default ggml-vocab-llama-bpe and ggml-vocab-qwen2)")
    ap.add_argument("--repeat", type=int, default=3, help="load / warm-encode repetitions, best kept (default 3)")
    ap.add_argument("--no-hf", action="store_true", help="skip the HuggingFace tokenizers comparison")
    args = ap.parse_args()
    vocabs = args.vocab or ["ggml-vocab-llama-bpe", "ggml-vocab-qwen2"]

    text, used = build_corpus(args.mb)
    mb = len(text.encode()) / 1e6
    print(f"# synapse tokenizer benchmark, {datetime.datetime.now():%Y-%m-%d %H:%M}, {cpu_name()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, Python {platform.python_version()}")
    print(f"# command: {' '.join([os.path.relpath(sys.executable, REPO)] + sys.argv)}")
    print(f"# text: {mb:.2f} MB, {len(text)} codepoints: " + ", ".join(f"{k} {b / 1e6:.2f} MB" for k, b in used.items()))
    print("# times are CPU seconds of this process (one core)")
    hf_ok = not args.no_hf
    if hf_ok:
        try:
            import tokenizers  # noqa: F401
        except ImportError:
            print("# HuggingFace `tokenizers` not installed: comparison skipped")
            hf_ok = False
    for name in vocabs:
        path = FIXTURES / "vocab" / f"{name}.gguf"
        load = min(timed(lambda: load_tokenizer(path))[0] for _ in range(args.repeat))
        tok = load_tokenizer(path)
        cold, cold_wall, ids = timed(lambda: tok.encode(text, add_special=False, parse_special=True))
        warm = min(timed(lambda: tok.encode(text, add_special=False, parse_special=True))[0] for _ in range(args.repeat))
        print(f"{name}: {tok.vocab.n_tokens} tokens, load {load:.3f} s; {len(ids)} ids; "
              f"first encode {cold:.2f} s = {mb / cold:.2f} MB/s (wall {cold_wall:.2f} s); "
              f"warm {warm:.2f} s = {mb / warm:.2f} MB/s")
        if hf_ok:
            hf = hf_tokenizer(tok)
            t_hf, w_hf, enc = timed(lambda: hf.encode(text, add_special_tokens=False))
            same = enc.ids == ids
            print(f"  HF tokenizers {tokenizers.__version__}: {t_hf:.2f} s = {mb / t_hf:.2f} MB/s (wall {w_hf:.2f} s); ids "
                  + ("identical" if same else f"differ ({len(enc.ids)} vs {len(ids)})"))


if __name__ == "__main__":
    main()
