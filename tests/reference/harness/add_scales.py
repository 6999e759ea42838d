"""Copy a GGUF and add llama.cpp's optional per-tensor weight scales, as convert_hf_to_gguf.py writes them for NVFP4
checkpoints (`<weight>.scale`: the product is multiplied by it; `<weight>.input_scale`: loaded, unused on the CPU),
for every product weight of every layer and for the output: synapse's test data (tests/reference/README.md).

    python add_scales.py IN.gguf OUT.gguf

Scales: a deterministic spread of values in [0.25, 4), one per tensor (input scales: 1 / that)."""

from __future__ import annotations

import sys

import gguf
import numpy as np

WEIGHTS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def main(src: str, dst: str) -> None:
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    names = [t.name for t in reader.tensors]
    extra = []
    for i, name in enumerate(n for n in names if n.endswith(".weight") and (n.split(".")[-2] in WEIGHTS
                                                                          or n == "output.weight")):
        s = np.float32(2.0 ** ((i * 7 % 16) / 4 - 2))  # 0.25 .. 3.4
        extra += [(name.replace(".weight", ".scale"), np.array([s], np.float32)),
                  (name.replace(".weight", ".input_scale"), np.array([1 / s], np.float32))]
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    for name, a in extra:
        writer.add_tensor_info(name, a.shape, a.dtype, a.nbytes, gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data)
    for _, a in extra:
        writer.write_tensor_data(a)
    writer.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
