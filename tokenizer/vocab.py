"""The vocabulary of a GGUF file, loaded the way llama.cpp's llama_vocab::impl::load does (src/llama-vocab.cpp).

From the `tokenizer.ggml.*` metadata: token texts, types and scores, the merges (BPE), the special ids
with llama.cpp's defaults per tokenizer model, the flags llama.cpp derives from the pre-tokenizer name
(add_bos, ignore_merges, clean_spaces, ...), and the attributes llama.cpp fixes up at load time:
control-looking tokens re-typed as CONTROL (Qwen's plain `</s>`), control tokens named "unused" marked
UNUSED, the end-of-generation set, the special-token cache used to split specials out of the text, and
per-model lstrip/rstrip attributes (Phi-3).

Heavy structures (str -> id maps, merge ranks) are built on first use, so loading a 152k-token
vocabulary costs little more than reading its metadata.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from kernels.errors import ModelError

# llama_token_type (include/llama.h): the values stored in tokenizer.ggml.token_type
TYPE_UNDEFINED, TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_USER_DEFINED, TYPE_UNUSED, TYPE_BYTE = range(7)

# llama_token_attr bits
ATTR_UNDEFINED = 0
ATTR_UNKNOWN = 1 << 0
ATTR_UNUSED = 1 << 1
ATTR_NORMAL = 1 << 2
ATTR_CONTROL = 1 << 3
ATTR_USER_DEFINED = 1 << 4
ATTR_BYTE = 1 << 5
ATTR_NORMALIZED = 1 << 6
ATTR_LSTRIP = 1 << 7
ATTR_RSTRIP = 1 << 8
ATTR_SINGLE_WORD = 1 << 9

_TYPE_TO_ATTR = np.array(
    [ATTR_UNDEFINED, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_UNUSED, ATTR_BYTE],
    dtype=np.int32,
)

NULL = -1  # LLAMA_TOKEN_NULL


class VocabError(ModelError):
    """The file has no usable vocabulary, or one synapse's tokenizer cannot reproduce."""


# --- pre-tokenizers (tokenizer/pretokenizers.py) ------------------------------------------------------

from .pretokenizers import PRE_TOKENIZERS, PreTokenizer  # noqa: E402

# tokenizer.ggml.model -> llama_vocab_type, as llama_vocab::impl::load maps them
VOCAB_TYPES = {"llama": "spm", "gpt2": "bpe", "hybriddna": "bpe", "whitespace": "bpe", "gemma4": "bpe",
               "bert": "wpm", "t5": "ugm", "rwkv": "rwkv", "plamo2": "plamo2", "test": "test"}
NOT_IMPLEMENTED_MODELS = frozenset({"plamo2", "test", "hybriddna"})

# --- special-token detection by text (llama_vocab::impl::load) ------------------------------------

_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
              "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>")
_EOM_TEXTS = ("<|eom_id|>",)
_FIM_PRE_TEXTS = ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                  "<|code_prefix|>", "<|prefix|>")
_FIM_SUF_TEXTS = ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                  "<|code_suffix|>", "<|suffix|>")
_FIM_MID_TEXTS = ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                  "<|code_middle|>", "<|middle|>")
_FIM_PAD_TEXTS = ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]")
_FIM_REP_TEXTS = ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>")
_FIM_SEP_TEXTS = ("<|file_sep|>",)
_EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
              "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
              "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
              "<｜end▁of▁sentence｜>", "[e~[")

# (slot, metadata key, candidate texts) in the order llama.cpp scans them per token
_TEXT_SLOTS = (
    ("eot", _EOT_TEXTS), ("eom", _EOM_TEXTS), ("fim_pre", _FIM_PRE_TEXTS), ("fim_suf", _FIM_SUF_TEXTS),
    ("fim_mid", _FIM_MID_TEXTS), ("fim_pad", _FIM_PAD_TEXTS), ("fim_rep", _FIM_REP_TEXTS), ("fim_sep", _FIM_SEP_TEXTS),
)

# special_token_types: (slot, key) in llama.cpp's order; the deprecated keys last
_SPECIAL_KEYS = (
    ("bos", "tokenizer.ggml.bos_token_id"), ("eos", "tokenizer.ggml.eos_token_id"),
    ("eot", "tokenizer.ggml.eot_token_id"), ("eom", "tokenizer.ggml.eom_token_id"),
    ("unk", "tokenizer.ggml.unknown_token_id"), ("sep", "tokenizer.ggml.seperator_token_id"),
    ("pad", "tokenizer.ggml.padding_token_id"), ("mask", "tokenizer.ggml.mask_token_id"),
    ("fim_pre", "tokenizer.ggml.fim_pre_token_id"), ("fim_suf", "tokenizer.ggml.fim_suf_token_id"),
    ("fim_mid", "tokenizer.ggml.fim_mid_token_id"), ("fim_pad", "tokenizer.ggml.fim_pad_token_id"),
    ("fim_rep", "tokenizer.ggml.fim_rep_token_id"), ("fim_sep", "tokenizer.ggml.fim_sep_token_id"),
    ("fim_pre", "tokenizer.ggml.prefix_token_id"), ("fim_suf", "tokenizer.ggml.suffix_token_id"),
    ("fim_mid", "tokenizer.ggml.middle_token_id"),
)


def _get_uint(reader, key: str):
    v = reader.get(key)
    if v is None or isinstance(v, (str, bool, np.ndarray)) or not isinstance(v, (int, np.integer)):
        return None
    return int(v)


def _get_bool(reader, key: str, default=None):
    """The bool at `key`, or `default` when it is absent or not a bool (llama.cpp's optional get_key)."""
    v = reader.get(key)
    return bool(v) if isinstance(v, (bool, np.bool_)) else default


def _array(reader, key: str, kinds: str, what: str):
    f = reader.fields.get(key)
    if f is None:
        return None
    if not isinstance(f.value, np.ndarray) or f.value.dtype.kind + str(f.value.dtype.itemsize) not in kinds.split():
        raise VocabError(f"invalid gguf type for {key} ({what})")
    return f.value


@dataclass
class Vocab:
    """llama_vocab: texts, attributes, special ids and tokenizer flags of one GGUF vocabulary."""

    model: str  # tokenizer.ggml.model as written ("llama", "gpt2", "bert", "t5", "gemma4", "rwkv", ...)
    pre: str  # tokenizer.ggml.pre as written ("" when absent)
    texts: list[bytes] = field(repr=False)  # (n_tokens,) raw texts ("[EMPTY_i]" for empty ones, as llama.cpp)
    scores: np.ndarray = field(repr=False)  # (n_tokens,) float32
    types: np.ndarray = field(repr=False)  # (n_tokens,) int32 token types as stored in the file (0 if absent)
    attrs: np.ndarray = field(repr=False)  # (n_tokens,) int32 llama_token_attr after llama.cpp's load-time fixes
    merges_source: object = field(default=None, repr=False)  # BPE: the GGUF StringArray of merge lines
    pre_tokenizer: PreTokenizer | None = None
    bos_id: int = NULL
    eos_id: int = NULL
    eom_id: int = NULL
    unk_id: int = NULL
    sep_id: int = NULL
    pad_id: int = NULL
    mask_id: int = NULL
    fim_pre_id: int = NULL
    fim_suf_id: int = NULL
    fim_mid_id: int = NULL
    fim_pad_id: int = NULL
    fim_rep_id: int = NULL
    fim_sep_id: int = NULL
    type: str = "spm"  # llama_vocab_type: "spm", "bpe", "wpm", "ugm" or "rwkv"
    add_bos: bool = False
    add_eos: bool = False
    add_sep: bool = False
    add_space_prefix: bool = False
    clean_spaces: bool = False
    ignore_merges: bool = False
    remove_extra_whitespaces: bool = False  # UGM: runs of spaces become one (tokenizer.ggml.remove_extra_whitespaces)
    escape_whitespaces: bool = True  # UGM, and BPE gemma4/sarvam-moe: spaces as U+2581
    treat_whitespace_as_suffix: bool = False  # (no GGUF key sets it)
    lowercase: bool = True  # WPM / whitespace normalizer_opts
    strip_accents: bool = True
    precompiled_charsmap: bytes = field(default=b"", repr=False)  # UGM normalization table
    linefeed_id: int = NULL
    eog_ids: set[int] = field(default_factory=set)
    special_ids: list[int] = field(default_factory=list, repr=False)  # cache_special_tokens: longest text first
    max_token_len: int = 0
    name: str = ""  # general.name
    _eot_id: int = NULL
    _eot_candidates: list[int] = field(default_factory=list, repr=False)
    _order_source: tuple | None = field(default=None, repr=False)  # (buf, offsets, lengths) for hash order

    # --- queries -----------------------------------------------------------------------------------

    @property
    def n_tokens(self) -> int:
        return len(self.texts)

    @property
    def is_spm(self) -> bool:
        return self.type == "spm"

    @property
    def is_bpe(self) -> bool:
        return self.type == "bpe"

    @property
    def byte_encode(self) -> bool:
        """BPE: GPT-2 byte encoding of the words (false for the SPM-style gemma4, sarvam-moe, whitespace)."""
        return self.pre_tokenizer.byte_encode if self.pre_tokenizer is not None else True

    @property
    def eot_id(self) -> int:
        """special_eot_id: from metadata, else the first EOT-looking token in llama.cpp's hash order."""
        if self._eot_id == NULL and len(self._eot_candidates) > 1:
            self._eot_id = self._first_in_hash_order(self._eot_candidates)
            self._eot_candidates = [self._eot_id]
        elif self._eot_id == NULL and self._eot_candidates:
            self._eot_id = self._eot_candidates[0]
        return self._eot_id

    def text(self, token_id: int) -> bytes:
        return self.texts[token_id]

    def token_type(self, token_id: int) -> int:
        """The token's llama_token_type after llama.cpp's load-time re-typing (Qwen's plain `</s>` is
        CONTROL here), derived from its attributes; file_token_type gives the value stored in the file."""
        a = int(self.attrs[token_id])
        for bit, t in ((ATTR_USER_DEFINED, TYPE_USER_DEFINED), (ATTR_CONTROL, TYPE_CONTROL), (ATTR_UNKNOWN, TYPE_UNKNOWN),
                       (ATTR_BYTE, TYPE_BYTE), (ATTR_NORMAL, TYPE_NORMAL), (ATTR_UNUSED, TYPE_UNUSED)):
            if a & bit:
                return t
        return TYPE_UNDEFINED

    def file_token_type(self, token_id: int) -> int:
        """The llama_token_type stored in tokenizer.ggml.token_type (0 when the key is absent)."""
        return int(self.types[token_id])

    def token_attr(self, token_id: int) -> int:
        return int(self.attrs[token_id])

    def score(self, token_id: int) -> float:
        return float(self.scores[token_id])

    def is_eog(self, token_id: int) -> bool:
        return token_id in self.eog_ids

    def is_control(self, token_id: int) -> bool:
        return bool(self.attrs[token_id] & ATTR_CONTROL)

    def is_byte(self, token_id: int) -> bool:
        return bool(self.attrs[token_id] & ATTR_BYTE)

    @cached_property
    def token_to_id(self) -> dict[bytes, int]:
        """text_to_token's map (raw token bytes -> id)."""
        return dict(zip(self.texts, range(len(self.texts))))

    @cached_property
    def merges(self) -> list[bytes]:
        """BPE merge lines ("left right", GPT-2 byte-encoded) in rank order; decoded on first use."""
        return self.merges_source.to_bytes_list() if self.merges_source is not None else []

    # --- hash order ----------------------------------------------------------------------------------

    def _first_in_hash_order(self, ids: list[int]) -> int:
        from .hash_order import hash_bytes, hash_many, iteration_order

        if self._order_source is not None:
            buf, offsets, lengths = self._order_source
            hashes = hash_many(buf, offsets, lengths)
            for i in np.nonzero(lengths == 0)[0].tolist():  # "[EMPTY_i]" replacements are not in the file
                hashes[i] = hash_bytes(self.texts[i])
        else:
            hashes = np.array([hash_bytes(t) for t in self.texts], dtype=np.uint64)
        order = iteration_order(hashes)
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        return min(ids, key=lambda i: rank[i])


def load_vocab(reader) -> Vocab:
    """llama_vocab_impl::load for the SPM, BPE, WPM, UGM and RWKV tokenizer models."""
    model = reader.get("tokenizer.ggml.model")
    path = getattr(reader, "path", "?")
    if model is None:
        raise VocabError(f"{os.path.basename(path)}: no vocabulary (key tokenizer.ggml.model not found)")
    if not isinstance(model, str):
        raise VocabError("tokenizer.ggml.model is not a string")
    if model in ("no_vocab", "none"):
        raise VocabError(f"{os.path.basename(path)}: the model has no vocabulary (tokenizer.ggml.model = {model!r})")
    vtype = VOCAB_TYPES.get(model)
    if vtype is None:
        raise VocabError(f"unknown tokenizer: {model!r}")
    if model in NOT_IMPLEMENTED_MODELS:
        raise VocabError(f"tokenizer model {model!r} is known to llama.cpp but not implemented by synapse")
    pre = reader.get("tokenizer.ggml.pre", "")
    if not isinstance(pre, str):
        raise VocabError("tokenizer.ggml.pre is not a string")

    v = Vocab(model=model, pre=pre, texts=[], scores=np.zeros(0, np.float32), types=np.zeros(0, np.int32),
              attrs=np.zeros(0, np.int32), type=vtype)
    name = reader.get("general.name", "")
    v.name = name if isinstance(name, str) else ""

    # default special ids and flags per type (sep/pad/mask are NULL unless said otherwise)
    pad = mask = sep = NULL
    if vtype == "spm":
        v.bos_id, v.eos_id, v.unk_id = 1, 2, 0
    elif vtype == "wpm":
        v.bos_id, v.eos_id, v.unk_id, sep, pad, mask = 101, NULL, 100, 102, 0, 103
    elif vtype == "ugm":
        v.bos_id, v.eos_id, v.unk_id, pad = NULL, 1, 2, 0
        f = reader.fields.get("tokenizer.ggml.precompiled_charsmap")
        if f is not None:
            if not isinstance(f.value, np.ndarray) or f.value.dtype.kind + str(f.value.dtype.itemsize) not in ("i1", "u1"):
                raise VocabError("invalid gguf type for tokenizer.ggml.precompiled_charsmap")
            cm = f.value.tobytes()
            if len(cm) < 4:
                raise VocabError("precompiled_charsmap too small for xcda_blob_size header!")
            if int.from_bytes(cm[:4], "little") + 4 >= len(cm):
                raise VocabError("Index out of array bounds in precompiled charsmap!")
            v.precompiled_charsmap = cm
    elif vtype == "rwkv":
        v.bos_id = v.eos_id = v.unk_id = NULL
    elif vtype == "bpe":
        merges = reader.fields.get("tokenizer.ggml.merges")
        if merges is None:
            if not (pre == "kimi-k2" and model != "gemma4"):
                raise VocabError("cannot find tokenizer merges in model file")
        else:
            from kernels.gguf import StringArray

            if not isinstance(merges.value, StringArray):
                raise VocabError("invalid gguf type for tokenizer.ggml.merges")
            v.merges_source = merges.value
        if model == "gemma4":
            v.bos_id = v.eos_id = v.unk_id = NULL
            pre = "gemma4"  # llama.cpp sets this pre-tokenizer for the tokenizer model
        else:
            v.bos_id, v.eos_id, v.unk_id = 11, 11, NULL

    if vtype == "bpe":
        v.add_space_prefix, v.escape_whitespaces, v.clean_spaces = False, False, True
        key = pre or "default"  # llama.cpp warns "missing pre-tokenizer type, using: 'default'"
        if key not in PRE_TOKENIZERS:
            raise VocabError(f"unknown pre-tokenizer type: {pre!r}")
        pt = PRE_TOKENIZERS[key]
        v.pre_tokenizer = pt
        v.clean_spaces = pt.clean_spaces
        v.ignore_merges = pt.ignore_merges
        v.escape_whitespaces = pt.escape_whitespaces
        v.add_sep = pt.add_sep
        if pt.add_bos is not None:
            v.add_bos = pt.add_bos
        if pt.bos_null:
            v.bos_id = NULL
        if pt.lowercase is not None:
            v.lowercase = pt.lowercase
    elif vtype == "spm":
        v.add_space_prefix, v.clean_spaces, v.add_bos, v.add_eos = True, False, True, False
    elif vtype == "wpm":
        v.add_space_prefix, v.clean_spaces, v.add_bos, v.add_eos, v.add_sep = False, True, True, False, True
    elif vtype == "ugm":
        v.add_bos, v.add_eos = False, True
    elif vtype == "rwkv":
        v.add_space_prefix, v.clean_spaces, v.add_bos, v.add_eos = False, False, False, False
    v.add_space_prefix = _get_bool(reader, "tokenizer.ggml.add_space_prefix", v.add_space_prefix)
    v.remove_extra_whitespaces = _get_bool(reader, "tokenizer.ggml.remove_extra_whitespaces",
                                           v.remove_extra_whitespaces)

    # tokens, scores, types
    tf = reader.fields.get("tokenizer.ggml.tokens")
    if tf is None:
        raise VocabError("cannot find tokenizer vocab in model file")
    from kernels.gguf import StringArray

    if not isinstance(tf.value, StringArray):
        raise VocabError("invalid gguf type for tokenizer.ggml.tokens")
    sa = tf.value
    texts = sa.to_bytes_list()
    n = len(texts)
    for i in np.nonzero(sa.lengths == 0)[0].tolist():
        texts[i] = b"[EMPTY_%d]" % i
    v.texts = texts
    v._order_source = (sa.buf, sa.offsets, sa.lengths)
    v.max_token_len = max([int(sa.lengths.max(initial=0))] + [len(texts[i]) for i in np.nonzero(sa.lengths == 0)[0]])

    scores = _array(reader, "tokenizer.ggml.scores", "f4 i4", "scores")
    if scores is not None:
        if len(scores) < n:
            raise VocabError(f"Index out of array bounds for scores ({len(scores)} < {n})")
        v.scores = scores[:n].astype(np.float32)
    else:
        v.scores = np.zeros(n, np.float32)
    types = _array(reader, "tokenizer.ggml.token_type", "i4", "token types")
    if types is not None:
        if len(types) < n:
            raise VocabError(f"Index out of array bounds for toktypes ({len(types)} < {n})")
        v.types = np.array(types[:n], dtype=np.int32)
        ok = (v.types >= 0) & (v.types <= 6)
        attrs = np.where(ok, _TYPE_TO_ATTR[np.clip(v.types, 0, 6)], ATTR_UNDEFINED).astype(np.int32)
    else:
        v.types = np.zeros(n, np.int32)
        attrs = np.full(n, ATTR_NORMAL, np.int32)
    v.attrs = attrs

    t2i = v.token_to_id
    if len(t2i) != n:
        raise VocabError(f"the vocabulary has duplicate token texts ({n - len(t2i)}); llama.cpp refuses it")

    # special ids: defaults disabled when out of range, then metadata
    ids = {"bos": v.bos_id, "eos": v.eos_id, "eot": NULL, "eom": NULL, "unk": v.unk_id, "sep": sep, "pad": pad,
           "mask": mask, "fim_pre": NULL, "fim_suf": NULL, "fim_mid": NULL, "fim_pad": NULL, "fim_rep": NULL,
           "fim_sep": NULL}
    for slot, key in _SPECIAL_KEYS:
        if ids[slot] >= n:
            ids[slot] = NULL
        new = _get_uint(reader, key)
        if new is None:
            continue
        if 0 <= new < n:
            ids[slot] = new
    v.add_bos = _get_bool(reader, "tokenizer.ggml.add_bos_token", v.add_bos)
    v.add_eos = _get_bool(reader, "tokenizer.ggml.add_eos_token", v.add_eos)
    v.add_sep = _get_bool(reader, "tokenizer.ggml.add_sep_token", v.add_sep)
    if v.pre_tokenizer is not None and v.pre_tokenizer.type == "gemma4" and not v.add_bos:
        v.add_bos = True  # llama.cpp: "override 'tokenizer.ggml.add_bos_token' to 'true' for Gemma4"
    # BertNormalizer options (WPM; the whitespace model's lowercasing)
    v.lowercase = _get_bool(reader, "tokenizer.ggml.normalizer.lowercase", v.lowercase)
    v.strip_accents = _get_bool(reader, "tokenizer.ggml.normalizer.strip_accents", v.lowercase)

    # auto-detect special tokens by text. llama.cpp walks token_to_id (hash order) and takes the first
    # match per empty slot, forcing its type to CONTROL; we find all candidates and resolve order only
    # where it changes something beyond the slot's id.
    def present(texts_):
        return [t2i[t.encode()] for t in texts_ if t.encode() in t2i]

    eot_candidates: list[int] = []
    need_order: list[tuple[str, list[int]]] = []
    for slot, cands_texts in _TEXT_SLOTS:
        if ids[slot] != NULL:
            continue
        cands = present(cands_texts)
        if not cands:
            continue
        if slot == "eot":
            # every EOT-looking text is also an EOG text, so the choice only changes the id: resolved lazily
            eot_candidates = cands
            continue
        if len(cands) == 1:
            ids[slot] = cands[0]
            attrs[cands[0]] |= ATTR_CONTROL
        else:
            need_order.append((slot, cands))
    if need_order:
        for slot, cands in need_order:
            first = v._first_in_hash_order(cands)
            ids[slot] = first
            attrs[first] |= ATTR_CONTROL

    # control tokens whose text contains "unused" are UNUSED
    ctrl = np.nonzero((attrs & ATTR_CONTROL) & ~(attrs & ATTR_UNUSED))[0]
    for i in ctrl.tolist():
        if b"unused" in texts[i]:
            attrs[i] |= ATTR_UNUSED

    # the end-of-generation set
    eog: set[int] = set()
    for slot in ("fim_pad", "fim_rep", "fim_sep"):
        if ids[slot] != NULL:
            eog.add(ids[slot])
    for t in _EOG_TEXTS:
        i = t2i.get(t.encode())
        if i is not None:
            eog.add(i)
            attrs[i] |= ATTR_CONTROL
    # gpt-oss: always rendered
    for t in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):
        i = t2i.get(t.encode())
        if i is not None:
            attrs[i] = ATTR_USER_DEFINED
    for slot in ("eos", "eom"):
        if ids[slot] != NULL:
            eog.add(ids[slot])
    if ids["eot"] != NULL:
        eog.add(ids["eot"])
    # o200k_harmony / solar-open: "<|end|>" is not EOG there
    in_eog = {texts[i]: i for i in eog if 0 <= i < n}
    has_return = b"<|return|>" in in_eog
    has_call = b"<|call|>" in in_eog or b"<|calls|>" in in_eog
    has_flush = b"<|flush|>" in in_eog
    if b"<|end|>" in in_eog and ((has_return and has_call) or (has_call and has_flush)):
        end_id = in_eog[b"<|end|>"]
        eog.discard(end_id)
        attrs[end_id] = ATTR_USER_DEFINED
    # gemma4 / plamo: a normal "</s>"
    if (b"<|tool_response>" in in_eog or b"<|plamo:eos|>" in in_eog) and b"</s>" in in_eog:
        s_id = in_eog[b"</s>"]
        eog.discard(s_id)
        attrs[s_id] = ATTR_NORMAL

    v.bos_id, v.eos_id, v.unk_id, v.sep_id, v.pad_id, v.mask_id = (
        ids["bos"], ids["eos"], ids["unk"], ids["sep"], ids["pad"], ids["mask"])
    v.eom_id = ids["eom"]
    v.fim_pre_id, v.fim_suf_id, v.fim_mid_id = ids["fim_pre"], ids["fim_suf"], ids["fim_mid"]
    v.fim_pad_id, v.fim_rep_id, v.fim_sep_id = ids["fim_pad"], ids["fim_rep"], ids["fim_sep"]
    v._eot_id = ids["eot"]
    v._eot_candidates = eot_candidates
    v.eog_ids = eog

    # special tokens cache: CONTROL | USER_DEFINED | UNKNOWN, longest text first (llama.cpp uses an
    # unstable std::sort; equal lengths keep id order here)
    special = np.nonzero(attrs & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))[0].tolist()
    special.sort(key=lambda i: -len(texts[i]))
    v.special_ids = special

    # per-model lstrip/rstrip (set after the caches, as llama.cpp does)
    model_name = v.name.lower()
    arch = reader.get("general.architecture", "")
    arch = arch if isinstance(arch, str) else ""
    if any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        s in arch for s in ("nomic-bert-moe", "jina-bert-v3")
    ):
        if b"<mask>" in t2i:
            attrs[t2i[b"<mask>"]] |= ATTR_LSTRIP
    elif "phi-3" in model_name or "phi3" in model_name:
        for i in special:
            attrs[i] |= ATTR_RSTRIP
        for t, on in ((b"</s>", True), (b"<unk>", False), (b"<s>", False), (b"<|endoftext|>", False)):
            if t not in t2i:
                raise VocabError(f"phi-3 vocabulary without the token {t.decode()!r}")
            if on:
                attrs[t2i[t]] |= ATTR_RSTRIP
            else:
                attrs[t2i[t]] &= ~ATTR_RSTRIP
    elif "modern-bert" in model_name:
        if b"[MASK]" in t2i:
            attrs[t2i[b"[MASK]"]] |= ATTR_LSTRIP
    return v
