"""A small RWKV-"world"-style vocabulary (tokenizer.ggml.model = "rwkv") to test synapse's RWKV tokenizer
against llama-tokenize (tests/reference/README.md, "rwkv/"). Writes ggml-vocab-tiny-rwkv.gguf.

Token texts are escaped as llama.cpp's RWKV converter stores them (\\t \\n \\r \\xHH, a backslash before
other characters): "<s>" (CONTROL) first, then the 256 single bytes, then multi-byte words taken from the
fixtures' public texts (the most frequent space-led words and some longer pieces), so that greedy
longest-match has choices to make. llama arch keys (as the fixtures' tiny-spm vocabulary) make the file
loadable as vocab only.

    python make_vocab.py ../../../../shared/fixtures/tokenizer/texts.json [OUT.gguf]

The file is not committed: tests/test_tokenizer_more.py writes it again (gguf-py is a test dependency).
"""
import collections
import json
import re
import sys

import gguf


def escape(b: bytes) -> str:
    out = []
    for c in b:
        if c == 0x09:
            out.append("\\t")
        elif c == 0x0A:
            out.append("\\n")
        elif c == 0x0D:
            out.append("\\r")
        elif c == 0x5C:
            out.append("\\\\")
        elif 0x20 <= c < 0x7F:
            out.append(chr(c))
        else:
            out.append(f"\\x{c:02x}")
    return "".join(out)


texts = [d["text"] for d in json.load(open(sys.argv[1], encoding="utf-8"))]
words = collections.Counter()
for t in texts:
    for w in re.findall(r" ?\w+|[^\w\s]+|\s+", t):
        words[w.encode()] += 1
multi = [w for w, _ in words.most_common(600) if len(w) > 1]
multi += [b"Hel", b"Hello wor", b"  ", b"    ", b"\n\n", b"\xf0\x9f", b"\xe4\xb8\xad\xe6\x96\x87", b"<|im", b"<|im_start|>"]
tokens, types = ["<s>"], [3]
seen = set()
for b in [bytes([i]) for i in range(256)] + multi:
    e = escape(b)
    if e in seen:
        continue
    seen.add(e)
    tokens.append(e)
    types.append(1)
w = gguf.GGUFWriter(sys.argv[2] if len(sys.argv) > 2 else "ggml-vocab-tiny-rwkv.gguf", "llama")
w.add_name("tiny-rwkv-vocab")
w.add_context_length(4096)
w.add_embedding_length(256)
w.add_block_count(2)
w.add_feed_forward_length(768)
w.add_head_count(4)
w.add_head_count_kv(2)
w.add_rope_dimension_count(64)
w.add_layer_norm_rms_eps(1e-5)
w.add_vocab_size(len(tokens))
w.add_tokenizer_model("rwkv")
w.add_token_list(tokens)
w.add_token_types(types)
w.write_header_to_file()
w.write_kv_data_to_file()
w.close()
print(len(tokens), "tokens")
