"""A traced tensor as llama-eval-callback shows it (TensorRecord: header fields, float32 sum, printed corner
values), the --tensor-filter patterns, and TraceRecorder, the hook the forward pass calls."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from kernels.errors import SynapseError

N_SHOW = 3  # common_debug_cb_eval prints n = 3 leading and trailing indices per dimension
GGML_MAX_NAME = 64  # ggml tensor names are char[64]: at most 63 bytes
SRC1_BUF = 128  # char src1_str[128] in common_debug_cb_eval: at most 127 characters
HEADER_PREFIX = "common_debug_cb_eval"
PRINT_RES = 1e-6  # resolution of a `sum = %f` line
VALUE_RES = 1e-4  # resolution of a `%12.4f` value
# types whose values common_ggml_get_float_value can read (others, the quantized ones, print a header only)
VALUE_TYPES = frozenset({"f32", "f16", "bf16", "i64", "i32", "i16", "i8"})

INDENT = "    "


class EvalCbError(SynapseError):
    """A trace (log or JSON) cannot be read, or a trace cannot be produced."""


# --------------------------------------------------------------------------------------------------
# record


@dataclass
class TensorRecord:
    """One graph node as common_debug_cb_eval reports it.

    `ne` is ggml's (innermost first, padded to 4). `shown` holds the printed corner values,
    shape (ne3, k2, k1, k0) float64, or None when no values were printed (quantized type,
    `--no-values`, truncated log). `sums` are the `sum = ` values, one per i3 block as printed
    (all equal to `sum` since llama.cpp sums the whole tensor first). `value` is the whole tensor
    (numpy shape = reversed ne) when it was kept.
    """

    name: str
    op: str
    type: str
    ne: tuple[int, int, int, int]
    srcs: list[tuple[str, Optional[tuple[int, ...]]]] = field(default_factory=list)
    sum: Optional[float] = None
    shown: Optional[np.ndarray] = None
    sums: tuple[float, ...] = ()
    sum_kind: str = "full"  # "full" or "printed" (2024 eval-callback: sum of the printed elements only)
    sumsq: Optional[float] = None  # sum of squares of all elements when known exactly (full array)
    value: Optional[np.ndarray] = None
    line: Optional[int] = None  # 1-based line of the header in the source log
    truncated: bool = False  # the log ended inside this record's value block

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.ne, dtype=np.int64))

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy shape of the tensor (reversed ne)."""
        return tuple(reversed(self.ne))

    def first_values(self) -> Optional[list[float]]:
        """The first min(3, N) elements in index order (all of them are among the printed ones)."""
        return self._flat_values(range(min(N_SHOW, self.n_elements)))

    def last_values(self) -> Optional[list[float]]:
        """The last min(3, N) elements in index order."""
        total = self.n_elements
        return self._flat_values(range(max(0, total - N_SHOW), total))

    def _flat_values(self, flat: Iterable[int]) -> Optional[list[float]]:
        if self.shown is None:
            return None
        # the first and last N_SHOW flat indices have every coordinate within N_SHOW of the start /
        # end of its dimension, so they are all in the shown block
        pos = [_shown_positions(self.ne[d]) for d in range(3)] + [{i: i for i in range(self.ne[3])}]  # i3: all
        out = []
        for f in flat:
            idx = []
            for d in range(4):
                idx.append(pos[d][f % self.ne[d]])
                f //= self.ne[d]
            out.append(float(self.shown[idx[3], idx[2], idx[1], idx[0]]))
        return out


def shown_indices(extent: int, n: int = N_SHOW) -> list[int]:
    """Indices along one dimension that common_debug_print_tensor prints (i2, i1, i0)."""
    if extent > 2 * n:
        return list(range(n)) + list(range(extent - n, extent))
    return list(range(extent))


def _shown_positions(extent: int, n: int = N_SHOW) -> dict[int, int]:
    return {i: k for k, i in enumerate(shown_indices(extent, n))}


def pad_ne(ne: Sequence[int]) -> tuple[int, int, int, int]:
    ne = tuple(int(x) for x in ne)
    if len(ne) > 4 or any(x < 0 for x in ne):
        raise ValueError(f"ggml tensors have at most 4 non-negative extents, got ne={ne}")
    return ne + (1,) * (4 - len(ne))  # type: ignore[return-value]


def ggml_sum(value: np.ndarray) -> float:
    """common_debug_print_tensor's sum: one float32 accumulator, elements in index order.

    `value` has numpy shape = reversed ne, so C order is ggml's (i3, i2, i1, i0) order. A cumulative
    sum is a sequential float32 recurrence (numpy's pairwise summation applies to reductions only).
    """
    if value.size == 0:
        return 0.0
    acc = np.cumsum(value.reshape(-1), dtype=np.float32)  # (N,) running float32 sums
    s = float(acc[-1])
    # C starts from +0.0f, so the sum is never -0.0 (cumsum starts from the first element, maybe -0.0)
    return 0.0 if s == 0 else s


def _as_4d(value: np.ndarray, ne: tuple[int, int, int, int]) -> np.ndarray:
    """View of `value` as (ne3, ne2, ne1, ne0)."""
    if value.size != int(np.prod(ne, dtype=np.int64)):
        raise ValueError(f"value of shape {value.shape} does not hold ne={ne}")
    return value.reshape(ne[3], ne[2], ne[1], ne[0])


def shown_block(value: np.ndarray, ne: tuple[int, int, int, int], n: int = N_SHOW) -> np.ndarray:
    """The printed corner values of a full tensor: (ne3, k2, k1, k0) float64 (of the float32 values)."""
    v4 = _as_4d(value, ne)
    block = v4[np.ix_(range(ne[3]), shown_indices(ne[2], n), shown_indices(ne[1], n), shown_indices(ne[0], n))]
    return block.astype(np.float32).astype(np.float64)


def record_from_array(
    name: str,
    op: str,
    value: np.ndarray,
    srcs: Sequence[tuple[str, Sequence[int]]],
    ggml_type: str,
    *,
    ne: Optional[Sequence[int]] = None,
    keep_value: bool = False,
) -> TensorRecord:
    """A record from the model's trace hook arguments (see `TraceRecorder.__call__`)."""
    value = np.asarray(value)
    ne4 = pad_ne(ne) if ne is not None else pad_ne(tuple(reversed(value.shape)))
    name = ggml_name(name)
    rec = TensorRecord(
        name=name,
        op=op,
        type=ggml_type,
        ne=ne4,
        srcs=[(ggml_name(s), pad_ne(s_ne) if s_ne is not None else None) for s, s_ne in srcs],
    )
    if ggml_type in VALUE_TYPES:
        v32 = value.astype(np.float32, copy=False)  # ggml reads every printable type as float
        _as_4d(v32, ne4)  # validates the size
        rec.sum = ggml_sum(v32)
        rec.sums = (rec.sum,) * ne4[3]
        rec.shown = shown_block(v32, ne4)
        v64 = v32.astype(np.float64)
        rec.sumsq = float(np.sum(v64 * v64))
        if keep_value:
            rec.value = value
    return rec


def ggml_name(name: str) -> str:
    """ggml_format_name / ggml_set_name keep at most GGML_MAX_NAME - 1 bytes."""
    raw = name.encode("utf-8")
    if len(raw) < GGML_MAX_NAME:
        return name
    return raw[: GGML_MAX_NAME - 1].decode("utf-8", errors="ignore")


# --------------------------------------------------------------------------------------------------
# tensor filter (llama-eval-callback / llama-debug --tensor-filter)


def compile_tensor_filter(patterns: Sequence[str]) -> Optional[Callable[[str], bool]]:
    """`--tensor-filter` patterns as common_debug_cb_user_data builds them: each anchored with `^`
    and searched (std::regex_search), so a pattern matches a prefix of the name. None = no filter."""
    if not patterns:
        return None
    compiled = []
    for p in patterns:
        try:
            compiled.append(re.compile("^" + p))
        except re.error as e:
            raise EvalCbError(f"invalid --tensor-filter regex '{p}': {e}") from None
    return lambda name: any(rx.search(name) for rx in compiled)


