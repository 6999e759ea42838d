"""llama.cpp's built-in chat templates: names, detection from a Jinja source, and the formatters.

Mirrors src/llama-chat.cpp of llama.cpp 0c1e570: the name table `LLM_CHAT_TEMPLATES`
(`llm_chat_template_from_str`, `llama_chat_builtin_templates`), `llm_chat_detect_template` (substring
heuristics, tested in llama.cpp's order), `llm_chat_apply_template` (one formatter per template; these are
not Jinja, they write the prompt directly) and `llama_chat_apply_template` (src/llama.cpp: detect, then
format). Messages are `{"role": str, "content": str}` dicts; every formatter returns the prompt text.
"""

from __future__ import annotations

from enum import Enum


class Tmpl(Enum):
    """enum llm_chat_template (src/llama-chat.h), in its order."""

    CHATML = "chatml"
    LLAMA_2 = "llama2"
    LLAMA_2_SYS = "llama2-sys"
    LLAMA_2_SYS_BOS = "llama2-sys-bos"
    LLAMA_2_SYS_STRIP = "llama2-sys-strip"
    MISTRAL_V1 = "mistral-v1"
    MISTRAL_V3 = "mistral-v3"
    MISTRAL_V3_TEKKEN = "mistral-v3-tekken"
    MISTRAL_V7 = "mistral-v7"
    MISTRAL_V7_TEKKEN = "mistral-v7-tekken"
    PHI_3 = "phi3"
    PHI_4 = "phi4"
    FALCON_3 = "falcon3"
    ZEPHYR = "zephyr"
    MONARCH = "monarch"
    GEMMA = "gemma"
    ORION = "orion"
    OPENCHAT = "openchat"
    VICUNA = "vicuna"
    VICUNA_ORCA = "vicuna-orca"
    DEEPSEEK = "deepseek"
    DEEPSEEK_2 = "deepseek2"
    DEEPSEEK_3 = "deepseek3"
    DEEPSEEK_OCR = "deepseek-ocr"
    COMMAND_R = "command-r"
    LLAMA_3 = "llama3"
    CHATGLM_3 = "chatglm3"
    CHATGLM_4 = "chatglm4"
    GLMEDGE = "glmedge"
    MINICPM = "minicpm"
    EXAONE_3 = "exaone3"
    EXAONE_4 = "exaone4"
    EXAONE_MOE = "exaone-moe"
    RWKV_WORLD = "rwkv-world"
    GRANITE_3_X = "granite"
    GRANITE_4_0 = "granite-4.0"
    GRANITE_4_1 = "granite-4.1"
    GIGACHAT = "gigachat"
    MEGREZ = "megrez"
    YANDEX = "yandex"
    BAILING = "bailing"
    BAILING_THINK = "bailing-think"
    BAILING2 = "bailing2"
    LLAMA4 = "llama4"
    SMOLVLM = "smolvlm"
    DOTS1 = "dots1"  # not in the name table: reachable only by detection
    HUNYUAN_MOE = "hunyuan-moe"
    OPENAI_MOE = "gpt-oss"
    HUNYUAN_DENSE = "hunyuan-dense"
    HUNYUAN_VL = "hunyuan-vl"
    KIMI_K2 = "kimi-k2"
    SEED_OSS = "seed_oss"
    GROK_2 = "grok-2"
    PANGU_EMBED = "pangu-embedded"
    SOLAR_OPEN = "solar-open"


# LLM_CHAT_TEMPLATES: the names `--chat-template NAME` accepts (DOTS1 has a formatter but no name).
NAMED = {t.value: t for t in Tmpl if t is not Tmpl.DOTS1}


def builtin_templates() -> list[str]:
    """llama_chat_builtin_templates: the names in std::map order (sorted by bytes), as `--help` lists them."""
    return sorted(NAMED, key=lambda s: s.encode())


def template_from_str(name: str) -> Tmpl | None:
    """llm_chat_template_from_str (None where llama.cpp's map::at throws)."""
    return NAMED.get(name)


def detect_template(tmpl: str) -> Tmpl | None:
    """llm_chat_detect_template: a built-in name, else the first matching substring rule; None = UNKNOWN."""
    named = template_from_str(tmpl)
    if named is not None:
        return named

    def has(s: str) -> bool:
        return s in tmpl

    if has("<|im_start|>"):
        if has("<|im_sep|>"):
            return Tmpl.PHI_4
        # SmolVLM uses <|im_start|> as BOS, but it is not chatml
        return Tmpl.SMOLVLM if has("<end_of_utterance>") else Tmpl.CHATML
    if tmpl.startswith("mistral") or has("[INST]"):
        if has("[SYSTEM_PROMPT]"):
            return Tmpl.MISTRAL_V7
        if has("' [INST] ' + system_message") or has("[AVAILABLE_TOOLS]"):
            # the official mistral 'v1', 'v3' and 'v3-tekken' templates
            if has(" [INST]"):
                return Tmpl.MISTRAL_V1
            if has('"[INST]"'):
                return Tmpl.MISTRAL_V3_TEKKEN
            return Tmpl.MISTRAL_V3
        # llama2 and its variants
        if has("content.strip()"):
            return Tmpl.LLAMA_2_SYS_STRIP
        if has("bos_token + '[INST]"):
            return Tmpl.LLAMA_2_SYS_BOS
        if has("<<SYS>>"):
            return Tmpl.LLAMA_2_SYS
        return Tmpl.LLAMA_2
    if has("<|assistant|>") and has("<|end|>"):
        return Tmpl.PHI_3
    if has("[gMASK]<sop>"):
        return Tmpl.CHATGLM_4
    if has("<|assistant|>") and has("<|user|>"):
        if has("<|tool_declare|>"):
            return Tmpl.EXAONE_MOE
        return Tmpl.FALCON_3 if has("</s>") else Tmpl.GLMEDGE
    if has("<|{{ item['role'] }}|>") and has("<|begin_of_image|>"):
        return Tmpl.GLMEDGE
    if has("<|user|>") and has("<|endoftext|>"):
        return Tmpl.ZEPHYR
    if has("bos_token + message['role']"):
        return Tmpl.MONARCH
    if has("<start_of_turn>"):
        return Tmpl.GEMMA
    if has("'\\n\\nAssistant: ' + eos_token"):  # OrionStarAI/Orion-14B-Chat
        return Tmpl.ORION
    if has("GPT4 Correct "):  # openchat/openchat-3.5-0106
        return Tmpl.OPENCHAT
    if has("USER: ") and has("ASSISTANT: "):  # eachadea/vicuna-13b-1.1 (and the Orca variant)
        return Tmpl.VICUNA_ORCA if has("SYSTEM: ") else Tmpl.VICUNA
    if has("### Instruction:") and has("<|EOT|>"):  # deepseek-ai/deepseek-coder-33b-instruct
        return Tmpl.DEEPSEEK
    if has("<|START_OF_TURN_TOKEN|>") and has("<|USER_TOKEN|>"):  # CohereForAI/c4ai-command-r-plus
        return Tmpl.COMMAND_R
    if has("<|start_header_id|>") and has("<|end_header_id|>"):
        return Tmpl.LLAMA_3
    if has("[gMASK]sop"):  # chatglm3-6b
        return Tmpl.CHATGLM_3
    if has("<用户>"):  # MiniCPM-3B-OpenHermes-2.5-v2-GGUF
        return Tmpl.MINICPM
    if has("'Assistant: ' + message['content'] + eos_token"):
        return Tmpl.DEEPSEEK_2
    if has("<｜Assistant｜>") and has("<｜User｜>") and has("<｜end▁of▁sentence｜>"):
        return Tmpl.DEEPSEEK_3
    if has("[|system|]") and has("[|assistant|]") and has("[|endofturn|]"):
        return Tmpl.EXAONE_4 if has("[|tool|]") else Tmpl.EXAONE_3
    if has("rwkv-world") or has("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}"):
        return Tmpl.RWKV_WORLD
    if has("<|start_of_role|>"):
        if has("<tool_call>") or has("<tools>"):
            return Tmpl.GRANITE_4_0 if has("g4_default_system_message") else Tmpl.GRANITE_4_1
        return Tmpl.GRANITE_3_X
    if has("message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]"):
        return Tmpl.GIGACHAT
    if has("<|role_start|>"):
        return Tmpl.MEGREZ
    if has(" Ассистент:"):
        return Tmpl.YANDEX
    if has("<role>ASSISTANT</role>") and has("'HUMAN'"):
        return Tmpl.BAILING
    if has("<role>ASSISTANT</role>") and has('"HUMAN"') and has("<think>"):
        return Tmpl.BAILING_THINK
    if has("<role>ASSISTANT</role>") and has("<role>HUMAN</role>") and has("<|role_end|>"):
        return Tmpl.BAILING2
    if has("<|header_start|>") and has("<|header_end|>"):
        return Tmpl.LLAMA4
    if has("<|endofuserprompt|>"):
        return Tmpl.DOTS1
    if has("<|extra_0|>") and has("<|extra_4|>"):
        return Tmpl.HUNYUAN_MOE
    if has("<|start|>") and has("<|channel|>"):
        return Tmpl.OPENAI_MOE
    if has("<｜hy_Assistant｜>") and has("<｜hy_begin▁of▁sentence｜>"):
        return Tmpl.HUNYUAN_VL
    if has("<｜hy_Assistant｜>") and has("<｜hy_place▁holder▁no▁3｜>"):
        return Tmpl.HUNYUAN_DENSE
    if has("<|im_assistant|>assistant<|im_middle|>"):
        return Tmpl.KIMI_K2
    if has("<seed:bos>"):
        return Tmpl.SEED_OSS
    if has("'Assistant: '  + message['content'] + '<|separator|>"):
        return Tmpl.GROK_2
    if has("[unused9]系统：[unused10]"):
        return Tmpl.PANGU_EMBED
    if has("<|begin|>") and has("<|end|>") and has("<|content|>"):
        return Tmpl.SOLAR_OPEN
    return None


def _trim(s: str) -> str:
    """llama-chat.cpp trim(): strip C isspace() characters (ASCII whitespace) at both ends."""
    return s.strip(" \t\n\v\f\r")


def _ascii_upper(s: str) -> str:
    """std::transform(..., ::toupper) in the C locale: ASCII letters only."""
    return "".join(c.upper() if c.isascii() else c for c in s)


def apply_template(tmpl: Tmpl, chat: list[dict], add_ass: bool) -> str:
    """llm_chat_apply_template: the prompt for `chat` (role/content dicts) in built-in template `tmpl`.

    `add_ass` adds the assistant prefix where the template has one (several ignore it, as llama.cpp's do)."""
    ss: list[str] = []
    out = ss.append
    T = Tmpl
    if tmpl is T.CHATML:
        for m in chat:
            out(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
        if add_ass:
            out("<|im_start|>assistant\n")
    elif tmpl in (T.MISTRAL_V7, T.MISTRAL_V7_TEKKEN):
        # official mistral 'v7' and 'v7-tekken' (the latter without the spaces)
        sp = " " if tmpl is T.MISTRAL_V7 else ""
        for m in chat:
            role, content = m["role"], m["content"]
            if role == "system":
                out(f"[SYSTEM_PROMPT]{sp}{content}[/SYSTEM_PROMPT]")
            elif role == "user":
                out(f"[INST]{sp}{content}[/INST]")
            else:
                out(f"{sp}{content}</s>")
    elif tmpl in (T.MISTRAL_V1, T.MISTRAL_V3, T.MISTRAL_V3_TEKKEN):
        leading = " " if tmpl is T.MISTRAL_V1 else ""
        trailing = "" if tmpl is T.MISTRAL_V3_TEKKEN else " "
        trim_assistant = tmpl is T.MISTRAL_V3
        inside_turn = False
        for m in chat:
            if not inside_turn:
                out(f"{leading}[INST]{trailing}")
                inside_turn = True
            role, content = m["role"], m["content"]
            if role == "system":
                out(f"{content}\n\n")
            elif role == "user":
                out(f"{content}{leading}[/INST]")
            else:
                out(f"{trailing}{_trim(content) if trim_assistant else content}</s>")
                inside_turn = False
    elif tmpl in (T.LLAMA_2, T.LLAMA_2_SYS, T.LLAMA_2_SYS_BOS, T.LLAMA_2_SYS_STRIP):
        support_system = tmpl is not T.LLAMA_2
        bos_inside_history = tmpl is T.LLAMA_2_SYS_BOS
        strip = tmpl is T.LLAMA_2_SYS_STRIP
        inside_turn = True  # skip BOS at the beginning
        out("[INST] ")
        for m in chat:
            content = _trim(m["content"]) if strip else m["content"]
            role = m["role"]
            if not inside_turn:
                inside_turn = True
                out("<s>[INST] " if bos_inside_history else "[INST] ")
            if role == "system":
                if support_system:
                    out(f"<<SYS>>\n{content}\n<</SYS>>\n\n")
                else:
                    # no system message in this variant: it still goes into the first message, without <<SYS>>
                    out(f"{content}\n")
            elif role == "user":
                out(f"{content} [/INST]")
            else:
                out(f"{content}</s>")
                inside_turn = False
    elif tmpl is T.PHI_3:
        for m in chat:
            out(f"<|{m['role']}|>\n{m['content']}<|end|>\n")
        if add_ass:
            out("<|assistant|>\n")
    elif tmpl is T.PHI_4:
        for m in chat:
            out(f"<|im_start|>{m['role']}<|im_sep|>{m['content']}<|im_end|>")
        if add_ass:
            out("<|im_start|>assistant<|im_sep|>")
    elif tmpl is T.FALCON_3:
        for m in chat:
            out(f"<|{m['role']}|>\n{m['content']}\n")
        if add_ass:
            out("<|assistant|>\n")
    elif tmpl is T.ZEPHYR:
        for m in chat:
            out(f"<|{m['role']}|>\n{m['content']}<|endoftext|>\n")
        if add_ass:
            out("<|assistant|>\n")
    elif tmpl is T.MONARCH:
        # mlabonne/AlphaMonarch-7B: the <s> is part of the history, except before the first message
        for i, m in enumerate(chat):
            bos = "" if i == 0 else "<s>"
            out(f"{bos}{m['role']}\n{m['content']}</s>\n")
        if add_ass:
            out("<s>assistant\n")
    elif tmpl is T.GEMMA:
        # google/gemma-7b-it: no system role, the system text is merged into the next user turn
        system_prompt = ""
        for m in chat:
            role = m["role"]
            if role == "system":
                system_prompt += _trim(m["content"])
                continue
            role = "model" if role == "assistant" else role
            out(f"<start_of_turn>{role}\n")
            if system_prompt and role != "model":
                out(f"{system_prompt}\n\n")
                system_prompt = ""
            out(f"{_trim(m['content'])}<end_of_turn>\n")
        if add_ass:
            out("<start_of_turn>model\n")
    elif tmpl is T.ORION:
        # OrionStarAI/Orion-14B-Chat: no system role, merged into the next user turn
        system_prompt = ""
        for m in chat:
            role = m["role"]
            if role == "system":
                system_prompt += m["content"]
                continue
            if role == "user":
                out("Human: ")
                if system_prompt:
                    out(f"{system_prompt}\n\n")
                    system_prompt = ""
                out(f"{m['content']}\n\nAssistant: </s>")
            else:
                out(f"{m['content']}</s>")
    elif tmpl is T.OPENCHAT:
        # openchat/openchat-3.5-0106
        for m in chat:
            role = m["role"]
            if role == "system":
                out(f"{m['content']}<|end_of_turn|>")
            else:
                role = _ascii_upper(role[:1]) + role[1:]
                out(f"GPT4 Correct {role}: {m['content']}<|end_of_turn|>")
        if add_ass:
            out("GPT4 Correct Assistant:")
    elif tmpl in (T.VICUNA, T.VICUNA_ORCA):
        # eachadea/vicuna-13b-1.1 (and the Orca variant, which prefixes the system message)
        for m in chat:
            role = m["role"]
            if role == "system":
                out(f"SYSTEM: {m['content']}\n" if tmpl is T.VICUNA_ORCA else f"{m['content']}\n\n")
            elif role == "user":
                out(f"USER: {m['content']}\n")
            elif role == "assistant":
                out(f"ASSISTANT: {m['content']}</s>\n")
        if add_ass:
            out("ASSISTANT:")
    elif tmpl is T.DEEPSEEK:
        # deepseek-ai/deepseek-coder-33b-instruct
        for m in chat:
            role = m["role"]
            if role == "system":
                out(m["content"])
            elif role == "user":
                out(f"### Instruction:\n{m['content']}\n")
            elif role == "assistant":
                out(f"### Response:\n{m['content']}\n<|EOT|>\n")
        if add_ass:
            out("### Response:\n")
    elif tmpl is T.COMMAND_R:
        # CohereForAI/c4ai-command-r-plus
        tokens = {"system": "<|SYSTEM_TOKEN|>", "user": "<|USER_TOKEN|>", "assistant": "<|CHATBOT_TOKEN|>"}
        for m in chat:
            if m["role"] in tokens:
                out(f"<|START_OF_TURN_TOKEN|>{tokens[m['role']]}{_trim(m['content'])}<|END_OF_TURN_TOKEN|>")
        if add_ass:
            out("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")
    elif tmpl is T.LLAMA_3:
        for m in chat:
            out(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{_trim(m['content'])}<|eot_id|>")
        if add_ass:
            out("<|start_header_id|>assistant<|end_header_id|>\n\n")
    elif tmpl is T.CHATGLM_3:
        # chatglm3-6b
        out("[gMASK]sop")
        for m in chat:
            out(f"<|{m['role']}|>\n {m['content']}")
        if add_ass:
            out("<|assistant|>")
    elif tmpl is T.CHATGLM_4:
        out("[gMASK]<sop>")
        for m in chat:
            out(f"<|{m['role']}|>\n{m['content']}")
        if add_ass:
            out("<|assistant|>\n")
    elif tmpl is T.GLMEDGE:
        for m in chat:
            out(f"<|{m['role']}|>\n{m['content']}")
        if add_ass:
            out("<|assistant|>")
    elif tmpl is T.MINICPM:
        # MiniCPM-3B-OpenHermes-2.5-v2-GGUF
        for m in chat:
            if m["role"] == "user":
                out(f"<用户>{_trim(m['content'])}<AI>")
            else:
                out(_trim(m["content"]))
    elif tmpl is T.DEEPSEEK_2:
        # DeepSeek-V2
        for m in chat:
            role = m["role"]
            if role == "system":
                out(f"{m['content']}\n\n")
            elif role == "user":
                out(f"User: {m['content']}\n\n")
            elif role == "assistant":
                out(f"Assistant: {m['content']}<｜end▁of▁sentence｜>")
        if add_ass:
            out("Assistant:")
    elif tmpl is T.DEEPSEEK_3:
        # DeepSeek-V3
        for m in chat:
            role = m["role"]
            if role == "system":
                out(f"{m['content']}\n\n")
            elif role == "user":
                out(f"<｜User｜>{m['content']}")
            elif role == "assistant":
                out(f"<｜Assistant｜>{m['content']}<｜end▁of▁sentence｜>")
        if add_ass:
            out("<｜Assistant｜>")
    elif tmpl is T.DEEPSEEK_OCR:
        for m in chat:  # no template
            out(m["content"])
    elif tmpl in (T.EXAONE_3, T.EXAONE_4):
        # EXAONE-3.0-7.8B-Instruct; EXAONE 4 adds the tool role
        for m in chat:
            role, content = m["role"], _trim(m["content"])
            if role == "system":
                out(f"[|system|]{content}[|endofturn|]\n")
            elif role == "user":
                out(f"[|user|]{content}\n")
            elif role == "assistant":
                out(f"[|assistant|]{content}[|endofturn|]\n")
            elif role == "tool" and tmpl is T.EXAONE_4:
                out(f"[|tool|]{content}[|endofturn|]\n")
        if add_ass:
            out("[|assistant|]")
    elif tmpl is T.EXAONE_MOE:
        for m in chat:
            role = m["role"]
            if role in ("system", "user", "assistant", "tool"):
                out(f"<|{role}|>\n{_trim(m['content'])}<|endofturn|>\n")
        if add_ass:
            out("<|assistant|>\n")
    elif tmpl is T.RWKV_WORLD:
        # this template needs the model to have "\n\n" as its EOT token
        for i, m in enumerate(chat):
            role = m["role"]
            if role == "system":
                out(f"System: {_trim(m['content'])}\n\n")
            elif role == "user":
                out(f"User: {_trim(m['content'])}\n\n")
                if i == len(chat) - 1:
                    out("Assistant:")
            elif role == "assistant":
                out(f"Assistant: {_trim(m['content'])}\n\n")
    elif tmpl is T.GRANITE_3_X:
        # IBM Granite 3.x
        for m in chat:
            role = m["role"]
            out(f"<|start_of_role|>{role}<|end_of_role|>")
            if role == "assistant_tool_call":
                out("<|tool_call|>")
            out(f"{m['content']}<|end_of_text|>\n")
        if add_ass:
            out("<|start_of_role|>assistant<|end_of_role|>")
    elif tmpl in (T.GRANITE_4_0, T.GRANITE_4_1):
        # IBM Granite 4.0 and 4.1 (the same text)
        for m in chat:
            role = m["role"]
            if role == "assistant_tool_call":
                out("<|start_of_role|>assistant<|end_of_role|><|tool_call|>")
            else:
                out(f"<|start_of_role|>{role}<|end_of_role|>")
            out(f"{m['content']}<|end_of_text|>\n")
        if add_ass:
            out("<|start_of_role|>assistant<|end_of_role|>")
    elif tmpl is T.GIGACHAT:
        has_system = bool(chat) and chat[0]["role"] == "system"
        out(f"<s>{chat[0]['content']}<|message_sep|>" if has_system else "<s>")
        for m in chat[1 if has_system else 0:]:
            role = m["role"]
            if role == "user":
                out(f"user<|role_sep|>{m['content']}<|message_sep|>available functions<|role_sep|>[]<|message_sep|>")
            elif role == "assistant":
                out(f"assistant<|role_sep|>{m['content']}<|message_sep|>")
        if add_ass:
            out("assistant<|role_sep|>")
    elif tmpl is T.MEGREZ:
        for m in chat:
            out(f"<|role_start|>{m['role']}<|role_end|>{m['content']}<|turn_end|>")
        if add_ass:
            out("<|role_start|>assistant<|role_end|>")
    elif tmpl is T.YANDEX:
        # "\n\n" is the EOT token
        for m in chat:
            role = m["role"]
            if role == "user":
                out(f" Пользователь: {m['content']}\n\n")
            elif role == "assistant":
                out(f" Ассистент: {m['content']}\n\n")
        if add_ass:
            out(" Ассистент:[SEP]")
    elif tmpl in (T.BAILING, T.BAILING_THINK):
        # Bailing (Ling/Ring)
        for m in chat:
            role = "HUMAN" if m["role"] == "user" else _ascii_upper(m["role"])
            out(f"<role>{role}</role>{m['content']}")
        if add_ass:
            out("<role>ASSISTANT</role>")
            if tmpl is T.BAILING_THINK:
                out("<think>")
    elif tmpl is T.BAILING2:
        # Bailing2 (Ling 2.0)
        has_system = bool(chat) and chat[0]["role"] == "system"
        if not has_system:
            out("<role>SYSTEM</role>detailed thinking off<|role_end|>")
        for m in chat:
            role = "HUMAN" if m["role"] == "user" else _ascii_upper(m["role"])
            out(f"<role>{role}</role>{m['content']}<|role_end|>")
        if add_ass:
            out("<role>ASSISTANT</role>")
    elif tmpl is T.LLAMA4:
        for m in chat:
            out(f"<|header_start|>{m['role']}<|header_end|>\n\n{_trim(m['content'])}<|eot|>")
        if add_ass:
            out("<|header_start|>assistant<|header_end|>\n\n")
    elif tmpl is T.SMOLVLM:
        out("<|im_start|>")  # <|im_start|> is SmolVLM's BOS; the turns are not chatml
        for m in chat:
            role = m["role"]
            if role == "system":
                out(f"{m['content']}\n\n")
            elif role == "user":
                out(f"User: {m['content']}<end_of_utterance>\n")
            else:
                out(f"Assistant: {m['content']}<end_of_utterance>\n")
        if add_ass:
            out("Assistant:")
    elif tmpl is T.DOTS1:
        # dots.llm1.inst
        for m in chat:
            role = m["role"]
            if role == "system":
                out(f"<|system|>{m['content']}<|endofsystem|>")
            elif role == "user":
                out(f"<|userprompt|>{m['content']}<|endofuserprompt|>")
            else:
                out(f"<|response|>{m['content']}<|endofresponse|>")
        if add_ass:
            out("<|response|>")
    elif tmpl is T.HUNYUAN_MOE:
        # tencent/Hunyuan-A13B-Instruct
        for m in chat:
            role = m["role"]
            if role == "system":
                out(f"<|startoftext|>{m['content']}<|extra_4|>")
            elif role == "assistant":
                out(f"{m['content']}<|eos|>")
            else:
                out(f"<|startoftext|>{m['content']}<|extra_0|>")
    elif tmpl is T.OPENAI_MOE:
        # gpt-oss (based on the Harmony format)
        for m in chat:
            role = m["role"]
            out(f"<|start|>{role}<|message|>{m['content']}")
            out("<|return|>" if role == "assistant" else "<|end|>")
        if add_ass:
            out("<|start|>assistant")
    elif tmpl is T.HUNYUAN_DENSE:
        # tencent/Hunyuan-4B-Instruct
        for i, m in enumerate(chat):
            role = m["role"]
            if i == 0 and role == "system":
                out(f"{m['content']}<｜hy_place▁holder▁no▁3｜>")
            if role == "assistant":
                out(f"<｜hy_Assistant｜>{m['content']}<｜hy_place▁holder▁no▁2｜>")
            elif role == "user":
                out(f"<｜hy_User｜>{m['content']}<｜hy_Assistant｜>")
    elif tmpl is T.HUNYUAN_VL:
        # tencent/HunyuanOCR and HunyuanVL
        out("<｜hy_begin▁of▁sentence｜>")
        for i, m in enumerate(chat):
            role = m["role"]
            if i == 0 and role == "system":
                out(f"{m['content']}<｜hy_place▁holder▁no▁3｜>")
                continue
            if role == "user":
                out(f"{m['content']}<｜hy_User｜>")
            elif role == "assistant":
                out(f"{m['content']}<｜hy_Assistant｜>")
    elif tmpl is T.KIMI_K2:
        # moonshotai/Kimi-K2-Instruct
        heads = {
            "system": "<|im_system|>system<|im_middle|>",
            "user": "<|im_user|>user<|im_middle|>",
            "assistant": "<|im_assistant|>assistant<|im_middle|>",
            "tool": "<|im_system|>tool<|im_middle|>",
        }
        for m in chat:
            out(heads.get(m["role"], ""))
            out(f"{m['content']}<|im_end|>")
        if add_ass:
            out("<|im_assistant|>assistant<|im_middle|>")
    elif tmpl is T.SEED_OSS:
        for m in chat:
            role = m["role"]
            content = _trim(m["content"]) if role == "assistant" else m["content"]
            out(f"<seed:bos>{role}\n{content}<seed:eos>")
        if add_ass:
            out("<seed:bos>assistant\n")
    elif tmpl is T.GROK_2:
        for m in chat:
            role = m["role"]
            if role == "system":
                out(f"System: {_trim(m['content'])}<|separator|>\n\n")
            elif role == "user":
                out(f"Human: {_trim(m['content'])}<|separator|>\n\n")
            elif role == "assistant":
                out(f"Assistant: {m['content']}<|separator|>\n\n")
        if add_ass:
            out("Assistant:")
    elif tmpl is T.PANGU_EMBED:
        # [unused9]系统：xxx[unused10], [unused9]用户：xxx[unused10], [unused9]助手：xxx[unused10], ...
        names = {"system": "系统", "user": "用户", "assistant": "助手", "tool": "工具", "function": "方法"}
        for i, m in enumerate(chat):
            role = m["role"]
            if i == 0 and role != "system":
                out("[unused9]系统：[unused10]")
            if role in names:
                out(f"[unused9]{names[role]}：{m['content']}[unused10]")
        if add_ass:
            out("[unused9]助手：")
    elif tmpl is T.SOLAR_OPEN:
        for m in chat:
            out(f"<|begin|>{m['role']}<|content|>{m['content']}<|end|>")
        if add_ass:
            out("<|begin|>assistant")
    else:  # pragma: no cover - every enum member has a branch
        raise AssertionError(tmpl)
    return "".join(ss)


def chat_apply_template(tmpl: str | None, chat: list[dict], add_ass: bool) -> str | None:
    """llama_chat_apply_template (src/llama.cpp): detect `tmpl` (None means "chatml"), then format.

    Returns None where llama.cpp returns -1 (a template it does not recognise)."""
    detected = detect_template("chatml" if tmpl is None else tmpl)
    if detected is None:
        return None
    return apply_template(detected, chat, add_ass)
