"""Codepoint classes, UTF-8 handling and pre-tokenizer splitting exactly as llama.cpp's src/unicode.cpp.

llama.cpp does not use Unicode properties from a regex engine. It classifies codepoints with its own
tables (src/unicode-data.cpp, carried here as `unicode_data`), and `unicode_regex_split` splits text

* with hand-written state machines for the GPT-2, Llama-3, Qwen2 and Qwen3.5 regexes, Kimi-K2's
  patterns, AFMoE's (and tiny_aya's) digit grouping and the newline runs of Gemma 4 (the "custom"
  paths, chosen by exact string comparison of the pattern),
* otherwise with C++ `std::regex` (ECMAScript grammar): on a *collapsed* copy of the text where every
  non-ASCII codepoint becomes one byte naming its category (0xD1 number, 0xD2 letter, 0xD3 punctuation,
  0xD4 mark, 0xD5 symbol, 0xD0 other, 0x0B whitespace) when the pattern uses `\\p{..}`, or on the
  codepoints themselves (non-ASCII whitespace replaced by 0x0B) when it does not.

We mirror both. The four GPT-style state machines are each an equivalent Python `re` pattern (its matches tile the
text exactly as the state machine cuts it). Its classes are llama.cpp's own: [A-Za-z] etc. on ASCII
text, llama.cpp's tables restricted to the BMP on text without astral codepoints (one bitmap lookup in
`re`), and otherwise the pattern runs on an ASCII "stand-in" copy of the text whose cut points are
applied to the original; long texts go in chunks cut where a piece always ends. The std::regex paths run
the same collapsed text through the pattern translated from ECMAScript to Python syntax (`\\s` is the C
locale's six ASCII spaces, `$` is end of input). tests/split_reference.py keeps line-by-line ports of
those four state machines as the test oracle; the other custom splitters are line-by-line ports
themselves (split_kimi_k2, split_afmoe_digits, split_newlines).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import lru_cache
from itertools import accumulate

from . import unicode_data as _ud

# unicode_cpt_flags bits (src/unicode.h)
UNDEFINED = 0x0001
NUMBER = 0x0002
LETTER = 0x0004
SEPARATOR = 0x0008
ACCENT_MARK = 0x0010
PUNCTUATION = 0x0020
SYMBOL = 0x0040
CONTROL = 0x0080
MASK_CATEGORIES = 0x00FF
WHITESPACE = 0x0100

MAX_CODEPOINTS = 0x110000
_STARTS = _ud.RANGE_STARTS
_FLAGS = _ud.RANGE_FLAGS
WHITESPACE_SET = frozenset(_ud.WHITESPACE)
_LOWER = dict(zip(_ud.LOWER_FROM, _ud.LOWER_TO))


def cpt_flags(cp: int) -> int:
    """unicode_cpt_flags_from_cpt(cp).as_uint() without the lowercase/uppercase/nfd helper bits."""
    if cp >= MAX_CODEPOINTS:
        return UNDEFINED
    f = _FLAGS[bisect_right(_STARTS, cp) - 1]
    if cp in WHITESPACE_SET:
        f |= WHITESPACE
    return f


def tolower(cp: int) -> int:
    """unicode_tolower: llama.cpp's single-codepoint lowercase map."""
    return _LOWER.get(cp, cp)


# --- UTF-8 ------------------------------------------------------------------------------------------

def utf8_len(lead: int) -> int:
    """unicode_len_utf8: sequence length implied by a lead byte (continuation bytes count as 1)."""
    return (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[lead >> 4]


def utf8_decode_llama(data: bytes) -> str:
    """unicode_cpts_from_utf8 as a str: valid UTF-8 decodes normally; on a malformed sequence llama.cpp
    emits U+FFFD and skips ONE byte. It does not reject overlong forms or surrogates (those decode to
    their value); a 4-byte form above U+10FFFF, which llama.cpp cannot re-encode, becomes U+FFFD."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    out = []
    i, n = 0, len(data)
    while i < n:
        b0 = data[i]
        if b0 < 0x80:
            out.append(chr(b0))
            i += 1
            continue
        if b0 & 0x40 == 0:
            cp, size = -1, 1
        elif b0 & 0x20 == 0:
            ok = i + 1 < n and data[i + 1] & 0xC0 == 0x80
            cp, size = (((b0 & 0x1F) << 6) | (data[i + 1] & 0x3F), 2) if ok else (-1, 1)
        elif b0 & 0x10 == 0:
            ok = i + 2 < n and data[i + 1] & 0xC0 == 0x80 and data[i + 2] & 0xC0 == 0x80
            cp, size = (((b0 & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F), 3) if ok else (-1, 1)
        elif b0 & 0x08 == 0:
            ok = i + 3 < n and all(data[i + k] & 0xC0 == 0x80 for k in (1, 2, 3))
            cp, size = (
                (((b0 & 0x07) << 18) | ((data[i + 1] & 0x3F) << 12) | ((data[i + 2] & 0x3F) << 6) | (data[i + 3] & 0x3F), 4)
                if ok
                else (-1, 1)
            )
        else:
            cp, size = -1, 1
        out.append("\ufffd" if cp < 0 or cp >= MAX_CODEPOINTS else chr(cp))
        i += size
    return "".join(out)


def utf8_encode(text: str) -> bytes:
    """unicode_cpt_to_utf8 over a str (lone surrogates encode to their 3-byte form, as llama.cpp does)."""
    return text.encode("utf-8", "surrogatepass")


# --- GPT-2 byte <-> unicode map (unicode_byte_to_utf8_map) ------------------------------------------

def _build_byte_map() -> list[str]:
    direct = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = [""] * 256
    for b in direct:
        table[b] = chr(b)
    n = 0
    for b in range(256):
        if not table[b]:
            table[b] = chr(256 + n)
            n += 1
    return table


BYTE_TO_UNICODE: list[str] = _build_byte_map()  # (256,) byte -> one-codepoint str
UNICODE_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_TO_UNICODE)}
# str.translate tables: latin-1 char (= byte) -> GPT-2 char, and back
_GPT2_TO_LATIN1 = {ord(c): b for b, c in enumerate(BYTE_TO_UNICODE)}


def byte_decode(text: str) -> bytes:
    """llama_decode_text: GPT-2 codepoints back to bytes; a codepoint outside the map becomes
    `[UNK_BYTE_0x<hex of its UTF-8>` + whole text + `]`, as llama.cpp writes it."""
    t = text.translate(_GPT2_TO_LATIN1)
    try:
        return t.encode("latin-1")
    except UnicodeEncodeError:
        pass
    out = bytearray()
    for ch in text:
        b = UNICODE_TO_BYTE.get(ch)
        if b is not None:
            out.append(b)
        else:
            out += b"[UNK_BYTE_0x" + utf8_encode(ch).hex().encode() + utf8_encode(text) + b"]"
    return bytes(out)


def _esc(cp: int) -> str:
    return f"\\x{cp:02x}" if cp < 0x100 else (f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}")


# The exact regex strings llama-vocab.cpp dispatches to custom code (unicode_regex_split_custom)
RE_GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
RE_LLAMA3_ORIG = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
RE_LLAMA3 = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
RE_QWEN2 = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
RE_QWEN35 = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
RE_KIMI_K2 = "\\p{Han}+"  # the trigger of the whole Kimi-K2 splitter
RE_AFMOE_DIGITS = "\\p{AFMoE_digits}"
RE_NEWLINES = "[^\\n]+|[\\n]+"
RE_TINY_AYA_DIGITS = "\\d{1,3}(?=(?:\\d{3})*\\b)"  # llama.cpp runs the AFMoE digit splitter for it

_CUSTOM_KIND = {
    RE_GPT2: "gpt2", RE_LLAMA3_ORIG: "llama3", RE_LLAMA3: "llama3", RE_QWEN2: "qwen2", RE_QWEN35: "qwen35",
    RE_KIMI_K2: "kimi_k2", RE_AFMOE_DIGITS: "afmoe", RE_NEWLINES: "newlines", RE_TINY_AYA_DIGITS: "afmoe",
}
_FAST_KINDS = ("gpt2", "llama3", "qwen2", "qwen35")  # splitters with an equivalent Python regex


class _StandInTable(dict):
    """str.translate table for the custom splitters: ASCII stays itself, every other codepoint becomes
    an ASCII stand-in of its llama.cpp class (letter 'a', number '0', whitespace 0x0B, anything else
    '!'). The custom splitters only ask "letter / number / whitespace / one of ' \\r \\n space and
    the ASCII contraction letters" (no non-ASCII codepoint lowercases to s t r e v m l d in
    unicode-data.cpp, checked in the tests), so the stand-in text splits exactly like the original,
    and a regex over ASCII classes runs several times faster than one over llama.cpp's full tables.

    With `marks` (Qwen3.5's splitter also asks "accent mark") marks become 0x01, and the ASCII control
    characters that are not whitespace (which no splitter treats apart from '!') become '!'."""

    def __init__(self, marks: bool = False):
        super().__init__({c: chr(c) for c in range(128)})
        self.marks = marks
        if marks:
            for c in list(range(0x20)) + [0x7F]:
                if c not in WHITESPACE_SET:
                    self[c] = "!"

    def __missing__(self, cp: int) -> str:
        f = cpt_flags(cp)
        c = "\x0b" if f & WHITESPACE else "a" if f & LETTER else "0" if f & NUMBER else "!"
        if self.marks and f & ACCENT_MARK and not f & WHITESPACE:
            c = "\x01"
        self[cp] = c
        return c


_STAND_IN = _StandInTable()
_STAND_IN_MARKS = _StandInTable(marks=True)


def _bmp_class(bit: int) -> str:
    """Regex class body of the BMP codepoints whose llama.cpp category has `bit`."""
    out = []
    for i in range(len(_STARTS) - 1):
        lo, hi = _STARTS[i], min(_STARTS[i + 1] - 1, 0xFFFF)
        if lo > 0xFFFF:
            break
        if _FLAGS[i] & bit:
            if out and out[-1][1] + 1 == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
    return "".join(_esc(a) if a == b else f"{_esc(a)}-{_esc(b)}" for a, b in out)


@lru_cache(maxsize=None)
def custom_pattern(kind: str, mode: str = "ascii") -> re.Pattern:
    """A Python regex whose successive matches (findall) are exactly the pieces llama.cpp's custom
    splitter `kind` emits: over ASCII text with llama.cpp's classes restricted to ASCII (mode "ascii"),
    over text without astral codepoints with llama.cpp's classes restricted to the BMP ("bmp"; `re`
    turns those into one bitmap lookup, while astral ranges would be scanned one by one), or over the
    stand-in text ("standin", see _StandInTable). Each alternative list ends in a one-codepoint
    catch-all, the custom code's "no match" branch, so the matches tile the text."""
    if mode == "bmp":
        L, N, M = _bmp_class(LETTER), _bmp_class(NUMBER), _bmp_class(ACCENT_MARK)
        WS = "".join(_esc(c) for c in sorted(WHITESPACE_SET))
    else:  # llama.cpp's classes restricted to ASCII: [A-Za-z], [0-9] and the six C-locale spaces
        L, N, WS = "A-Za-z", "0-9", "\\t\\n\\x0b\\x0c\\r "
        M = "\\x01" if mode == "standin" and kind == "qwen35" else ""  # no ASCII codepoint is a mark
    # (possessive ++ where nothing after the run could ever take its characters back: speed only)
    if kind == "gpt2":
        # the custom code emits a lone whitespace that `\\s+(?!\\S)` rejects as its own piece: `[WS]+`
        pat = (
            f"'(?:[stmd]|re|ve|ll)| ?[{L}]++| ?[{N}]++| ?[^{WS}{L}{N}]++"
            f"|[{WS}]+(?![^{WS}])|[{WS}]+|[\\s\\S]"
        )
    elif kind in ("llama3", "qwen2", "qwen35"):
        # (?i:'s|...) as the custom code tests it: unicode_tolower(next) is the letter
        contraction = "'(?:[sStTmMdD]|[rRvV][eE]|[lL][lL])"
        num = f"[{N}]{{1,3}}" if kind == "llama3" else f"[{N}]"
        LM = L + M if kind == "qwen35" else L  # qwen35: letter runs take the marks, punctuation runs do not
        pat = (
            f"{contraction}|[^\\r\\n{L}{N}]?[{LM}]++|{num}| ?[^{WS}{LM}{N}]++[\\r\\n]*+"
            f"|[{WS}]*[\\r\\n]+|[{WS}]+(?![^{WS}])|[{WS}]+|[\\s\\S]"
        )
    else:
        raise ValueError(f"no custom splitter {kind!r}")
    return re.compile(pat)


def _split_chunk(kind: str, text: str) -> list[str]:
    if text.isascii():
        return custom_pattern(kind).findall(text)
    if max(text) < "\U00010000":
        return custom_pattern(kind, "bmp").findall(text)
    # astral codepoints: split the stand-in text, cut the original at the same places (C-level loops)
    table = _STAND_IN_MARKS if kind == "qwen35" else _STAND_IN
    ends = list(accumulate(map(len, custom_pattern(kind, "standin").findall(text.translate(table)))))
    return list(map(text.__getitem__, map(slice, [0] + ends[:-1], ends)))


@lru_cache(maxsize=None)
def _boundary_pattern(kind: str) -> re.Pattern:
    """Positions where splitter `kind` always ends a piece, whatever surrounds them, so that the text
    can be split in chunks there: after a newline followed by a non-space (llama3, qwen2: a whitespace
    run ending in \\n is one piece, `\\s*[\\r\\n]+`), or after a lone newline between non-spaces (gpt2)."""
    ws = "".join(_esc(c) for c in sorted(WHITESPACE_SET))
    if kind == "gpt2":
        return re.compile(f"(?<=[^{ws}])\\n(?=[^{ws}])")
    return re.compile(f"\\n(?=[^{ws}])")


_CHUNK = 4096


def custom_split(kind: str, text: str) -> list[str]:
    """unicode_regex_split_custom_<kind> over one range of text."""
    if kind not in _FAST_KINDS:
        return _SLOW_CUSTOM[kind](text)
    n = len(text)
    if n <= _CHUNK or text.isascii():
        return _split_chunk(kind, text)
    # chunks, so that one emoji does not send a whole document down the slow path
    out: list[str] = []
    search = _boundary_pattern(kind).search
    pos = 0
    while pos < n:
        end = n
        if n - pos > _CHUNK:
            m = search(text, pos + _CHUNK)
            if m is not None:
                end = m.end()
        out += _split_chunk(kind, text[pos:end])
        pos = end
    return out


_NEWLINE_RUNS = re.compile("[^\\n]+|\\n+")


def split_newlines(text: str) -> list[str]:
    """unicode_regex_split_custom_newlines: runs of non-newlines and runs of newlines."""
    return _NEWLINE_RUNS.findall(text)


def split_afmoe_digits(text: str) -> list[str]:
    """unicode_regex_split_custom_afmoe (also tiny_aya's digit grouping): each run of numbers is cut
    into a leading 1-2 and then groups of 3; everything between runs is one piece."""
    flags = [cpt_flags(ord(c)) for c in text]
    n = len(text)
    out: list[str] = []
    prev = 0
    pos = 0
    while pos < n:
        if flags[pos] & NUMBER:
            start = pos
            while pos < n and flags[pos] & NUMBER:
                pos += 1
            cur = start  # (the text since the last cut goes out with the first group, as _add_token does)
            r = (pos - start) % 3
            cuts = ([cur + r] if r else []) + list(range(cur + r + 3, pos + 1, 3))
            for c in cuts:
                out.append(text[prev:c])
                prev = c
            continue
        pos += 1
    if prev < n:
        out.append(text[prev:n])
    return out


def is_han(cp: int) -> bool:
    """unicode_cpt_is_han."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
            or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or 0x2CEB0 <= cp <= 0x2EBEF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def split_kimi_k2(text: str) -> list[str]:
    """unicode_regex_split_custom_kimi_k2, line by line (Han runs, letter words without Han with an
    optional contraction, 1-3 digits, punctuation runs, the whitespace rules of llama3)."""
    cpts = [ord(c) for c in text]
    n = len(cpts)
    OUT = 0xFFFFFFFF
    flags = [cpt_flags(c) for c in cpts]
    cpt_at = lambda p: cpts[p] if 0 <= p < n else OUT  # noqa: E731
    fl_at = lambda p: flags[p] if 0 <= p < n else 0  # noqa: E731
    pieces: list[str] = []
    prev_end = 0

    def add(end: int) -> int:
        nonlocal prev_end
        ln = end - prev_end
        if ln > 0:
            pieces.append(text[prev_end:end])
        prev_end = end
        return ln

    def letter_not_han(p: int) -> bool:
        return bool(fl_at(p) & LETTER) and not is_han(cpt_at(p))

    pos = 0
    while pos < n:
        cpt, fl = cpt_at(pos), fl_at(pos)
        if is_han(cpt):
            while is_han(cpt_at(pos)):
                pos += 1
            add(pos)
            continue
        lead_ok = not (cpt in (0x0D, 0x0A) or fl & LETTER or fl & NUMBER)
        if (fl & LETTER and not is_han(cpt)) or (lead_ok and letter_not_han(pos + 1)):
            has_lead = False
            if lead_ok:
                has_lead = True
                pos += 1
            has_letters = False
            while letter_not_han(pos):
                has_letters = True
                pos += 1
            if has_letters or (not has_lead and letter_not_han(pos)):
                if not has_letters:
                    pos += 1
                while letter_not_han(pos):
                    pos += 1
                if cpt_at(pos) == 0x27 and pos + 1 < n:
                    nx = tolower(cpt_at(pos + 1))
                    if nx in (0x73, 0x74, 0x6D, 0x64):
                        pos += 2
                    elif pos + 2 < n:
                        nn = tolower(cpt_at(pos + 2))
                        if (nx, nn) in ((0x72, 0x65), (0x76, 0x65), (0x6C, 0x6C)):
                            pos += 3
                add(pos)
                continue
            elif has_lead:
                pos -= 1
        if fl & NUMBER:
            ini = pos
            while fl_at(pos) & NUMBER:
                pos += 1
                if pos - ini >= 3:
                    add(pos)
                    ini = pos
            add(pos)
            continue
        f2 = fl_at(pos + 1) if cpt == 0x20 else fl
        if not (f2 & (WHITESPACE | LETTER | NUMBER)) and f2:
            pos += cpt == 0x20
            while not (f2 & (WHITESPACE | LETTER | NUMBER)) and f2:
                pos += 1
                f2 = fl_at(pos)
            while cpt_at(pos) in (0x0D, 0x0A):
                pos += 1
            add(pos)
            continue
        nws = 0
        last_rn = 0
        while fl_at(pos + nws) & WHITESPACE:
            if cpt_at(pos + nws) in (0x0D, 0x0A):
                last_rn = pos + nws + 1
            nws += 1
        if last_rn > 0:
            pos = last_rn
            add(pos)
            continue
        if nws > 1 and cpt_at(pos + nws) != OUT:
            pos += nws - 1
            add(pos)
            continue
        if nws > 0:
            pos += nws
            add(pos)
            continue
        pos += 1
        add(pos)
    return pieces


_SLOW_CUSTOM = {"newlines": split_newlines, "afmoe": split_afmoe_digits, "kimi_k2": split_kimi_k2}


# --- the std::regex fallback -------------------------------------------------------------------------

_UCAT_ENUM = {  # k_ucat_enum: pattern -> category flag
    "\\p{N}": NUMBER, "\\p{L}": LETTER, "\\p{P}": PUNCTUATION, "\\p{M}": ACCENT_MARK, "\\p{S}": SYMBOL,
    "\\p{Lu}": LETTER, "\\p{Ll}": LETTER, "\\p{Lt}": LETTER, "\\p{Lm}": LETTER, "\\p{Lo}": LETTER,
}
_UCAT_CPT = {NUMBER: 0xD1, LETTER: 0xD2, PUNCTUATION: 0xD3, ACCENT_MARK: 0xD4, SYMBOL: 0xD5}
_UCAT_MAP = {  # k_ucat_map: the ASCII members of each category, as raw regex text
    NUMBER: "\x30-\x39",
    LETTER: "\x41-\x5A\x61-\x7A",
    PUNCTUATION: "\x21-\x23\x25-\x2A\x2C-\x2F\x3A-\x3B\x3F-\x40\\\x5B-\\\x5D\x5F\\\x7B\\\x7D",
    ACCENT_MARK: "",
    SYMBOL: "\\\x24\\\x2B\x3C-\x3E\x5E\x60\\\x7C\\\x7E",
}


class _CollapseTable(dict):
    """str.translate table: codepoint -> its collapsed one-byte stand-in (filled on demand)."""

    def __missing__(self, cp: int) -> str:
        if cp < 128:
            c = chr(cp)
        else:
            f = cpt_flags(cp)
            if f & WHITESPACE:
                c = "\x0b"
            else:
                c = chr(_UCAT_CPT.get(f & MASK_CATEGORIES, 0xD0))
        self[cp] = c
        return c


_COLLAPSE = _CollapseTable()
_WIDE_WS = {cp: "\x0b" for cp in WHITESPACE_SET if cp > 0x7F}


def collapse(text: str) -> str:
    """The "collapsed" text of unicode_regex_split: one char (U+0000..U+00FF) per codepoint."""
    return text.translate(_COLLAPSE)


def widen(text: str) -> str:
    """The wregex input of unicode_regex_split: codepoints, non-ASCII whitespace replaced by 0x0B."""
    return text.translate(_WIDE_WS)


def uses_categories(regex_expr: str) -> bool:
    return any(u in regex_expr for u in _UCAT_ENUM)


def collapse_regex(regex_expr: str) -> str:
    """The collapsed pattern of unicode_regex_split, character for character (incl. its bracket tracking)."""
    if any(ord(c) >= 128 for c in regex_expr):
        raise ValueError("Regex includes both unicode categories and non-ASCII characters - not supported")
    out = []
    inside = False
    i, n = 0, len(regex_expr)
    while i < n:
        c = regex_expr[i]
        if c == "[" and (i == 0 or regex_expr[i - 1] != "\\"):
            out.append("[")
            inside = True
            i += 1
            continue
        if inside and c == "]" and regex_expr[i - 1] != "\\":
            out.append("]")
            inside = False
            i += 1
            continue
        if c == "\\" and i + 3 < n and regex_expr[i + 1] == "p" and regex_expr[i + 2] == "{":
            close = regex_expr.find("}", i + 3)
            if close != -1 and close <= i + 10:
                pat = regex_expr[i : close + 1]
                if pat in _UCAT_ENUM:
                    cat = _UCAT_ENUM[pat]
                    out.append(("" if inside else "[") + chr(_UCAT_CPT[cat]) + _UCAT_MAP[cat] + ("" if inside else "]"))
                    i = close + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)


# ECMAScript classes under the "C" locale, as members of a Python character class
_ECMA_SPACE = "\\t\\n\\x0b\\x0c\\r "
_ECMA_DIGIT = "0-9"
_ECMA_WORD = "0-9A-Za-z_"
_ECMA_CLASSES = {"s": _ECMA_SPACE, "d": _ECMA_DIGIT, "w": _ECMA_WORD}  # \s \d \w (upper case: the complement)
_ECMA_NAMED = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v", "0": "\0"}  # \n ... \0


def ecma_to_python(pattern: str) -> str:
    """Translate an ECMAScript (std::regex) pattern to Python `re` syntax with the same meaning.

    Handles what llama.cpp's pre-tokenizer patterns use: classes with ranges and escapes, groups,
    lookaheads, quantifiers, alternation, `\\s \\S \\d \\D \\w \\W`, and `$` (end of input). Anything whose
    semantics we have not pinned down (`\\b`, back-references, lookbehind) raises ValueError."""
    out: list[str] = []
    i, n = 0, len(pattern)

    def atom_escape(j: int) -> tuple[str, int, str | None]:
        """Escape at pattern[j] == '\\' inside a class -> (kind, next index, char or class body)."""
        c = pattern[j + 1] if j + 1 < n else ""
        if c in _ECMA_CLASSES:
            return "class", j + 2, _ECMA_CLASSES[c]
        if c in "SDWbB" or c.isdigit() and c != "0":
            raise ValueError(f"unsupported escape \\{c} inside a class in {pattern!r}")
        if c == "x":
            return "char", j + 4, chr(int(pattern[j + 2 : j + 4], 16))
        if c == "u":
            return "char", j + 6, chr(int(pattern[j + 2 : j + 6], 16))
        if c in _ECMA_NAMED:
            return "char", j + 2, _ECMA_NAMED[c]
        return "char", j + 2, c

    while i < n:
        c = pattern[i]
        if c == "[":
            j = i + 1
            neg = j < n and pattern[j] == "^"
            if neg:
                j += 1
            body: list[str] = []
            while j < n and pattern[j] != "]":
                if pattern[j] == "\\":
                    kind, j, val = atom_escape(j)
                else:
                    kind, val = "char", pattern[j]
                    j += 1
                if kind == "class":
                    body.append(val)
                    continue
                # a range?
                if j + 1 < n and pattern[j] == "-" and pattern[j + 1] != "]":
                    if pattern[j + 1] == "\\":
                        kind2, j2, val2 = atom_escape(j + 1)
                        if kind2 == "class":
                            raise ValueError(f"class escape as range end in {pattern!r}")
                    else:
                        val2, j2 = pattern[j + 1], j + 2
                    if ord(val2) < ord(val):
                        raise ValueError(f"bad range {val!r}-{val2!r} in {pattern!r}")
                    body.append(f"{_esc(ord(val))}-{_esc(ord(val2))}")
                    j = j2
                else:
                    body.append(_esc(ord(val)))
            if j >= n or not body:
                raise ValueError(f"unterminated or empty class in {pattern!r}")
            out.append("[" + ("^" if neg else "") + "".join(body) + "]")
            i = j + 1
            continue
        if c == "\\":
            d = pattern[i + 1] if i + 1 < n else ""
            if d.lower() in _ECMA_CLASSES:
                out.append(f"[{'^' if d.isupper() else ''}{_ECMA_CLASSES[d.lower()]}]")
            elif d in "bB" or d.isdigit() and d != "0" or d == "":
                raise ValueError(f"unsupported escape \\{d} in {pattern!r}")
            elif d == "x":
                out.append(_esc(int(pattern[i + 2 : i + 4], 16)))
                i += 4
                continue
            elif d == "u":
                out.append(_esc(int(pattern[i + 2 : i + 6], 16)))
                i += 6
                continue
            elif d in _ECMA_NAMED:
                out.append(_esc(ord(_ECMA_NAMED[d])))
            else:
                out.append(re.escape(d))
            i += 2
            continue
        if c == "$":
            out.append("\\Z")
        elif c == "(" and pattern.startswith("(?<", i):
            raise ValueError(f"lookbehind is not ECMAScript (std::regex) syntax: {pattern!r}")
        elif c in "^.*+?(){}|":
            out.append(c)
        else:
            out.append(_esc(ord(c)) if ord(c) >= 0x80 or c in " #&~-" or c.isspace() else c)
        i += 1
    py = "".join(out)
    re.compile(py)  # validate now: a pattern we cannot compile is a load-time error
    return py


class RegexSplitter:
    """unicode_regex_split for one list of regex expressions (one pre-tokenizer), compiled once."""

    def __init__(self, regex_exprs: list[str]):
        self.steps: list[tuple[str, object]] = []  # ("custom", kind) | ("collapsed" | "wide", pattern)
        for expr in regex_exprs:
            kind = _CUSTOM_KIND.get(expr)
            if kind is not None:
                if kind in _FAST_KINDS:
                    custom_pattern(kind)
                self.steps.append(("custom", kind))
            elif uses_categories(expr):
                self.steps.append(("collapsed", re.compile(ecma_to_python(collapse_regex(expr)))))
            else:
                self.steps.append(("wide", re.compile(ecma_to_python(expr))))
        self.need_collapse = any(k == "collapsed" for k, _ in self.steps)
        self.need_wide = any(k == "wide" for k, _ in self.steps)

    def split(self, text: str) -> list[str]:
        """The words of `text` (codepoints, not yet byte-encoded)."""
        if not text:
            return []
        steps = self.steps
        if len(steps) == 1 and steps[0][0] == "custom":
            return custom_split(steps[0][1], text)  # the hot path: one custom splitter
        collapsed = collapse(text) if self.need_collapse else None
        wide = widen(text) if self.need_wide else None
        bounds = [(0, len(text))]  # (start, end) codepoint ranges
        for kind, pat in steps:
            src = text if kind == "custom" else collapsed if kind == "collapsed" else wide
            new: list[tuple[int, int]] = []
            for s, e in bounds:
                piece = src[s:e]
                if kind == "custom":
                    pos = s
                    for w in custom_split(pat, piece):
                        new.append((pos, pos + len(w)))
                        pos += len(w)
                    continue
                # unicode_regex_split_stl: matches plus the unmatched gaps between them
                last = 0
                for m in pat.finditer(piece):
                    a, b = m.span()
                    if a > last:
                        new.append((s + last, s + a))
                    new.append((s + a, s + b))
                    last = b
                if last < e - s:
                    new.append((s + last, e))
            bounds = new
        return [text[s:e] for s, e in bounds]
