"""WordPiece (BERT) tokenization of one text fragment: llama.cpp's llm_tokenizer_wpm_session.

preprocess: the fragment's codepoints (lenient UTF-8 decoding), each replaced by the first codepoint of
its NFD decomposition when accents are stripped, are cut into words at whitespace; NUL, U+FFFD and control
characters are dropped, so are accent marks when stripping; every punctuation character, ASCII symbol and
CJK ideograph is a word of its own; the rest is lowercased (unicode_tolower) when asked.

tokenize: each word gets a U+2581 prefix (the converter stores word-initial WordPiece tokens as `▁word`
and continuations bare) and is cut greedily into the longest tokens from the left, comparing bytes; a word
with a position no token starts at becomes one UNK.
"""

from __future__ import annotations

from bisect import bisect_right

from . import unicode_data as _ud
from .unicode import ACCENT_MARK, CONTROL, PUNCTUATION, SYMBOL, WHITESPACE, cpt_flags, tolower, utf8_decode_llama

_PHANTOM_SPACE = "\u2581".encode()


def nfd_first(cp: int) -> int:
    """unicode_cpts_normalize_nfd for one codepoint: the first codepoint of its decomposition."""
    i = bisect_right(_ud.NFD_FIRST, cp) - 1
    if i >= 0 and _ud.NFD_FIRST[i] <= cp <= _ud.NFD_LAST[i]:
        return _ud.NFD_TO[i]
    return cp


def is_chinese_char(cp: int) -> bool:
    """llm_tokenizer_wpm_session::is_chinese_char (the 0x2B920 bound as llama.cpp has it)."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
            or 0x2B740 <= cp <= 0x2B81F or 0x2B920 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF
            or 0x2F800 <= cp <= 0x2FA1F)


def wpm_preprocess(text: str, lowercase: bool, strip_accents: bool) -> list[str]:
    """The words of one fragment (codepoints already decoded the llama.cpp way)."""
    words: list[list[str]] = [[]]
    for ch in text:
        cp = ord(ch)
        if strip_accents:
            cp = nfd_first(cp)
        flags = cpt_flags(cp)
        if flags & WHITESPACE:
            if words[-1]:
                words.append([])
            continue
        if cp == 0 or cp == 0xFFFD or flags & CONTROL:
            continue
        if strip_accents and flags & ACCENT_MARK:
            continue
        s = chr(tolower(cp) if lowercase else cp)
        if flags & PUNCTUATION or (cp < 0x7F and flags & SYMBOL) or is_chinese_char(cp):
            if words[-1]:
                words.append([])
            words[-1] = [s]
            words.append([])
        else:
            words[-1].append(s)
    return ["".join(w) for w in words if w]


def wpm_word(word: bytes, token_to_id: dict[bytes, int], max_token_len: int, unk_id: int) -> list[int]:
    """The tokens of one word (UTF-8, without the phantom space)."""
    w = _PHANTOM_SPACE + word
    n = len(w)
    out: list[int] = []
    i = 0
    while i < n:
        for j in range(min(n, i + max_token_len + 1), i, -1):
            tid = token_to_id.get(w[i:j])
            if tid is not None:
                out.append(tid)
                i = j
                break
        else:  # no token starts here: the whole word is unknown
            return [unk_id]
    return out if out else [unk_id]


def wpm_tokenize(text, token_to_id: dict[bytes, int], max_token_len: int, unk_id: int, lowercase: bool,
                 strip_accents: bool, cache: dict, out: list[int]) -> None:
    """Append the tokens of one fragment (str, or bytes decoded as llama.cpp decodes them)."""
    if isinstance(text, bytes):
        text = utf8_decode_llama(text)
    for word in wpm_preprocess(text, lowercase, strip_accents):
        ids = cache.get(word)
        if ids is None:
            ids = cache[word] = wpm_word(word.encode("utf-8", "surrogatepass"), token_to_id, max_token_len, unk_id)
        out.extend(ids)
