"""llama-completion's prompt cache (`--prompt-cache FNAME`, `--prompt-cache-all`, `--prompt-cache-ro`): llama.cpp's
session file and how tools/completion/completion.cpp uses it.

The file (llama_context::state_save_file / state_load_file, llama_kv_cache::state_write / state_read in
src/llama-context.cpp and src/llama-kv-cache.cpp; little-endian, LLAMA_SESSION_VERSION 10):

    u32 magic 0x6767736e ('ggsn'), u32 version 10, u32 n_token_count, i32 tokens[n_token_count]
    u32 length, the architecture's name
    u32 n_stream; per stream: u32 cell_count, and when it is > 0:
        per non-empty cell in cell order: i32 pos, u32 n_seq_id, i32 seq_id[n_seq_id]
        u32 v_trans, u32 n_layer
        per layer: i32 K type, u64 K row size, the cells' K rows
        v_trans 0 (flash attention): per layer: i32 V type, u64 V row size, the cells' V rows
        v_trans 1: per layer: i32 V type, u32 V element size, u32 n_embd_v_gqa, per row j of the transposed V the
                   cells' elements

No logits are stored: the last token of a reused prompt is decoded again (common_replay_last_token). A restore puts
the cells at 0.. in their saved order with their saved positions. Files are llama.cpp's byte for byte, so either
tool reads what the other wrote (same model, cache types and flash-attention setting).
"""

from __future__ import annotations

import os
import struct
from typing import Callable

import numpy as np

from kernels.errors import SynapseError

SESSION_MAGIC = 0x6767736E  # LLAMA_FILE_MAGIC_GGSN
SESSION_VERSION = 10  # LLAMA_SESSION_VERSION


def _ggml_type(cache_type: str):
    """A cache type's ggml type id and its (block size, bytes per block)."""
    from kernels.ggml_type import BLOCK_GEOMETRY, GGMLType

    t = GGMLType[cache_type.upper()]
    return int(t), BLOCK_GEOMETRY[t]


def _row_size(cache_type: str, n: int) -> int:
    """ggml_row_size(type, n)."""
    _, (block, nbytes) = _ggml_type(cache_type)
    return n // block * nbytes


# ------------------------------------------------------------------------------------------------ the file


def _cells(ctx) -> tuple[np.ndarray, np.ndarray]:
    """The non-empty cells in cell order and the positions they hold: (n,) int64, (n,) int32."""
    if ctx.cells is None:
        return np.arange(ctx.n_past), np.arange(ctx.n_past, dtype=np.int32)
    idx = np.flatnonzero(ctx.cells.pos >= 0)
    return idx, ctx.cells.pos[idx]


def state_bytes(ctx, tokens: list[int]) -> bytes:
    """What llama_state_save_file writes for this context (one sequence, id 0) and these tokens."""
    hp = ctx.hp
    parts = [struct.pack("<III", SESSION_MAGIC, SESSION_VERSION, len(tokens)), np.asarray(tokens, "<i4").tobytes()]
    arch = hp.arch.encode()
    parts.append(struct.pack("<I", len(arch)) + arch)
    idx, pos = _cells(ctx)
    parts.append(struct.pack("<II", ctx.n_stream, len(idx)))  # stream 0, then the other (empty) streams
    if len(idx):
        meta = np.zeros((len(idx), 3), "<i4")  # pos, n_seq_id 1, seq_id 0
        meta[:, 0], meta[:, 1] = pos, 1
        parts.append(meta.tobytes())
        n_embd_gqa = hp.n_embd_k_gqa
        v_trans = not ctx.flash_attn
        parts.append(struct.pack("<II", int(v_trans), hp.n_layer))
        for k in ctx.k_cache:
            parts.append(struct.pack("<iQ", _ggml_type(ctx.cache_type)[0], _row_size(ctx.cache_type, n_embd_gqa)))
            parts.append(np.ascontiguousarray(k[idx]).tobytes())
        for v in ctx.v_cache:
            vt = _ggml_type(ctx.cache_type_v)[0]
            if v_trans:  # v: (head, dim, cell); per row j of n_embd_v_gqa the cells' elements
                parts.append(struct.pack("<iII", vt, v.itemsize, n_embd_gqa))
                parts.append(np.ascontiguousarray(v.reshape(n_embd_gqa, ctx.n_ctx)[:, idx]).tobytes())
            else:
                parts.append(struct.pack("<iQ", vt, _row_size(ctx.cache_type_v, n_embd_gqa)))
                parts.append(np.ascontiguousarray(v[idx]).tobytes())
    parts.append(b"\0\0\0\0" * (ctx.n_stream - 1))  # (cell_count 0 for the streams of other sequences)
    return b"".join(parts)


def save_state_file(ctx, path: str, tokens: list[int]) -> None:
    with open(path, "wb") as f:
        f.write(state_bytes(ctx, tokens))


class _Reader:
    """Reads a mapped file's bytes with llama_file's end-of-file error: only what is asked for is copied, and every
    count is checked against this context (a huge or hostile file allocates nothing more)."""

    def __init__(self, data):
        self.data, self.at = data, 0

    def read(self, n: int) -> bytes:
        if n > len(self.data) - self.at:
            raise ValueError("unexpectedly reached end of file")
        self.at += n
        return self.data[self.at - n : self.at]

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.read(struct.calcsize("<" + fmt)))


def load_state_file(ctx, path: str, n_token_capacity: int) -> list[int]:
    """llama_state_load_file into ctx: the saved tokens; the cache holds the saved cells at 0.. (anything before is
    cleared). Raises SynapseError with llama.cpp's reason when the file does not fit this context."""
    import mmap

    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise ValueError("unexpectedly reached end of file")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _restore(ctx, _Reader(data), n_token_capacity)
    except (OSError, ValueError) as e:
        ctx.reset()
        raise SynapseError(f"failed to load session file '{path}': {e}") from None


def _restore(ctx, r: _Reader, n_token_capacity: int) -> list[int]:
    hp = ctx.hp
    magic, version = r.unpack("II")
    if magic != SESSION_MAGIC or version != SESSION_VERSION:
        raise ValueError(f"unknown (magic, version) for session file: {magic:08x}, {version:08x}")
    (n_token_count,) = r.unpack("I")
    if n_token_count > n_token_capacity:
        raise ValueError(f"token count in session file exceeded capacity! {n_token_count} > {n_token_capacity}")
    tokens = np.frombuffer(r.read(4 * n_token_count), "<i4").tolist()
    state_start = r.at
    (n,) = r.unpack("I")
    if n > 256:  # (no architecture's name is that long: not read)
        raise ValueError(f"wrong model arch: a name of {n} bytes instead of '{hp.arch}'")
    arch = r.read(n).decode("utf-8", "replace")
    if arch != hp.arch:  # (control characters escaped: one line)
        raise ValueError(f"wrong model arch: '{arch.encode('unicode_escape').decode()}' instead of '{hp.arch}'")
    (n_stream,) = r.unpack("I")
    if n_stream != ctx.n_stream:
        raise ValueError("n_stream mismatch")
    ctx.reset()  # (llama_kv_cache::clear(true))
    for s in range(n_stream):
        (cell_count,) = r.unpack("I")
        if cell_count == 0:
            continue
        if s > 0:  # llama-completion decodes sequence 0, which lives in stream 0
            raise ValueError("the session file holds cells of other sequences than 0 (synapse decodes one)")
        if cell_count > ctx.n_ctx:
            raise ValueError("not enough cells in kv cache")
        pos = np.empty(cell_count, np.int32)
        for i in range(cell_count):
            pos[i], n_seq_id = r.unpack("iI")
            if n_seq_id > ctx.n_seq_max:  # (its ids cannot all be distinct sequences of this context: not read)
                raise ValueError(f"invalid seq_id count {n_seq_id} (the context has {ctx.n_seq_max} sequences)")
            seq_ids = np.frombuffer(r.read(4 * n_seq_id), "<i4")
            bad = seq_ids[(seq_ids < 0) | (seq_ids >= ctx.n_seq_max)]
            if len(bad):
                raise ValueError(f"invalid seq_id, {bad[0]} is out of range [0, {ctx.n_seq_max})")
            if seq_ids.tolist() != [0]:
                raise ValueError("the session file holds cells of other sequences than 0 (synapse decodes one)")
        _read_kv(ctx, r, cell_count)
        _place(ctx, pos)
    if r.at != len(r.data):
        raise ValueError(f"did not read all of the session file data! size {len(r.data) - state_start}, "
                         f"got {r.at - state_start}")
    return tokens


def _read_kv(ctx, r: _Reader, cell_count: int) -> None:
    """llama_kv_cache::state_read_data into cells 0..cell_count-1, with its checks."""
    hp = ctx.hp
    n_embd_gqa = hp.n_embd_k_gqa
    v_trans, n_layer = r.unpack("II")
    if n_layer != hp.n_layer:
        raise ValueError(f"mismatched layer count ({n_layer} instead of {hp.n_layer})")
    if bool(v_trans) != (not ctx.flash_attn):
        raise ValueError("incompatible V transposition")
    k_type, k_row = _ggml_type(ctx.cache_type)[0], _row_size(ctx.cache_type, n_embd_gqa)
    for il, k in enumerate(ctx.k_cache):
        t, row = r.unpack("iQ")
        if t != k_type:
            raise ValueError(f"mismatched key type ({k_type} != {t}, layer {il})")
        if row != k_row:
            raise ValueError(f"mismatched key row size ({k_row} != {row}, layer {il})")
        k[:cell_count] = np.frombuffer(r.read(k_row * cell_count), k.dtype).reshape(k[:cell_count].shape)
    v_type = _ggml_type(ctx.cache_type_v)[0]
    for il, v in enumerate(ctx.v_cache):
        t = r.unpack("i")[0]
        if t != v_type:
            raise ValueError(f"mismatched value type ({v_type} != {t}, layer {il})")
        if v_trans:
            el, n_embd = r.unpack("II")
            if el != v.itemsize:
                raise ValueError(f"mismatched value element size ({v.itemsize} != {el}, layer {il})")
            if n_embd != n_embd_gqa:
                raise ValueError(f"mismatched GQA embedding size ({n_embd_gqa} != {n_embd}, layer {il})")
            rows = np.frombuffer(r.read(el * n_embd * cell_count), v.dtype).reshape(n_embd, cell_count)
            v.reshape(n_embd_gqa, ctx.n_ctx)[:, :cell_count] = rows
        else:
            v_row = _row_size(ctx.cache_type_v, n_embd_gqa)
            (row,) = r.unpack("Q")
            if row != v_row:
                raise ValueError(f"mismatched value row size ({v_row} != {row}, layer {il})")
            v[:cell_count] = np.frombuffer(r.read(v_row * cell_count), v.dtype).reshape(v[:cell_count].shape)


def _place(ctx, pos: np.ndarray) -> None:
    """The restored cells 0..n-1 hold `pos`: positions 0..n-1 in order are the plain cache, others llama.cpp's cell
    bookkeeping (synapse_cli/kv_cells.py) with its head at 0, as a whole-cache restore leaves it."""
    from .kv_cells import KVCells

    n = len(pos)
    if np.array_equal(pos, np.arange(n)):
        ctx.cells, ctx.n_past = None, n
        return
    cells = KVCells(ctx.n_ctx, 0)
    cells.pos[:n] = pos
    cells.head = 0
    ctx.cells, ctx.n_past = cells, int(pos.max()) + 1


# ------------------------------------------------------------------------------ llama-completion's session


class PromptCache:
    """llama-completion's session (tools/completion/completion.cpp): `tokens` is its session_tokens (the tokens
    whose state the file holds, then every token decoded since), `n_consumed` how many of them the prompt has
    passed (n_session_consumed). `log` takes llama-completion's info lines (stderr)."""

    def __init__(self, path: str, save_all: bool = False, read_only: bool = False,
                 log: Callable[[str], None] = lambda line: None):
        self.path: str | None = path  # (None once a context shift ended the session's use)
        self.file = path
        self.save_all, self.read_only, self.log = save_all, read_only, log
        self.tokens: list[int] = []
        self.n_loaded = 0  # the tokens the file held
        self.n_match = 0  # of them, the prompt's prefix reused
        self.n_consumed = 0
        self.do_save = False
        self.saved: int | None = None  # tokens in the last file written
        self.logits: np.ndarray | None = None  # the replayed token's (match())

    def load(self, ctx) -> None:
        """At the start, before the prompt is tokenized."""
        self.log(f"llama_completion: attempting to load saved session from '{self.path}'")
        if not os.path.exists(self.path):
            self.log("llama_completion: session file does not exist, will create.")
        elif os.path.getsize(self.path) == 0:
            self.log("llama_completion: The session file is empty. A new session will be initialized.")
        else:
            self.tokens = load_state_file(ctx, self.path, ctx.n_ctx_total)
            self.n_loaded = len(self.tokens)
            self.log(f"llama_completion: loaded a session with prompt size of {len(self.tokens)} tokens")

    def use_session_prompt(self, prompt_empty: bool, interactive_first: bool = False) -> bool:
        """llama-completion takes the session's tokens as the prompt when it is given none."""
        return prompt_empty and not interactive_first and bool(self.tokens)

    def match(self, ctx, embd_inp: list[int], prompt_empty: bool) -> np.ndarray | None:
        """Before the loop: the prompt's prefix the session holds is kept, the rest of the cache dropped; the last
        kept token is decoded again for its logits (returned, or None when nothing is kept)."""
        n_match = 0
        if self.tokens:
            for t in self.tokens:
                if n_match >= len(embd_inp) or t != embd_inp[n_match]:
                    break
                n_match += 1
            if prompt_empty and n_match == len(embd_inp):
                self.log("llama_completion: using full prompt from session file")
            elif n_match >= len(embd_inp):
                self.log("llama_completion: session file has exact match for prompt!")
            elif n_match < len(embd_inp) // 2:
                self.log(f"llama_completion: session file has low similarity to prompt ({n_match} / {len(embd_inp)} "
                         "tokens); will mostly be reevaluated")
            else:
                self.log(f"llama_completion: session file matches {n_match} / {len(embd_inp)} tokens of prompt")
            if len(self.tokens) > n_match:  # llama_memory_seq_rm(mem, -1, pos, -1)
                ctx.truncate(n_match - 1 if n_match > 0 else 0)
                del self.tokens[n_match:]
        self.n_match = n_match
        self.do_save = self.path is not None and n_match < len(embd_inp) and not self.read_only
        if not (self.tokens and n_match > 0 and n_match == len(self.tokens)):
            return None
        # common_replay_last_token: the last kept token again, at its position, which llama_batch_allocr wants right
        # after the last one the cache holds (if any)
        x = ctx.seq_pos_max()
        if x >= 0 and n_match - 1 != x + 1:
            raise SynapseError(f"failed to replay last token: the KV cache's last position is X = {x}, the token's is "
                               f"Y = {n_match - 1}; llama.cpp requires Y = X + 1")
        if ctx.cells is None and ctx.n_past < n_match - 1:  # (nothing cached: llama.cpp's slot search from cell 0)
            ctx._moved_cells()
        ctx.n_past = n_match - 1
        self.logits = ctx.decode([self.tokens[-1]])
        self.do_save = False
        self.log("llama_completion: replayed last token from session")
        return self.logits

    def pending(self) -> int:
        """Session tokens the prompt has not passed yet (llama-completion's n_past lags ctx.n_past by these)."""
        return len(self.tokens) - self.n_consumed

    def skip(self, embd: list[int]) -> list[int]:
        """The prompt batch minus its prefix the session already holds."""
        i = 0
        if self.n_consumed < len(self.tokens):
            while i < len(embd):
                if embd[i] != self.tokens[self.n_consumed]:
                    del self.tokens[self.n_consumed:]
                    break
                self.n_consumed += 1
                i += 1
                if self.n_consumed >= len(self.tokens):
                    break
        return embd[i:]

    def decode(self, ctx, embd: list[int], last_batch: bool) -> np.ndarray:
        """common_prompt_batch_decode: the prompt's last batch saves the state before its last token (a one-token
        batch saves nothing)."""
        save_now = self.do_save and last_batch
        self.tokens.extend(embd)
        if save_now and len(embd) > 1:
            ctx.decode(embd[:-1])
            self._save(ctx, "common_prompt_batch_decode: saved session before last token to {path}, n_new = {n}")
            logits = ctx.decode(embd[-1:])
        else:
            logits = ctx.decode(embd)
        self.n_consumed += len(embd)
        if save_now:
            self.do_save = False
        return logits

    def context_shifted(self) -> None:
        """A context shift ends the session's use (llama-completion clears path_session)."""
        self.path = None

    def finish(self, ctx, embd: list[int], write: Callable[[bytes], None]) -> None:
        """At the end, --prompt-cache-all: every token, generated ones too (the last one not decoded yet)."""
        if self.path is None or not self.save_all or self.read_only:
            return
        write(b"\nllama_completion: saving final output to session file '" + self.path.encode() + b"'\n")
        self.tokens.extend(embd)
        self._save(ctx, "saved final session to {path}, n_tokens = {n}")

    def summary(self) -> dict:
        """For --json: the file, the tokens it held, the prompt's prefix reused, the tokens saved (or None)."""
        return {"path": self.file, "loaded_tokens": self.n_loaded, "reused_tokens": self.n_match,
                "saved_tokens": self.saved}

    def _save(self, ctx, done: str) -> None:
        try:
            save_state_file(ctx, self.path, self.tokens)
        except OSError as e:  # (llama.cpp logs the error and goes on)
            self.log(f"llama_state_save_file: error saving session file: {e}")
            return
        self.saved = len(self.tokens)
        self.log(done.format(path=self.path, n=len(self.tokens)))
