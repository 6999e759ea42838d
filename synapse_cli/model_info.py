"""What llama.cpp says about a model file without running it (src/llama-model.cpp, llama-model-loader.cpp):
llama_model_desc ("qwen2 1B Q4_K - Medium"), the LLM_TYPE name, the file type (llama_ftype, with the loader's
guess when general.file_type is absent), the size and the parameter count. Used by bench and inspect-gguf."""

from __future__ import annotations

import re

import numpy as np

from kernels.ggml_type import GGMLType


def llm_type_name(arch: str, n_layer: int, n_embd: int, n_head: int, n_head_kv: int, n_vocab: int,
                  n_expert: int = 0) -> str:
    """The LLM_TYPE name llama.cpp's load_arch_hparams picks from the layer count ("?B" when unknown)."""
    L = n_layer
    if arch == "llama":
        if n_expert == 8:
            return {32: "8x7B", 56: "8x22B"}.get(L, "?B")
        if L == 32:  # granite uses a vocab of 49152
            return "3B" if n_vocab == 49152 else ("7B" if n_vocab < 40000 else "8B")
        if L == 80:
            return "65B" if n_head == n_head_kv else "70B"
        return {16: "1B", 22: "1B", 26: "3B", 28: "3B", 30: "256M", 36: "8B", 40: "13B", 48: "34B",
                60: "30B"}.get(L, "?B")
    if arch == "qwen2":
        if L == 24:
            return "0.5B" if n_embd == 1024 else "1B"
        if L == 28:
            return "1.5B" if n_embd == 1536 else "7B"
        if L == 40:
            return "4B" if n_head == 20 else "13B"
        return {32: "7B", 36: "3B", 48: "14B", 64: "32B", 80: "70B"}.get(L, "?B")
    if arch == "mistral3":
        return {26: "3B", 34: "8B", 40: "14B"}.get(L, "?B")
    return "?B"


# llama.h enum llama_ftype -> (LLAMA_FTYPE_ name, llama_ftype_name() text)
LLAMA_FTYPES: dict[int, tuple[str, str]] = {
    0: ("ALL_F32", "all F32"), 1: ("MOSTLY_F16", "F16"), 2: ("MOSTLY_Q4_0", "Q4_0"), 3: ("MOSTLY_Q4_1", "Q4_1"),
    7: ("MOSTLY_Q8_0", "Q8_0"), 8: ("MOSTLY_Q5_0", "Q5_0"), 9: ("MOSTLY_Q5_1", "Q5_1"),
    10: ("MOSTLY_Q2_K", "Q2_K - Medium"), 11: ("MOSTLY_Q3_K_S", "Q3_K - Small"),
    12: ("MOSTLY_Q3_K_M", "Q3_K - Medium"), 13: ("MOSTLY_Q3_K_L", "Q3_K - Large"),
    14: ("MOSTLY_Q4_K_S", "Q4_K - Small"), 15: ("MOSTLY_Q4_K_M", "Q4_K - Medium"),
    16: ("MOSTLY_Q5_K_S", "Q5_K - Small"), 17: ("MOSTLY_Q5_K_M", "Q5_K - Medium"), 18: ("MOSTLY_Q6_K", "Q6_K"),
    19: ("MOSTLY_IQ2_XXS", "IQ2_XXS - 2.0625 bpw"), 20: ("MOSTLY_IQ2_XS", "IQ2_XS - 2.3125 bpw"),
    21: ("MOSTLY_Q2_K_S", "Q2_K - Small"), 22: ("MOSTLY_IQ3_XS", "IQ3_XS - 3.3 bpw"),
    23: ("MOSTLY_IQ3_XXS", "IQ3_XXS - 3.0625 bpw"), 24: ("MOSTLY_IQ1_S", "IQ1_S - 1.5625 bpw"),
    25: ("MOSTLY_IQ4_NL", "IQ4_NL - 4.5 bpw"), 26: ("MOSTLY_IQ3_S", "IQ3_S - 3.4375 bpw"),
    27: ("MOSTLY_IQ3_M", "IQ3_S mix - 3.66 bpw"), 28: ("MOSTLY_IQ2_S", "IQ2_S - 2.5 bpw"),
    29: ("MOSTLY_IQ2_M", "IQ2_M - 2.7 bpw"), 30: ("MOSTLY_IQ4_XS", "IQ4_XS - 4.25 bpw"),
    31: ("MOSTLY_IQ1_M", "IQ1_M - 1.75 bpw"), 32: ("MOSTLY_BF16", "BF16"),
    36: ("MOSTLY_TQ1_0", "TQ1_0 - 1.69 bpw ternary"), 37: ("MOSTLY_TQ2_0", "TQ2_0 - 2.06 bpw ternary"),
    38: ("MOSTLY_MXFP4_MOE", "MXFP4 MoE"), 39: ("MOSTLY_NVFP4", "NVFP4"), 40: ("MOSTLY_Q1_0", "Q1_0"),
    41: ("MOSTLY_Q2_0", "Q2_0"),
}

# llama-model-loader.cpp: the file type guessed from the most common tensor type when the key is absent
_GUESS_FTYPE = {
    GGMLType.F32: 0, GGMLType.F16: 1, GGMLType.BF16: 32, GGMLType.Q4_0: 2, GGMLType.Q4_1: 3, GGMLType.Q5_0: 8,
    GGMLType.Q5_1: 9, GGMLType.Q8_0: 7, GGMLType.Q2_K: 10, GGMLType.Q3_K: 12, GGMLType.Q4_K: 15,
    GGMLType.Q5_K: 17, GGMLType.Q6_K: 18, GGMLType.TQ1_0: 36, GGMLType.TQ2_0: 37, GGMLType.IQ2_XXS: 19,
    GGMLType.IQ2_XS: 20, GGMLType.IQ2_S: 28, GGMLType.IQ3_XXS: 23, GGMLType.IQ1_S: 24, GGMLType.IQ1_M: 31,
    GGMLType.IQ4_NL: 25, GGMLType.IQ4_XS: 30, GGMLType.IQ3_S: 26, GGMLType.NVFP4: 39, GGMLType.Q1_0: 40,
    GGMLType.Q2_0: 41,
}

FTYPE_GUESSED = 1024  # LLAMA_FTYPE_GUESSED: or-ed into a file type llama.cpp guessed


def ftype_name(ftype: int) -> str:
    """llama_ftype_name, including the "(guessed) " prefix for guessed file types."""
    name = LLAMA_FTYPES.get(ftype & ~FTYPE_GUESSED, ("", "unknown, may not work"))[1]
    return "(guessed) " + name if ftype & FTYPE_GUESSED else name


def _weight_order_key(name: str):
    # llama_model_loader::weight_name_comparer: by sscanf(name, "blk.%d.") layer (-1 if none), then name
    m = re.match(r"blk\.\s*([+-]?\d+)", name)
    return (int(m.group(1)) if m else -1, name)


def file_ftype(reader) -> int:
    """llama_model_loader's file type: general.file_type, or its guess | FTYPE_GUESSED: the most frequent
    tensor type, counted in its weights_map order (layer, then name), the first type to lead keeps a tie."""
    counts: dict[int, int] = {}
    n_max, type_max = 0, int(GGMLType.F32)
    for t in sorted(reader.tensors, key=lambda t: _weight_order_key(t.name)):
        counts[t.ggml_type] = counts.get(t.ggml_type, 0) + 1
        if n_max < counts[t.ggml_type]:
            n_max, type_max = counts[t.ggml_type], t.ggml_type
    try:
        guessed = _GUESS_FTYPE.get(GGMLType(type_max), 0)
    except ValueError:
        guessed = 0
    v = reader.get("general.file_type")
    if v is not None and isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    return guessed | FTYPE_GUESSED


def _first_int(v, default: int = 0) -> int:
    if v is None:
        return default
    if isinstance(v, np.ndarray):  # per-layer arrays: llama.cpp's n_head() is layer 0's
        return int(v[0]) if len(v) else default
    return int(v)


def model_desc(reader) -> str:
    """llama_model_desc: e.g. "llama 256M Q4_1", "qwen2 1B Q4_K - Medium", "llama ?B Q8_0"."""
    arch = reader.get("general.architecture") or "unknown"
    a = arch
    n_layer = _first_int(reader.get(f"{a}.block_count"))
    n_embd = _first_int(reader.get(f"{a}.embedding_length"))
    n_head = _first_int(reader.get(f"{a}.attention.head_count"))
    n_head_kv = _first_int(reader.get(f"{a}.attention.head_count_kv"), n_head)
    n_expert = _first_int(reader.get(f"{a}.expert_count"))
    tokens = reader.get("tokenizer.ggml.tokens")
    n_vocab = _first_int(reader.get(f"{a}.vocab_size"), len(tokens) if tokens is not None else 0)
    type_name = llm_type_name(arch, n_layer, n_embd, n_head, n_head_kv, n_vocab, n_expert)
    return f"{arch} {type_name} {ftype_name(file_ftype(reader))}"


def model_size(reader) -> int:
    """llama_model_size: the sum of every tensor's bytes (ggml_nbytes)."""
    return sum(t.nbytes for t in reader.tensors)


def model_n_params(reader) -> int:
    """llama_model_n_params: the sum of every tensor's element count."""
    return sum(t.n_elements for t in reader.tensors)
