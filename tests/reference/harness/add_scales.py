"""Copy a GGUF and add llama.cpp's optional per-tensor weight scales, as convert_hf_to_gguf.py writes them for NVFP4
checkpoints (`<weight>.scale`: the product is multiplied by it; `<weight>.input_scale`: loaded, unused on the CPU),
for every product weight of every layer and for the output: synapse's test data (tests/reference/README.md).

    python add_scales.py IN.gguf OUT.gguf

Scales: a deterministic spread of values in [0.25, 4), one per tensor (input scales: 1 / that)."""

from __future__ import annotations

import sys

import gguf
import numpy as np

from gguf_rewrite import rewrite

WEIGHTS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def with_scales(reader: gguf.GGUFReader) -> list:
    out = [(t.name, t.data, t.tensor_type) for t in reader.tensors]
    products = [t.name for t in reader.tensors
                if t.name.endswith(".weight") and (t.name.split(".")[-2] in WEIGHTS or t.name == "output.weight")]
    for i, name in enumerate(products):
        s = np.float32(2.0 ** ((i * 7 % 16) / 4 - 2))  # 0.25 .. 3.4
        out += [(name.replace(".weight", ".scale"), np.array([s], np.float32), gguf.GGMLQuantizationType.F32),
                (name.replace(".weight", ".input_scale"), np.array([1 / s], np.float32), gguf.GGMLQuantizationType.F32)]
    return out


if __name__ == "__main__":
    rewrite(sys.argv[1], sys.argv[2], with_scales)
