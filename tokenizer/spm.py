"""SentencePiece-style tokenization of one text fragment: llama.cpp's llm_tokenizer_spm_session.

The fragment (bytes, spaces already escaped as U+2581) is split into UTF-8 characters (by lead-byte
length, as unicode_len_utf8), then the adjacent pair whose concatenation is a token with the highest
score is merged first (ties: the leftmost), repeatedly. Symbols that end up not being tokens are
resegmented along the merges that built them, and whatever is left falls back to <0xXX> byte tokens.
"""

from __future__ import annotations

import heapq

from .unicode import utf8_len


def byte_to_token(token_to_id: dict[bytes, int], b: int) -> int:
    """llama_vocab::byte_to_token for SPM: "<0xXX>", else the single byte as a token."""
    tid = token_to_id.get(b"<0x%02X>" % b)
    if tid is None:
        tid = token_to_id.get(bytes([b]))
    if tid is None:
        from .vocab import VocabError

        raise VocabError(f"the vocabulary has no byte token for 0x{b:02X} (llama.cpp would abort here)")
    return tid


def spm_tokenize(text: bytes, token_to_id: dict[bytes, int], scores, n_tokens: int, out: list[int]) -> None:
    """Append the tokens of `text` to out. scores: (n_tokens,) float32 token scores."""
    # symbols: [start, length, prev, next] over text
    starts: list[int] = []
    lens: list[int] = []
    offs, size = 0, len(text)
    while offs < size:
        n = min(utf8_len(text[offs]), size - offs)
        starts.append(offs)
        lens.append(n)
        offs += n
    ns = len(starts)
    if ns == 0:
        return
    prev = list(range(-1, ns - 1))
    nxt = list(range(1, ns + 1))
    nxt[-1] = -1

    heap: list[tuple[float, int, int, int]] = []  # (-score, left, right, size)
    rev_merge: dict[bytes, tuple[int, int]] = {}

    def try_add(left: int, right: int) -> None:
        if left == -1 or right == -1:
            return
        piece = text[starts[left] : starts[left] + lens[left] + lens[right]]
        tid = token_to_id.get(piece)
        if tid is None or tid >= n_tokens:
            return
        # llm_bigram_spm::comparator: higher score first, then smaller left index
        heapq.heappush(heap, (-float(scores[tid]), left, right, len(piece)))
        rev_merge[piece] = (left, right)

    for i in range(1, ns):
        try_add(i - 1, i)

    while heap:
        _, left, right, size_ = heapq.heappop(heap)
        if lens[left] == 0 or lens[right] == 0 or lens[left] + lens[right] != size_:
            continue  # one of the symbols already got merged
        lens[left] += lens[right]
        lens[right] = 0
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prev[nxt[right]] = left
        try_add(prev[left], left)
        try_add(left, nxt[left])

    def resegment(i: int) -> None:
        piece = text[starts[i] : starts[i] + lens[i]]
        tid = token_to_id.get(piece)
        if tid is not None:
            out.append(tid)
            return
        p = rev_merge.get(piece)
        if p is None:
            for b in piece:
                out.append(byte_to_token(token_to_id, b))
            return
        resegment(p[0])
        resegment(p[1])

    i = 0
    while i != -1:
        resegment(i)
        i = nxt[i]
