"""Copy a GGUF with each layer's attn_q/attn_k/attn_v weights (and biases) fused into attn_qkv, as
convert_hf_to_gguf.py --fuse-qkv writes them (rows of Q, then K, then V; the three must share one type): synapse's
test data (tests/reference/README.md).

    python fuse_qkv.py IN.gguf OUT.gguf"""

from __future__ import annotations

import sys

import gguf
import numpy as np

from gguf_rewrite import rewrite


def fused(reader: gguf.GGUFReader) -> list:
    by_name = {t.name: t for t in reader.tensors}
    out = []
    for t in reader.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[2] in ("attn_q", "attn_k", "attn_v"):
            if parts[2] != "attn_q":
                continue  # (written with attn_q's)
            qkv = [by_name[f"blk.{parts[1]}.attn_{w}.{parts[3]}"] for w in "qkv"]
            assert len({x.tensor_type for x in qkv}) == 1, "Q, K and V of different types"
            out.append((f"blk.{parts[1]}.attn_qkv.{parts[3]}", np.concatenate([x.data for x in qkv], axis=0),
                        t.tensor_type))
            continue
        out.append((t.name, t.data, t.tensor_type))
    return out


if __name__ == "__main__":
    rewrite(sys.argv[1], sys.argv[2], fused)
