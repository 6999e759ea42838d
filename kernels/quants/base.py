"""The block-format record every format module registers, and the registry itself.

A format module (kernels/quants/<name>.py) describes one ggml tensor type: block geometry, byte layout (bit
diagram in its docstring), a dequantizer (ggml-quants.c dequantize_row_<type>), the activation type its dot
product runs against (ggml-cpu.c type_traits_cpu[type].vec_dot_type) and the gemv/gemm kernels
(the x86 orders llama.cpp's CPU backend runs: arch/x86 vec_dot, repack.cpp's gemv/gemm, tinyBLAS, the tiled
K-quant matmul; same integer sums, same float operation order; the generic C order as the portable fallback).
Adding a format = writing one module and listing it in kernels/quants/__init__.py.
"""

from __future__ import annotations

import math
import mmap
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import numpy as np

from ..config import jit
from ..ggml_type import BLOCK_GEOMETRY, GGMLType


@dataclass(frozen=True)
class BlockFormat:
    ggml_type: GGMLType
    block_size: int          # elements per block
    type_size: int           # bytes per block
    vec_dot_type: GGMLType   # type the activations are converted to before the dot product
    # dequantize_rows(raw (n_rows, row_bytes) uint8, ids (m,) int64, out (m, K) float32): out[i] = row ids[i]
    dequantize_rows: Callable[..., None]
    # pack(raw (N, row_bytes) uint8, K) -> opaque tuple of arrays the kernels read (may just hold `raw`)
    pack: Callable[[np.ndarray, int], Any]
    # gemv(packed, Activations with T == 1, out (1, N) f32) / gemm(packed, Activations, out (T, N) f32)
    gemv: Callable[..., None]
    gemm: Callable[..., None]
    # the batched product in llama.cpp's batch order where that differs from its single-token order (x86
    # llama.cpp's repacked Q4_K runs ggml_gemm_q4_K_8x8_q8_K on the first T - T % 4 tokens); None: gemm
    gemm_llama: Optional[Callable[..., None]] = None

    @property
    def name(self) -> str:
        return self.ggml_type.name

    def row_bytes(self, n_per_row: int) -> int:
        return n_per_row // self.block_size * self.type_size


FORMATS: dict[int, BlockFormat] = {}

# llama.cpp's weight repacking, on by default; its --no-repack (no extra buffer types) loads every weight as stored
_REPACKING = [True]


@contextmanager
def repacking(enabled: bool):
    """Weights made inside follow llama.cpp with repacking on (its default) or off (-nr/--no-repack)."""
    before = _REPACKING[0]
    _REPACKING[0] = enabled
    try:
        yield
    finally:
        _REPACKING[0] = before


def llama_repacks(ggml_type: int, n_rows: int) -> bool:
    """Whether the fixtures' x86 llama.cpp (AVX-512) repacks a weight at load (ggml-cpu/repack.cpp
    ggml_repack_get_optimal_repack_type: Q4_0 -> q4_0_8x8, Q4_K -> q4_K_8x8, IQ4_NL -> iq4_nl_8x8 and
    MXFP4 -> mxfp4_8x8 with AVX2, Q2_K -> q2_K_8x8 with AVX-512), which it does only when the row count is a
    multiple of 8; a repacked weight's products follow the repacked gemv/gemm, the others ggml_vec_dot (and,
    for llama.cpp's batches, tinyBLAS or the tiled matmul)."""
    return (_REPACKING[0] and int(ggml_type) in (GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.Q2_K, GGMLType.IQ4_NL,
                                                  GGMLType.MXFP4)
            and n_rows % 8 == 0)


def register(fmt: BlockFormat) -> BlockFormat:
    FORMATS[int(fmt.ggml_type)] = fmt
    return fmt


def _as_stored(raw, K):
    """The rows as stored (no repack)."""
    return (raw,)


def register_as_stored(ggml_type: GGMLType, vec_dot_type: GGMLType, dequantize_rows, mm, mm_llama=None) -> BlockFormat:
    """Register a format whose kernels read the file's blocks as they are: mm(raw, a, out) the single-token order
    (gemv, and the default batch-invariant gemm), mm_llama the batch in llama.cpp's order where that differs."""
    block_size, type_size = BLOCK_GEOMETRY[ggml_type]

    def gemm(packed, a, out):
        mm(packed[0], a, out)

    def gemm_llama(packed, a, out):
        mm_llama(packed[0], a, out)

    return register(BlockFormat(ggml_type, block_size, type_size, vec_dot_type, dequantize_rows, _as_stored, gemm, gemm,
                                gemm_llama if mm_llama else None))


CACHE_LINE = 64


def empty_aligned(shape, dtype, zero: bool = False) -> np.ndarray:
    """np.empty (np.zeros with zero=True) whose data starts on a 64-byte cache line. numpy only aligns to 16
    bytes: a kernel's 64-byte (zmm) loads from such an array then straddle two cache lines every time, and
    half of its 32-byte loads do (Q6_K gemm, 1 thread: 140 -> 160 GFLOP/s with aligned activations)."""
    if _arena is not None:
        return _arena.empty(shape, dtype)  # fresh anonymous memory: zero already
    dtype = np.dtype(dtype)
    n = math.prod(shape if isinstance(shape, tuple) else (shape,)) * dtype.itemsize
    raw = (np.zeros if zero else np.empty)(n + CACHE_LINE, np.uint8)
    off = (-_address(raw)) % CACHE_LINE
    return raw[off:off + n].view(dtype).reshape(shape)


@jit
def _address(a):
    """a's data address: 0.3 us against 2.4 us for a.ctypes.data (and np.prod of a shape took 8 us: a one-token
    forward pass makes 15 such arrays, issue #20)."""
    return a.ctypes.data


def zeros_aligned(shape, dtype) -> np.ndarray:
    return empty_aligned(shape, dtype, zero=True)


def streams_out(out: np.ndarray) -> bool:
    """Whether a gemm may write out (T, N) float32 by 64-byte streaming stores (vmovntps needs aligned lines):
    rows start on cache lines and their elements are contiguous."""
    return (out.ctypes.data % CACHE_LINE == 0 and out.strides[0] % CACHE_LINE == 0
            and out.strides[1] == out.itemsize)


_layout_only = False


@contextmanager
def layout_only() -> Iterator[None]:
    """Weights packed inside this block get their kernels' arrays, shapes and types but not their bytes: the
    cold-cache helper process (synapse_cli/warm.py) compiles kernels on such weights without compiling, or
    running, the repacks (whose results it never uses)."""
    global _layout_only
    old, _layout_only = _layout_only, True
    try:
        yield
    finally:
        _layout_only = old


def in_layout_only() -> bool:
    """Whether weights packed now are layout-only shells (no bytes to read or move)."""
    return _layout_only


def run_repack(repack: Callable[..., None], *args) -> None:
    """repack(*args): a format's repack kernel filling its out array (skipped inside layout_only())."""
    if not _layout_only:
        repack(*args)


def readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: kernels always see read-only weights, whether they come from an mmap or a test's
    np.array, so numba compiles one specialization per kernel instead of two."""
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


HUGE_PAGE = 2 << 20


class WeightArena:
    """One model's weight arrays side by side in memory the kernel may back with 2 MB pages (transparent huge
    pages, madvise MADV_HUGEPAGE), in the order the loader makes them (the order a token reads them): the
    repacks write into it (packing_into), and the rows the kernels read as stored are read into it from the file
    (GGUFReader.read_into).

    A token streams every weight once; with 4 KB pages each 4 KB costs a TLB miss (a nested page walk on a VM),
    and numpy only advises huge pages for arrays of 4 MB or more, so the small products (a 1536x1536 Q4_K
    attn_q: 1.4 MB) and the weights read from the file mapping (Q6_K: the rows as stored) sat on 4 KB pages.
    Measured side by side in one process (two copies of a model, tokens alternating): 4-5 % less time a token
    for Qwen2.5-1.5B and SmolLM2; but faulting in 2 MB pages is slow on this kind of VM, ~1 s more load for a
    1 GB model, so Model.load uses an arena only when asked (llama.cpp's -lm none). Chunks of CHUNK bytes are
    reserved as needed; only the pages written are resident, so the unused tail of a chunk costs at most one
    partly used 2 MB page. Inside layout_only() nothing is written, so nothing becomes resident."""

    CHUNK = 256 << 20

    def __init__(self):
        self._maps: list[mmap.mmap] = []  # the mappings stay open as long as the arrays use them
        self._free = np.empty(0, np.uint8)  # the current chunk's unused part, 64-byte aligned

    def _reserve(self, n: int) -> None:
        size = max(self.CHUNK, -(-n // HUGE_PAGE) * HUGE_PAGE) + HUGE_PAGE
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # shared memory gets no THP
        self._maps.append(m)
        buf = np.frombuffer(m, np.uint8)
        off = (-buf.ctypes.data) % HUGE_PAGE  # THP needs 2 MB-aligned virtual ranges
        try:
            m.madvise(mmap.MADV_HUGEPAGE, off, size - off)
        except (AttributeError, OSError):  # no THP on this system: 4 KB pages, the same as before
            pass
        self._free = buf[off:]

    def empty(self, shape, dtype) -> np.ndarray:
        """A new C-contiguous array inside the arena, starting on a cache line (zeros: fresh pages)."""
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if n > self._free.size:
            self._reserve(n)
        out = self._free[:n].view(dtype).reshape(shape)
        self._free = self._free[-(-n // CACHE_LINE) * CACHE_LINE:]
        return out


_arena: WeightArena | None = None


@contextmanager
def packing_into(arena: WeightArena | None) -> Iterator[None]:
    """Weights packed inside this block get their arrays (empty_aligned) from `arena` (None: from numpy):
    Model.load's repacks write straight into it."""
    global _arena
    old, _arena = _arena, arena
    try:
        yield
    finally:
        _arena = old
