"""RWKV "world" tokenization: llama.cpp's llm_tokenizer_rwkv / llm_tokenizer_rwkv_session.

Token texts are stored escaped (`\\t \\n \\r \\xHH`, a backslash before any other character keeps it);
tokenization is greedy: at each byte the longest token (over the unescaped texts) that starts there, or
the UNK id when no token starts with that byte.
"""

from __future__ import annotations


def unescape_rwkv_token(escaped: bytes) -> bytes:
    """llama_unescape_rwkv_token, byte for byte (a hex digit above 'a' is read as c - 'a' + 10, others as c - '0')."""
    out = bytearray()
    escaping = False
    hex_left = 0
    acc = 0
    for c in escaped:
        if hex_left:
            acc = ((acc << 4) + ((c - 0x61 + 10) if c >= 0x61 else (c - 0x30))) & 0xFF
            hex_left -= 1
            if hex_left == 0:
                out.append(acc)
                acc = 0
            continue
        if escaping:
            if c == 0x74:
                out.append(0x09)
            elif c == 0x6E:
                out.append(0x0A)
            elif c == 0x72:
                out.append(0x0D)
            elif c == 0x78:
                hex_left = 2
            else:
                out.append(c)
            escaping = False
            continue
        if c == 0x5C:
            escaping = True
            continue
        out.append(c)
    return bytes(out)


class RwkvTokenizer:
    """llm_tokenizer_rwkv: the unescaped token texts (a trie in llama.cpp; a dict and lengths here)."""

    def __init__(self, vocab):
        self.vocab = vocab
        self.matcher: dict[bytes, int] = {}
        self.max_len = [0] * 256
        for i, t in enumerate(vocab.texts):
            u = unescape_rwkv_token(t)
            if not u:
                continue
            self.matcher.setdefault(u, i)
            self.max_len[u[0]] = max(self.max_len[u[0]], len(u))

    def tokenize(self, data: bytes, out: list[int]) -> None:
        matcher, max_len = self.matcher, self.max_len
        pos, n = 0, len(data)
        while pos < n:
            best = None
            for end in range(min(n, pos + max_len[data[pos]]), pos, -1):
                tid = matcher.get(data[pos:end])
                if tid is not None:
                    best = (tid, end)
                    break
            if best is None:
                if max_len[data[pos]] == 0:  # no token starts with this byte
                    out.append(self.vocab.unk_id)
                    pos += 1
                    continue
                # llama.cpp would emit token 0 and restart from offset 0 (a loop); refuse instead
                from .vocab import VocabError

                raise VocabError(f"RWKV vocabulary has no token for byte 0x{data[pos]:02x} at {pos}")
            out.append(best[0])
            pos = best[1]
