"""Chat templates as llama-completion applies them: template choice, prompt formatting, one turn's delta.

Mirrors common/chat.cpp of llama.cpp 0c1e570 (the parts llama-completion uses) over two engines:
`builtin` (src/llama-chat.cpp, what llama.cpp runs without `--jinja`) and `jinja` (the template from the GGUF,
rendered in jinja2's sandbox, what `--jinja` runs).

    from synapse_cli.chat import ChatTemplates, ChatSession
    tmpls = ChatTemplates.from_gguf(reader, tok, chat_template=None, chat_template_file=None, use_jinja=False)
    chat = ChatSession(tmpls)
    prompt, waiting = chat.start(system_prompt="You are a helpful assistant.", prompt="Name three colors.")
    ids = tok.encode(prompt, add_special=True, parse_special=True)     # as completion.cpp tokenizes it
    ...                                                                # generate the reply
    chat.add_and_format("assistant", reply)                            # after an end-of-generation token
    delta = chat.add_and_format("user", next_line)                     # next turn: tokenize delta with
                                                                       # add_special=False, parse_special=True

Messages are dicts `{"role": str, "content": str}`. Every error is a `ChatTemplateError` (a SynapseError).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import builtin
from .jinja import ChatTemplateError, ChatTemplateStopped, JinjaTemplate

__all__ = ["CHATML_TEMPLATE_SRC", "ChatSession", "ChatTemplateError", "ChatTemplateStopped", "ChatTemplates",
           "builtin_templates",
           "read_template_file"]

# common/chat.cpp CHATML_TEMPLATE_SRC: the template used when the model has none (or `--chat-template chatml`)
CHATML_TEMPLATE_SRC = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\n' -}}\n"
    "{%- endif -%}"
)

KEY_CHAT_TEMPLATE = "tokenizer.chat_template"  # LLM_KV_TOKENIZER_CHAT_TEMPLATE (a named variant adds ".NAME")

builtin_templates = builtin.builtin_templates


def read_template_file(path: str) -> str:
    """common/arg.cpp read_file, as `--chat-template-file` reads the file (the whole text, as it is)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        raise ChatTemplateError(f"failed to open file '{path}'") from None
    return data.decode("utf-8", errors="replace")


def _trim_whitespace(s: str) -> str:
    """common/chat-auto-parser-helpers.cpp trim_whitespace (C isspace)."""
    return s.strip(" \t\n\v\f\r")


def _format_time(now: float, fmt: str) -> str:
    """common/chat.cpp format_time: std::put_time on the local time."""
    return time.strftime(fmt, time.localtime(now))


@dataclass
class ChatTemplates:
    """common_chat_templates: the default template (and the tool-use variant), bos/eos texts, add_bos/add_eos."""

    source: str  # template_default's source (a Jinja text, or a built-in name such as "llama3")
    bos_token: str = ""
    eos_token: str = ""
    add_bos: bool = False
    add_eos: bool = False
    has_explicit_template: bool = False  # model template or override given (common_chat_templates_was_explicit)
    use_jinja: bool = False
    tool_use_source: str = ""
    _jinja: JinjaTemplate | None = field(default=None, repr=False)

    # --- construction -------------------------------------------------------------------------------

    @classmethod
    def init(cls, model_template: str | None, override: str = "", *, tool_use_template: str | None = None,
             bos_token: str = "", eos_token: str = "", add_bos: bool = False, add_eos: bool = False,
             use_jinja: bool = False) -> "ChatTemplates":
        """common_chat_templates_init: the override if given, else the model's template, else chatml.

        `model_template` is the GGUF's `tokenizer.chat_template` (None when absent). With `use_jinja` the
        template is parsed and probed in the sandbox now (llama.cpp parses it even without --jinja; synapse
        does not run a template it will not use)."""
        default_src, tool_use_src = "", ""
        explicit = bool(override)
        if not override:
            if model_template is not None:
                default_src, explicit = model_template, True
            if tool_use_template is not None:
                tool_use_src, explicit = tool_use_template, True
        else:
            default_src = override
        if not default_src or default_src == "chatml":
            default_src = tool_use_src or CHATML_TEMPLATE_SRC

        # llama.cpp's temporary patches of two known templates that would raise
        if "<|channel|>" in default_src and "in message.content or" in default_src:
            default_src = default_src.replace(
                '{%- if "<|channel|>analysis<|message|>" in message.content or '
                '"<|channel|>final<|message|>" in message.content %}', "{%- if false %}")
        if "[TOOL_CALLS]" in default_src and "if (message['content'] is none or" in default_src:
            default_src = default_src.replace(
                "{%- if (message['content'] is none or message['content'] == '' or "
                "message['content']|length == 0) and (message['tool_calls'] is not defined or "
                "message['tool_calls'] is none or message['tool_calls']|length == 0) %}", "{%- if false %}")

        t = cls(source=default_src, bos_token=bos_token, eos_token=eos_token, add_bos=add_bos, add_eos=add_eos,
                has_explicit_template=explicit, use_jinja=use_jinja, tool_use_source=tool_use_src)
        if use_jinja:
            t._jinja = JinjaTemplate(default_src, bos_token, eos_token)
        return t

    @classmethod
    def from_gguf(cls, metadata, tokenizer, chat_template: str | None = None, chat_template_file: str | None = None,
                  use_jinja: bool = False) -> "ChatTemplates":
        """What llama-completion builds from `-m M [--chat-template X | --chat-template-file F] [--jinja]`.

        `metadata` is anything with `.get(key)` (a kernels.gguf.GGUFReader or a dict); `tokenizer` a
        tokenizer.Tokenizer of the same file (bos/eos texts as `common_token_to_piece(special=true)`, add_bos,
        add_eos). A given template is checked first (common_chat_verify_template) and refused with llama.cpp's
        text. `chat_template_file` wins over `chat_template` when both are given."""
        override = read_template_file(chat_template_file) if chat_template_file else (chat_template or "")
        if override:
            verify_template(override, use_jinja)
        model_template = _model_chat_template(metadata, tokenizer, None)
        tool_use = _model_chat_template(metadata, tokenizer, "tool_use")
        if tokenizer is None:  # no vocabulary: no bos/eos texts (common_chat_templates_init with model == nullptr)
            return cls.init(model_template, override, tool_use_template=tool_use, use_jinja=use_jinja)
        v = tokenizer.vocab

        def piece(token_id: int) -> str:
            if token_id < 0:
                return ""  # LLAMA_TOKEN_NULL: llama.cpp warns when the template uses it and passes ""
            return tokenizer.token_to_piece(token_id, special=True).decode("utf-8", errors="replace")

        return cls.init(model_template, override, tool_use_template=tool_use, bos_token=piece(v.bos_id),
                        eos_token=piece(v.eos_id), add_bos=bool(v.add_bos), add_eos=bool(v.add_eos),
                        use_jinja=use_jinja)

    # --- formatting ----------------------------------------------------------------------------------

    def apply(self, messages: list[dict], add_generation_prompt: bool = True, *, use_jinja: bool | None = None,
              now: float | None = None) -> str:
        """common_chat_templates_apply(...).prompt: the whole conversation as the model's prompt text."""
        jinja = self.use_jinja if use_jinja is None else use_jinja
        if jinja:
            return self._apply_jinja(messages, add_generation_prompt, time.time() if now is None else now)
        return self._apply_legacy(messages, add_generation_prompt)

    def format_single(self, past_messages: list[dict], new_message: dict, add_generation_prompt: bool) -> str:
        """common_chat_format_single: the text `new_message` adds to the formatted history.

        Formats the history without, then with, the new message and returns the difference (keeping a newline
        that ends the history, as llama.cpp does when `add_generation_prompt`)."""
        fmt_past = ""
        if past_messages:
            fmt_past = self.apply(past_messages, add_generation_prompt=False)
        lead = "\n" if add_generation_prompt and fmt_past.endswith("\n") else ""
        fmt_new = self.apply(list(past_messages) + [new_message], add_generation_prompt=add_generation_prompt)
        if len(fmt_past) > len(fmt_new):  # std::string::substr would throw out_of_range
            raise ChatTemplateError("chat template: the history formats longer than the history plus a message")
        return lead + fmt_new[len(fmt_past):]

    def format_example(self) -> str:
        """common_chat_format_example: the example llama-completion logs in conversation mode."""
        return self.apply([
            {"role": "system", "content": "You are a helpful assistant"},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there"},
            {"role": "user", "content": "How are you?"},
        ], add_generation_prompt=True)

    def _apply_legacy(self, messages: list[dict], add_generation_prompt: bool) -> str:
        """common_chat_templates_apply_legacy: llama_chat_apply_template on the default template's source."""
        chat = [{"role": m["role"], "content": _content_text(m)} for m in messages]
        out = builtin.chat_apply_template(self.source, chat, add_generation_prompt)
        if out is None:
            raise ChatTemplateError("this custom template is not supported, try using --jinja")
        return out

    def _apply_jinja(self, messages: list[dict], add_generation_prompt: bool, now: float) -> str:
        """common_chat_templates_apply_jinja for messages without tools, then direct_apply's render."""
        if self._jinja is None:
            self._jinja = JinjaTemplate(self.source, self.bos_token, self.eos_token)
        tmpl, src, caps = self._jinja, self.source, self._jinja.caps
        msgs = [_to_json_oaicompat(m) for m in messages]
        if "You have access to the following functions in JSONSchema format" in src:  # StepFun workaround
            for m in msgs:
                if isinstance(m["content"], str):
                    m["content"] = _trim_whitespace(m["content"])
        msgs = _normalize_content(msgs, caps)
        if "<|channel|>" not in src:  # workaround::map_developer_role_to_system, except for GPT-OSS
            for m in msgs:
                if m.get("role") == "developer":
                    m["role"] = "system"
        if not caps["supports_system_role"]:
            msgs = _system_message_not_supported(msgs)

        # common_chat_template_direct_apply_impl
        ctx = {"messages": msgs, "bos_token": tmpl.bos_token, "eos_token": tmpl.eos_token, "enable_thinking": True,
               "datetime": _format_time(now, "%b %d %Y"), "date_string": _format_time(now, "%d %b %Y"), "_now": now}
        if add_generation_prompt:
            ctx["add_generation_prompt"] = True  # left undefined otherwise, as llama.cpp leaves it
        result = tmpl.render(ctx)
        if self.add_bos and result.startswith(tmpl.bos_token):
            result = result[len(tmpl.bos_token):]
        if self.add_eos and result.endswith(tmpl.eos_token):
            result = result[: len(result) - len(tmpl.eos_token)]

        # common/parsers/gemma4.cpp: the model's turn is opened when the template leaves it closed
        if "'<|tool_call>call:'" in src and add_generation_prompt and result.endswith("<turn|>\n"):
            result += "<|turn>model\n"
        return result


@dataclass
class ChatSession:
    """tools/completion/completion.cpp's chat state: `chat_msgs` and `chat_add_and_format`."""

    templates: ChatTemplates
    messages: list[dict] = field(default_factory=list)

    def add_and_format(self, role: str, content: str) -> str:
        """chat_add_and_format: append a message, return its formatted delta (assistant prefix after a user)."""
        new = {"role": role, "content": content}
        delta = self.templates.format_single(self.messages, new, add_generation_prompt=role == "user")
        self.messages.append(new)
        return delta

    def start(self, system_prompt: str = "", prompt: str = "") -> tuple[str, bool]:
        """The first prompt of `-cnv [-sys S] [-p P]`: (prompt text, waiting_for_first_input).

        As completion.cpp: the system and user messages go into the history, and the prompt is the whole
        conversation formatted once, with the assistant prefix only when there is a user prompt. Tokenize it
        with add_special=True, parse_special=True. With neither -sys nor -p the prompt is empty."""
        if system_prompt:
            self.add_and_format("system", system_prompt)
        waiting = not prompt
        if prompt:
            self.add_and_format("user", prompt)
        text = ""
        if system_prompt or prompt:
            text = self.templates.apply(self.messages, add_generation_prompt=bool(prompt))
        return text, waiting


# --- helpers (common/chat.cpp) --------------------------------------------------------------------------


def verify_template(tmpl: str, use_jinja: bool) -> None:
    """common_chat_verify_template, raising llama.cpp's error (common/arg.cpp) for an unsupported template."""
    if use_jinja:
        try:
            t = ChatTemplates.init(None, tmpl, use_jinja=True)
            t.apply([{"role": "user", "content": "test"}], add_generation_prompt=True)
            return
        except ChatTemplateStopped:
            raise  # a hostile template: say what the sandbox did, on one line
        except ChatTemplateError:
            note = ""
    else:
        if builtin.chat_apply_template(tmpl, [{"role": "user", "content": "test"}], True) is not None:
            return
        note = "\nnote: llama.cpp was started without --jinja, we only support commonly used templates"
    raise ChatTemplateError(f"the supplied chat template is not supported: {tmpl}{note}")


def _model_chat_template(metadata, tokenizer, name: str | None) -> str | None:
    """llama_model_chat_template: `tokenizer.chat_template[.NAME]`, and llama.cpp's one-off default for
    Mistral-Small-2503 (a tekken vocabulary, 40 layers, no template): "mistral-v7-tekken"."""
    key = KEY_CHAT_TEMPLATE if name is None else f"{KEY_CHAT_TEMPLATE}.{name}"
    value = metadata.get(key)
    if isinstance(value, str):
        return value
    if value is not None:
        raise ChatTemplateError(f"{key} is not a string")
    if name is None and tokenizer is not None and getattr(tokenizer.vocab, "pre", "") == "tekken":
        arch = metadata.get("general.architecture")
        if isinstance(arch, str) and metadata.get(f"{arch}.block_count") == 40:
            return "mistral-v7-tekken"
    return None


def _content_text(m: dict) -> str:
    """The legacy path's content: the string content, then text parts joined by newlines."""
    content = m.get("content") or ""
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if p.get("type") in ("text", "media_marker")]
        return "\n".join(parts)
    return content


def _to_json_oaicompat(m: dict) -> dict:
    """common_chat_msg::to_json_oaicompat: role and content ("" when empty), then the optional fields."""
    out = {"role": m["role"], "content": m.get("content") or ""}
    for key in ("reasoning_content", "name", "tool_call_id", "tool_calls"):
        if m.get(key):
            out[key] = m[key]
    return out


def _normalize_content(msgs: list[dict], caps: dict) -> list[dict]:
    """messages_inp_normalizer: string content becomes one text part for templates that only take parts."""
    if not caps["supports_string_content"] and caps["supports_typed_content"]:
        for m in msgs:
            if isinstance(m.get("content"), str):
                m["content"] = [{"type": "text", "text": m["content"]}]
    return msgs


def _system_message_not_supported(msgs: list[dict]) -> list[dict]:
    """workaround::system_message_not_supported: merge a leading system message into the next one."""
    if msgs and msgs[0].get("role") == "system":
        if len(msgs) > 1:
            first, second = msgs[0], msgs[1]
            second["content"] = f"{first['content']}\n{second['content']}"
        msgs = msgs[1:]
    return msgs

