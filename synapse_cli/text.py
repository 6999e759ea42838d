"""Text helpers shared by the commands: llama.cpp's escape processing of `-p` arguments.

`process_escapes` mirrors common/common.cpp `string_process_escapes`: it works on the UTF-8 bytes,
turns \\n \\r \\t \\' \\" \\\\ and \\xHH into their bytes, and leaves any other backslash pair as is.
"""

from __future__ import annotations

_SIMPLE = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("'"): b"'", ord('"'): b'"', ord("\\"): b"\\"}
_HEX = b"0123456789abcdefABCDEF"


def process_escapes_bytes(data: bytes) -> bytes:
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        c = data[i]
        if c == 0x5C and i + 1 < n:  # backslash with a following byte
            i += 1
            e = data[i]
            if e in _SIMPLE:
                out += _SIMPLE[e]
            elif e == ord("x") and i + 2 < n and data[i + 1] in _HEX and data[i + 2] in _HEX:
                out.append(int(data[i + 1 : i + 3], 16))
                i += 2
            else:
                out.append(0x5C)
                out.append(e)
        else:
            out.append(c)
        i += 1
    return bytes(out)


def process_escapes(text: str) -> str:
    """Escape-process `text`; bytes that do not form valid UTF-8 (from \\xHH) are kept via surrogateescape."""
    return process_escapes_bytes(text.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")
