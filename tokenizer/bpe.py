"""Byte-level BPE of one pre-tokenized word: llama.cpp's llm_tokenizer_bpe_session::tokenize.

A word is byte-encoded (each UTF-8 byte becomes its GPT-2 codepoint) and starts as one symbol per
codepoint; the adjacent pair with the lowest merge rank is merged, ties going to the leftmost pair,
until no pair is in the merge table. llama.cpp drives this with a priority queue keyed by
(rank, left index) and lazily discards stale entries; since every adjacent pair is always in the
queue, that is the same as repeatedly merging the minimal (rank, position) pair, which `merge_word`
does directly (`merge_word_queue`, a literal port, serves long words and is the test oracle).

Symbols are handled as the UTF-8 bytes of their GPT-2 codepoints, so token texts and merge lines are
looked up exactly as stored in the GGUF file, with no decoding. Final symbols are looked up as tokens;
one that is not a token falls back to those of its single bytes that are tokens (as in llama.cpp).
"""

from __future__ import annotations

import heapq

from .unicode import BYTE_TO_UNICODE, utf8_encode

# byte -> UTF-8 bytes of its GPT-2 codepoint (one initial symbol)
BYTE_SYMBOL: tuple[bytes, ...] = tuple(c.encode("utf-8") for c in BYTE_TO_UNICODE)


def build_ranks(merges: list[bytes]) -> dict[bytes, int]:
    """bpe_ranks keyed by the merge line b"left right" itself (first occurrence wins, like emplace).

    A lookup for the pair (left, right) is `left + b" " + right`. Symbols never contain a space (byte
    encoding maps it to U+0120), and llama.cpp splits a line at its first space after position 0, so
    the two spellings are equivalent."""
    n = len(merges)
    return dict(zip(reversed(merges), range(n - 1, -1, -1)))


def word_symbols(word: str) -> list[bytes]:
    """The initial symbols of a word: its UTF-8 bytes, byte-encoded one by one."""
    return [BYTE_SYMBOL[b] for b in utf8_encode(word)]


_NO_RANK = 1 << 62


def merge_word(symbols: list[bytes], ranks: dict[bytes, int]) -> list[bytes]:
    """Merge the lowest-rank adjacent pair (leftmost on ties) until none is left. Mutates symbols.

    pair[i] holds the rank of (symbols[i], symbols[i+1]); a merge only changes its two neighbours."""
    if len(symbols) < 2:
        return symbols
    get = ranks.get
    pair = [get(a + b" " + b, _NO_RANK) for a, b in zip(symbols, symbols[1:])]
    while pair:
        best = min(pair)
        if best == _NO_RANK:
            break
        i = pair.index(best)  # the leftmost of the lowest rank
        symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
        del pair[i]
        if i > 0:
            pair[i - 1] = get(symbols[i - 1] + b" " + symbols[i], _NO_RANK)
        if i < len(pair):
            pair[i] = get(symbols[i] + b" " + symbols[i + 1], _NO_RANK)
    return symbols


def merge_word_queue(symbols: list[bytes], ranks: dict[bytes, int]) -> list[bytes]:
    """The same merge, as llama.cpp runs it: a heap of (rank, left) with stale entries skipped."""
    n = len(symbols)
    text = list(symbols)
    prev = list(range(-1, n - 1))
    nxt = list(range(1, n + 1))
    if n:
        nxt[-1] = -1
    heap: list[tuple[int, int, int, bytes]] = []

    def add(left: int, right: int) -> None:
        if left == -1 or right == -1:
            return
        r = ranks.get(text[left] + b" " + text[right])
        if r is not None:
            heapq.heappush(heap, (r, left, right, text[left] + text[right]))

    for i in range(1, n):
        add(i - 1, i)
    while heap:
        _, left, right, joined = heapq.heappop(heap)
        if not text[left] or not text[right] or text[left] + text[right] != joined:
            continue  # outdated bigram
        text[left] = joined
        text[right] = b""
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prev[nxt[right]] = left
        add(prev[left], left)
        add(left, nxt[left])
    return [t for t in text if t]


LONG_WORD = 64  # beyond this many symbols the quadratic scan loses to the heap


# the token text an unknown symbol's byte falls back to: the byte itself (std::string(1, byte)), or, for
# SPM-style BPE (byte_encode off, gemma4), its <0xXX> token
BYTE_TOKENS = tuple(bytes((b,)) for b in range(256))
HEX_BYTE_TOKENS = tuple(b"<0x%02X>" % b for b in range(256))


def symbols_to_ids(symbols: list[bytes], token_to_id: dict[bytes, int], out: list[int],
                   byte_tokens: tuple[bytes, ...] = BYTE_TOKENS) -> None:
    """Final symbols -> ids; an unknown symbol contributes the tokens of its bytes (`byte_tokens[b]`), if any."""
    for s in symbols:
        tid = token_to_id.get(s)
        if tid is not None:
            out.append(tid)
            continue
        for b in s:
            tid = token_to_id.get(byte_tokens[b])
            if tid is not None:
                out.append(tid)
