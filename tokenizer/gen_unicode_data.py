"""Regenerate `tokenizer/unicode_data.json` (the tables `tokenizer/unicode_data.py` loads) from llama.cpp's
`src/unicode-data.cpp`.

llama.cpp classifies codepoints with its own tables (generated from a fixed Unicode version by
llama.cpp's scripts/gen-unicode-data.py), not with the C library or Python's `unicodedata`. Pre-tokenizer
splits depend on those exact classes, so we carry the same data, converted once by this script:

    python tokenizer/gen_unicode_data.py /path/to/llama.cpp/src/unicode-data.cpp

(run as a script: importing the `tokenizer` package needs the file it writes)

Only the tables the tokenizer uses are kept: the codepoint-range -> category flags table, the
whitespace set, the lowercase map (llama's custom splitters lowercase the contraction letters; WPM
lowercases words) and the NFD ranges (unicode_cpts_normalize_nfd, WPM's accent stripping).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def _block(src: str, name: str) -> str:
    start = src.index(name)
    body = src[src.index("{", src.index("=", start)) + 1 :]
    return body[: body.index("};")]


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python tokenizer/gen_unicode_data.py PATH/TO/unicode-data.cpp")
    src = Path(argv[0]).read_text()
    hexnum = re.compile(r"0x[0-9A-Fa-f]+")
    pair = re.compile(r"\{(0x[0-9A-Fa-f]+),\s*(0x[0-9A-Fa-f]+)\}")

    ranges = [(int(a, 16), int(b, 16)) for a, b in pair.findall(_block(src, "unicode_ranges_flags"))]
    whitespace = [int(x, 16) for x in hexnum.findall(_block(src, "unicode_set_whitespace"))]
    lower = [(int(a, 16), int(b, 16)) for a, b in pair.findall(_block(src, "unicode_map_lowercase"))]
    triple = re.compile(r"\{(0x[0-9A-Fa-f]+),\s*(0x[0-9A-Fa-f]+),\s*(0x[0-9A-Fa-f]+)\}")
    nfd = [tuple(int(x, 16) for x in t) for t in triple.findall(_block(src, "unicode_ranges_nfd"))]
    assert all(a[0] < b[0] for a, b in zip(nfd, nfd[1:])), "nfd table not ascending"
    assert ranges[0][0] == 0 and ranges[-1][0] == 0x110000, "unexpected range table bounds"
    assert all(a < b for (a, _), (b, _) in zip(ranges, ranges[1:])), "range table not ascending"

    tables = {
        "RANGE_STARTS": [a for a, _ in ranges],
        "RANGE_FLAGS": [b for _, b in ranges],
        "WHITESPACE": sorted(whitespace),
        "LOWER_FROM": [a for a, _ in lower],
        "LOWER_TO": [b for _, b in lower],
        "NFD_FIRST": [t[0] for t in nfd],
        "NFD_LAST": [t[1] for t in nfd],
        "NFD_TO": [t[2] for t in nfd],
    }
    dest = Path(__file__).with_name("unicode_data.json")
    # one table a line: diffs of a regenerated file stay readable
    dest.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in tables.items()) + "\n}\n")
    print(f"wrote {dest}: {len(ranges)} ranges, {len(whitespace)} whitespace, {len(lower)} lowercase pairs, {len(nfd)} nfd ranges")


if __name__ == "__main__":
    main(sys.argv[1:])
