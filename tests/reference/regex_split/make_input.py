"""Input of the unicode_regex_split reference (tests/reference/README.md, "regex_split/").

    python make_input.py LLAMA_CPP_DIR FIXTURES_DIR      # writes input.json

Every LLAMA_VOCAB_PRE_TYPE_* of LLAMA_CPP_DIR/src/llama-vocab.cpp with its regex_exprs (read from the
llm_tokenizer_bpe constructor's switch; the three types no case names get the default's list, as the
switch's default does), and the texts: the fixtures' 44 public texts, the test-tokenizer-0 inputs of
models/ggml-vocab-{llama-bpe,qwen35,command-r}.gguf.inp, ten hand-written stress lines and 200 seeded
random strings. Not run by the tests.
"""
import json
import re
import sys

LLAMA, FIXTURES = sys.argv[1], sys.argv[2]
src = open(LLAMA + "/src/llama-vocab.cpp", encoding="utf-8").read()
a = src.index("llm_tokenizer_bpe(const llama_vocab & vocab) {")
b = src.index("std::vector<std::string> regex_exprs;", a)
body = src[a:b]
# split into blocks ending with break;
def unescape(lit):
    out = []; i = 0
    while i < len(lit):
        c = lit[i]
        if c == "\\":
            d = lit[i+1]
            out.append({"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "'": "'"}[d]); i += 2
        else:
            out.append(c); i += 1
    return "".join(out)
blocks = re.split(r"break;", body)
table = {}
for blk in blocks:
    labels = re.findall(r"case LLAMA_VOCAB_PRE_TYPE_(\w+):", blk)
    if "default:" in blk:
        labels.append("DEFAULT")
    m = re.search(r"regex_exprs = \{(.*?)\};", blk, re.S)
    if not m: continue
    lits = []
    for line in m.group(1).split("\n"):
        line = line.strip()
        if line.startswith("//") or not line: continue
        # strip trailing comment after the literal
        mm = re.match(r'"((?:[^"\\]|\\.)*)"\s*,?\s*(//.*)?$', line)
        assert mm, line
        lits.append(unescape(mm.group(1)))
    be = "byte_encode = false" not in blk
    for l in labels:
        table[l] = {"regexes": lits, "byte_encode": be}

L = LLAMA + "/models/"
SEP = "\n__ggml_vocab_test__\n"
texts = [d["text"] for d in json.load(open(FIXTURES + "/tokenizer/texts.json", encoding="utf-8"))]
for f in ("ggml-vocab-llama-bpe.gguf.inp", "ggml-vocab-qwen35.gguf.inp", "ggml-vocab-command-r.gguf.inp"):
    for s in open(L + f, encoding="utf-8").read().split(SEP):
        if s and s not in texts:
            texts.append(s)
extra = [
    "1 12 123 1234 12345 123456 1234567 ١٢٣٤ ²³ 3.14159 1,000,000 0x1F",
    "हिन्दी नमस्ते क्षत्रिय ﷺ e\u0301t\u00e9 a\u0308\u0301b \u0301start",
    "中文汉字 日本語のひらがなカタカナ ｶﾀｶﾅ 한국어 한글 ภาษาไทย ພາສາລາວ ភាសាខ្មែរ မြန်မာ",
    "<sentinel:12> IMGIMGABCZ IMGIMGZ \t\n    x  y",
    "It's I'M we'RE they'Ve he'lL she'd 'S 'x don't",
    "a\u00a0b\u3000c\u2028d\x85e\u200bf\ufeffg\x0bh\x0ci",
    "CamelCaseWord ALLCAPS lowerUPPER Ωmega ǅungla ǈ",
    "emoji 🦙🦙 👨‍👩‍👧 ✨ 🇫🇷 \U0001d400\U0001d401 \U00020000\U0002a6d6",
    "   leading and trailing   \n\n\n  \r\n\r\n end  ",
    "price: $100, 50% off! (really?) ... a--b __init__ x+=1; y<=2 ^_^ ~tilde `tick` |pipe|",
]
texts += extra
types = table
for t in ("CHATGLM3", "LLAMA4", "PIXTRAL"):
    types[t] = dict(types["DEFAULT"])
# seeded random strings over characters that exercise every splitter branch
import random
pool = (list("abcxyzSTMDRELVstmdrelv'  \t\n\r\x0b\x0c0123456789.,!?-_()[]{}<>/\\\"#$%&*+=:;@^`|~")
        + ["é", "ß", "Ω", "中", "日", "한", "ぁ", "ア", "ｱ", "ا", "ж", "²", "٣", "Ⅻ", "\xa0", "\u3000", "\x85", "\u2028",
           "\u0301", "\u093f", "\u0915", "\u094d", "\u200b", "\u200d", "\ufeff", "\x00", "\x1f", "\x7f", "\U0001f999",
           "\U0001d400", "\U00020001", "\u0378", "İ", "ſ", "K", "\u2581", "…", "。", "，", "！", "（", "１", "Ａ", "ǅ", "\u02b0",
           "IMGIMG", "<sentinel:", "ABC", "Z"])
rng = random.Random(19)
rand_texts = ["".join(rng.choices(pool, k=rng.randrange(1, 80))) for _ in range(200)]
texts += rand_texts
json.dump({"types": types, "texts": texts}, open("input.json", "w"), ensure_ascii=False)
print(len(texts), len(types))
