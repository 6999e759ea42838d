"""llama_tokenize / llama_token_to_piece / llama_detokenize over a loaded Vocab (src/llama-vocab.cpp).

encode(text, add_special, parse_special):
  1. tokenizer_st_partition: special tokens (longest first) are cut out of the raw text; control and
     unknown tokens only with parse_special, user-defined tokens always; a token with LSTRIP/RSTRIP
     eats the ASCII whitespace (C isspace) on that side of it.
  2. each remaining text fragment goes through the vocabulary type's session: SPM (the leading-space
     rule and U+2581 escaping), BPE (pre-tokenizer split, byte encoding or, for gemma4-style vocabularies,
     U+2581 escaping and raw UTF-8 symbols, merges), WPM (BERT WordPiece), UGM (T5 unigram) or RWKV;
  3. BOS/EOS (WPM: CLS/SEP) around it when add_special and the vocabulary says so.

BPE and WPM words are cached (word -> ids), which makes repeated text cheap; the cache is bounded.
"""

from __future__ import annotations

import codecs
import re
from itertools import chain

from .bpe import (BYTE_TOKENS, HEX_BYTE_TOKENS, LONG_WORD, build_ranks, merge_word, merge_word_queue, symbols_to_ids,
                  word_symbols)
from .spm import spm_tokenize
from .unicode import WHITESPACE, RegexSplitter, byte_decode, cpt_flags, tolower, utf8_decode_llama, utf8_encode
from .vocab import (
    ATTR_BYTE,
    ATTR_CONTROL,
    ATTR_LSTRIP,
    ATTR_NORMAL,
    ATTR_RSTRIP,
    ATTR_UNKNOWN,
    ATTR_USER_DEFINED,
    NULL,
    Vocab,
    VocabError,
)

_C_SPACE = frozenset(b" \t\n\v\f\r")  # isspace() in the C locale
_C_SPACE_STR = " \t\n\v\f\r"
_ESCAPED_SPACE = "\u2581".encode()
_CACHE_MAX = 1 << 18


def _per_byte_replace(err: UnicodeDecodeError):
    """Decode error handler: one U+FFFD per invalid byte (how the fixtures and terminals show them)."""
    return "\ufffd" * (err.end - err.start), err.end


codecs.register_error("synapse.perbyte", _per_byte_replace)


def decode_utf8_lossy(data: bytes) -> str:
    return data.decode("utf-8", "synapse.perbyte")


def _special(out: list[int], wanted: bool, token: int, missing: str) -> None:
    """Append a special token (BOS, EOS, SEP) when wanted; llama.cpp's error when the vocabulary has none."""
    if wanted:
        if token == NULL:
            raise VocabError(missing)
        out.append(token)


def _texts(fragments, out: list[int]):
    """The text fragments in order; the special-token ids between them go to out as they come."""
    for frag in fragments:
        if isinstance(frag, int):
            out.append(frag)
        else:
            yield frag


class Tokenizer:
    """A GGUF vocabulary's tokenizer (SPM, BPE, WPM, UGM or RWKV), bit-exact with llama.cpp."""

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self._piece_cache: dict[int, bytes] = {}
        self._word_cache: dict[str, tuple[int, ...]] = {}
        self._splitter: RegexSplitter | None = None
        self._ranks: dict[bytes, int] | None = None
        self._specials: dict[tuple[bool, bool], list] = {}
        self._special_finder: dict[tuple[bool, bool], _SpecialFinder | None] = {}
        self._session = None  # UGM / RWKV: the tokenizer object llama.cpp builds at load
        if vocab.is_bpe:
            try:
                self._splitter = RegexSplitter(list(vocab.pre_tokenizer.regexes))
            except ValueError as e:
                raise VocabError(f"pre-tokenizer {vocab.pre!r}: {e}") from None
        elif vocab.type == "ugm":
            from .ugm import UgmTokenizer

            self._session = UgmTokenizer(vocab)
        elif vocab.type == "rwkv":
            from .rwkv import RwkvTokenizer

            self._session = RwkvTokenizer(vocab)

    # --- encode ------------------------------------------------------------------------------------

    def encode(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """llama_tokenize(vocab, text, add_special, parse_special). `text` may be str or raw bytes
        (bytes that are not valid UTF-8 are handled the way llama.cpp handles them)."""
        if isinstance(text, (bytes, bytearray, memoryview)):
            raw = bytes(text)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                return self._encode_domain(raw, add_special, parse_special)
        elif not isinstance(text, str):
            raise TypeError(f"text must be str or bytes, not {type(text).__name__}")
        return self._encode_domain(text, add_special, parse_special)

    def _encode_domain(self, text, add_special: bool, parse_special: bool) -> list[int]:
        v = self.vocab
        is_bytes = isinstance(text, bytes)
        fragments = self._partition(text, parse_special, is_bytes) if text else []
        out: list[int] = []
        if v.is_spm:
            is_prev_special = True
            _special(out, add_special and v.add_bos, v.bos_id, "add_bos is set but the vocabulary has no BOS token")
            t2i, scores, n = v.token_to_id, v.scores, v.n_tokens
            for frag in fragments:
                if isinstance(frag, int):
                    out.append(frag)
                    is_prev_special = True
                    continue
                raw = frag if is_bytes else utf8_encode(frag)
                if v.add_space_prefix and is_prev_special:
                    raw = b" " + raw
                spm_tokenize(raw.replace(b" ", _ESCAPED_SPACE), t2i, scores, n, out)
                is_prev_special = False
            _special(out, add_special and v.add_eos, v.eos_id, "add_eos is set but the vocabulary has no EOS token")
            return out
        if v.type == "wpm":
            from .wpm import wpm_tokenize

            _special(out, add_special, v.bos_id, "the vocabulary has no BOS (CLS) token")
            for frag in _texts(fragments, out):
                wpm_tokenize(frag, v.token_to_id, v.max_token_len, v.unk_id, v.lowercase, v.strip_accents,
                             self._word_cache, out)
            _special(out, add_special, v.sep_id, "the vocabulary has no SEP token")
            return out
        if v.type == "rwkv":
            for frag in _texts(fragments, out):
                self._session.tokenize(frag if is_bytes else utf8_encode(frag), out)
            return out
        # BPE and UGM
        _special(out, add_special and v.add_bos, v.bos_id, "add_bos is set but the vocabulary has no BOS token")
        for frag in _texts(fragments, out):
            if v.type == "ugm":
                self._session.tokenize(frag if is_bytes else utf8_encode(frag), out)
            else:
                self._bpe_fragment(utf8_decode_llama(frag) if is_bytes else frag, out)
        _special(out, add_special and v.add_eos, v.eos_id, "add_eos is set but the vocabulary has no EOS token")
        return out

    def _bpe_fragment(self, text: str, out: list[int]) -> None:
        v = self.vocab
        if v.escape_whitespaces:  # gemma4, sarvam-moe: llama_escape_whitespace on the fragment
            text = text.replace(" ", "\u2581")
        if v.model == "whitespace":  # llm_tokenizer_whitespace_session: BPE per whitespace-free segment
            seg: list[str] = []
            for ch in text:
                if cpt_flags(ord(ch)) & WHITESPACE:
                    if seg:
                        self._bpe_words("".join(seg), out)
                        seg = []
                else:
                    seg.append(chr(tolower(ord(ch))) if v.lowercase else ch)
            if seg:
                self._bpe_words("".join(seg), out)
            return
        self._bpe_words(text, out)

    def _bpe_words(self, text: str, out: list[int]) -> None:
        words = self._splitter.split(text)
        cache = self._word_cache
        new = set(words).difference(cache)
        if new:
            if len(cache) + len(new) > _CACHE_MAX:
                cache.clear()
                new = set(words)
            bpe_word = self._bpe_word
            for w in new:
                cache[w] = bpe_word(w)
        out.extend(chain.from_iterable(map(cache.__getitem__, words)))

    def _bpe_word(self, word: str) -> tuple[int, ...]:
        v = self.vocab
        t2i = v.token_to_id
        byte_encode = v.byte_encode
        symbols = word_symbols(word) if byte_encode else [utf8_encode(c) for c in word]
        if v.ignore_merges:
            tid = t2i.get(b"".join(symbols))
            if tid is not None:
                return (tid,)
        elif v.pre_tokenizer.type == "gemma4" and word and not word.strip("\n"):
            tid = t2i.get(b"".join(symbols))  # a run of newlines that is a token stays whole (gemma 4)
            if tid is not None:
                return (tid,)
        if self._ranks is None:
            self._ranks = build_ranks(v.merges)
        symbols = merge_word(symbols, self._ranks) if len(symbols) <= LONG_WORD else merge_word_queue(symbols, self._ranks)
        ids: list[int] = []
        symbols_to_ids(symbols, t2i, ids, BYTE_TOKENS if byte_encode else HEX_BYTE_TOKENS)
        return tuple(ids)

    # --- special-token partition (tokenizer_st_partition) -----------------------------------------

    def _special_list(self, parse_special: bool, is_bytes: bool) -> list[tuple]:
        """The specials tokenizer_st_partition tries, in cache order, as (text, id, lstrip, rstrip)."""
        key = (parse_special, is_bytes)
        lst = self._specials.get(key)
        if lst is None:
            v = self.vocab
            lst = []
            for tid in v.special_ids:
                attr = int(v.attrs[tid])
                if not parse_special and attr & (ATTR_CONTROL | ATTR_UNKNOWN):
                    continue
                t = v.texts[tid]
                lst.append((t if is_bytes else t.decode("utf-8", "surrogateescape"), tid,
                            bool(attr & ATTR_LSTRIP), bool(attr & ATTR_RSTRIP)))
            self._specials[key] = lst
            self._special_finder[key] = _SpecialFinder([s[0] for s in lst], is_bytes) if lst else None
        return lst

    def _partition(self, text, parse_special: bool, is_bytes: bool) -> list:
        """Fragments in order: raw text pieces (str/bytes) and special token ids (int)."""
        specials = self._special_list(parse_special, is_bytes)
        if not specials:
            return [text]
        present = self._special_finder[(parse_special, is_bytes)].present(text)
        if not present:
            return [text]
        space = _C_SPACE if is_bytes else _C_SPACE_STR
        # fragments: (text offset, length) for raw text, or the id
        frags: list = [(0, len(text))]
        for stext, tid, lstrip, rstrip in specials:
            if stext not in present:
                continue
            new: list = []
            for frag in frags:
                if isinstance(frag, int):
                    new.append(frag)
                    continue
                base, length = frag
                end = base + length
                while True:
                    match = text.find(stext, base, end)
                    if match < 0:
                        new.append((base, end - base))
                        break
                    if match > base:
                        left_len = match - base
                        if lstrip:
                            while left_len > 0 and text[base + left_len - 1] in space:
                                left_len -= 1
                        if left_len > 0:
                            new.append((base, left_len))
                    new.append(tid)
                    right = match + len(stext)
                    if right < end:
                        if rstrip:
                            while right < end and text[right] in space:
                                right += 1
                        base = right
                        if base >= end:
                            break
                    else:
                        break
            frags = new
        return [f if isinstance(f, int) else text[f[0] : f[0] + f[1]] for f in frags if isinstance(f, int) or f[1] > 0]

    # --- pieces and detokenization --------------------------------------------------------------------

    def token_to_piece(self, token_id: int, special: bool = True, lstrip: int = 0) -> bytes:
        """llama_token_to_piece(vocab, id, buf, size, lstrip, special) as bytes."""
        v = self.vocab
        if not 0 <= token_id < v.n_tokens:
            raise ValueError(f"token id {token_id} out of range [0, {v.n_tokens})")
        attr = int(v.attrs[token_id])
        if not special and attr & (ATTR_UNKNOWN | ATTR_CONTROL):
            return b""
        piece = self._piece_cache.get(token_id)
        if piece is None:
            piece = self._piece(token_id, attr)
            self._piece_cache[token_id] = piece
        if lstrip:
            k = 0
            while k < lstrip and k < len(piece) and piece[k] == 0x20:
                k += 1
            piece = piece[k:]
        return piece

    def _piece(self, token_id: int, attr: int) -> bytes:
        """The cached piece (special=true), computed as token_to_piece does without the cache."""
        v = self.vocab
        text = v.texts[token_id]
        if attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED):
            return text
        if v.type == "rwkv":  # every token: its unescaped text
            from .rwkv import unescape_rwkv_token

            return unescape_rwkv_token(text)
        if attr & ATTR_NORMAL:
            if not v.is_bpe or v.escape_whitespaces:
                return text.replace(_ESCAPED_SPACE, b" ")
            return byte_decode(text.decode("utf-8", "surrogateescape"))
        if attr & ATTR_BYTE:
            # token_to_byte: strtol(text.substr(3, 2), 16), i.e. the leading hex digits of those two chars
            digits = re.match(rb"[0-9A-Fa-f]*", text[3:5]).group()
            return bytes([int(digits, 16) if digits else 0])
        return b""

    def detokenize_bytes(self, ids, remove_special: bool = False, unparse_special: bool = False) -> bytes:
        """llama_detokenize(vocab, ids, ..., remove_special, unparse_special) as raw bytes."""
        v = self.vocab
        ids = list(ids)
        remove_space = v.add_space_prefix
        if remove_special and v.add_bos and ids and ids[0] == v.bos_id:
            remove_space = False
            ids = ids[1:]
        if remove_special and v.add_eos and ids and ids[-1] == v.eos_id:
            ids = ids[:-1]
        parts = []
        for tid in ids:
            parts.append(self.token_to_piece(tid, unparse_special, 1 if remove_space else 0))
            remove_space = False
        text = b"".join(parts)
        if v.clean_spaces and text:
            text = _clean_spaces(bytearray(text))
        return text

    def detokenize(self, ids, remove_special: bool = False, unparse_special: bool = False) -> str:
        """llama_detokenize as str; bytes that are not valid UTF-8 become one U+FFFD each."""
        return decode_utf8_lossy(self.detokenize_bytes(ids, remove_special, unparse_special))

    @property
    def linefeed_id(self) -> int:
        """llama.cpp's linefeed_id: the byte token of "\\n" (SPM), else the first token of "\\n"."""
        v = self.vocab
        if v.is_spm:
            from .spm import byte_to_token

            try:
                return byte_to_token(v.token_to_id, 0x0A)
            except VocabError:
                return v.pad_id
        if v.type == "wpm":
            return v.pad_id
        ids = self.encode("\n", False, False)
        return ids[0] if ids else v.pad_id

    def streamer(self, special: bool = False) -> "Streamer":
        """Incremental detokenizer for generation: push(id) -> newly completed text."""
        return Streamer(self, special)


class _SpecialFinder:
    """Which special texts occur anywhere in a text, without scanning it once per special token.

    Candidate positions are found with one character-class search on the specials' first characters;
    at each, only the specials sharing the next two characters are compared."""

    def __init__(self, texts: list, is_bytes: bool):
        self.short = [t for t in texts if len(t) < 2]
        self.by_prefix: dict = {}
        for t in texts:
            if len(t) >= 2:
                self.by_prefix.setdefault(t[:2], []).append(t)
        firsts = sorted({t[:1] for t in texts if len(t) >= 2})
        if is_bytes:
            cls = b"".join(re.escape(c) for c in firsts)
            self.first = re.compile(b"[" + cls + b"]") if firsts else None
        else:
            cls = "".join(re.escape(c) for c in firsts)
            self.first = re.compile("[" + cls + "]") if firsts else None

    def present(self, text) -> set:
        found = {t for t in self.short if t in text}
        if self.first is not None:
            by_prefix = self.by_prefix
            for m in self.first.finditer(text):
                p = m.start()
                cands = by_prefix.get(text[p : p + 2])
                if cands:
                    for t in cands:
                        if t not in found and text.startswith(t, p):
                            found.add(t)
        return found


def _clean_spaces(t: bytearray) -> bytes:
    """The three in-place passes of llama_vocab::impl::detokenize for clean_up_tokenization_spaces."""
    # pass 1: " ?", " !", " .", " ,": drop the space
    total1 = len(t)
    total = 1
    for i in range(1, total1):
        x = t[i]
        if t[i - 1] == 0x20 and x in b"?!.,":
            total -= 1
        t[total] = x
        total += 1
    # pass 2: " ' " -> "'" (the next space is overwritten by NUL and skipped)
    total2 = total
    total = 1
    i = 1
    while i < total2:
        x = t[i]
        if x == 0x27 and i + 1 < total2 and t[i - 1] == 0x20 and t[i + 1] == 0x20:
            total -= 1
            i += 1
            t[i] = 0
        t[total] = x
        total += 1
        i += 1
    # pass 3: " 's", " 'm", " 're", " 've": drop the space
    total3 = total
    total = 1
    for i in range(1, total3):
        x = t[i]
        if t[i - 1] == 0x20 and x == 0x27 and i + 1 < total3:
            x1 = t[i + 1]
            if x1 in b"sm":
                total -= 1
            elif x1 not in b"td" and i + 2 < total3:
                x2 = t[i + 2]
                if (x1, x2) in ((0x72, 0x65), (0x76, 0x65)):
                    total -= 1
        t[total] = x
        total += 1
    return bytes(t[:total])


class Streamer:
    """Turns generated token ids into text as it becomes complete UTF-8.

    push(id) appends the token's piece (llama_token_to_piece with `special`) and returns the text that is
    now complete; a trailing partial multi-byte sequence is held back until its continuation bytes
    arrive. Bytes that can never become valid UTF-8 are emitted as U+FFFD, one per byte. flush() returns
    whatever is still held (as U+FFFD)."""

    def __init__(self, tok: Tokenizer, special: bool = False):
        self._tok = tok
        self._special = special
        self._buf = b""

    def push(self, token_id: int) -> str:
        self._buf += self._tok.token_to_piece(token_id, self._special)
        buf = self._buf
        keep = _incomplete_tail(buf)
        done, self._buf = buf[: len(buf) - keep], buf[len(buf) - keep :]
        return decode_utf8_lossy(done)

    def flush(self) -> str:
        rest, self._buf = self._buf, b""
        return decode_utf8_lossy(rest)


def _incomplete_tail(buf: bytes) -> int:
    """Length of a trailing sequence that is a valid but unfinished UTF-8 character (0..3)."""
    n = len(buf)
    for k in range(1, min(4, n + 1)):
        b = buf[n - k]
        if b & 0xC0 == 0x80:
            continue  # continuation byte: look further back for the lead
        need = 2 if 0xC2 <= b <= 0xDF else 3 if 0xE0 <= b <= 0xEF else 4 if 0xF0 <= b <= 0xF4 else 0
        if need > k:
            tail = buf[n - k :]
            try:  # a prefix is held only if some continuation can still complete it
                tail.decode("utf-8")
            except UnicodeDecodeError as e:
                if e.reason == "unexpected end of data":
                    return k
            return 0
        return 0
    return 0
