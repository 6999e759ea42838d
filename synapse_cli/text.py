"""Text helpers shared by the commands: the prompt as llama.cpp's common arguments read it, and llama.cpp's
escape processing.

Mirrors common/common.cpp `string_process_escapes`: it works on the UTF-8 bytes, turns \\n \\r \\t
\\' \\" \\\\ and \\xHH into their bytes (HH as strtol reads two characters), and leaves any other
backslash pair as it is.
"""

from __future__ import annotations


def process_escapes_bytes(data: bytes) -> bytes:
    """common/common.cpp string_process_escapes, on bytes."""
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        c = data[i]
        if c == 0x5C and i + 1 < n:  # backslash
            i += 1
            e = data[i]
            simple = {0x6E: 0x0A, 0x72: 0x0D, 0x74: 0x09, 0x27: 0x27, 0x22: 0x22, 0x5C: 0x5C}
            if e in simple:
                out.append(simple[e])
            elif e == 0x78 and i + 2 < n and _strtol_hex2(data[i + 1 : i + 3]) is not None:
                out.append(_strtol_hex2(data[i + 1 : i + 3]) & 0xFF)
                i += 2
            else:
                out.append(0x5C)
                out.append(e)
        else:
            out.append(c)
        i += 1
    return bytes(out)


def _strtol_hex2(two: bytes) -> int | None:
    """strtol(two chars, &end, 16) when it consumes exactly both chars (else None), as common.cpp checks.

    strtol skips leading whitespace and takes a sign (and a "0x" prefix, which cannot fit here)."""
    s = two.decode("latin-1")
    j = 0
    while j < len(s) and s[j] in " \t\n\v\f\r":
        j += 1
    neg = False
    if j < len(s) and s[j] in "+-":
        neg = s[j] == "-"
        j += 1
    digits = ""
    while j < len(s) and s[j] in "0123456789abcdefABCDEF":
        digits += s[j]
        j += 1
    if not digits or j != 2:
        return None
    v = int(digits, 16)
    return -v if neg else v


def process_escapes(text: str) -> str:
    """Escape-process `text`; bytes that do not form valid UTF-8 (from \\xHH) are kept via surrogateescape."""
    return process_escapes_bytes(text.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")


def read_prompt(prompt: str | None, file: str | None, escape: bool, file_last: bool = False) -> bytes | None:
    """The prompt as common_params_parse leaves it (common/arg.cpp): -p's bytes as given on the command line,
    or -f's file with one trailing newline stripped; then, unless --no-escape, escapes processed (in both
    cases, as llama.cpp does). Raw bytes: llama.cpp tokenizes what it gets, valid UTF-8 or not. None when
    neither is given. Both given: each sets the prompt in turn, so the last one (file_last) counts, and the
    file is read either way (a file that cannot be read is an error, as there)."""
    import os

    data = read_text_file(file) if file is not None else None
    if prompt is not None and (data is None or not file_last):
        data = os.fsencode(prompt)  # the argv bytes (Python keeps undecodable ones as surrogates)
    if data is None:
        return None
    return process_escapes_bytes(data) if escape else data



def read_text_file(path: str) -> bytes:
    """A -f / -sysf file as common/arg.cpp reads it: its bytes, one trailing newline removed."""
    from kernels.errors import SynapseError

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SynapseError(f"failed to open file '{path}': {e.strerror or e}") from None
    return data[:-1] if data.endswith(b"\n") else data
