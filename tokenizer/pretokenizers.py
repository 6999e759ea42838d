"""llama.cpp's BPE pre-tokenizers as data: every LLAMA_VOCAB_PRE_TYPE_* with its regex list and flags.

Mirrors src/llama-vocab.cpp of llama.cpp 0c1e570: `PRE_TYPE_REGEXES` is the `regex_exprs` switch of
llm_tokenizer_bpe's constructor (type -> regexes, verbatim: unicode.cpp picks its custom splitters by
comparing these strings; `BYTE_ENCODE_OFF` the types that set `byte_encode = false`), `PRE_TOKENIZERS`
the `tokenizer.ggml.pre` name -> type and flag assignments of llama_vocab::impl::load. The pre-type names
are llama.cpp's enum names in lower case (LLAMA_VOCAB_PRE_TYPE_QWEN35 -> "qwen35").

Three enum values are reached by no `tokenizer.ggml.pre` name (chatglm3, llama4, pixtral; "pixtral" and
"llama4" name other types) and fall to the switch's default, so they share "default"'s regexes here.

tests/reference/regex_split/ holds llama.cpp's own unicode_regex_split output for every type on the
public texts, and test_tokenizer_pretokenizers.py checks both the table and the splits against it.
"""

from __future__ import annotations

from dataclasses import dataclass

# (pre-types sharing one list): regex_exprs, in llama.cpp's case order
_GROUPS: dict[tuple[str, ...], tuple[str, ...]] = {
    ('llama3', 'dbrx', 'smaug', 'chatglm4'): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('jais2',): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
    ),
    ('deepseek_llm',): (
        '[\r\n]',
        '\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+',
        '\\s?[!-/:-~！-／：-～‘-‟\u3000-。]+',
        '\\s+$',
        '[一-龥ࠀ-一가-\ud7ff]+',
        '\\p{N}+',
    ),
    ('deepseek3_llm', 'hunyuan_dense', 'joyai_llm', 'hy_v4'): (
        '\\p{N}{1,3}',
        '[一-龥\u3040-ゟ゠-ヿ]+',
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',
    ),
    ('spark2_5',): (
        '\\p{N}{1,3}',
        '[一-龥\u3040-ゟ゠-ヿ]+',
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+',
        '\\p{N}',
    ),
    ('youtu',): (
        '[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥\u3040-ゟ゠-ヿ]+',
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('deepseek_coder',): (
        '[\r\n]',
        '\\s?\\p{L}+',
        '\\s?\\p{P}+',
        '[一-龥ࠀ-一가-\ud7ff]+',
        '\\p{N}',
    ),
    ('falcon',): (
        '[\\p{P}\\$\\+<=>\\^~\\|`]+',
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        '[0-9][0-9][0-9]',
    ),
    ('starcoder', 'refact', 'command_r', 'smollm', 'codeshell', 'exaone', 'minerva', 'mellum2'): (
        '\\p{N}',
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    ),
    ('gpt2', 'mpt', 'olmo', 'jais', 'trillion', 'granite_docling'): (
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    ),
    ('stablelm2', 'qwen2', 'hunyuan', 'solar_open', 'grok_2'): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('qwen35',): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('poro', 'bloom', 'gpt3_finnish'): (
        ' ?[^(\\s|.,!?…。，、।۔،)]+',
    ),
    ('viking',): (
        ' ?[^(\\s|.,!?…。，、।۔،)]+',
        '\\p{N}',
    ),
    ('tekken',): (
        '[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ),
    ('chameleon',): (
        '<sentinel:[0-9]+>',
        '(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z',
        '([\\t\\n]|    |  )',
        '\\p{N}',
        '[\\p{P}!-/:-@\\[-`{-~]',
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    ),
    ('gpt4o', 'minimax_m2'): (
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('granite_emb_multi',): (
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('tiny_aya',): (
        '\\d{1,3}(?=(?:\\d{3})*\\b)',
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('kimi_k2',): (
        '\\p{Han}+',
    ),
    ('superbpe',): (
        '\\p{N}+',
        '(?=(\\d{3})+(?!\\d))',
    ),
    ('bailingmoe',): (
        "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    ),
    ('seed_coder',): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('ufakzeka',): (
        '[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ),
    ('afmoe',): (
        '\\p{AFMoE_digits}',
        '[一-鿿㐀-䶿豈-\ufaff\u3040-ゟ゠-ヿ･-ﾟ⼀-\u2fdfเ-\u0e7f\u0e80-\u0effក-\u17ffက-႟ꩠ-ꩿꧠ-\ua9ff가-\ud7afᄀ-ᇿ]+',
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ),
    ('laguna',): (
        '[^\\n]+|[\\n]+',
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('exaone_moe',): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    ),
    ('gemma4', 'sarvam_moe'): (
        '[^\\n]+|[\\n]+',
    ),
    ('minicpm5',): (
        '\\p{N}{1,3}',
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('whitespace',): (
        '\\S+',
    ),
    ('default',): (
        '[\\p{P}\\$\\+<=>\\^~\\|]+',
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        '\\p{N}+',
        '[0-9][0-9][0-9]',
    ),
}

PRE_TYPE_REGEXES: dict[str, tuple[str, ...]] = {t: rx for types, rx in _GROUPS.items() for t in types}
for _t in ("chatglm3", "llama4", "pixtral"):  # unreachable from a file: the switch's default
    PRE_TYPE_REGEXES[_t] = PRE_TYPE_REGEXES["default"]

# SPM-style BPE (raw UTF-8 symbols, byte fallback to <0xXX> tokens) instead of GPT-2 byte encoding
BYTE_ENCODE_OFF = frozenset({"gemma4", "sarvam_moe", "whitespace"})


@dataclass(frozen=True)
class PreTokenizer:
    """What one `tokenizer.ggml.pre` name sets in llama_vocab::impl::load (None / False: untouched)."""

    type: str  # key of PRE_TYPE_REGEXES
    ignore_merges: bool = False
    clean_spaces: bool = True  # the BPE default
    add_bos: bool | None = None  # None: keep the BPE default (false)
    bos_null: bool = False  # special_bos_id = LLAMA_TOKEN_NULL (chatglm-bpe, glm4, glm5)
    escape_whitespaces: bool = False  # spaces -> U+2581 before splitting (gemma4, sarvam-moe)
    add_sep: bool = False
    lowercase: bool | None = None  # normalizer_opts.lowercase (whitespace: false)

    @property
    def regexes(self) -> tuple[str, ...]:
        return PRE_TYPE_REGEXES[self.type]

    @property
    def byte_encode(self) -> bool:
        return self.type not in BYTE_ENCODE_OFF


# tokenizer.ggml.pre -> what llama.cpp sets, in load()'s order ("" / absent: "default" with a warning)
PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "default": PreTokenizer("default"),
    "minicpm5": PreTokenizer("minicpm5", ignore_merges=True),
    "llama3": PreTokenizer("llama3", ignore_merges=True, add_bos=True),
    "llama-v3": PreTokenizer("llama3", ignore_merges=True, add_bos=True),
    "llama-bpe": PreTokenizer("llama3", ignore_merges=True, add_bos=True),
    "falcon3": PreTokenizer("llama3", ignore_merges=True, add_bos=True),
    "falcon-h1": PreTokenizer("llama3", ignore_merges=True, add_bos=True),
    "pixtral": PreTokenizer("llama3", ignore_merges=True, add_bos=True),
    "midm-2.0": PreTokenizer("llama3", ignore_merges=True, add_bos=True),
    "lfm2": PreTokenizer("llama3", ignore_merges=True, add_bos=True),
    "jina-v5-nano": PreTokenizer("llama3", ignore_merges=True, add_bos=True),
    "deepseek-llm": PreTokenizer("deepseek_llm", clean_spaces=False),
    "deepseek-coder": PreTokenizer("deepseek_coder", clean_spaces=False),
    "deepseek-v3": PreTokenizer("deepseek3_llm", clean_spaces=False),
    "spark2_5": PreTokenizer("spark2_5", clean_spaces=False),
    "youtu": PreTokenizer("youtu", ignore_merges=True, clean_spaces=False),
    "falcon": PreTokenizer("falcon"),
    "mpt": PreTokenizer("mpt"),
    "starcoder": PreTokenizer("starcoder"),
    "gpt-2": PreTokenizer("gpt2"),
    "phi-2": PreTokenizer("gpt2"),
    "jina-es": PreTokenizer("gpt2"),
    "jina-de": PreTokenizer("gpt2"),
    "gigachat": PreTokenizer("gpt2"),
    "jina-v2-es": PreTokenizer("gpt2"),
    "jina-v2-de": PreTokenizer("gpt2"),
    "a.x-4.0": PreTokenizer("gpt2"),
    "mellum": PreTokenizer("gpt2"),
    "modern-bert": PreTokenizer("gpt2"),
    "jais-2": PreTokenizer("jais2"),
    "gemma4": PreTokenizer("gemma4", escape_whitespaces=True),
    "granite-embed-multi-311m": PreTokenizer("gemma4", escape_whitespaces=True),
    "sarvam-moe": PreTokenizer("sarvam_moe", clean_spaces=False, escape_whitespaces=True),
    "jina-v1-en": PreTokenizer("gpt2", add_sep=True),
    "jina-v2-code": PreTokenizer("gpt2", add_sep=True),
    "roberta-bpe": PreTokenizer("gpt2", add_sep=True),
    "whitespace": PreTokenizer("whitespace", lowercase=False),
    "refact": PreTokenizer("refact"),
    "command-r": PreTokenizer("command_r", clean_spaces=False),
    "qwen2": PreTokenizer("qwen2", clean_spaces=False),
    "deepseek-r1-qwen": PreTokenizer("qwen2", clean_spaces=False),
    "kormo": PreTokenizer("qwen2", clean_spaces=False),
    "f2llmv2": PreTokenizer("qwen2", clean_spaces=False),
    "qwen35": PreTokenizer("qwen35", clean_spaces=False),
    "stablelm2": PreTokenizer("stablelm2"),
    "olmo": PreTokenizer("olmo"),
    "dbrx": PreTokenizer("dbrx"),
    "smaug-bpe": PreTokenizer("smaug"),
    "poro-chat": PreTokenizer("poro", clean_spaces=False),
    "chatglm-bpe": PreTokenizer("chatglm4", bos_null=True),
    "glm4": PreTokenizer("chatglm4", ignore_merges=True, bos_null=True),
    "glm5": PreTokenizer("chatglm4", ignore_merges=True, bos_null=True),
    "viking": PreTokenizer("viking", clean_spaces=False),
    "jais": PreTokenizer("jais"),
    "tekken": PreTokenizer("tekken", ignore_merges=True, clean_spaces=False, add_bos=True),
    "smollm": PreTokenizer("smollm", clean_spaces=False),
    "codeshell": PreTokenizer("codeshell"),
    "bloom": PreTokenizer("bloom"),
    "gpt3-finnish": PreTokenizer("gpt3_finnish"),
    "exaone": PreTokenizer("exaone"),
    "exaone4": PreTokenizer("gpt2"),
    "exaone-moe": PreTokenizer("exaone_moe"),
    "chameleon": PreTokenizer("chameleon", clean_spaces=False, add_bos=True),
    "minerva-7b": PreTokenizer("minerva"),
    "megrez": PreTokenizer("qwen2"),
    "gpt-4o": PreTokenizer("gpt4o", clean_spaces=False),
    "llama4": PreTokenizer("gpt4o", clean_spaces=False),
    "kanana2": PreTokenizer("gpt4o", clean_spaces=False),
    "talkie": PreTokenizer("gpt4o", clean_spaces=False),
    "granite-embed-multi-97m": PreTokenizer("granite_emb_multi", ignore_merges=True, clean_spaces=False),
    "tiny_aya": PreTokenizer("tiny_aya", clean_spaces=False),
    "cohere2moe": PreTokenizer("tiny_aya", clean_spaces=False),
    "superbpe": PreTokenizer("superbpe", clean_spaces=False),
    "trillion": PreTokenizer("trillion", clean_spaces=False),
    "granite-docling": PreTokenizer("granite_docling", clean_spaces=False),
    "bailingmoe": PreTokenizer("bailingmoe", clean_spaces=False),
    "bailingmoe2": PreTokenizer("bailingmoe", clean_spaces=False),
    "llada-moe": PreTokenizer("bailingmoe", clean_spaces=False),
    "seed-coder": PreTokenizer("seed_coder", clean_spaces=False),
    "hunyuan": PreTokenizer("hunyuan", clean_spaces=False),
    "hunyuan-dense": PreTokenizer("hunyuan_dense", clean_spaces=False),
    "hy_v4": PreTokenizer("hy_v4", clean_spaces=False),
    "joyai-llm": PreTokenizer("joyai_llm", clean_spaces=False),
    "kimi-k2": PreTokenizer("kimi_k2", clean_spaces=False),
    "ufakzeka": PreTokenizer("ufakzeka", clean_spaces=False),
    "grok-2": PreTokenizer("grok_2", clean_spaces=False),
    "afmoe": PreTokenizer("afmoe", clean_spaces=False),
    "laguna": PreTokenizer("laguna", clean_spaces=False),
    "minimax-m2": PreTokenizer("minimax_m2", clean_spaces=False),
    "solar-open": PreTokenizer("solar_open", clean_spaces=False),
    "mellum2": PreTokenizer("mellum2"),
}
