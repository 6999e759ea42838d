"""GBNF grammars: src/llama-grammar.cpp's parser and pushdown matcher, and the grammar sampler.

`parse_grammar(text, tokenize)` turns a GBNF text into rules (llama_grammar_parser); `Grammar` holds the rules
and the set of pushdown stacks (llama_grammar): `apply(cur)` sets the logit of every candidate the grammar cannot
continue with to -inf (llama_grammar_apply_impl), `accept(token)` advances the stacks over a sampled token's
text (llama_grammar_accept_impl). A rule is a list of (type, value) elements ending in END; a stack is a tuple of
element positions (rule id, index), the top last, as llama.cpp's vectors of element pointers.

The candidate check (llama_grammar_reject_candidates) walks every stack over every candidate's code points, one
code point a level. All candidates of one level are at the same depth of their text, so a level is a few numpy
operations over the candidates' code points at that depth instead of a loop over them.
"""

from __future__ import annotations

import numpy as np

from kernels.errors import SynapseError

# llama_gretype
END, ALT, RULE_REF, CHAR, CHAR_NOT, CHAR_RNG_UPPER, CHAR_ALT, CHAR_ANY, TOKEN, TOKEN_NOT = range(10)
MAX_REPETITION_THRESHOLD = 2000
UINT64_MAX = 2**64 - 1


class GrammarError(SynapseError):
    pass


# --- the parser (llama_grammar_parser) ---------------------------------------------------------------------------
# It reads the grammar's UTF-8 bytes as C does: src[i] == 0 is the end of the text.

def _decode_utf8_char(src: bytes, i: int) -> tuple[int, int]:
    """decode_utf8 (the parser's): one code point at i, assuming valid UTF-8 but stopping at the end."""
    first = src[i]
    n = (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[first >> 4]
    value = first & ((1 << (8 - n)) - 1)
    end, i = i + n, i + 1
    while i < end and src[i]:
        value = (value << 6) + (src[i] & 0x3F)
        i += 1
    return value, i


def _is_word_char(c: int) -> bool:
    return 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A or c == 0x2D or 0x30 <= c <= 0x39


def _at(src: bytes, i: int) -> str:
    """The rest of the text from i, as llama.cpp's messages quote it (cut at the line's end here)."""
    rest = src[i:].split(b"\0", 1)[0].decode("utf-8", "replace")
    return rest.splitlines()[0] if rest.strip() else repr(rest)


def _parse_hex(src: bytes, i: int, size: int) -> tuple[int, int]:
    value, end, start = 0, i + size, i
    while i < end and src[i]:
        c = src[i]
        if 0x61 <= c <= 0x66:
            value = (value << 4) + c - 0x61 + 10
        elif 0x41 <= c <= 0x46:
            value = (value << 4) + c - 0x41 + 10
        elif 0x30 <= c <= 0x39:
            value = (value << 4) + c - 0x30
        else:
            break
        i += 1
    if i != end:
        raise GrammarError(f"expecting {size} hex chars at {_at(src, start)}")
    return value, i


def _parse_space(src: bytes, i: int, newline_ok: bool) -> int:
    while src[i] in b" \t#" or (newline_ok and src[i] in b"\r\n"):
        if src[i] == 0x23:  # '#': a comment to the end of the line
            while src[i] and src[i] not in b"\r\n":
                i += 1
        else:
            i += 1
    return i


def _parse_name(src: bytes, i: int) -> int:
    start = i
    while _is_word_char(src[i]):
        i += 1
    if i == start:
        raise GrammarError(f"expecting name at {_at(src, start)}")
    return i


def _parse_int(src: bytes, i: int) -> int:
    start = i
    while 0x30 <= src[i] <= 0x39:
        i += 1
    if i == start:
        raise GrammarError(f"expecting integer at {_at(src, start)}")
    return i


_ESCAPES = {0x74: 0x09, 0x72: 0x0D, 0x6E: 0x0A, 0x5C: 0x5C, 0x22: 0x22, 0x5B: 0x5B, 0x5D: 0x5D, 0x2D: 0x2D}


def _parse_char(src: bytes, i: int) -> tuple[int, int]:
    if src[i] == 0x5C:  # backslash
        c = src[i + 1]
        if c == 0x78:
            return _parse_hex(src, i + 2, 2)
        if c == 0x75:
            return _parse_hex(src, i + 2, 4)
        if c == 0x55:
            return _parse_hex(src, i + 2, 8)
        if c in _ESCAPES:
            return _ESCAPES[c], i + 2
        raise GrammarError(f"unknown escape at {_at(src, i)}")
    if src[i]:
        return _decode_utf8_char(src, i)
    raise GrammarError("unexpected end of input")


class _Parser:
    def __init__(self, src: bytes, tokenize):
        self.src = src.split(b"\0", 1)[0] + b"\0\0\0\0"  # (C reads up to three bytes past a name)
        self.tokenize = tokenize  # bytes -> token ids (parse_special), for <token> elements; None: none
        self.symbol_ids: dict[str, int] = {}
        self.rules: list[list[tuple[int, int]]] = []

    def get_symbol_id(self, name: str) -> int:
        return self.symbol_ids.setdefault(name, len(self.symbol_ids))

    def generate_symbol_id(self, base_name: str) -> int:
        next_id = len(self.symbol_ids)
        self.symbol_ids[f"{base_name}_{next_id}"] = next_id
        return next_id

    def add_rule(self, rule_id: int, rule: list) -> None:
        while len(self.rules) <= rule_id:
            self.rules.append([])
        self.rules[rule_id] = rule

    def parse_alternates(self, i: int, rule_name: str, rule_id: int, is_nested: bool) -> int:
        rule: list[tuple[int, int]] = []
        i = self.parse_sequence(i, rule_name, rule, is_nested)
        while self.src[i] == 0x7C:  # '|'
            rule.append((ALT, 0))
            i = _parse_space(self.src, i + 1, True)
            i = self.parse_sequence(i, rule_name, rule, is_nested)
        rule.append((END, 0))
        self.add_rule(rule_id, rule)
        return i

    def parse_token(self, i: int) -> tuple[int, int]:
        src, start = self.src, i
        if src[i] != 0x3C:
            raise GrammarError(f"expecting '<' at {_at(src, i)}")
        i += 1
        if src[i] == 0x5B:  # <[id]>
            i += 1
            end = _parse_int(src, i)
            tid = int(src[i:end])
            if tid > 0xFFFFFFFF:
                raise GrammarError(f"parsed token id is too big at {_at(src, i)}")
            i = end
            if src[i] != 0x5D:
                raise GrammarError(f"expecting ']' at {_at(src, i)}")
            i += 1
            if src[i] != 0x3E:
                raise GrammarError(f"expecting '>' at {_at(src, i)}")
            return tid, i + 1
        if self.tokenize is None:
            raise GrammarError(f"no vocab to parse token at {_at(src, start)}")
        while src[i] and src[i] != 0x3E:
            i += 1
        if src[i] != 0x3E:
            raise GrammarError(f"expecting '>' at {_at(src, i)}")
        i += 1
        ids = self.tokenize(src[start:i])
        if len(ids) != 1:  # must tokenize to exactly one token
            raise GrammarError(f"invalid token '{src[start:i].decode('utf-8', 'replace')}'")
        return int(ids[0]), i

    def parse_sequence(self, i: int, rule_name: str, rule: list, is_nested: bool) -> int:
        src = self.src
        last_sym_start = len(rule)
        n_prev_rules = 1

        def handle_repetitions(min_times: int, max_times: int) -> None:
            # S{m,n} --> S S S (m times) S'(n-m), S'(x) ::= S S'(x-1) | ; S{m,} --> S..S S', S' ::= S S' |
            nonlocal n_prev_rules
            no_max = max_times == UINT64_MAX
            if last_sym_start == len(rule):
                raise GrammarError(f"expecting preceding item to */+/?/{{ at {_at(src, i)}")
            if not no_max and max_times < min_times:  # (llama.cpp would count to 2^64 here)
                raise GrammarError(f"repetition maximum below its minimum at {_at(src, i)}")
            prev_rule = rule[last_sym_start:]
            total_rules = max_times if not no_max and max_times > 0 else min_times if min_times > 0 else 1
            if n_prev_rules * total_rules > MAX_REPETITION_THRESHOLD:
                raise GrammarError("number of rules that are going to be repeated multiplied by the new repetition "
                                   "exceeds sane defaults, please reduce the number of repetitions or rule "
                                   "complexity")
            if min_times == 0:
                del rule[last_sym_start:]
            else:
                for _ in range(1, min_times):
                    rule.extend(prev_rule)
            last_rec_rule_id = 0
            n_opt = 1 if no_max else max_times - min_times
            for k in range(n_opt):
                rec_rule = list(prev_rule)
                rec_rule_id = self.generate_symbol_id(rule_name)
                if k > 0 or no_max:
                    rec_rule.append((RULE_REF, rec_rule_id if no_max else last_rec_rule_id))
                rec_rule += [(ALT, 0), (END, 0)]
                self.add_rule(rec_rule_id, rec_rule)
                last_rec_rule_id = rec_rule_id
            if n_opt > 0:
                rule.append((RULE_REF, last_rec_rule_id))
            n_prev_rules *= total_rules

        while src[i]:
            c = src[i]
            if c == 0x22:  # literal string
                i += 1
                last_sym_start, n_prev_rules = len(rule), 1
                while src[i] != 0x22:
                    if not src[i]:
                        raise GrammarError("unexpected end of input")
                    chr_, i = _parse_char(src, i)
                    rule.append((CHAR, chr_))
                i = _parse_space(src, i + 1, is_nested)
            elif c == 0x5B:  # char range(s)
                i += 1
                start_type = CHAR
                if src[i] == 0x5E:  # '^'
                    i += 1
                    start_type = CHAR_NOT
                last_sym_start, n_prev_rules = len(rule), 1
                while src[i] != 0x5D:
                    if not src[i]:
                        raise GrammarError("unexpected end of input")
                    chr_, i = _parse_char(src, i)
                    rule.append((CHAR_ALT if last_sym_start < len(rule) else start_type, chr_))
                    if src[i] == 0x2D and src[i + 1] != 0x5D:
                        if not src[i + 1]:
                            raise GrammarError("unexpected end of input")
                        end_chr, i = _parse_char(src, i + 1)
                        rule.append((CHAR_RNG_UPPER, end_chr))
                i = _parse_space(src, i + 1, is_nested)
            elif c in (0x3C, 0x21):  # token, !token
                typ = TOKEN
                if c == 0x21:
                    typ = TOKEN_NOT
                    i += 1
                tid, i = self.parse_token(i)
                last_sym_start, n_prev_rules = len(rule), 1
                rule.append((typ, tid))
                i = _parse_space(src, i, is_nested)
            elif _is_word_char(c):  # rule reference
                end = _parse_name(src, i)
                ref = self.get_symbol_id(src[i:end].decode())
                i = _parse_space(src, end, is_nested)
                last_sym_start, n_prev_rules = len(rule), 1
                rule.append((RULE_REF, ref))
            elif c == 0x28:  # grouping: nested alternates into a synthesized rule
                i = _parse_space(src, i + 1, True)
                n_rules_before = len(self.symbol_ids)
                sub_rule_id = self.generate_symbol_id(rule_name)
                i = self.parse_alternates(i, rule_name, sub_rule_id, True)
                n_prev_rules = max(1, len(self.symbol_ids) - n_rules_before)
                last_sym_start = len(rule)
                rule.append((RULE_REF, sub_rule_id))
                if src[i] != 0x29:
                    raise GrammarError(f"expecting ')' at {_at(src, i)}")
                i = _parse_space(src, i + 1, is_nested)
            elif c == 0x2E:  # any char
                last_sym_start, n_prev_rules = len(rule), 1
                rule.append((CHAR_ANY, 0))
                i = _parse_space(src, i + 1, is_nested)
            elif c in (0x2A, 0x2B, 0x3F):  # * + ?
                i = _parse_space(src, i + 1, is_nested)
                handle_repetitions(*{0x2A: (0, UINT64_MAX), 0x2B: (1, UINT64_MAX), 0x3F: (0, 1)}[c])
            elif c == 0x7B:  # {m}, {m,}, {m,n}
                i = _parse_space(src, i + 1, is_nested)
                if not 0x30 <= src[i] <= 0x39:
                    raise GrammarError(f"expecting an int at {_at(src, i)}")
                end = _parse_int(src, i)
                min_times = int(src[i:end])
                i = _parse_space(src, end, is_nested)
                max_times = UINT64_MAX
                if src[i] == 0x7D:
                    max_times = min_times
                    i = _parse_space(src, i + 1, is_nested)
                elif src[i] == 0x2C:
                    i = _parse_space(src, i + 1, is_nested)
                    if 0x30 <= src[i] <= 0x39:
                        end = _parse_int(src, i)
                        max_times = int(src[i:end])
                        i = _parse_space(src, end, is_nested)
                    if src[i] != 0x7D:
                        raise GrammarError(f"expecting '}}' at {_at(src, i)}")
                    i = _parse_space(src, i + 1, is_nested)
                else:
                    raise GrammarError(f"expecting ',' at {_at(src, i)}")
                if min_times > UINT64_MAX or (max_times != UINT64_MAX and max_times > UINT64_MAX):
                    raise GrammarError("stoull")  # (std::out_of_range)
                if min_times > MAX_REPETITION_THRESHOLD:
                    raise GrammarError("number of repetitions exceeds sane defaults, please reduce the number of "
                                       "repetitions")
                if max_times != UINT64_MAX and max_times > MAX_REPETITION_THRESHOLD:
                    max_times = UINT64_MAX
                handle_repetitions(min_times, max_times)
            else:
                break
        return i

    def parse_rule(self, i: int) -> int:
        src = self.src
        name_end = _parse_name(src, i)
        name = src[i:name_end].decode()
        j = _parse_space(src, name_end, False)
        rule_id = self.get_symbol_id(name)
        if src[j:j + 3] != b"::=":
            raise GrammarError(f"expecting ::= at {_at(src, j)}")
        j = _parse_space(src, j + 3, True)
        j = self.parse_alternates(j, name, rule_id, False)
        if src[j] == 0x0D:
            j += 2 if src[j + 1] == 0x0A else 1
        elif src[j] == 0x0A:
            j += 1
        elif src[j]:
            raise GrammarError(f"expecting newline or end at {_at(src, j)}")
        return _parse_space(src, j, True)

    def parse(self) -> None:
        i = _parse_space(self.src, 0, True)
        while self.src[i]:
            i = self.parse_rule(i)
        for rule in self.rules:  # every referenced rule defined
            if not rule:
                raise GrammarError("Undefined rule")
            for typ, value in rule:
                if typ == RULE_REF and (value >= len(self.rules) or not self.rules[value]):
                    name = next(k for k, v in self.symbol_ids.items() if v == value)
                    raise GrammarError(f"Undefined rule identifier '{name}'")


def parse_grammar(text: bytes | str, tokenize=None) -> tuple[list[list[tuple[int, int]]], dict[str, int]]:
    """llama_grammar_parser::parse: (rules, symbol ids); GrammarError with llama.cpp's message on bad input."""
    p = _Parser(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text, tokenize)
    try:
        p.parse()
    except RecursionError:  # (nested groups a few hundred deep; llama.cpp recurses on its C stack)
        raise GrammarError("groups nested too deep") from None
    return p.rules, p.symbol_ids


def _is_end_of_sequence(elem) -> bool:
    return elem[0] in (END, ALT)


def _detect_left_recursion(rules, index, visited, in_progress, may_be_empty) -> bool:
    if in_progress[index]:
        return True
    in_progress[index] = True
    rule = rules[index]
    at_start = True  # does the rule have an empty alternate?
    for elem in rule:
        if _is_end_of_sequence(elem):
            if at_start:
                may_be_empty[index] = True
                break
            at_start = True
        else:
            at_start = False
    recurse = True  # into leftmost nonterminals (and the next ones while those may be empty)
    for typ, value in rule:
        if typ == RULE_REF and recurse:
            if _detect_left_recursion(rules, value, visited, in_progress, may_be_empty):
                return True
            if not may_be_empty[value]:
                recurse = False
        elif typ in (END, ALT):
            recurse = True
        else:
            recurse = False
    in_progress[index] = False
    visited[index] = True
    return False


# --- the matcher (llama_grammar) -----------------------------------------------------------------------------------

def _match_char(rule, k: int, chr_: int) -> tuple[bool, int]:
    """llama_grammar_match_char at rules[r][k]: (chr satisfies the char set, index after the set)."""
    typ = rule[k][0]
    positive = typ in (CHAR, CHAR_ANY)
    found = False
    while True:
        if rule[k + 1][0] == CHAR_RNG_UPPER:
            found = found or rule[k][1] <= chr_ <= rule[k + 1][1]
            k += 2
        elif rule[k][0] == CHAR_ANY:
            found = True
            k += 1
        else:
            found = found or rule[k][1] == chr_
            k += 1
        if rule[k][0] != CHAR_ALT:
            return found == positive, k


def _match_chars(rule, k: int, c: np.ndarray) -> np.ndarray:
    """_match_char for an array of code points at once."""
    positive = rule[k][0] in (CHAR, CHAR_ANY)
    found = np.zeros(len(c), bool)
    while True:
        if rule[k + 1][0] == CHAR_RNG_UPPER:
            found |= (rule[k][1] <= c) & (c <= rule[k + 1][1])
            k += 2
        elif rule[k][0] == CHAR_ANY:
            found[:] = True
            k += 1
        else:
            found |= c == rule[k][1]
            k += 1
        if rule[k][0] != CHAR_ALT:
            return found if positive else ~found


def _match_partial_char(rule, k: int, value: int, n_remain: int) -> bool:
    """llama_grammar_match_partial_char: could some completion of a partial UTF-8 sequence satisfy the set?"""
    positive = rule[k][0] in (CHAR, CHAR_ANY)
    if n_remain < 0 or (n_remain == 1 and value < 2):  # invalid, or a 7-bit char split over 2 bytes (overlong)
        return False
    low = value << (n_remain * 6)
    high = low | ((1 << (n_remain * 6)) - 1)
    if low == 0:
        if n_remain == 2:
            low = 1 << 11
        elif n_remain == 3:
            low = 1 << 16
    while True:
        if rule[k + 1][0] == CHAR_RNG_UPPER:
            if rule[k][1] <= high and low <= rule[k + 1][1]:
                return positive
            k += 2
        elif rule[k][0] == CHAR_ANY:
            return True
        else:
            if low <= rule[k][1] <= high:
                return positive
            k += 1
        if rule[k][0] != CHAR_ALT:
            return not positive


def decode_utf8(piece: bytes, partial: tuple[int, int] = (0, 0)) -> tuple[list[int], tuple[int, int]]:
    """decode_utf8 (the matcher's): the code points of piece continuing `partial` (value, n_remain), without the
    terminating 0, and the partial sequence it ends in; an invalid sequence gives no code points and n_remain -1
    (llama.cpp's code points are then just the terminator)."""
    value, n_remain = partial
    pos, n = 0, len(piece)
    cps: list[int] = []
    while pos < n and piece[pos] and n_remain > 0:  # continue the previous sequence
        b = piece[pos]
        if b >> 6 != 2:
            return [], (0, -1)
        value = (value << 6) + (b & 0x3F)
        pos += 1
        n_remain -= 1
    if partial[1] > 0 and n_remain == 0:
        cps.append(value)
    while pos < n and piece[pos]:
        first = piece[pos]
        n_remain = (1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4)[first >> 4] - 1
        if n_remain < 0:
            return [], (0, n_remain)
        value = first & ((1 << (7 - n_remain)) - 1)
        pos += 1
        while pos < n and piece[pos] and n_remain > 0:
            value = (value << 6) + (piece[pos] & 0x3F)
            pos += 1
            n_remain -= 1
        if n_remain == 0:
            cps.append(value)
    return cps, (value, n_remain)


class _Decoded:
    """Candidates' decoded pieces (index = slot): code points flat, where each starts, how many, and the partial
    UTF-8 sequence each ends in."""

    def __init__(self, pieces: list[bytes], partial: tuple[int, int]):
        flat, start, length = [], np.zeros(len(pieces), np.int64), np.zeros(len(pieces), np.int64)
        pval, prem = np.zeros(len(pieces), np.int64), np.zeros(len(pieces), np.int64)
        for s, piece in enumerate(pieces):
            cps, (v, r) = decode_utf8(piece, partial)
            start[s], length[s], pval[s], prem[s] = len(flat), len(cps), v, r
            flat.extend(cps)
        self.flat = np.array(flat + [0], np.int64)
        self.start, self.length, self.pval, self.prem = start, length, pval, prem

    def at(self, slots: np.ndarray, depth: int) -> np.ndarray:
        """The code point at `depth` of each slot's text, 0 past its end."""
        inside = self.length[slots] > depth
        return np.where(inside, self.flat[np.where(inside, self.start[slots] + depth, len(self.flat) - 1)], 0)


class Grammar:
    """llama_grammar (not lazy) over a vocabulary: pieces[id] is token_to_piece(id) with special tokens' text,
    is_eog(id) its end-of-generation flag."""

    def __init__(self, text: bytes | str, pieces: list[bytes], eog_ids, tokenize=None, root: str = "root"):
        try:
            rules, symbol_ids = parse_grammar(text, tokenize)
        except GrammarError as e:
            raise GrammarError(f"failed to parse grammar: {e}") from None
        if not rules:
            raise GrammarError("failed to parse grammar: no rules")
        if root not in symbol_ids:
            raise GrammarError(f"grammar does not contain a '{root}' symbol")
        n = len(rules)
        visited, in_progress, may_be_empty = [False] * n, [False] * n, [False] * n
        for i in range(n):
            if not visited[i] and _detect_left_recursion(rules, i, visited, in_progress, may_be_empty):
                raise GrammarError(f"unsupported grammar, left recursion detected for nonterminal at index {i}")
        self.rules = rules
        self.pieces = pieces
        self.n_vocab = len(pieces)
        self.eog = np.zeros(self.n_vocab, bool)
        self.eog[[t for t in eog_ids if 0 <= t < self.n_vocab]] = True
        # a piece that is empty or starts with a 0 byte never matches
        self.empty = np.array([not p or p[0] == 0 for p in pieces], bool)
        self._decoded: dict[tuple[int, int], _Decoded] = {}
        self.initial = self._start(symbol_ids[root])
        self.reset()

    def _start(self, root_id: int) -> list[tuple]:
        stacks: list[tuple] = []
        rule, k = self.rules[root_id], 0
        while True:  # one stack per alternate of the start rule
            self._advance_stack(() if _is_end_of_sequence(rule[k]) else ((root_id, k),), stacks)
            while not _is_end_of_sequence(rule[k]):
                k += 1
            if rule[k][0] != ALT:
                return stacks
            k += 1

    def reset(self) -> None:
        self.stacks = list(self.initial)
        self.partial = (0, 0)

    def _advance_stack(self, stack: tuple, new_stacks: list) -> None:
        """llama_grammar_advance_stack: expand rule references on top until each stack ends at a terminal."""
        rules = self.rules
        todo, seen = [stack], set()
        while todo:
            cur = todo.pop()
            if cur in seen:
                continue
            seen.add(cur)
            if not cur:
                if cur not in new_stacks:
                    new_stacks.append(cur)
                continue
            r, k = cur[-1]
            typ, value = rules[r][k]
            if typ == RULE_REF:
                sub, j = rules[value], 0
                while True:
                    nxt = cur[:-1]
                    if not _is_end_of_sequence(rules[r][k + 1]):
                        nxt += ((r, k + 1),)
                    if not _is_end_of_sequence(sub[j]):
                        nxt += ((value, j),)
                    todo.append(nxt)
                    while not _is_end_of_sequence(sub[j]):
                        j += 1
                    if sub[j][0] != ALT:
                        break
                    j += 1
            elif typ in (CHAR, CHAR_NOT, CHAR_ANY, TOKEN, TOKEN_NOT):
                if cur not in new_stacks:
                    new_stacks.append(cur)
            else:
                raise GrammarError("grammar stack on a non-terminal element")  # (GGML_ABORT)

    # --- llama_grammar_apply_impl -----------------------------------------------------------------------------

    def _table(self, ids: np.ndarray) -> tuple[_Decoded, np.ndarray]:
        """The decoded pieces of `ids` after the current partial sequence, and each id's slot in it."""
        if self.partial[1] <= 0:  # (no sequence to continue: every piece decodes as from the start)
            if (0, 0) not in self._decoded:
                self._decoded[(0, 0)] = _Decoded(self.pieces, (0, 0))
            return self._decoded[(0, 0)], ids.astype(np.int64)
        return _Decoded([self.pieces[t] for t in ids], self.partial), np.arange(len(ids))

    def apply(self, cur) -> None:
        """Set to -inf the logit of every candidate of `cur` (a TokenDataArray) the grammar rejects."""
        ids = cur.ids.astype(np.int64)
        allow_eog = any(len(s) == 0 for s in self.stacks)
        eog = self.eog[ids]
        if not allow_eog:
            cur.logit[eog] = -np.inf
        bad = ~eog & self.empty[ids]
        cur.logit[bad] = -np.inf
        positions = np.flatnonzero(~eog & ~self.empty[ids])
        table, slots = self._table(ids[positions])
        slot_pos = np.full(int(slots.max()) + 1 if len(slots) else 0, -1, np.int64)
        slot_pos[slots] = positions
        rejected = self._reject(table, self.stacks, slots, ids, slot_pos, 0)
        cur.logit[slot_pos[rejected]] = -np.inf

    def _reject(self, table, stacks, slots, ids, slot_pos, depth) -> np.ndarray:
        """llama_grammar_reject_candidates: the slots no stack can continue with."""
        if not len(slots):
            return slots
        rejects = self._reject_for_stack(table, stacks[0], slots, ids, slot_pos, depth)
        for stack in stacks[1:]:
            rejects = self._reject_for_stack(table, stack, rejects, ids, slot_pos, depth)
        return rejects

    def _reject_for_stack(self, table, stack, slots, ids, slot_pos, depth) -> np.ndarray:
        c = table.at(slots, depth)
        at_end = c == 0
        partial = table.prem[slots] != 0
        if not stack:  # only a text that ended here (and is no partial sequence) is accepted
            return slots[~at_end | partial]
        r, k = stack[-1]
        rule = self.rules[r]
        typ, value = rule[k]
        if typ in (TOKEN, TOKEN_NOT):  # the top is a token: only the token id counts
            tok = ids[slot_pos[slots]]
            match = tok == value if typ == TOKEN else tok != value
            return slots[(at_end & partial) | (~at_end & ~match)]
        ends = slots[at_end & partial]  # ended in a partial sequence that no continuation can make match
        rej_end = [s for s in ends if not _match_partial_char(rule, k, int(table.pval[s]), int(table.prem[s]))]
        matched = ~at_end & _match_chars(rule, k, c)
        rej_char = slots[~at_end & ~matched]
        after = _match_char(rule, k, 0)[1]
        stack_after = stack[:-1] + (() if _is_end_of_sequence(rule[after]) else ((r, after),))
        next_stacks: list[tuple] = []
        self._advance_stack(stack_after, next_stacks)
        rej_next = self._reject(table, next_stacks, slots[matched], ids, slot_pos, depth + 1)
        return np.concatenate([np.array(rej_end, np.int64), rej_char, rej_next])

    # --- llama_grammar_accept_impl ----------------------------------------------------------------------------

    def _accept_chr(self, stack: tuple, chr_: int, new_stacks: list) -> None:
        if not stack:
            return
        r, k = stack[-1]
        rule = self.rules[r]
        if rule[k][0] in (TOKEN, TOKEN_NOT):
            return
        ok, after = _match_char(rule, k, chr_)
        if ok:
            self._advance_stack(stack[:-1] + (() if _is_end_of_sequence(rule[after]) else ((r, after),)),
                                new_stacks)

    def accept(self, token: int) -> None:
        """Advance over a sampled token (an end-of-generation token only where the grammar may end)."""
        if self.eog[token]:
            if any(len(s) == 0 for s in self.stacks):
                return
            raise GrammarError("the grammar does not allow the end of generation here")  # (GGML_ABORT)
        self.accept_token(token, self.pieces[token])

    def accept_token(self, token: int, piece: bytes) -> None:
        """llama_grammar_accept_token: a token element matches the id, character elements the piece's text."""
        cps, partial = decode_utf8(piece, self.partial)
        new_stacks: list[tuple] = []
        for stack in self.stacks:
            if not stack:
                continue
            r, k = stack[-1]
            typ, value = self.rules[r][k]
            if typ in (TOKEN, TOKEN_NOT):
                if (token == value) == (typ == TOKEN):
                    after = () if _is_end_of_sequence(self.rules[r][k + 1]) else ((r, k + 1),)
                    self._advance_stack(stack[:-1] + after, new_stacks)
                continue
            current = [stack]
            for cp in cps:
                nxt: list[tuple] = []
                for s in current:
                    self._accept_chr(s, cp, nxt)
                current = nxt
                if not current:
                    break
            for s in current:
                if s not in new_stacks:
                    new_stacks.append(s)
        self.stacks = new_stacks
        self.partial = partial
        if not self.stacks:
            raise GrammarError(f"unexpected empty grammar stack after accepting piece "
                               f"{piece.decode('utf-8', 'replace')!r} ({token})")
