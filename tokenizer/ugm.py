"""Unigram (T5-style SentencePiece) tokenization: llama.cpp's llm_tokenizer_ugm / llm_tokenizer_ugm_session.

normalize: the fragment is rewritten prefix by prefix: a user-defined token stays as it is; otherwise the
longest prefix found in the precompiled charsmap (SentencePiece's XOR-compressed compact double array,
XCDA, followed by NUL-terminated replacement strings) is replaced; otherwise one UTF-8 character is kept
(an invalid byte becomes U+FFFD). Spaces are then written as U+2581 (escape_whitespaces), one is put in
front (add_space_prefix), and with remove_extra_whitespaces every run of spaces collapses into one
before the next non-space and trailing spaces vanish.

tokenize: Viterbi over byte offsets of the normalized text. From each codepoint boundary every token
(normal, user-defined or unused: the trie of the file's token types) that starts there challenges the best
path ending where it ends, with score = path score (double) + token score (0 for user-defined tokens);
a codepoint no single token covers may be the unknown token at min(normal score) - 10 (float). The best
path is read back from the end, runs of unknown tokens merged into one.
"""

from __future__ import annotations

import struct

import numpy as np

from .vocab import ATTR_NORMAL, ATTR_UNUSED, ATTR_USER_DEFINED, _TYPE_TO_ATTR

_ESCAPED_SPACE = "\u2581".encode()
_NEG_INF = -float("inf")
_DBL_MIN_SUM = -1.7976931348623157e308  # -DBL_MAX, the initial score of every position


def _utf8_len(lead: int) -> int:
    return (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[lead >> 4]


def _valid_utf8_char_len(data: bytes, off: int) -> int:
    """unicode_cpt_from_utf8's length at `off`, or 0 where it throws."""
    b0 = data[off]
    n = len(data)
    if b0 < 0x80:
        return 1
    if not b0 & 0x40:
        return 0
    need = 2 if not b0 & 0x20 else 3 if not b0 & 0x10 else 4 if not b0 & 0x08 else 0
    if need == 0 or off + need - 1 >= n:
        return 0
    for k in range(1, need):
        if data[off + k] & 0xC0 != 0x80:
            return 0
    return need


class UgmTokenizer:
    """llm_tokenizer_ugm: the token matchers, scores and charsmap of one vocabulary."""

    def __init__(self, vocab):
        self.vocab = vocab
        # llama.cpp builds this at init_tokenizer, before the load-time re-typing: the file's token types
        file_attrs = _TYPE_TO_ATTR[np.clip(vocab.types, 0, 6)]
        file_attrs = np.where((vocab.types >= 0) & (vocab.types <= 6), file_attrs, 0)
        if not vocab.types.any():  # no tokenizer.ggml.token_type: every token NORMAL
            file_attrs = np.full(vocab.n_tokens, ATTR_NORMAL, np.int32)
        normal = (file_attrs & ATTR_NORMAL) != 0
        user = (file_attrs & ATTR_USER_DEFINED) != 0
        matchable = normal | user | ((file_attrs & ATTR_UNUSED) != 0)
        scores = vocab.scores
        min_score = np.float32(scores[normal].min()) if normal.any() else np.float32(3.4028235e38)
        self.unknown_token_score = float(np.float32(min_score - np.float32(10.0)))
        texts = vocab.texts
        # the token trie as a dict (every token's text -> id); the longest token per first byte bounds the search
        self.matcher: dict[bytes, int] = {}
        self.max_len = [0] * 256
        for i in np.nonzero(matchable)[0].tolist():
            t = texts[i]
            self.matcher.setdefault(t, i)  # naive_trie::insert keeps the first value for a text
            if len(t) > self.max_len[t[0]]:
                self.max_len[t[0]] = len(t)
        self.user_defined = sorted({texts[i] for i in np.nonzero(user)[0].tolist()}, key=len, reverse=True)
        self.scores = scores.astype(np.float64).tolist()
        cm = vocab.precompiled_charsmap
        self.xcda: tuple = ()
        self.replacements = b""
        if cm:
            blob = struct.unpack_from("<I", cm, 0)[0]
            self.xcda = struct.unpack_from(f"<{blob // 4}I", cm, 4)
            self.replacements = cm[4 + blob :]
        self._norm_cache: dict[bytes, tuple[bytes, int]] = {}

    # --- normalization -----------------------------------------------------------------------------

    def _normalize_prefix(self, data: bytes, off: int) -> tuple[bytes, int]:
        """(replacement, bytes consumed) for the input at off (normalize_prefix)."""
        for t in self.user_defined:  # longest user-defined token that is a prefix
            if data.startswith(t, off):
                return t, len(t)
        longest_len = 0
        longest_off = 0
        xcda = self.xcda
        if xcda:
            size = len(xcda)

            def node(i: int) -> int:
                if i >= size:
                    raise IndexError("Index out of array bounds in XCDA array!")
                return xcda[i]

            def base(i: int) -> int:
                p = node(i)
                return (p >> 10) << ((p & (1 << 9)) >> 6)

            idx = base(0)
            for k in range(off, len(data)):
                c = data[k]
                if c == 0:
                    break
                idx ^= c
                p = node(idx)
                if p & ((1 << 31) | 0xFF) != c:  # lcheck
                    break
                is_leaf = (p >> 8) & 1
                idx ^= base(idx)
                if is_leaf:
                    longest_len = k - off + 1
                    longest_off = node(idx) & ((1 << 31) - 1)
        if longest_len > 0:
            repl = self.replacements
            if longest_off >= len(repl):
                raise IndexError("Index out of array bounds in precompiled charsmap!")
            end = repl.find(b"\0", longest_off)
            if end < 0:
                raise IndexError("Unterminated string in precompiled charsmap!")
            return repl[longest_off:end], longest_len
        n = _valid_utf8_char_len(data, off)
        if n:
            return data[off : off + n], n
        return "\ufffd".encode(), 1

    def normalize(self, data: bytes) -> bytes:
        v = self.vocab
        space = _ESCAPED_SPACE if v.escape_whitespaces else b" "
        prepend = not v.treat_whitespace_as_suffix and v.add_space_prefix
        append = v.treat_whitespace_as_suffix and v.add_space_prefix
        merge = v.remove_extra_whitespaces
        out = bytearray()
        space_prepended = False
        in_word = False
        off, n = 0, len(data)
        while off < n:
            repl, used = self._normalize_prefix(data, off)
            for c in repl:
                if c != 0x20:
                    if not in_word:
                        in_word = True
                        if (prepend and not space_prepended) or merge:
                            out += space
                            space_prepended = True
                    out.append(c)
                else:
                    in_word = False
                    if not merge:
                        out += space
            off += used
        if append:
            out += space
        return bytes(out)

    # --- Viterbi -----------------------------------------------------------------------------------

    def tokenize(self, data: bytes, out: list[int]) -> None:
        """Append the tokens of one fragment (raw bytes)."""
        v = self.vocab
        norm = self.normalize(data)
        n = len(norm)
        if n == 0:
            return
        unk = v.unk_id
        best_id = [unk] * (n + 1)
        best_from = [0] * (n + 1)
        best_score = [_DBL_MIN_SUM] * (n + 1)
        best_score[0] = 0.0
        matcher, max_len, scores = self.matcher, self.max_len, self.scores
        attrs = v.attrs
        unk_score = self.unknown_token_score
        off = 0
        while off < n:
            cu = min(_utf8_len(norm[off]), n - off)
            cur = best_score[off]
            single = False
            for end in range(off + 1, min(n, off + max_len[norm[off]]) + 1):
                tid = matcher.get(norm[off:end])
                if tid is None:
                    continue
                if end - off == cu:
                    single = True
                score = cur + (0.0 if attrs[tid] & ATTR_USER_DEFINED else scores[tid])
                if score > best_score[end]:
                    best_id[end], best_from[end], best_score[end] = tid, off, score
            if not single:
                end = off + cu
                score = cur + unk_score
                if score > best_score[end]:
                    best_id[end], best_from[end], best_score[end] = unk, off, score
            off += cu
        ids: list[int] = []
        prev_unknown = False
        pos = n
        while True:
            tid = best_id[pos]
            is_unknown = tid == unk
            if not (prev_unknown and is_unknown):
                ids.append(tid)
            if best_from[pos] == 0:
                break
            prev_unknown = is_unknown
            pos = best_from[pos]
        ids.reverse()
        out.extend(ids)
