"""The cells of a one-sequence KV cache once they stop holding positions 0..n_past-1 in order: llama.cpp's
llama_kv_cells and llama_kv_cache's slot search (src/llama-kv-cells.h, src/llama-kv-cache.cpp), for
llama-completion's context shift (llama_memory_seq_rm, seq_add) and self-extend (seq_div).

llama.cpp attends over cells in cell order and masks each by the position it holds. After a context shift the
next tokens land in the freed cells in the middle of the cache, and attention (flash attention's online
soft-max above all) sums in that order; so the cache keeps llama.cpp's placement cell for cell, and a shift
is applied to the cached K as llama.cpp's K-shift graph does (Context.apply_k_shift).
"""

from __future__ import annotations

import numpy as np

POS_MAX = np.iinfo(np.int32).max


class KVCells:
    """pos (n_ctx,) int32: the position held by each cell, -1 where empty; shift (n_ctx,) int32: the position
    change a cell's K still has to be rotated by; head: where the next slot search starts."""

    def __init__(self, n_ctx: int, n_past: int):
        self.pos = np.full(n_ctx, -1, np.int32)
        self.pos[:n_past] = np.arange(n_past, dtype=np.int32)  # what the cache held in order so far
        self.shift = np.zeros(n_ctx, np.int32)
        self.has_shift = False
        self.head = n_past  # (llama.cpp's head after a slot: its last cell + 1)

    def copy(self) -> KVCells:
        c = KVCells(len(self.pos), 0)
        c.pos, c.shift, c.has_shift, c.head = self.pos.copy(), self.shift.copy(), self.has_shift, self.head
        return c

    @staticmethod
    def _range(p0: int, p1: int) -> tuple[int, int]:
        return max(p0, 0), POS_MAX if p1 < 0 else p1

    def _in(self, p0: int, p1: int) -> np.ndarray:
        """Indices of the non-empty cells whose position lies in [p0, p1) (pos_in), ascending."""
        return np.flatnonzero((self.pos >= p0) & (self.pos < p1) & (self.pos >= 0))

    def used(self) -> int:
        return int(np.count_nonzero(self.pos >= 0))

    def used_max_p1(self) -> int:
        nz = np.flatnonzero(self.pos >= 0)
        return int(nz[-1]) + 1 if len(nz) else 0

    def seq_rm(self, p0: int, p1: int) -> None:
        """llama_kv_cache::seq_rm: empty the cells of positions [p0, p1) (p1 < 0: to the end); the head moves
        back to the first freed cell."""
        idx = self._in(*self._range(p0, p1))
        self.pos[idx] = -1
        self.shift[idx] = 0
        if len(idx) and idx[0] < self.head:
            self.head = int(idx[0])

    def seq_add(self, p0: int, p1: int, delta: int) -> None:
        """llama_kv_cache::seq_add: positions [p0, p1) move by delta (a cell moved below 0 is emptied); the
        head goes to the first emptied cell, else to 0."""
        p0, p1 = self._range(p0, p1)
        if delta == 0 or p0 == p1:
            return
        idx = self._in(p0, p1)
        if len(idx):
            self.has_shift = True
        self.pos[idx] += delta
        self.shift[idx] += delta
        gone = idx[self.pos[idx] < 0]
        self.pos[gone] = -1
        self.shift[gone] = 0
        self.head = int(gone[0]) if len(gone) else 0

    def seq_div(self, p0: int, p1: int, d: int) -> None:
        """llama_kv_cache::seq_div: positions [p0, p1) become pos / d (C division, positions are >= 0)."""
        p0, p1 = self._range(p0, p1)
        if d == 1 or p0 == p1:
            return
        idx = self._in(p0, p1)
        if len(idx):
            self.has_shift = True
        old = self.pos[idx].copy()
        self.pos[idx] = old // d
        self.shift[idx] += old - self.pos[idx]

    def find_slot(self, n_tokens: int) -> np.ndarray | None:
        """llama_kv_cache::find_slot(ubatch, cont=false) -> (n_tokens,) int32 cell indices, or None when the
        cache has too few empty cells."""
        size = len(self.pos)
        if n_tokens > size:
            return None
        head_cur = self.head
        if head_cur > self.used() + 2 * n_tokens:  # enough unused cells before the head: search from 0
            head_cur = 0
        idxs: list[int] = []
        n_tested = 0
        while True:
            if head_cur + 1 > size:
                n_tested += size - head_cur
                head_cur = 0
                continue
            idx = head_cur
            head_cur += 1
            n_tested += 1
            if self.pos[idx] < 0:
                idxs.append(idx)
            if len(idxs) == n_tokens:
                return np.array(idxs, np.int32)
            if n_tested >= size:
                return None

    def apply(self, idxs: np.ndarray, pos: np.ndarray) -> None:
        """llama_kv_cache::apply_ubatch: the cells take the ubatch's positions; the head follows its last cell."""
        self.pos[idxs] = pos
        self.head = int(idxs[-1]) + 1

    def reset_shift(self) -> None:
        self.shift[:] = 0
        self.has_shift = False
