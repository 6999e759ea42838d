"""Chat templates against llama.cpp: its test-chat-template table, the real models' chat fixtures, hostile templates.

`data/llama_chat_template_cases.json` is the table of llama.cpp's tests/test-chat-template.cpp (0c1e570, MIT;
regenerate with tests/gen_chat_template_cases.py): a fixed six-message conversation and, per template, the
exact prompt llama.cpp's built-in formatter and its Jinja path produce.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, QWEN_05B, QWEN_15B, SMOLLM2, real_model_path
from synapse_cli.chat import (ChatSession, ChatTemplateError, ChatTemplates, ChatTemplateStopped, builtin,
                              builtin_templates)
from synapse_cli.chat.jinja import MAX_DEPTH, MAX_SECONDS, JinjaTemplate, tojson

TABLE = json.loads((Path(__file__).parent / "data" / "llama_chat_template_cases.json").read_text(encoding="utf-8"))
CONVERSATION = TABLE["conversation"]
CASES = TABLE["cases"]
IDS = [c["name"] for c in CASES]


# --- (a) built-in formatters, (b) detection ----------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_builtin_formatting_matches_llama_cpp(case):
    """llama_chat_apply_template(template_str, conversation, add_ass=true) == expected_output."""
    chat = CONVERSATION + case["extra_conversation"]
    assert builtin.chat_apply_template(case["template_str"], chat, True) == case["expected_output"]


def test_every_builtin_template_is_exercised():
    """Each detection rule of the table's templates lands on a template, and together they cover most names."""
    detected = {builtin.detect_template(c["template_str"]) for c in CASES}
    assert None not in detected
    assert len(detected) >= 30


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_detection_is_stable_under_its_name(case):
    """Detecting a template and formatting by the detected name gives the same prompt (name lookup first)."""
    tmpl = builtin.detect_template(case["template_str"])
    if tmpl is builtin.Tmpl.DOTS1:
        pytest.skip("dots1 has no name")
    chat = CONVERSATION + case["extra_conversation"]
    assert builtin.chat_apply_template(tmpl.value, chat, True) == case["expected_output"]


EXPECTED_DETECTION = {
    "teknium/OpenHermes-2.5-Mistral-7B": "chatml",
    "mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 without a system prompt)": "llama2",
    "TheBloke/FusionNet_34Bx2_MoE-AWQ": "llama2-sys-bos",
    "bofenghuang/vigogne-2-70b-chat": "llama2-sys-strip",
    "mlabonne/AlphaMonarch-7B": "monarch",
    "google/gemma-7b-it": "gemma",
    "OrionStarAI/Orion-14B-Chat": "orion",
    "openchat/openchat-3.5-0106": "openchat",
    "deepseek-ai/deepseek-coder-33b-instruct": "deepseek",
    "eachadea/vicuna-13b-1.1": "vicuna",
    "Orca-Vicuna": "vicuna-orca",
    "CohereForAI/c4ai-command-r-plus": "command-r",
    "Llama-3": "llama3",
    "Phi-3-mini": "phi3",
    "Phi-3-small": "phi3",
    "Phi-3-medium": "phi3",
    "Phi-3-vision": "phi3",
    "ChatGLM3": "chatglm3",
    "ChatGLM4": "chatglm4",
    "GLMEdge": "glmedge",
    "MiniCPM-3B-OpenHermes-2.5-v2-GGUF": "minicpm",
    "DeepSeek-V2": "deepseek2",
    "ibm-granite/granite-3.0-8b-instruct": "granite",
    "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)": "mistral-v1",
    "Mistral-Large-Instruct-2407 (mistralai 'v3' template; modified to have system prompt at start)": "mistral-v3",
    "Mistral-Nemo-Instruct-2407 (mistralai 'v3-tekken' template; modified to have system prompt at start)":
        "mistral-v3-tekken",
    "mistralai/Mistral-Large-Instruct-2411 (mistralai 'v7' template)": "mistral-v7",
    "ai-sage/GigaChat-20B-A3B-instruct": "gigachat",
    "Infinigence/Megrez-3B-Instruct": "megrez",
    "phi-4": "phi4",
    "yandex/YandexGPT-5-Lite-8B-instruct": "yandex",
    "inclusionAI/Ling-lite": "bailing",
    "ByteDance-Seed/Seed-OSS-36B-Instruct": "seed_oss",
    "ibm-granite/granite-3.x (tool call)": "granite",
    "ibm-granite/granite-4.0 (tool call)": "granite-4.0",
    "ibm-granite/granite-4.1 (tool call)": "granite-4.1",
}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_detection(case):
    """llm_chat_detect_template: each template of the table detects to the built-in llama.cpp formats it with."""
    assert builtin.detect_template(case["template_str"]).value == EXPECTED_DETECTION[case["name"]]


def test_names_and_unknown_template():
    """llama_chat_builtin_templates lists the names in std::map order; an unknown template is refused."""
    names = builtin_templates()
    assert names == sorted(names, key=str.encode) and "chatml" in names and "llama3" in names
    assert len(names) == len(builtin.Tmpl) - 1  # dots1 has a formatter but no name
    assert builtin.chat_apply_template("INVALID TEMPLATE", CONVERSATION, True) is None
    by_name = {}  # the table's cases whose template detects to a named built-in
    for case in CASES:
        by_name.setdefault(EXPECTED_DETECTION[case["name"]], []).append(case)
    turns = [m["content"].strip() for m in CONVERSATION if m["role"] in ("user", "assistant")]
    for name in names:
        # every named template keeps every turn's text (yandex drops the system message, as llama.cpp does)
        out = builtin.chat_apply_template(name, CONVERSATION, True)
        assert all(t in out for t in turns), name
        for case in by_name.get(name, []):  # by name it formats as by the template string it stands for
            chat = CONVERSATION + case["extra_conversation"]
            assert builtin.chat_apply_template(name, chat, True) == case["expected_output"], (name, case["name"])
    assert len(set(names) & set(by_name)) >= 30


def test_unknown_name_is_refused_with_llama_cpp_text():
    with pytest.raises(ChatTemplateError) as e:
        ChatTemplates.from_gguf({}, None, chat_template="not-a-template")
    assert str(e.value) == ("the supplied chat template is not supported: not-a-template\n"
                            "note: llama.cpp was started without --jinja, we only support commonly used templates")


def test_chatml_fallback_and_names():
    """No model template: chatml (was_explicit false); `--chat-template NAME` formats with that built-in."""
    t = ChatTemplates.init(None)
    assert not t.has_explicit_template
    msgs = [{"role": "user", "content": "hi"}]
    assert t.apply(msgs) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert t.apply(msgs, use_jinja=True) == t.apply(msgs)
    assert ChatTemplates.init("{{ x }}", "llama3").apply(msgs) == (
        "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


# --- Jinja path: the same table through the sandbox --------------------------------------------------


@pytest.mark.parametrize("case", [c for c in CASES if c["supported_with_jinja"]],
                         ids=[c["name"] for c in CASES if c["supported_with_jinja"]])
def test_jinja_matches_llama_cpp(case):
    """common_chat_templates_apply with use_jinja (format_using_common): expected_output_jinja or expected_output.

    Covers llama.cpp's system-role workaround (gemma, phi-3-mini, orion, yandex merge the system message
    into the first user message) and bos/eos handling."""
    t = ChatTemplates.init(None, case["template_str"], bos_token=case["bos_token"], eos_token=case["eos_token"],
                           use_jinja=True)
    expected = case["expected_output_jinja"] or case["expected_output"]
    assert t.apply(CONVERSATION + case["extra_conversation"], True) == expected


def test_tojson_formatting():
    """llama.cpp's value_to_json: ", "/": " separators, "," with an indent, no HTML escaping, %g floats."""
    v = {"a": [1, 2.5, 3.0, None, True], "b": "<tag> & \"q\"\n", "c": {}}
    assert tojson(v) == '{"a": [1, 2.5, 3, null, true], "b": "<tag> & \\"q\\"\\n", "c": {}}'
    assert tojson([1, {"x": "é"}], indent=2) == '[\n  1,\n  {\n    "x": "é"\n  }\n]'
    assert tojson("é😀", ensure_ascii=True) == '"\\u00e9\\ud83d\\ude00"'
    t = JinjaTemplate("{{ messages | tojson }}|{{ x | tojson(indent=1) }}")
    assert t.render({"messages": [{"role": "user"}], "x": [1]}) == '[{"role": "user"}]|[\n 1\n]'


def test_jinja_context_as_llama_cpp_gives_it():
    """add_generation_prompt undefined when false, bos/eos tokens, strftime_now, raise_exception, chained undefined."""
    src = ("{{ add_generation_prompt is defined }}|{{ bos_token }}{{ eos_token }}|{{ tools is defined }}|"
           "{{ messages[0].tool_calls.x is defined }}|{{ strftime_now('%Y') }}|{{ enable_thinking }}")
    t = ChatTemplates.init(None, src, bos_token="<s>", eos_token="</s>", use_jinja=True)
    year = time.strftime("%Y")
    msgs = [{"role": "user", "content": "x"}]
    assert t.apply(msgs, False) == f"False|<s></s>|False|False|{year}|True"
    assert t.apply(msgs, True) == f"True|<s></s>|False|False|{year}|True"
    with pytest.raises(ChatTemplateError, match="^chat template: Jinja Exception: nope$"):
        ChatTemplates.init(None, "{% if messages %}{{ raise_exception('nope') }}{% endif %}",
                           use_jinja=True).apply(msgs)


def test_add_bos_strips_template_bos():
    """direct_apply: with a vocabulary that adds BOS, a leading bos_token from the template is removed."""
    t = ChatTemplates.init(None, "{{ bos_token }}[{{ messages[0].content }}]", bos_token="<s>", add_bos=True,
                           use_jinja=True)
    assert t.apply([{"role": "user", "content": "x"}]) == "[x]"


# --- (e) format_single: the delta of each turn ---------------------------------------------------------


@pytest.mark.parametrize("use_jinja", [False, True])
def test_format_single_two_turns(use_jinja):
    """common_chat_format_single, as completion.cpp calls it for every message of a two-turn chat (chatml)."""
    chat = ChatSession(ChatTemplates.init(None, use_jinja=use_jinja))
    prompt, waiting = chat.start("S", "P1")
    assert (prompt, waiting) == ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nP1<|im_end|>\n"
                                 "<|im_start|>assistant\n", False)
    # the assistant's delta includes its prefix (the history is formatted without one); completion.cpp only
    # records the message, its prompt already holds the prefix and the reply
    assert chat.add_and_format("assistant", "A1") == "<|im_start|>assistant\nA1<|im_end|>\n"
    # the history ends with a newline and a user turn asks for the assistant prefix: llama.cpp keeps a "\n"
    assert chat.add_and_format("user", "P2") == "\n<|im_start|>user\nP2<|im_end|>\n<|im_start|>assistant\n"
    assert chat.add_and_format("assistant", "A2") == "<|im_start|>assistant\nA2<|im_end|>\n"
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant", "user", "assistant"]


def test_format_single_llama3_and_empty_start():
    t = ChatTemplates.init(None, "llama3")
    assert t.format_single([], {"role": "user", "content": " hi "}, True) == (
        "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert t.format_single([{"role": "user", "content": "hi"}], {"role": "assistant", "content": "yo"}, False) == (
        "<|start_header_id|>assistant<|end_header_id|>\n\nyo<|eot_id|>")
    assert ChatSession(t).start() == ("", True)  # -cnv without -sys and -p waits for the first line


def test_format_example():
    t = ChatTemplates.init(None)
    assert t.format_example() == (
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
        "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n"
        "<|im_start|>assistant\n")


# --- (c) the real models: the prompt ids of llama-completion's chat fixtures ----------------------------


def _fixture(name: str) -> tuple[list, list[int]]:
    d = json.loads((FIXTURES / "real" / "completion" / name).read_text(encoding="utf-8"))
    note = d["note"]
    ids = json.loads(note[note.index("tokens [") + len("tokens "): note.index("]", note.index("tokens [")) + 1])
    return d["args"], ids


def _arg(args, flag, default=""):
    return args[args.index(flag) + 1] if flag in args else default


CHAT_FIXTURES = [
    (SMOLLM2, "SmolLM2-135M-Instruct.Q4_1__cnv_colors__greedy.json", False),
    (SMOLLM2, "SmolLM2-135M-Instruct.Q4_1__cnv_colors__greedy__jinja.json", True),
    (QWEN_05B, "qwen2.5-coder-0.5b-instruct-awq-q4_k_m__cnv_reverse__seed7.json", False),
]


def _open(model: str):
    from kernels.gguf import GGUFReader
    from tokenizer import load_tokenizer

    reader = GGUFReader(real_model_path(model))
    return reader, load_tokenizer(reader)


@pytest.mark.real
@pytest.mark.parametrize("model,fixture,use_jinja", CHAT_FIXTURES, ids=[f for _, f, _ in CHAT_FIXTURES])
def test_real_chat_prompt_ids(model, fixture, use_jinja):
    """-cnv -st [-sys S] -p P [--jinja]: the formatted prompt tokenizes to llama-completion's prompt ids."""
    args, ids = _fixture(fixture)
    assert ("--jinja" in args) == use_jinja
    reader, tok = _open(model)
    chat = ChatSession(ChatTemplates.from_gguf(reader, tok, use_jinja=use_jinja))
    prompt, waiting = chat.start(_arg(args, "-sys"), _arg(args, "-p"))
    assert not waiting
    assert tok.encode(prompt, add_special=True, parse_special=True) == ids


@pytest.mark.real
@pytest.mark.parametrize("model", [SMOLLM2, QWEN_05B, QWEN_15B])
def test_real_jinja_equals_builtin(model):
    """The GGUF's own template (--jinja) gives the built-in chatml prompt for the fixtures' conversation with a
    system prompt, and for a two-turn chat's deltas. Without a system prompt the Qwen templates insert their
    default system message, which llama.cpp's built-in chatml does not."""
    reader, tok = _open(model)
    jinja = ChatTemplates.from_gguf(reader, tok, use_jinja=True)
    plain = ChatTemplates.from_gguf(reader, tok, use_jinja=False)
    assert jinja.has_explicit_template and plain.has_explicit_template
    a, b = ChatSession(jinja), ChatSession(plain)
    assert a.start("You are a helpful assistant.", "Name three primary colors.") == \
        b.start("You are a helpful assistant.", "Name three primary colors.")
    for role, text in (("assistant", "Red, blue, yellow."), ("user", "And secondary?"), ("assistant", "Green.")):
        assert a.add_and_format(role, text) == b.add_and_format(role, text)
    if model != SMOLLM2:
        no_sys, _ = ChatSession(jinja).start("", "hi")
        assert no_sys.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")


# --- (d) hostile templates: refused or stopped, one line, quickly -----------------------------------------

HOSTILE = {
    "class_mro": ("{{ ''.__class__.__mro__ }}", "refused by the sandbox: access to attribute '__class__'"),
    "globals": ("{{ raise_exception.__globals__ }}", "refused by the sandbox: access to attribute '__globals__'"),
    "subclasses": ("{{ ().__class__.__base__.__subclasses__() }}", "refused by the sandbox"),
    "cycler_os": ("{{ cycler.__init__.__globals__.os }}", "refused by the sandbox"),
    "mutation": ("{% set l = [] %}{{ l.append(1) }}", "refused by the sandbox: access to attribute 'append'"),
    "big_range": ("{% for i in range(10**9) %}x{% endfor %}", "stopped: Range too big"),
    "endless_loops": ("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
                      "stopped: rendering took longer than 0.5 s"),
    "recursive_macro": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                        "stopped: recursion too deep (more than 100 nested template calls)"),
    "huge_output": ("{% for i in range(99999) %}{{ 'x' * 1000 }}{% endfor %}", "stopped: output longer than"),
    "huge_string": ("{{ 'x' * 10**10 }}", "stopped: '*' would build a string"),
    "huge_pow": ("{{ 10 ** 100000000 }}", "stopped: '10 ** 100000000' is too large"),
    "huge_ljust": ("{{ 'x'.ljust(10**10) }}", "stopped: str.ljust()"),
    "huge_center": ("{{ 'x' | center(10**10) }}", "stopped: filter 'center'"),
    "huge_format": ("{{ '{:>9999999999}'.format('x') }}", "stopped: a format with a width"),
    "huge_percent": ("{{ '%9999999999s' % 'x' }}", "stopped: a '%' format with a width"),
    "huge_replace": ("{% set s = 'x' * 1000000 %}{{ s.replace('x', s) }}", "stopped: replace() would build"),
    "syntax": ("{% for %}", "syntax error, line 1"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_template(name):
    src, message = HOSTILE[name]
    # Only the endless loops wait for the deadline; the other limits must trip before the default one, even on a
    # loaded CI machine (a recursive macro stops at MAX_DEPTH, in milliseconds).
    max_seconds = 0.5 if name == "endless_loops" else MAX_SECONDS
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError) as e:
        t = JinjaTemplate(src, max_seconds=max_seconds)
        t.render({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True})
    assert message in str(e.value)
    assert isinstance(e.value, ChatTemplateStopped) == (name != "syntax")
    assert "\n" not in str(e.value) and "Traceback" not in str(e.value)
    assert time.monotonic() - t0 < 10


def test_deep_macro_within_the_depth_limit():
    """A macro nested MAX_DEPTH - 10 deep renders (a tool-call schema's nesting is far shallower); one more level
    than the limit stops."""
    src = "{% macro f(n) %}{% if n > 0 %}({{ f(n - 1) }}){% endif %}{% endmacro %}{{ f(depth) }}"
    ok = MAX_DEPTH - 10
    assert JinjaTemplate(src).render({"messages": [], "depth": ok}) == "(" * ok + ")" * ok
    with pytest.raises(ChatTemplateStopped, match="recursion too deep"):
        JinjaTemplate(src).render({"messages": [], "depth": MAX_DEPTH})


def test_hostile_template_from_cli_arguments():
    """`--jinja --chat-template '<hostile>'`: the sandbox's one line, not llama.cpp's "not supported" text."""
    with pytest.raises(ChatTemplateError, match="^chat template refused by the sandbox: access to attribute"):
        ChatTemplates.from_gguf({}, None, chat_template="{{ ''.__class__ }}", use_jinja=True)


def test_template_file(tmp_path):
    f = tmp_path / "t.jinja"
    f.write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}.\n", encoding="utf-8")
    t = ChatTemplates.from_gguf({}, None, chat_template_file=str(f), use_jinja=True)
    assert t.apply([{"role": "user", "content": "x"}]) == "<user>x."  # one trailing newline dropped (the lexer's)
    for ending, rendered in (("\n\n", "\n"), ("\r\n", ""), ("\r", "\n"), ("", "")):
        f.write_bytes(b"<{{ messages[0].content }}>" + ending.encode())
        t = ChatTemplates.from_gguf({}, None, chat_template_file=str(f), use_jinja=True)
        assert t.apply([{"role": "user", "content": "x"}]) == "<x>" + rendered, repr(ending)
    with pytest.raises(ChatTemplateError, match="^failed to open file "):
        ChatTemplates.from_gguf({}, None, chat_template_file=str(tmp_path / "missing"))
