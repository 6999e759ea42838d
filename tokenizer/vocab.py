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


# --- pre-tokenizers ----------------------------------------------------------------------------------

from .unicode import RE_GPT2, RE_LLAMA3, RE_QWEN2  # noqa: E402

# llm_tokenizer_bpe's regex_exprs for the pre-tokenizer types synapse implements (verbatim strings:
# llama.cpp picks its custom code by comparing them)
PRE_REGEXES: dict[str, list[str]] = {
    "default": ["[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
    "llama3": [RE_LLAMA3],
    "deepseek-llm": [
        "[\r\n]",
        "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
        "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
        "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
        "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d"
        "\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
        "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
        "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
        "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a"
        "\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2"
        "\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
        "\\s+$",
        "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
        "\\p{N}+",
    ],
    "deepseek-coder": ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", "\\p{N}"],
    "falcon": ["[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"],
    "starcoder": ["\\p{N}", RE_GPT2],
    "gpt2": [RE_GPT2],
    "qwen2": [RE_QWEN2],
    "tekken": [
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ],
}


@dataclass(frozen=True)
class PreTokenizer:
    regexes: str  # key of PRE_REGEXES
    clean_spaces: bool = True  # BPE default
    ignore_merges: bool = False
    add_bos: bool | None = None  # None: keep the BPE default (false)
    bos_null: bool = False  # chatglm: special_bos_id = LLAMA_TOKEN_NULL


def _pre_table() -> dict[str, PreTokenizer]:
    t: dict[str, PreTokenizer] = {"default": PreTokenizer("default")}
    for n in ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"):
        t[n] = PreTokenizer("llama3", ignore_merges=True, add_bos=True)
    t["deepseek-llm"] = PreTokenizer("deepseek-llm", clean_spaces=False)
    t["deepseek-coder"] = PreTokenizer("deepseek-coder", clean_spaces=False)
    t["falcon"] = PreTokenizer("falcon")
    t["mpt"] = PreTokenizer("gpt2")
    t["starcoder"] = PreTokenizer("starcoder")
    for n in ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
              "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "exaone4", "olmo", "jais"):
        t[n] = PreTokenizer("gpt2")
    t["refact"] = PreTokenizer("starcoder")
    t["command-r"] = PreTokenizer("starcoder", clean_spaces=False)
    for n in ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "grok-2", "solar-open"):
        t[n] = PreTokenizer("qwen2", clean_spaces=False)
    t["megrez"] = PreTokenizer("qwen2")
    t["stablelm2"] = PreTokenizer("qwen2")
    t["dbrx"] = PreTokenizer("llama3")
    t["smaug-bpe"] = PreTokenizer("llama3")
    t["chatglm-bpe"] = PreTokenizer("llama3", bos_null=True)
    t["glm4"] = t["glm5"] = PreTokenizer("llama3", bos_null=True, ignore_merges=True)
    t["tekken"] = PreTokenizer("tekken", clean_spaces=False, ignore_merges=True, add_bos=True)
    t["smollm"] = PreTokenizer("starcoder", clean_spaces=False)
    t["codeshell"] = PreTokenizer("starcoder")
    t["exaone"] = PreTokenizer("starcoder")
    t["minerva-7b"] = PreTokenizer("starcoder")
    t["mellum2"] = PreTokenizer("starcoder")
    t["trillion"] = PreTokenizer("gpt2", clean_spaces=False)
    t["granite-docling"] = PreTokenizer("gpt2", clean_spaces=False)
    return t


PRE_TOKENIZERS = _pre_table()
# names llama.cpp knows whose splitting synapse does not implement (refused with a clear message)
KNOWN_UNSUPPORTED_PRE = frozenset(
    "minicpm5 deepseek-v3 spark2_5 youtu jais-2 gemma4 granite-embed-multi-311m sarvam-moe whitespace qwen35 "
    "poro-chat viking bloom gpt3-finnish exaone-moe chameleon gpt-4o llama4 kanana2 talkie granite-embed-multi-97m "
    "tiny_aya cohere2moe superbpe bailingmoe bailingmoe2 llada-moe seed-coder hunyuan-dense hy_v4 joyai-llm "
    "kimi-k2 ufakzeka afmoe laguna minimax-m2".split()
)

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


def _get_bool(reader, key: str):
    v = reader.get(key)
    return bool(v) if isinstance(v, (bool, np.bool_)) else None


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

    model: str  # tokenizer.ggml.model: "llama" (SPM) or "gpt2" (BPE)
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
    add_bos: bool = False
    add_eos: bool = False
    add_space_prefix: bool = False
    clean_spaces: bool = False
    ignore_merges: bool = False
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
        return self.model == "llama"

    @property
    def is_bpe(self) -> bool:
        return self.model == "gpt2"

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
    """llama_vocab::impl::load for the SPM ("llama") and BPE ("gpt2") tokenizer models."""
    model = reader.get("tokenizer.ggml.model")
    path = getattr(reader, "path", "?")
    if model is None:
        raise VocabError(f"{os.path.basename(path)}: no vocabulary (key tokenizer.ggml.model not found)")
    if not isinstance(model, str):
        raise VocabError("tokenizer.ggml.model is not a string")
    if model in ("no_vocab", "none"):
        raise VocabError(f"{os.path.basename(path)}: the model has no vocabulary (tokenizer.ggml.model = {model!r})")
    if model not in ("llama", "gpt2"):
        known = ("bert", "t5", "rwkv", "plamo2", "gemma4", "hybriddna", "whitespace", "test")
        if model in known:
            raise VocabError(f"tokenizer model {model!r} is supported by llama.cpp but not by synapse (llama, gpt2)")
        raise VocabError(f"unknown tokenizer: {model!r}")
    pre = reader.get("tokenizer.ggml.pre", "")
    if not isinstance(pre, str):
        raise VocabError("tokenizer.ggml.pre is not a string")

    v = Vocab(model=model, pre=pre, texts=[], scores=np.zeros(0, np.float32), types=np.zeros(0, np.int32),
              attrs=np.zeros(0, np.int32))
    name = reader.get("general.name", "")
    v.name = name if isinstance(name, str) else ""

    if model == "llama":
        v.bos_id, v.eos_id, v.unk_id = 1, 2, 0
        v.add_space_prefix, v.clean_spaces, v.add_bos, v.add_eos = True, False, True, False
    else:
        merges = reader.fields.get("tokenizer.ggml.merges")
        if merges is None:
            raise VocabError("cannot find tokenizer merges in model file")
        from kernels.gguf import StringArray

        if not isinstance(merges.value, StringArray):
            raise VocabError("invalid gguf type for tokenizer.ggml.merges")
        v.merges_source = merges.value
        v.bos_id, v.eos_id, v.unk_id = 11, 11, NULL
        v.clean_spaces = True
        key = pre or "default"
        if key not in PRE_TOKENIZERS:
            if key in KNOWN_UNSUPPORTED_PRE:
                raise VocabError(f"pre-tokenizer {pre!r} is known to llama.cpp but not implemented by synapse")
            raise VocabError(f"unknown pre-tokenizer type: {pre!r}")
        pt = PRE_TOKENIZERS[key]
        v.pre_tokenizer = pt
        v.clean_spaces = pt.clean_spaces
        v.ignore_merges = pt.ignore_merges
        if pt.add_bos is not None:
            v.add_bos = pt.add_bos
        if pt.bos_null:
            v.bos_id = NULL
    asp = _get_bool(reader, "tokenizer.ggml.add_space_prefix")
    if asp is not None:
        v.add_space_prefix = asp

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
    ids = {"bos": v.bos_id, "eos": v.eos_id, "eot": NULL, "eom": NULL, "unk": v.unk_id, "sep": NULL, "pad": NULL,
           "mask": NULL, "fim_pre": NULL, "fim_suf": NULL, "fim_mid": NULL, "fim_pad": NULL, "fim_rep": NULL,
           "fim_sep": NULL}
    for slot, key in _SPECIAL_KEYS:
        if ids[slot] >= n:
            ids[slot] = NULL
        new = _get_uint(reader, key)
        if new is None:
            continue
        if 0 <= new < n:
            ids[slot] = new
    ab = _get_bool(reader, "tokenizer.ggml.add_bos_token")
    if ab is not None:
        v.add_bos = ab
    ae = _get_bool(reader, "tokenizer.ggml.add_eos_token")
    if ae is not None:
        v.add_eos = ae

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
