"""Line-by-line ports of llama.cpp's four GPT-style pre-tokenizer state machines (src/unicode.cpp,
unicode_regex_split_custom_{gpt2,llama3,qwen2,qwen35}): the slow oracle that tokenizer/unicode.py's fast
`re` patterns are tested against (tests/test_tokenizer_unicode.py)."""

from __future__ import annotations

from tokenizer.unicode import ACCENT_MARK, LETTER, NUMBER, WHITESPACE, cpt_flags, tolower

def custom_split_reference(kind: str, text: str) -> list[str]:
    """Line-by-line port of unicode_regex_split_custom_{gpt2,llama3,qwen2,qwen35} over one range (slow)."""
    cpts = [ord(c) for c in text]
    n = len(cpts)
    OUT = 0xFFFFFFFF
    flags = [cpt_flags(c) for c in cpts]
    get_cpt = lambda p: cpts[p] if 0 <= p < n else OUT  # noqa: E731
    get_flags = lambda p: flags[p] if 0 <= p < n else 0  # noqa: E731
    is_l = lambda f: f & LETTER  # noqa: E731
    is_n = lambda f: f & NUMBER  # noqa: E731
    is_ws = lambda f: f & WHITESPACE  # noqa: E731
    pieces: list[str] = []
    prev_end = 0

    def add(end: int) -> int:
        nonlocal prev_end
        ln = end - prev_end
        if ln > 0:
            pieces.append(text[prev_end:end])
        prev_end = end
        return ln

    pos = 0
    while pos < n:
        cpt, fl = get_cpt(pos), get_flags(pos)
        if cpt == ord("'") and pos + 1 < n:
            low = (lambda x: x) if kind == "gpt2" else tolower
            nxt = low(get_cpt(pos + 1))
            if nxt in (ord("s"), ord("t"), ord("m"), ord("d")):
                pos += add(pos + 2)
                continue
            if pos + 2 < n:
                nn = low(get_cpt(pos + 2))
                if (nxt, nn) in ((ord("r"), ord("e")), (ord("v"), ord("e")), (ord("l"), ord("l"))):
                    pos += add(pos + 3)
                    continue
        if kind == "gpt2":
            f2 = get_flags(pos + 1) if cpt == 0x20 else fl
            if is_l(f2):
                pos += cpt == 0x20
                while is_l(f2):
                    pos += 1
                    f2 = get_flags(pos)
                add(pos)
                continue
            if is_n(f2):
                pos += cpt == 0x20
                while is_n(f2):
                    pos += 1
                    f2 = get_flags(pos)
                add(pos)
                continue
            if not (is_ws(f2) or is_l(f2) or is_n(f2)) and f2:
                pos += cpt == 0x20
                while not (is_ws(f2) or is_l(f2) or is_n(f2)) and f2:
                    pos += 1
                    f2 = get_flags(pos)
                add(pos)
                continue
            nws = 0
            while is_ws(get_flags(pos + nws)):
                nws += 1
            if nws > 1 and get_cpt(pos + nws) != OUT:
                pos += nws - 1
                add(pos)
                continue
            if nws > 0:
                pos += nws
                add(pos)
                continue
            pos += 1
            add(pos)
            continue
        # llama3 / qwen2 / qwen35 (whose letter runs also take accent marks)
        lm = (lambda f: f & (LETTER | ACCENT_MARK)) if kind == "qwen35" else is_l  # noqa: E731
        if not (cpt in (0x0D, 0x0A) or is_n(fl)):
            if lm(fl) or lm(get_flags(pos + 1)):
                pos += 1
                while lm(get_flags(pos)):
                    pos += 1
                add(pos)
                continue
        if is_n(fl):
            if kind == "llama3":
                ini = pos
                while is_n(get_flags(pos)):
                    pos += 1
                    if pos - ini >= 3:
                        add(pos)
                        ini = pos
                add(pos)
            else:
                pos += 1
                add(pos)
            continue
        f2 = get_flags(pos + 1) if cpt == 0x20 else fl
        if not (is_ws(f2) or lm(f2) or is_n(f2)) and fl:
            pos += cpt == 0x20
            while not (is_ws(f2) or lm(f2) or is_n(f2)) and f2:
                pos += 1
                f2 = get_flags(pos)
            c2 = get_cpt(pos)
            while c2 in (0x0D, 0x0A):
                pos += 1
                c2 = get_cpt(pos)
            add(pos)
            continue
        nws = 0
        last_rn = 0
        while is_ws(get_flags(pos + nws)):
            if get_cpt(pos + nws) in (0x0D, 0x0A):
                last_rn = pos + nws + 1
            nws += 1
        if last_rn > 0:
            pos = last_rn
            add(pos)
            continue
        if nws > 1 and get_cpt(pos + nws) != OUT:
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
