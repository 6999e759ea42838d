"""Adapters on top of a model's weights, as llama.cpp's common arguments load them.

Control vectors (`--control-vector FNAME`, `--control-vector-scaled FNAME:SCALE`, `--control-vector-layer-range
START END`; common/common.cpp common_control_vector_load, src/llama-adapter.cpp llama_adapter_cvec): a GGUF whose
tensors are F32 vectors named `direction.<layer>` (layer >= 1; llama.cpp never adds one to layer 0). Every file's
directions, times its scale, are summed into one buffer; block il of the graph then adds the buffer's direction
il to its output (`l_out`), for il in the layer range.

LoRA adapters (`--lora FNAME`, `--lora-scaled FNAME:SCALE`; src/llama-adapter.cpp llama_adapter_lora_init,
src/llama-graph.cpp build_lora_mm and build_inp_embd): a GGUF of tensor pairs `<weight>.lora_a` (ne [n_in, rank])
and `<weight>.lora_b` (ne [rank, n_out]); every product of that weight gets scale * (B @ (A @ x)) added, with
scale = adapter_scale * alpha / rank (adapter_scale where alpha is 0). For the token embeddings A and B are
stored transposed (A: [rank, n_vocab], B: [rank, n_embd]) and the rows of A are gathered instead.
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


def _load_one(path: str, strength: float, n_layer: int) -> tuple[int, dict[int, np.ndarray]]:
    """common_control_vector_load_one -> (n_embd, {layer: (n_embd,) float32}): llama.cpp's buffer of n_embd floats
    per layer from 1, kept here for the layers below n_layer only (the others are never applied; a file naming
    layer 10**9 must not allocate for it)."""
    from kernels.ggml_type import GGMLType
    from kernels.gguf import GGUFError, GGUFReader

    try:
        reader = GGUFReader(path)
    except (GGUFError, OSError) as e:
        raise SynapseError(f"failed to load control vector file from {path}: {e}") from None
    with reader:
        if not reader.tensors:
            raise SynapseError(f"no direction tensors found in {path}")
        n_embd, data = -1, {}
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
            if layer < n_layer:
                dst = data.setdefault(layer, np.zeros(n_embd, np.float32))
                dst += t.data.view(np.float32) * np.float32(strength)  # (float; a layer's directions add up)
        return n_embd, data


def control_vectors(spec: ControlVectorSpec, n_layer: int, n_embd: int) -> list[np.ndarray | None]:
    """common_control_vector_load + llama_adapter_cvec::apply -> per layer il the (n_embd,) float32 direction
    block il adds to its output, or None. A layer in the range without data in the files adds zeros, as there."""
    total_embd, total = -1, {}
    for path, strength in spec.files:
        e, data = _load_one(path, strength, n_layer)
        if total_embd not in (-1, e):
            raise SynapseError(f"control vectors in {path} does not match previous dimensions")
        total_embd = e
        for layer, v in data.items():  # result.data[i] += cur.data[i]
            if layer in total:
                total[layer] += v
            else:
                total[layer] = v
    if total_embd != n_embd:
        raise SynapseError("control vector n_embd does not match model")
    start = spec.layer_start if spec.layer_start > 0 else 1
    end = spec.layer_end if spec.layer_end > 0 else n_layer
    out: list[np.ndarray | None] = [None] * n_layer
    for il in range(1, n_layer):
        if start <= il <= end:  # (a layer in the range without data adds zeros, as there)
            out[il] = total.get(il, np.zeros(n_embd, np.float32))
    return out


@dataclass
class LoraWeight:
    """One adapted weight: the products A (rank outputs) and B (the weight's outputs), or for the token
    embeddings A's rows (get_rows) and B."""
    a: object  # kernels.matmul.Weight
    b: object
    rank: int

    def scale(self, alpha: float, adapter_scale: float) -> np.float32:
        """llama_adapter_lora_weight::get_scale, in float."""
        if alpha == 0.0:
            return np.float32(adapter_scale)
        return np.float32(np.float32(adapter_scale) * np.float32(alpha)) / np.float32(self.rank)


@dataclass
class LoraAdapter:
    path: str
    alpha: float
    weights: dict[str, LoraWeight]  # by the model tensor's name
    reader: object = None  # the file's GGUFReader (the weights view its mapping)


def load_lora(path: str, model) -> LoraAdapter:
    """llama_adapter_lora_init's checks and tensors (errors as llama.cpp words them)."""
    from kernels.errors import GGUFError
    from kernels.ggml_type import GGMLType
    from kernels.gguf import GGUFReader
    from kernels.matmul import Weight
    from kernels.quants.base import llama_repacks

    def fail(msg: str):
        raise SynapseError(f"failed to load lora adapter '{path}': {msg}")

    try:
        reader = GGUFReader(path)
    except (GGUFError, OSError) as e:
        fail(f"failed to load lora adapter from file ({e})")
    general_type = reader.get("general.type", "")
    if general_type != "adapter":
        fail(f"expect general.type to be 'adapter', but got: {general_type}")
    if reader.get("general.architecture", "") != model.hparams.arch:
        fail("model arch and LoRA arch mismatch")
    adapter_type = reader.get("adapter.type", "")
    if adapter_type != "lora":
        fail(f"expect adapter.type to be 'lora', but got: {adapter_type}")
    alpha = reader.get("adapter.lora.alpha", 0.0)
    if not isinstance(alpha, float):
        fail("adapter.lora.alpha is not a float")
    if reader.get("adapter.alora.invocation_tokens") is not None:
        fail("activated LoRA (adapter.alora.invocation_tokens) is not supported")
    pairs: dict[str, dict[str, object]] = {}
    for t in reader.tensors:
        for suffix in (".lora_a", ".lora_b"):
            if t.name.endswith(suffix):
                pairs.setdefault(t.name[: -len(suffix)], {})[suffix[-1]] = t
                break
        else:
            if not t.name.endswith("_norm.weight"):
                fail(f"LoRA tensor '{t.name}' has unexpected suffix")
    weights = {}
    for name in sorted(pairs):
        a, b = pairs[name].get("a"), pairs[name].get("b")
        if a is None or b is None:
            fail(f"LoRA tensor pair for '{name}' is missing one component")
        base = model.reader.tensor(name)
        if base is None:
            fail(f"LoRA tensor '{name}' does not exist in base model (hint: maybe wrong base model?)")
        if name.endswith(".attn_qkv.weight"):  # (synapse computes a fused QKV weight as its three row ranges)
            fail(f"LoRA tensor '{name}': adapters of a fused attn_qkv weight are not supported")
        ne = lambda t: tuple(t.ne) + (1,) * (2 - len(t.ne))  # noqa: E731
        (a0, a1), (b0, b1), (m0, m1) = ne(a)[:2], ne(b)[:2], ne(base)[:2]
        if name.endswith("token_embd.weight"):
            if m0 != b1 or m1 != a1:
                fail(f"tensor '{name}' has incorrect shape (hint: maybe wrong base model?)")
        else:
            if m0 != a0 or m1 != b1:
                fail(f"tensor '{name}' has incorrect shape (hint: maybe wrong base model?)")
            if a1 != b0:
                fail('lora_a tensor is not transposed (hint: adapter from "finetune" example is no longer supported)')
        for t, n0, n1 in ((a, a0, a1), (b, b0, b1)):
            if llama_repacks(t.ggml_type, n1):  # (llama.cpp keeps adapters in plain CPU buffers: never repacked)
                fail(f"LoRA tensor '{t.name}' of type {GGMLType(t.ggml_type).name} is not supported")
        try:
            weights[name] = LoraWeight(Weight(a.ggml_type, a.data, a0, a1, name=a.name),
                                       Weight(b.ggml_type, b.data, b0, b1, name=b.name), b0)
        except (ValueError, SynapseError) as e:  # (a type without kernels, a bad size)
            fail(str(e))
    return LoraAdapter(path, float(alpha), weights, reader)


def lora_adapters(files: list[tuple[str, float]], model) -> list[tuple[LoraAdapter, float]]:
    """The adapters of --lora/--lora-scaled, in the order llama.cpp's graph adds them: the context keeps them in
    an unordered_map keyed by pointer, where libstdc++ puts a new node first in the list or in its bucket, so two
    iterate last-inserted first (three or more: by pointer values; reversed here too); an adapter of scale 0 is
    left out (llama_context::set_adapters_lora)."""
    loaded = [(load_lora(path, model), scale) for path, scale in files]
    if model.tied_output and any("token_embd.weight" in a.weights for a, _ in loaded):
        raise SynapseError("a LoRA of token_embd.weight on a model whose output head is token_embd: llama.cpp "
                           "applies it to the output too, where its shapes do not fit (it aborts)")
    return [(a, np.float32(s)) for a, s in reversed(loaded) if s != 0.0]
