"""Control vectors: per-layer directions added to each block's output, as llama.cpp's common arguments
`--control-vector FNAME`, `--control-vector-scaled FNAME:SCALE` and `--control-vector-layer-range START END` load
them (common/common.cpp common_control_vector_load, src/llama-adapter.cpp llama_adapter_cvec).

A control vector file is a GGUF whose tensors are F32 vectors named `direction.<layer>` (layer >= 1; llama.cpp
never adds one to layer 0). Every file's directions, times its scale, are summed into one buffer; block il of
the graph then adds the buffer's direction il to its output (`l_out`), for il in the layer range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from kernels.errors import SynapseError


@dataclass
class ControlVectorSpec:
    """The flags: (file, scale) in command-line order, and the layer range (<= 0: from layer 1 / to the last)."""
    files: list[tuple[str, float]] = field(default_factory=list)
    layer_start: int = -1
    layer_end: int = -1


def _load_one(path: str, strength: float) -> tuple[int, np.ndarray]:
    """common_control_vector_load_one -> (n_embd, data (n_embd * max layer,) float32, layer 1 at [0])."""
    from kernels.ggml_type import GGMLType
    from kernels.gguf import GGUFError, GGUFReader

    try:
        reader = GGUFReader(path)
    except (GGUFError, OSError) as e:
        raise SynapseError(f"failed to load control vector file from {path}: {e}") from None
    with reader:
        if not reader.tensors:
            raise SynapseError(f"no direction tensors found in {path}")
        n_embd, data = -1, np.zeros(0, np.float32)
        for t in reader.tensors:
            prefix, _, rest = t.name.partition(".")
            m = re.match(r"\s*[+-]?\d+", rest) if prefix == "direction" else None  # (std::stoi)
            layer = int(m.group(0)) if m else -1
            if layer < 0:
                raise SynapseError(f"invalid/unparsable direction tensor layer index in {path}")
            if layer == 0:
                raise SynapseError(f"invalid (zero) direction tensor layer index in {path}")
            if t.ggml_type != GGMLType.F32:
                raise SynapseError(f"invalid (non-F32) direction tensor type in {path}")
            if sum(1 for d in t.ne if d != 1) > 1:  # ggml_n_dims
                raise SynapseError(f"invalid (non-1D) direction tensor shape in {path}")
            if n_embd == -1:
                n_embd = t.n_elements
            elif t.n_elements != n_embd:
                raise SynapseError(f"direction tensor in {path} does not match previous dimensions")
            if len(data) < n_embd * layer:
                data = np.concatenate([data, np.zeros(n_embd * layer - len(data), np.float32)])
            src = t.data.view(np.float32)
            dst = data[n_embd * (layer - 1): n_embd * layer]
            dst += src * np.float32(strength)  # (float arithmetic; several directions of a layer add up)
        return n_embd, data


def control_vectors(spec: ControlVectorSpec, n_layer: int, n_embd: int) -> list[np.ndarray | None]:
    """common_control_vector_load + llama_adapter_cvec::apply -> per layer il the (n_embd,) float32 direction
    block il adds to its output, or None. A layer in the range without data in the files adds zeros, as there."""
    total_embd, total = -1, np.zeros(0, np.float32)
    for path, strength in spec.files:
        e, data = _load_one(path, strength)
        if total_embd == -1:
            total_embd, total = e, data
            continue
        if e != total_embd:
            raise SynapseError(f"control vectors in {path} does not match previous dimensions")
        if len(total) < len(data):
            total = np.concatenate([total, np.zeros(len(data) - len(total), np.float32)])
        total[: len(data)] += data
    if total_embd != n_embd:
        raise SynapseError("control vector n_embd does not match model")
    start = spec.layer_start if spec.layer_start > 0 else 1
    end = spec.layer_end if spec.layer_end > 0 else n_layer
    out: list[np.ndarray | None] = [None] * n_layer
    for il in range(1, n_layer):
        if start <= il <= end:
            off = n_embd * (il - 1)
            out[il] = total[off: off + n_embd].copy() if off + n_embd <= len(total) else np.zeros(n_embd, np.float32)
    return out
