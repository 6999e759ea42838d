"""llama-perplexity's task scores: HellaSwag (--hellaswag) and Winogrande (--winogrande), from
tools/perplexity/perplexity.cpp.

A HellaSwag file has 6 lines per task: the context, the index of the right ending, and four endings. Tasks are
drawn at random (std::mt19937 seeded with 1, libstdc++'s uniform_int_distribution, each drawn task removed), each
ending is tokenized with the context (`context + " " + ending`, BOS added), and the ending whose tokens have the
highest mean log-probability after the tokens they share with the other endings is the model's answer.

A Winogrande file is a CSV of `index,sentence,choice1,choice2,answer`; the sentence's `_` is filled with each choice
and the two sentences are scored by the mean log-probability of the words after the choice.

llama.cpp packs several tasks into one batch, the endings of a task as sequences over their shared prefix. Here each task is decoded as one sequence: the shared prefix once, then each ending after it, the cache cut
back to the prefix in between. The log-probabilities are those of the same tokens at the same positions; the float
arithmetic after the logits (the first token's softmax over a double sum, the others' float log-softmax) is
llama.cpp's, statement by statement.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

import kernels.config  # noqa: F401  (sets NUMBA_CACHE_DIR before numba is imported: its cache goes to .cache/numba)
from numba import njit

from kernels.errors import SynapseError
from .sampling.rng import MT19937, uniform_int


@njit(cache=True)
def _first_token_logprob(logits, tok):
    """hellaswag_score's `std::log(softmax(logits)[tok])`: float exps over a double sum, the probability stored
    as float, its float log."""
    mx = logits[0]
    for v in logits:
        mx = max(mx, v)
    s = 0.0
    for v in logits:
        s += np.float64(np.float32(math.exp(np.float32(v - mx))))
    e = np.float32(math.exp(np.float32(logits[tok] - mx)))
    return np.float32(math.log(np.float32(np.float64(e) / s)))


@njit(cache=True)
def _token_logprob(logits, tok):
    """compute_logprobs: `logits[tok] - max - log(sum_p)`, all in float (sum_p summed in order)."""
    mx = logits[0]
    for j in range(1, logits.size):
        mx = max(mx, logits[j])
    s = np.float32(0.0)
    for v in logits:
        s = np.float32(s + np.float32(math.exp(np.float32(v - mx))))
    return np.float32(np.float32(logits[tok] - mx) - np.float32(math.log(s)))


class _Sequences:
    """A task's token sequences (one per answer) over the tokens they all begin with."""
    seq_tokens: list[list[int]]
    common_prefix: int

    def set_sequences(self, seqs: list[list[int]]) -> None:
        self.seq_tokens = seqs
        n = min(len(s) for s in seqs)
        self.common_prefix = next((k for k in range(n) if any(s[k] != seqs[0][k] for s in seqs[1:])), n)

    @property
    def required_tokens(self) -> int:
        """The cells llama.cpp's batch gives the task: the shared prefix once, each sequence's rest."""
        return self.common_prefix + sum(len(s) - self.common_prefix for s in self.seq_tokens)


@dataclass
class HellaswagTask(_Sequences):
    context: bytes
    gold: int
    endings: list[bytes]
    seq_tokens: list[list[int]] = field(default_factory=list)
    common_prefix: int = 0


def getlines(text: bytes) -> list[bytes]:
    """std::getline over an istringstream, '\\n'-separated: no last empty line after a final newline."""
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def _stoi(line: bytes) -> int:
    """std::stoi: white space, a sign and digits at the start (what follows is ignored); none is an error."""
    m = re.match(rb"[ \t\n\r\f\v]*([+-]?[0-9]+)", line)
    if m is None:
        raise SynapseError(f"hellaswag: the line after a context must be the right ending's index, got {line[:40]!r}")
    return int(m.group(1))


def load_hellaswag(text: bytes, n_tasks: int, tokenize) -> list[HellaswagTask]:
    """The tasks hellaswag_score evaluates: min(n_tasks, all) drawn at random, tokenized."""
    lines = getlines(text)
    if len(lines) % 6:
        raise SynapseError("hellaswag_score : number of lines in prompt not a multiple of 6.")
    count = min(n_tasks, len(lines) // 6)
    rng = MT19937(1)
    tasks = []
    for _ in range(count):
        idx = uniform_int(rng, 0, len(lines) // 6 - 1)
        block = lines[idx * 6: idx * 6 + 6]
        t = HellaswagTask(block[0], _stoi(block[1]), block[2:6])
        t.set_sequences([tokenize(t.context + b" " + e) for e in t.endings])
        tasks.append(t)
        del lines[idx * 6: idx * 6 + 6]
    return tasks


def _decode(ctx, tokens: list[int], all_logits: bool = False) -> np.ndarray:
    """ctx.decode in pieces of at most n_batch tokens (decode_helper's llama_decode calls)."""
    rows = [ctx.decode(tokens[s:s + ctx.n_batch], all_logits=all_logits) for s in range(0, len(tokens), ctx.n_batch)]
    return np.concatenate(rows, axis=0) if all_logits else rows[-1]


def continuation_logprobs(ctx, seqs: list[list[int]], cp: int, what: str) -> list[list[np.float32]]:
    """For each sequence after the cp tokens all share: the float log-probability of each of its tokens but the
    first shared one, up to its last (the first from the prefix's softmax, the others from compute_logprobs)."""
    if cp == 0:
        raise SynapseError(f"{what}: the answers share no first token (a model without BOS?)")
    ctx.reset()
    first = _decode(ctx, seqs[0][:cp])
    out = []
    for seq in seqs:
        ctx.truncate(cp)
        terms = [np.float32(_first_token_logprob(first, seq[cp]))]
        rest = seq[cp:-1]  # (the last token's logits are not needed)
        if rest:
            terms += [_token_logprob(row, seq[cp + 1 + j]) for j, row in enumerate(_decode(ctx, rest, all_logits=True))]
        out.append(terms)
    return out


def task_logprobs(ctx, task: HellaswagTask) -> list[float]:
    """Each ending's mean log-probability (summed in double, as hellaswag_score does)."""
    return [sum(float(x) for x in terms) / len(terms)
            for terms in continuation_logprobs(ctx, task.seq_tokens, task.common_prefix, "hellaswag")]


def wilson(acc: float, n: int) -> tuple[float, float, float]:
    """The running accuracy and its 95 % Wilson score interval, as hellaswag_score prints them (fractions)."""
    freq = acc / n
    za = 1.95996398454
    z = za * za / n
    cnf = z * math.sqrt(n * (4.0 * freq * (1 - freq) + z)) / (za + za)
    return freq, (freq + z * 0.5 - cnf) / (1.0 + z), (freq + z * 0.5 + cnf) / (1.0 + z)


def hellaswag_score(ctx, tasks: list[HellaswagTask], n_ctx: int, on_task) -> float:
    """Evaluate the tasks in order; on_task(line) gets each line llama.cpp prints. Returns the accuracy."""
    acc = 0.0
    for i, t in enumerate(tasks):
        if t.required_tokens > n_ctx:
            raise SynapseError(f"hellaswag_score : task {i} does not fit in the context window (requires "
                               f"{t.required_tokens} tokens)")
        means = task_logprobs(ctx, t)
        best = 0
        for s in range(1, 4):
            if means[s] > means[best]:
                best = s
        if best == t.gold:
            acc += 1.0
        freq, lo, hi = wilson(acc, i + 1)
        on_task(f"{i + 1}\t{freq * 100.0:3.8f}%\t[{lo * 100.0:3.4f}%, {hi * 100.0:3.4f}%]")
    return acc / len(tasks) if tasks else float("nan")


# --- Winogrande (--winogrande) -------------------------------------------------------------------------------------

K_MIN_TRAILING_CTX = 3  # winogrande_score: score only the words after the choice when both sentences have more


@dataclass
class WinograndeTask(_Sequences):
    first: bytes
    second: bytes
    choices: tuple[bytes, bytes]
    answer: int
    seq_tokens: list[list[int]] = field(default_factory=list)
    common_prefix: int = 0
    n_base: tuple[int, int] = (0, 0)  # tokens of context + choice 1, context + choice 2


def load_winogrande(text: bytes, warn) -> list[WinograndeTask]:
    """load_winogrande_from_csv: `index,sentence,choice1,choice2,answer` lines (the sentence may be quoted, its
    blank a `_`). As there, a line that does not end in a newline is not read (so the file's last line, whose newline
    -f strips, never is), and bad lines are skipped with a message."""
    tasks = []
    for line in text.split(b"\n")[:-1]:
        commas, quote = [], False
        for i, c in enumerate(line):
            if not quote:
                if c == 0x2C:
                    commas.append(i)
                    if len(commas) == 4:
                        break
                elif c == 0x22:
                    quote = True
            elif c == 0x22:
                quote = False
        if len(commas) != 4:
            warn(f"load_winogrande_from_csv: failed to find comma separators in <{line.decode('utf-8', 'replace')}>")
            continue
        c0, c1, c2, c3 = commas
        sentence = line[c0 + 2:c1 - 1] if line[c0 + 1:c0 + 2] == b'"' else line[c0 + 1:c1]
        where = sentence.find(b"_")
        if where < 0:
            warn(f"load_winogrande_from_csv: no _ in <{sentence.decode('utf-8', 'replace')}>")
            continue
        m = re.match(rb"[ \t\n\r\f\v]*([+-]?[0-9]+)", line[c3 + 1:])
        answer = int(m.group(1)) if m else 0
        if not 1 <= answer <= 2:
            warn(f"load_winogrande_from_csv: failed to parse answer <{line[c3 + 1:].decode('utf-8', 'replace')}>")
            continue
        tasks.append(WinograndeTask(sentence[:where], sentence[where + 1:], (line[c1 + 1:c2], line[c2 + 1:c3]),
                                    answer))
    return tasks


def select_winogrande(tasks: list[WinograndeTask], n: int) -> list[WinograndeTask]:
    """n tasks drawn as winogrande_score draws them: j = int(2^-32 * rng() * left) in float, swap-remove."""
    rng = MT19937(1)
    scale = np.float32(1.0) / (np.float32(1.0) + np.float32(0xFFFFFFFF))
    aux = list(range(len(tasks)))
    selected = []
    for _ in range(n):
        j = int(np.float32(np.float32(scale * np.float32(rng())) * np.float32(len(aux))))
        selected.append(tasks[aux[j]])
        aux[j] = aux[-1]
        aux.pop()
    return selected


def tokenize_winogrande(tasks: list[WinograndeTask], tokenize) -> None:
    for t in tasks:
        t.set_sequences([tokenize(t.first + c + t.second) for c in t.choices])
        t.n_base = tuple(len(tokenize(t.first + c)) for c in t.choices)


def _winogrande_scores(ctx, t: WinograndeTask) -> tuple[np.float32, np.float32]:
    """The two sentences' scores: the mean log-probability of the tokens after the choice word (or, when a sentence
    has 3 tokens or fewer after the shared prefix, after the shared prefix), the last token left out when more than
    one is scored. The logits are laid out as llama.cpp's batch holds them (the prefix's last token, then every
    token of sentence 1, then of sentence 2), so that its index arithmetic (FIXME included: without the skip, the
    second sentence's first score comes from the first sentence's last token) picks the same rows."""
    cp = t.common_prefix
    ctx.reset()
    rows = [_decode(ctx, t.seq_tokens[0][:cp])[None, :]]
    for seq in t.seq_tokens:
        ctx.truncate(cp)
        if len(seq) > cp:
            rows.append(_decode(ctx, seq[cp:], all_logits=True))
    logits = np.concatenate(rows, axis=0)
    a, b = t.seq_tokens
    skip = len(a) - cp > K_MIN_TRAILING_CTX and len(b) - cp > K_MIN_TRAILING_CTX
    scores = []
    for s, seq in enumerate(t.seq_tokens):
        n_base = t.n_base[s] if skip else cp
        last = 1 if len(seq) - n_base > 1 else 0
        li = n_base - cp if s == 0 else len(a) - cp + n_base - cp
        score = np.float32(0.0)
        for j in range(n_base - 1, len(seq) - 1 - last):
            score = np.float32(score + _token_logprob(logits[li], seq[j + 1]))
            li += 1
        with np.errstate(all="ignore"):
            scores.append(np.float32(score / np.float32(len(seq) - n_base - last)))
    return scores[0], scores[1]


def winogrande_score(ctx, tasks: list[WinograndeTask], n_ctx: int, on_task) -> tuple[int, int]:
    """Evaluate the tasks in order; on_task(line) gets each line llama.cpp prints. Returns (correct, done)."""
    n_correct = n_done = 0
    for i, t in enumerate(tasks):
        if t.required_tokens > n_ctx:
            raise SynapseError(f"winogrande_score : task {i} does not fit in the context window (requires "
                               f"{t.required_tokens} tokens)")
        s1, s2 = _winogrande_scores(ctx, t)
        result = 1 if s1 > s2 else 2
        n_correct += result == t.answer
        n_done += 1
        on_task(f"{i + 1}\t{100.0 * n_correct / n_done:.4f}\t{float(s1):10.6f}  {float(s2):10.6f}  {result}  "
                f"{t.answer}")
    return n_correct, n_done


def winogrande_final(n_correct: int, n_done: int) -> str | None:
    """`Final Winogrande score(N tasks): X +/- Y`, printed from 100 tasks on."""
    if n_done < 100:
        return None
    p = np.float32(n_correct) / np.float32(n_done)
    sigma = np.float32(100.0 * math.sqrt(float(np.float32(p * (np.float32(1) - p) / np.float32(n_done - 1)))))
    return f"Final Winogrande score({n_done} tasks): {float(np.float32(100) * p):.4f} +/- {float(sigma):.4f}"


# --- multiple choice (--multiple-choice: ARC, MMLU, TruthfulQA, ... in llama.cpp's binary format) ------------------

@dataclass
class ChoiceTask(_Sequences):
    question: bytes
    answers: list[bytes]  # mc1: one of them right
    labels: list[int]
    seq_tokens: list[list[int]] = field(default_factory=list)
    common_prefix: int = 0


class _Reader:
    """The istringstream of multiple_choice_score: little-endian uint32 fields and sized strings."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def u32(self) -> int | None:
        if self.pos + 4 > len(self.data):
            self.pos = len(self.data)
            return None
        v = int.from_bytes(self.data[self.pos:self.pos + 4], "little")
        self.pos += 4
        return v

    def string(self) -> bytes | None:
        n = self.u32()
        if n is None or self.pos + n > len(self.data):
            return None
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s

    def answers(self) -> tuple[list[bytes], list[int]] | None:
        """multiple_choice_answers::deserialize: n (at most 100), n strings, n int32 labels."""
        n = self.u32()
        if n is None or n > 100:
            return None
        answers = []
        for _ in range(n):
            a = self.string()
            if a is None:
                return None
            answers.append(a)
        if self.pos + 4 * n > len(self.data):
            return None
        labels = list(np.frombuffer(self.data, "<i4", n, self.pos).tolist())
        self.pos += 4 * n
        return answers, labels

    def task(self) -> ChoiceTask | None:
        q = self.string()
        mc1 = self.answers() if q is not None else None
        mc2 = self.answers() if mc1 is not None else None  # (read, not scored, as in llama.cpp)
        return None if mc2 is None else ChoiceTask(q, *mc1)


def load_multiple_choice(data: bytes, n_select: int, log) -> list[ChoiceTask]:
    """The tasks multiple_choice_score evaluates (all, or n_select drawn as winogrande's are); log(text, out)
    gets llama.cpp's messages (out: its stdout `LOG` dots, else a stderr line)."""
    r = _Reader(data)
    n_task = r.u32()
    if not n_task:
        raise SynapseError("multiple_choice_score: no tasks")
    log(f"multiple_choice_score: there are {n_task} tasks in prompt", False)
    if r.pos + 4 * n_task > len(r.data):  # (checked before reading: a text file claims ~2e9 tasks)
        raise SynapseError("multiple_choice_score: failed to read task positions from prompt")
    task_pos = [r.u32() for _ in range(n_task)]
    tasks = []
    if n_select == 0 or n_select >= n_task:
        log("multiple_choice_score: reading tasks", False)
        n_dot = max(n_task // 100, 1)
        for i in range(1, n_task + 1):
            t = r.task()
            if t is None:
                raise SynapseError(f"multiple_choice_score: failed to read task {i} of {n_task}")
            tasks.append(t)
            if i % n_dot == 0:
                log(".", True)
        log("done\n", True)
    else:
        log(f"multiple_choice_score: selecting {n_select} random tasks from {n_task} tasks available", False)
        rng = MT19937(1)
        scale = np.float32(1.0) / (np.float32(1.0) + np.float32(0xFFFFFFFF))
        aux = list(range(n_task))
        for _ in range(n_select):
            j = int(np.float32(np.float32(scale * np.float32(rng())) * np.float32(len(aux))))
            idx = aux[j]
            aux[j] = aux[-1]
            aux.pop()
            r.pos = task_pos[idx]
            t = r.task()
            if t is None:
                raise SynapseError(f"multiple_choice_score: failed to read task {idx} at position {task_pos[idx]}")
            tasks.append(t)
    return tasks


def prepare_multiple_choice(tasks: list[ChoiceTask], tokenize, log) -> None:
    """multiple_choice_prepare_one_task for each (its progress dots on stdout, `...` from 500 tasks on)."""
    log("multiple_choice_score: preparing task data", False)
    many = len(tasks) > 500
    if many:
        log("...", True)
    n_dot = max(len(tasks) // 100, 1)
    for i, t in enumerate(tasks, 1):
        if not t.question or not t.answers:
            raise SynapseError("multiple_choice_prepare_one_task: found bad task with empty question and/or answers"
                               if not many else "multiple_choice_score: found malformed tasks")
        if any(not a for a in t.answers):
            raise SynapseError("multiple_choice_prepare_one_task: found empty answer" if not many else
                               "multiple_choice_score: found malformed tasks")
        t.set_sequences([tokenize(t.question + b" " + a) for a in t.answers])
        if not many and i % n_dot == 0:
            log(".", True)
    log("done\n", True)


def multiple_choice_score(ctx, tasks: list[ChoiceTask], n_ctx: int, n_seq_max: int,
                          on_task) -> tuple[int, int, int]:
    """Evaluate the tasks in order (on_task gets each printed line); returns (correct, done, answers seen). A task
    with more answers than the context has sequences (n_seq_max, -np) stops the run, as llama.cpp's packing does."""
    n_correct = n_done = n_answers = 0
    for i, t in enumerate(tasks):
        if len(t.seq_tokens) > min(128, n_seq_max):
            raise SynapseError(f"multiple_choice_score : task {i} requires a higher -np|--parallel value (at least "
                               f"{len(t.seq_tokens)})")
        if t.required_tokens > n_ctx:
            raise SynapseError(f"multiple_choice_score : task {i} does not fit in the context window (requires "
                               f"{t.required_tokens} tokens)")
        log_probs = []  # (summed in float here)
        for terms in continuation_logprobs(ctx, t.seq_tokens, t.common_prefix, "multiple_choice_score"):
            lp = terms[0]
            for x in terms[1:]:
                lp = np.float32(lp + x)
            log_probs.append(np.float32(lp / np.float32(len(terms))))
        best = 0
        for s in range(1, len(log_probs)):
            if log_probs[s] > log_probs[best]:
                best = s
        n_answers += len(log_probs)
        n_correct += t.labels[best] == 1
        n_done += 1
        on_task(f"{n_done}\t{100.0 * n_correct / n_done:.8f}")
    return n_correct, n_done, n_answers


def multiple_choice_final(n_correct: int, n_done: int, n_answers: int) -> list[str]:
    """The result and random-chance lines (float arithmetic, as printed)."""
    out = []
    for num, den in ((n_correct, n_done), (n_done, n_answers)):
        p = np.float32(np.float32(num) / np.float32(den))
        sigma = np.float32(math.sqrt(float(np.float32(p * (np.float32(1) - p) / np.float32(n_done - 1)))))
        out.append((float(np.float32(100) * p), float(np.float32(100) * sigma)))
    return [f"Final result: {out[0][0]:.4f} +/- {out[0][1]:.4f}", f"Random chance: {out[1][0]:.4f} +/- {out[1][1]:.4f}"]
