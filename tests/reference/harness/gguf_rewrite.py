"""Write a copy of a GGUF with other tensors (gguf-py): the metadata as it is, the tensors a function of the
reader's. Used by add_scales.py and fuse_qkv.py to make synapse's test models (tests/reference/README.md)."""

from __future__ import annotations

from typing import Callable

import gguf
import numpy as np

# (name, data as stored, ggml type)
Tensors = list[tuple[str, np.ndarray, int]]


def rewrite(src: str, dst: str, tensors: Callable[[gguf.GGUFReader], Tensors]) -> None:
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # (written by GGUFWriter)
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    out = tensors(reader)
    for name, data, typ in out:
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, typ)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data, _ in out:
        writer.write_tensor_data(np.ascontiguousarray(data))
    writer.close()
