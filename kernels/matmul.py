"""ggml's MUL_MAT and GET_ROWS for GGUF weights, computed the way ggml-cpu does (ggml-cpu/ggml-cpu.c
ggml_compute_forward_mul_mat, ops.cpp get_rows).

    w = Weight(ggml_type, data, ne0, ne1, name)   # data: raw GGUF bytes (ne1 rows x row_bytes), uint8
    matmul(w, x, out)                             # out[t, n] = vec_dot(w row n, x row t converted)
    matmul_many([wq, wk, wv], x, [q, k, v])       # the same as matmul of each, x converted once
    w.get_rows(ids, out)                          # out[i] = dequantized row ids[i]

matmul converts the activations x (T, K) float32 to the weight type's vec_dot_type exactly like ggml
(kernels/quants/vec_dot_type.py), then every output is one ggml_vec_dot_<type>_<vec_type> in the float order of the x86 build llama.cpp runs
(its AVX2/AVX-512 vec_dot, repacked gemv/gemm, tinyBLAS or tiled kernels; each format module says which), with
integer dot products: T == 1 runs the gemv kernel, T > 1 the gemm kernel; both
parallelise over weight rows (numba prange, thread count from kernels.config.set_num_threads) and produce
bit-identical rows, independent of the thread count. Where llama.cpp's batched kernels sum in another order than
its single-token ones, `order` (kernels/order.py) says which a batch's rows follow.

Outputs whose rows start on cache lines (kernels.quants.base.empty_aligned, as the forward pass allocates them) let
the Q4_K gemm write its results by streaming stores, which leave the caches to the activations; any other C-contiguous
output gets the same bits, written element by element.

Single token (T == 1) with the AVX2 kernels of Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q6_K: one numba call converts x
and runs the gemv of up to 3 weights in one parallel region (kernels/quants/gemv1.py); matmul_many is how a
model shares that conversion between Q/K/V or gate/up (ggml-cpu converts src1 once per mul_mat too).
"""

from __future__ import annotations

import numpy as np

from kernels.errors import ModelError

from .ggml_type import GGMLType, type_name
from .quants import get_format, readonly
from .quants.base import llama_repacks
from .config import work_chunks as _num_threads
from .order import Order
from .quants import gemv1, kquants, q32
from .quants._simd import HAS_AVX2
from .quants.vec_dot_type import quantize_activations

__all__ = ["Weight", "matmul", "matmul_many", "FusedGemv", "UnsupportedTypeError"]

# fused T == 1 kernels (kernels/quants/gemv1.py): ggml type -> (kernel, format code inside that kernel).
# Weights whose (kernel, code) match - or any K-quant pair, the Q8_K kernel takes per-weight codes - can share
# one call.
_FUSED = {2: ("q8_0", 0), 6: ("q8_0", 1), 8: ("q8_0", 2), 3: ("q8_1", 0), 7: ("q8_1", 1),
          12: ("q8_K", 0), 14: ("q8_K", 1), 20: ("iq4", 0), 23: ("iq4", 1), 39: ("iq4", 2)} if HAS_AVX2 else {}


# types whose fused T == 1 kernel assumes llama.cpp's repacked order (kernels/quants/gemv1.py)
_REPACKED_LAYOUT = (GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.IQ4_NL, GGMLType.MXFP4)


class UnsupportedTypeError(ModelError):
    """A tensor's ggml type has no matmul / dequantize kernel."""


class Weight:
    """A 2-D GGUF weight ready for matmul: K = ne0 (inner, contiguous), N = ne1 (rows).

    Keeps a read-only view of the raw bytes (for get_rows) and the format's packed form for the kernels
    (which may be the same arrays; never a float expansion)."""

    __slots__ = ("ggml_type", "ne0", "ne1", "name", "fmt", "raw", "packed", "fused", "_group", "_x1", "_o1", "_solo")

    def __init__(self, ggml_type: int, data: np.ndarray, ne0: int, ne1: int, name: str = ""):
        fmt = get_format(ggml_type)
        label = name or "<unnamed>"
        if fmt is None:
            raise UnsupportedTypeError(
                f"tensor '{label}': ggml type {type_name(ggml_type)} ({int(ggml_type)}) has no matmul kernel")
        ne0, ne1 = int(ne0), int(ne1)
        if ne0 <= 0 or ne1 <= 0 or ne0 % fmt.block_size:
            raise ValueError(f"tensor '{label}': shape [{ne0}, {ne1}] invalid for {fmt.name} "
                             f"(ne0 must be a positive multiple of {fmt.block_size})")
        row_bytes = fmt.row_bytes(ne0)
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8:
            raise ValueError(f"tensor '{label}': data must be a uint8 numpy array of raw GGUF bytes")
        if data.size != ne1 * row_bytes:
            raise ValueError(f"tensor '{label}': {data.size} bytes, expected {ne1} rows x {row_bytes} bytes "
                             f"= {ne1 * row_bytes} for {fmt.name} [{ne0}, {ne1}]")
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        self.ggml_type = fmt.ggml_type
        self.ne0, self.ne1, self.name = ne0, ne1, name
        self.fmt = fmt
        self.raw = readonly(data.reshape(ne1, row_bytes))  # (N, row_bytes)
        self.packed = fmt.pack(self.raw, ne0)
        self.fused = _FUSED.get(int(fmt.ggml_type))  # (kernel, code) of the fused T == 1 path, or None
        if self.fused is not None and fmt.ggml_type in _REPACKED_LAYOUT and not llama_repacks(fmt.ggml_type, ne1):
            self.fused = None  # the fused kernels read the repacked layout only
        # weights with equal _group can go through one fused call (K-quants: any mix of Q4_K / Q6_K)
        self._group = None if self.fused is None else (self.fused if self.fused[0] != "q8_K" else "q8_K")
        self._x1, self._o1 = (1, ne0), (1, ne1)  # T == 1 shapes of the matmul fast path
        self._solo = None  # (kernel, leading args, prefetch) of the fused call for this weight alone
        if self.fused is not None:
            self._solo = _fused_call([self])

    def place(self, rows: np.ndarray) -> None:
        """Read the rows as stored from `rows` (the same bytes as `raw`, elsewhere: Model.load reads them into its
        huge-page WeightArena) for a weight whose kernels read the raw rows (not `repacked`)."""
        assert not self.repacked and rows.nbytes == self.raw.nbytes
        self.packed = self.fmt.pack(readonly(rows.reshape(self.raw.shape)), self.ne0)
        if self.fused is not None:
            self._solo = _fused_call([self])

    @property
    def shape(self) -> tuple[int, int]:
        """numpy-style (N, K)."""
        return self.ne1, self.ne0

    @property
    def repacked(self) -> bool:
        """The kernels read a copy in their own layout, not the raw bytes (which only get_rows reads)."""
        return not any(np.may_share_memory(a, self.raw) for a in self.packed)

    def __repr__(self) -> str:
        return f"Weight({self.name!r}, {self.fmt.name}, ne=[{self.ne0}, {self.ne1}])"

    def get_rows(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """ids (n,) int32/int64 -> out (n, K) float32: dequantized rows (ggml GET_ROWS)."""
        label = self.name or "<unnamed>"
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"tensor '{label}': get_rows ids must be a 1-D integer array")
        ids = ids.astype(np.int64, copy=False)
        if ids.size and (ids.min() < 0 or ids.max() >= self.ne1):
            raise ValueError(f"tensor '{label}': row id out of range [0, {self.ne1})")
        _check_out(out, (ids.shape[0], self.ne0), label)
        self.fmt.dequantize_rows(self.raw, ids, out)
        return out


def _check_out(out, shape, label):
    if (not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != shape
            or not out.flags.c_contiguous or not out.flags.writeable):
        got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise ValueError(f"tensor '{label}': out must be a writable C-contiguous float32 array of shape {shape}, "
                         f"got {got}")


def _check_x(w, x):
    """x (T, K) or (K,) float32 C-contiguous -> the 2-D view."""
    label = w.name or "<unnamed>"
    if not isinstance(x, np.ndarray):
        raise ValueError(f"tensor '{label}': x must be a numpy float32 array")
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    if x2.ndim != 2 or x2.shape[1] != w.ne0 or x.dtype != np.float32:
        raise ValueError(f"tensor '{label}': x must be float32 of shape (T, {w.ne0}), got {x.dtype} {x.shape}")
    if not x2.flags.c_contiguous:
        raise ValueError(f"tensor '{label}': x must be C-contiguous")
    return x2


def _out2(w, x, T, out):
    out2 = out.reshape(1, -1) if isinstance(out, np.ndarray) and out.ndim == 1 and x.ndim == 1 else out
    _check_out(out2, (T, w.ne1), w.name or "<unnamed>")
    return out2


# software-prefetch distances of the gemv loops, bytes ahead of the rows being read (_simd.prefetch_span)
_PF_K = kquants.GEMV_PF
_PF_Q32 = q32.GEMV_PF
_F32 = np.dtype(np.float32)
_BATCHED = Order.BATCHED  # (one global lookup on the decode path)


def _fused_call(ws):
    """(kernel, leading arguments, prefetch distance) of the fused T == 1 call computing 1..3 weights of the same
    _group; the kernel's remaining arguments are (x, out0, out1, out2, threads, prefetch), unused slots
    repeating slot 0."""
    n = len(ws)
    p = [w.packed[0] for w in ws]
    p += [p[0]] * (3 - n)
    kind, code = ws[0].fused
    if kind == "q8_K":
        c = [w.fused[1] for w in ws] + [0] * (3 - n)
        return gemv1.gemv_many_q8_K, (c[0], p[0], c[1], p[1], c[2], p[2], n), _PF_K
    return gemv1.Q32_GEMV[kind, code], (p[0], p[1], p[2], n), _PF_Q32


def _gemv_fused(ws, x2, outs):
    """One fused call for 1..3 weights of the same _group (T == 1)."""
    kern, pre, pf = _fused_call(ws)
    o = list(outs) + [outs[0]] * (3 - len(ws))
    kern(*pre, x2, o[0], o[1], o[2], _num_threads(), pf)


class FusedGemv:
    """matmul_many(weights, x, outs) for one token, with what matmul_many works out on every call (the weights'
    group, the kernel and its arguments) worked out once: decoding calls Q/K/V and gate/up ~60 times a token.
    None of the weights' shapes change, so a call checks only x and the outputs. `FusedGemv.of(weights)` is
    None where the weights cannot share one fused call."""

    __slots__ = ("kern", "pre", "pf", "x_shape", "out_shapes", "n")

    def __init__(self, weights):
        self.kern, self.pre, self.pf = _fused_call(weights)
        self.x_shape = (1, weights[0].ne0)
        self.out_shapes = tuple((1, w.ne1) for w in weights)
        self.n = len(weights)

    @staticmethod
    def of(weights) -> "FusedGemv | None":
        g = weights[0]._group
        if g is None or len(weights) > 3 or any(w._group != g or w.ne0 != weights[0].ne0 for w in weights):
            return None
        return FusedGemv(weights)

    def __call__(self, x, outs) -> None:
        if (type(x) is not np.ndarray or x.shape != self.x_shape or x.dtype is not _F32
                or not x.flags.c_contiguous or len(outs) != self.n):
            raise ValueError(f"FusedGemv: x must be C-contiguous float32 of shape {self.x_shape}")
        for o, shape in zip(outs, self.out_shapes):
            if (type(o) is not np.ndarray or o.shape != shape or o.dtype is not _F32 or not o.flags.c_contiguous
                    or not o.flags.writeable):
                raise ValueError(f"FusedGemv: outputs must be writable C-contiguous float32 of shapes {self.out_shapes}")
        o0 = outs[0]
        self.kern(*self.pre, x, o0, outs[1] if self.n > 1 else o0, outs[2] if self.n > 2 else o0, _num_threads(),
                  self.pf)


def _gemm(w, a, out, order):
    fn = w.fmt.gemm_llama if order and w.fmt.gemm_llama is not None else w.fmt.gemm
    fn(w.packed, a, out)


def batched_rows(T: int) -> int:
    """The smallest batch of >= T rows that takes llama.cpp's batched kernels for every row: the K-quants'
    tiled matmul from kquants.TILED_MIN_BATCH tokens, the repacked gemms on the first T - T % 4."""
    return max(kquants.TILED_MIN_BATCH, -(-T // 4) * 4)


def _every_row(product, x2, outs2):
    """Order.BATCHED: the product on x2 (T, K) padded with zero rows to batched_rows(T) in llama.cpp's batch
    order, whose rows do not depend on each other; the first T rows copied to outs2."""
    T = x2.shape[0]
    xp = np.zeros((batched_rows(T), x2.shape[1]), np.float32)
    xp[:T] = x2
    ops = [np.empty((xp.shape[0], o.shape[1]), np.float32) for o in outs2]
    product(xp, ops)
    for o, op in zip(outs2, ops):
        o[:] = op[:T]


def matmul(w: Weight, x: np.ndarray, out: np.ndarray, order: Order = Order.SINGLE) -> np.ndarray:
    """out (T, N) = ggml mul_mat(w, x) for x (T, K) float32 (1-D x / out are taken as T = 1), every row in
    llama.cpp's single-token order (SINGLE: a batch's rows equal the single-token products bit for bit), in its
    batch order where that differs (LLAMA, T > 1; BlockFormat.gemm_llama), or in its batch order for every row
    (BATCHED)."""
    if order is _BATCHED:
        x2 = _check_x(w, x)
        T = x2.shape[0]
        if batched_rows(T) != T:
            if T:
                _every_row(lambda xp, ops: matmul(w, xp, ops[0], Order.LLAMA), x2, [_out2(w, x, T, out)])
            return out
        order = Order.LLAMA  # a large batch: llama.cpp's own order takes the batched kernels already
    if (w.fused is not None and type(x) is np.ndarray and type(out) is np.ndarray and x.shape == w._x1
            and out.shape == w._o1 and x.dtype is _F32 and out.dtype is _F32 and x.flags.c_contiguous
            and out.flags.c_contiguous and out.flags.writeable):
        # decode fast path (~1 us of Python): the checks below, inlined for the common (1, K) -> (1, N) case
        kern, pre, pf = w._solo
        kern(*pre, x, out, out, out, _num_threads(), pf)
        return out
    x2 = _check_x(w, x)
    T = x2.shape[0]
    out2 = _out2(w, x, T, out)
    if T == 0:
        return out
    if T == 1 and w.fused is not None:
        _gemv_fused((w,), x2, (out2,))
        return out
    a = quantize_activations(w.fmt.vec_dot_type, x2)
    if T == 1:
        w.fmt.gemv(w.packed, a, out2)
    else:
        _gemm(w, a, out2, order)
    return out


def matmul_many(weights, x: np.ndarray, outs, order: Order = Order.SINGLE) -> list:
    """outs[i] (T, N_i) = matmul(weights[i], x, outs[i], order) for weights sharing the inner size K, with x
    converted once per vec_dot_type (and, for T == 1 on the fused formats, up to 3 products in one parallel
    region). Results are bit-identical to separate matmul calls. Returns outs."""
    weights = list(weights)
    outs = list(outs)
    if len(weights) != len(outs):
        raise ValueError(f"matmul_many: {len(weights)} weights but {len(outs)} outputs")
    if not weights:
        return outs
    x2 = None
    for w in weights:
        if w.ne0 != weights[0].ne0:
            raise ValueError(f"matmul_many: weights must share K, got {weights[0].ne0} and {w.ne0} "
                             f"('{weights[0].name}', '{w.name}')")
        x2 = _check_x(w, x)
    T = x2.shape[0]
    outs2 = [_out2(w, x, T, o) for w, o in zip(weights, outs)]
    if T == 0:
        return outs
    if order is _BATCHED:
        if batched_rows(T) != T:
            _every_row(lambda xp, ops: matmul_many(weights, xp, ops, Order.LLAMA), x2, outs2)
            return outs
        order = Order.LLAMA
    rest = []
    if T == 1:
        groups: dict = {}
        for i, w in enumerate(weights):
            if w._group is None:
                rest.append(i)
            else:
                groups.setdefault(w._group, []).append(i)
        for idx in groups.values():
            for j in range(0, len(idx), 3):
                sel = idx[j:j + 3]
                _gemv_fused([weights[i] for i in sel], x2, [outs2[i] for i in sel])
    else:
        rest = list(range(len(weights)))
    acts: dict = {}
    for i in rest:
        w = weights[i]
        vt = w.fmt.vec_dot_type
        if vt not in acts:
            acts[vt] = quantize_activations(vt, x2)
        if T == 1:
            w.fmt.gemv(w.packed, acts[vt], outs2[i])
        else:
            _gemm(w, acts[vt], outs2[i], order)
    return outs
