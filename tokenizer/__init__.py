"""synapse's tokenizer: llama.cpp's llama_tokenize / llama_token_to_piece / llama_detokenize in Python.

    from tokenizer import load_tokenizer
    tok = load_tokenizer("model.gguf")              # or a kernels.gguf.GGUFReader
    ids = tok.encode("Hello", add_special=True, parse_special=True)
    tok.detokenize(ids); tok.token_to_piece(ids[0]); tok.vocab.eog_ids

Mirrors src/llama-vocab.cpp and src/unicode.cpp of llama.cpp (see the modules for the details):
`vocab` (loading the GGUF vocabulary), `unicode` (codepoint tables and pre-tokenizer splits), `spm`,
`bpe` (the two tokenizer models), `tokenizer` (special-token partition, encode, pieces, detokenize).
Importing this package never imports numba.
"""

from __future__ import annotations

import os

from .tokenizer import Streamer, Tokenizer
from .vocab import Vocab, VocabError, load_vocab

__all__ = ["Streamer", "Tokenizer", "Vocab", "VocabError", "load_tokenizer", "load_vocab"]


def load_tokenizer(reader_or_path) -> Tokenizer:
    """A Tokenizer for the vocabulary of a GGUF file (path) or an open kernels.gguf.GGUFReader.

    Raises VocabError (a kernels.errors.SynapseError) for a file without a vocabulary or with a
    tokenizer model / pre-tokenizer synapse does not implement, GGUFError for a bad file."""
    if isinstance(reader_or_path, (str, os.PathLike)):
        from kernels.gguf import GGUFReader

        reader = GGUFReader(reader_or_path)
    else:
        reader = reader_or_path
    return Tokenizer(load_vocab(reader))
