"""Writes the LoRA adapter files of these tests (ours): GGUFs as convert_lora_to_gguf.py writes them
(general.type "adapter", adapter.type "lora", adapter.lora.alpha; `<weight>.lora_a` of ne [n_in, rank] and
`<weight>.lora_b` of ne [rank, n_out], token_embd's both transposed), with seeded random values, for the tiny
models of the fixtures (n_embd 256, attn_k/v 128 outputs, n_ff 768, n_vocab 1024, 2 layers).

    cd tests/reference/adapters && ../../../.venv/bin/python make_lora.py

- lora-llama-f32.gguf: rank 8, alpha 16, F32: attn_q, attn_v and ffn_down of both layers, attn_output of layer 1,
  token_embd, output; and a norm weight (which llama.cpp skips);
- lora-llama-f16.gguf: rank 4, no alpha (the scale alone), F16: attn_k, ffn_gate and ffn_up of layer 0, attn_q of
  layer 1 (also adapted by the first file);
- lora-llama-q8_0.gguf: rank 32, alpha 8, Q8_0: attn_q and ffn_up of layer 1;
- lora-qwen2-f32.gguf (arch qwen2, whose Q/K/V have biases): rank 8, alpha 8, F32: attn_q, attn_k, attn_v and
  ffn_gate of both layers.
"""

import numpy as np
import gguf
from gguf.quants import quantize

N_OUT = {"attn_q": 256, "attn_k": 128, "attn_v": 128, "attn_output": 256, "ffn_gate": 768, "ffn_up": 768,
         "ffn_down": 256, "output": 1024}
N_IN = {"attn_q": 256, "attn_k": 256, "attn_v": 256, "attn_output": 256, "ffn_gate": 256, "ffn_up": 256,
        "ffn_down": 768, "output": 256}


def write(path, arch, rank, alpha, qtype, weights, seed, std=0.08, extra=()):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    if alpha is not None:
        w.add_float32("adapter.lora.alpha", alpha)

    def tensor(name, shape):  # shape: numpy's (ne1, ne0)
        x = (rng.standard_normal(shape) * std).astype(np.float32)
        if qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, x.astype(np.float16))
        elif qtype == gguf.GGMLQuantizationType.Q8_0:
            q = quantize(x, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
        else:
            w.add_tensor(name, x)

    for name in weights:
        if name == "token_embd":
            tensor("token_embd.weight.lora_a", (1024, rank))  # ne [rank, n_vocab]
            tensor("token_embd.weight.lora_b", (256, rank))   # ne [rank, n_embd]
            continue
        kind = name.rsplit(".", 1)[-1]
        full = f"{name}.weight" if name == "output" else f"blk.{name}.weight"
        tensor(full + ".lora_a", (rank, N_IN[kind]))
        tensor(full + ".lora_b", (N_OUT[kind], rank))
    for name, n in extra:
        w.add_tensor(name, np.ones(n, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


T = gguf.GGMLQuantizationType
write("lora-llama-f32.gguf", "llama", 8, 16.0, T.F32,
      ["0.attn_q", "0.attn_v", "0.ffn_down", "1.attn_q", "1.attn_v", "1.ffn_down", "1.attn_output", "token_embd",
       "output"], 1, extra=[("blk.0.attn_norm.weight", 256)])
write("lora-llama-f16.gguf", "llama", 4, None, T.F16, ["0.attn_k", "0.ffn_gate", "0.ffn_up", "1.attn_q"], 2)
write("lora-llama-q8_0.gguf", "llama", 32, 8.0, T.Q8_0, ["1.attn_q", "1.ffn_up"], 3)
write("lora-qwen2-f32.gguf", "qwen2", 8, 8.0, T.F32,
      ["0.attn_q", "0.attn_k", "0.attn_v", "0.ffn_gate", "1.attn_q", "1.attn_k", "1.attn_v", "1.ffn_gate"], 4)
