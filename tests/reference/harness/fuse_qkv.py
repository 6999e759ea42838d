"""Copy a GGUF with each layer's attn_q/attn_k/attn_v weights (and biases, and per-tensor scales if all three have
equal ones) fused into attn_qkv, as convert_hf_to_gguf.py --fuse-qkv writes them (rows of Q, then K, then V; the
three must share one type): synapse's test data (tests/reference/README.md).

    python fuse_qkv.py IN.gguf OUT.gguf"""

from __future__ import annotations

import sys

import gguf
import numpy as np


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
    by_name = {t.name: t for t in reader.tensors}
    out = []  # (name, data as stored, its ggml type)
    for t in reader.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[2] in ("attn_q", "attn_k", "attn_v"):
            if parts[2] != "attn_q":
                continue  # (written with attn_q's)
            p = f"blk.{parts[1]}."
            qkv = [by_name[f"{p}attn_{w}.{parts[3]}"] for w in "qkv"]
            assert len({x.tensor_type for x in qkv}) == 1, "Q, K and V of different types"
            out.append((f"{p}attn_qkv.{parts[3]}", np.concatenate([x.data for x in qkv], axis=0), t.tensor_type))
            continue
        out.append((t.name, t.data, t.tensor_type))
    for name, data, typ in out:
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, typ)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data, _ in out:
        writer.write_tensor_data(np.ascontiguousarray(data))
    writer.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
