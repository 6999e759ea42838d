"""Writes the control vector files of these tests (ours): GGUFs of F32 `direction.<layer>` tensors, as
llama-cvector-generator writes them (general.architecture "controlvector"), with seeded random directions.

    cd tests/reference/adapters && ../../../.venv/bin/python make_control_vectors.py

- cvec-256-a.gguf: n_embd 256 (the tiny models), directions 1, 2 and 3 (only layer 1 exists in a 2-layer model:
  the others are ignored, as llama.cpp ignores them);
- cvec-256-b.gguf: n_embd 256, direction 1 only;
- cvec-576.gguf: n_embd 576 (SmolLM2-135M), directions 1 to 29, and two of layer 5 (they add up).
"""

import numpy as np
import gguf


def write(path: str, n_embd: int, layers: list[int], scale: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "controlvector")
    w.add_string("controlvector.model_hint", "synapse-test")
    w.add_uint32("controlvector.layer_count", len(layers))
    for i, il in enumerate(layers):
        name = f"direction.{il}" if layers.index(il) == i else f"direction.{il}.{i}"  # (a second one: "5.x" parses as 5)
        w.add_tensor(name, (rng.standard_normal(n_embd) * scale).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


write("cvec-256-a.gguf", 256, [1, 2, 3], 0.5, 1)
write("cvec-256-b.gguf", 256, [1], 0.25, 2)
write("cvec-576.gguf", 576, list(range(1, 30)) + [5], 0.05, 3)
