"""A GGUF's Jinja chat template, rendered in jinja2's ImmutableSandboxedEnvironment the way llama.cpp renders it.

llama.cpp (0c1e570) runs chat templates in its own engine (common/jinja/). synapse renders them with jinja2's
sandbox, set up to give a template what llama.cpp's engine gives it:
- the lexer options llama.cpp hard-codes (common/jinja/lexer.cpp): `trim_blocks` and `lstrip_blocks` on, and
  one trailing newline of the source dropped (`_lexer_source`);
- the globals of `global_builtins()` (common/jinja/value.cpp): `raise_exception(msg)` (fails with
  "Jinja Exception: msg"), `strftime_now(fmt)` (local time), `range`, `namespace`, `dict`;
- `tojson` formatted as llama.cpp's `value_to_json` (", " and ": " separators, "," with an indent, no HTML
  escaping, `ensure_ascii` off by default, `sort_keys` refused);
- undefined values that can be chained (`message.tool_calls.x` is undefined, not an error), as in llama.cpp.

Templates come from untrusted files. jinja2's sandbox refuses attribute access to Python internals
(`''.__class__`, `__globals__`, ...), calls of unsafe methods and every mutation of the inputs; on top of it
rendering stops after `max_seconds` (a trace function checks the clock on every line of the compiled
template and every call) or `MAX_DEPTH` nested template calls, output is capped at `max_output` characters,
and the operations that can allocate a huge string in one C call (`*`, `**`, `%`, format widths,
`ljust`/`center`/`zfill`/`replace`, the `center`/`indent`/`wordwrap`/`replace` filters) are bounded. Every failure is one `SynapseError` line.

`JinjaTemplate` mirrors `common_chat_template` (common/chat.h): the parsed program, the bos/eos token texts
and the capabilities `jinja::caps_get` (common/jinja/caps.cpp) finds, of which the chat path uses
`supports_system_role` and the string/typed content pair.
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections.abc import Mapping

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox

from kernels.errors import SynapseError

MAX_SECONDS = 5.0  # a chat template renders in milliseconds; this only stops runaway loops
MAX_OUTPUT = 16 * 1024 * 1024  # characters of output, and of any one string a template builds
MAX_DEPTH = 100  # nested frames of the compiled template (macro calls; Python itself stops near 190)
_MAX_POW_BITS = 1 << 16  # `a ** b` whose result would need more bits than this is refused
_FORMAT_WIDTH = re.compile(r"\d{7,}")  # a width or precision of a million or more in a format spec


class ChatTemplateError(SynapseError):
    """A chat template that does not parse, fails, or is stopped by the sandbox."""


class ChatTemplateStopped(ChatTemplateError):
    """The sandbox refused an operation or stopped the render (time, size, recursion): a hostile template."""


class _Stopped(Exception):
    """Raised inside the render to stop it (time limit); turned into a ChatTemplateError."""


class _RaisedException(Exception):
    """raise_exception() called by the template."""


# --- llama.cpp's global functions -------------------------------------------------------------------


def _raise_exception(msg):
    """global_builtins "raise_exception": fails the render with llama.cpp's "Jinja Exception: " prefix."""
    raise _RaisedException(f"Jinja Exception: {msg}")


def _make_strftime_now(now: float):
    def strftime_now(fmt):
        """global_builtins "strftime_now": the render's time (inputs.now), local, formatted by strftime."""
        if not isinstance(fmt, str):
            raise _RaisedException("strftime_now: expected a string format")
        out = time.strftime(fmt, time.localtime(now))
        if not out:
            raise _RaisedException("strftime_now: failed to format time")
        return out

    return strftime_now


# --- tojson as llama.cpp's value_to_json ------------------------------------------------------------

_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _json_string(s: str) -> str:
    out = ['"']
    for c in s:
        e = _JSON_ESCAPES.get(c)
        if e is not None:
            out.append(e)
        elif ord(c) < 0x20:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _json_float(x: float) -> str:
    """`std::ostream << double`: %g with 6 significant digits, inf/nan as the C library prints them."""
    if math.isnan(x):
        return "-nan" if math.copysign(1.0, x) < 0 else "nan"
    if math.isinf(x):
        return "-inf" if x < 0 else "inf"
    return "%g" % x


def _to_json(v, lvl: int, indent: int, item_sep: str, key_sep: str, out: list) -> None:
    """value_to_json_internal (common/jinja/value.cpp)."""
    if v is None or isinstance(v, jinja2.Undefined):
        out.append("null")
    elif isinstance(v, bool):
        out.append("true" if v else "false")
    elif isinstance(v, int):
        out.append(str(v))
    elif isinstance(v, float):
        out.append(_json_float(v))
    elif isinstance(v, str):
        out.append(_json_string(v))
    elif isinstance(v, (list, tuple)):
        _container("[", "]", [(_NO_KEY, item) for item in v], lvl, indent, item_sep, key_sep, out)
    elif isinstance(v, Mapping):
        if isinstance(v, _TrackedDict):
            v.mark_all()
        items = list(dict.items(v)) if isinstance(v, dict) else list(v.items())
        _container("{", "}", items, lvl, indent, item_sep, key_sep, out)
    else:
        out.append("null")


_NO_KEY = object()  # an array item's key in _container


def _container(open_: str, close: str, items: list, lvl: int, indent: int, item_sep: str, key_sep: str,
               out: list) -> None:
    """An array ((_NO_KEY, value) items) or object ((key, value) items), one item per line when indenting."""
    pad = " " * (lvl * indent) if indent > 0 else ""
    step = " " * indent if indent > 0 else ""
    nl = "\n" if indent >= 0 else ""
    out.append(open_)
    if items:
        out.append(nl)
        for i, (k, item) in enumerate(items):
            out.append(pad + step)
            if k is not _NO_KEY:
                out.append(_json_string(str(k)))
                out.append(key_sep)
            _to_json(item, lvl + 1, indent, item_sep, key_sep, out)
            if i < len(items) - 1:
                out.append(item_sep)
            out.append(nl)
        out.append(pad)
    out.append(close)


def _ensure_ascii(s: str) -> str:
    return "".join(c if ord(c) < 0x80 else _utf16_escape(c) for c in s)


def _utf16_escape(c: str) -> str:
    cp = ord(c)
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    cp -= 0x10000
    return f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}"


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    """The `tojson` filter as llama.cpp's engine has it (common/jinja/value.cpp tojson)."""
    if sort_keys:
        raise _RaisedException("tojson sort_keys=true not implemented")
    ind = indent if isinstance(indent, int) and not isinstance(indent, bool) else -1
    seps = list(separators) if isinstance(separators, (list, tuple)) else []
    item_sep = str(seps[0]) if len(seps) > 0 else (", " if ind < 0 else ",")
    key_sep = str(seps[1]) if len(seps) > 1 else ": "
    out: list[str] = []
    _to_json(value, 0, ind, item_sep, key_sep, out)
    s = "".join(out)
    return _ensure_ascii(s) if ensure_ascii else s


# --- usage tracking for the capability probes --------------------------------------------------------


class _TrackedDict(dict):
    """A message whose keys record when the template reads them (llama.cpp's value stats "used")."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.used: set = set()

    def __getitem__(self, key):
        self.used.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.used.add(key)
        return super().get(key, default)

    def items(self):
        self.mark_all()
        return super().items()

    def values(self):
        self.mark_all()
        return super().values()

    def mark_all(self):
        self.used.update(self.keys())


# --- the sandbox --------------------------------------------------------------------------------------


def _too_long(n: int) -> bool:
    return n > MAX_OUTPUT


def _check_size(n: int, what: str) -> None:
    if _too_long(n):
        raise _Stopped(f"{what} would build a string of {n} characters (limit {MAX_OUTPUT})")


def _check_int_args(args, what: str) -> None:
    for a in args:
        if isinstance(a, int) and not isinstance(a, bool) and _too_long(abs(a)):
            raise _Stopped(f"{what} with argument {a} is refused (limit {MAX_OUTPUT})")


def _check_replace(s, old, new, count=-1) -> None:
    if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
        n = s.count(old) if old else len(s) + 1
        if isinstance(count, int) and count >= 0:
            n = min(n, count)
        _check_size(len(s) + n * max(0, len(new) - len(old)), "replace()")


_WIDE_METHODS = {"ljust", "rjust", "center", "zfill", "expandtabs"}


class _Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment plus bounds on the operations that allocate in one C call."""

    intercepted_binops = frozenset(["*", "**", "%"])

    def call_binop(self, context, operator_, left, right):
        if operator_ == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and not isinstance(n, bool):
                    _check_size(len(seq) * max(n, 0), "'*'")
            return left * right
        if operator_ == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                if abs(left).bit_length() * right > _MAX_POW_BITS:
                    raise _Stopped(f"'{left} ** {right}' is too large")
            return left**right
        if operator_ == "%" and isinstance(left, str):
            if _FORMAT_WIDTH.search(left):
                raise _Stopped("a '%' format with a width of a million or more is refused")
        return super().call_binop(context, operator_, left, right)

    def unsafe_undefined(self, obj, attribute):
        """Refuse access to an unsafe attribute at once (jinja2 would return an undefined that prints as "")."""
        raise jinja2.exceptions.SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe.")

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's signature
        inner = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format / format_map
        name = getattr(inner, "__name__", "")
        owner = getattr(inner, "__self__", None)
        if isinstance(owner, str):
            if name in _WIDE_METHODS:
                _check_int_args(args, f"str.{name}()")
            elif name == "replace":
                _check_replace(owner, *args[:3])
            elif name in ("format", "format_map") and _FORMAT_WIDTH.search(owner):
                raise _Stopped("a format with a width of a million or more is refused")
        return super().call(__context, __obj, *args, **kwargs)


def _bounded_filter(env: jinja2.Environment, name: str) -> None:
    f = env.filters[name]

    def bounded(*args, **kwargs):
        if name == "replace":
            _check_replace(*[a for a in args if not isinstance(a, jinja2.nodes.EvalContext)][:4])
        else:
            _check_int_args(list(args[1:]) + list(kwargs.values()), f"filter '{name}'")
        return f(*args, **kwargs)

    for attr in ("jinja_pass_arg",):  # keep pass_eval_context / pass_context markers
        if hasattr(f, attr):
            setattr(bounded, attr, getattr(f, attr))
    env.filters[name] = bounded


def make_environment() -> jinja2.Environment:
    """The sandbox with llama.cpp's lexer options, globals and tojson."""
    env = _Sandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.ChainableUndefined,
        extensions=[jinja2.ext.loopcontrols],
        autoescape=False,
    )
    env.filters["tojson"] = tojson
    for name in ("center", "indent", "wordwrap", "replace", "truncate"):
        _bounded_filter(env, name)
    env.globals["raise_exception"] = _raise_exception
    return env


_ENV = make_environment()


# --- running a template under the limits --------------------------------------------------------------


def _one_line(msg: str) -> str:
    return " ".join(str(msg).split())


def _render_limited(template: jinja2.Template, context: dict, max_seconds: float, max_output: int) -> str:
    """Render with a deadline checked on every traced line/call and a cap on the output's length."""
    deadline = time.monotonic() + max_seconds
    # Live frames of the template's code: +1 on each call (a generator's resume too), -1 on each return (a
    # yield, an exception's unwinding too). Python's own recursion limit would also stop a recursive macro,
    # but only after ~1000 frames traced line by line: on a loaded machine, later than the deadline.
    depth = 0

    def local(frame, event, arg):
        nonlocal depth
        if event == "return":
            depth -= 1
        if time.monotonic() > deadline:
            raise _Stopped(f"rendering took longer than {max_seconds:g} s")
        return local

    def tracer(frame, event, arg):
        nonlocal depth
        if time.monotonic() > deadline:
            raise _Stopped(f"rendering took longer than {max_seconds:g} s")
        if frame.f_code.co_filename != "<template>":
            return None
        depth += 1
        if depth > MAX_DEPTH:
            raise _Stopped(f"recursion too deep (more than {MAX_DEPTH} nested template calls)")
        return local

    parts: list[str] = []
    size = 0
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        for chunk in template.generate(context):
            size += len(chunk)
            if size > max_output:
                raise _Stopped(f"output longer than {max_output} characters")
            parts.append(chunk)
    finally:
        sys.settrace(previous)
    return "".join(parts)


def render_source_errors(fn):
    """Turn every way a template can fail into one ChatTemplateError line."""

    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ChatTemplateError:
            raise
        except _Stopped as e:
            raise ChatTemplateStopped(f"chat template stopped: {_one_line(e)}") from None
        except _RaisedException as e:
            raise ChatTemplateError(f"chat template: {_one_line(e)}") from None
        except jinja2.exceptions.SecurityError as e:
            raise ChatTemplateStopped(f"chat template refused by the sandbox: {_one_line(e)}") from None
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"chat template syntax error, line {e.lineno}: {_one_line(e.message)}") from None
        except OverflowError as e:  # the sandbox's range() limit, or an arithmetic overflow
            raise ChatTemplateStopped(f"chat template stopped: {_one_line(e)}") from None
        except RecursionError:
            raise ChatTemplateStopped("chat template stopped: recursion too deep") from None
        except MemoryError:
            raise ChatTemplateStopped("chat template stopped: out of memory") from None
        except Exception as e:  # any other failure inside the template (TypeError, UndefinedError, ...)
            raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {_one_line(e)}") from None

    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


def _lexer_source(source: str) -> str:
    """The text llama.cpp's lexer tokenizes: one trailing newline of the source dropped ("\r\n" or "\n"; a lone
    "\r" at the end stays, as a newline). jinja2's own stripping (keep_trailing_newline off) would drop that
    "\r" too."""
    if source.endswith("\r\n"):
        return source[:-2]
    return source[:-1] if source.endswith("\n") else source


class JinjaTemplate:
    """common_chat_template: a template parsed once, its bos/eos texts and its capabilities."""

    @render_source_errors
    def __init__(self, source: str, bos_token: str = "", eos_token: str = "",
                 max_seconds: float = MAX_SECONDS, max_output: int = MAX_OUTPUT):
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.max_seconds = max_seconds
        self.max_output = max_output
        self._template = _ENV.from_string(_lexer_source(source))
        self.caps = self._caps()

    @render_source_errors
    def render(self, context: dict) -> str:
        """Render with `context` (messages, bos_token, eos_token, add_generation_prompt, ...) in the sandbox."""
        ctx = dict(context)
        ctx["strftime_now"] = _make_strftime_now(ctx.pop("_now", time.time()))
        return _render_limited(self._template, ctx, self.max_seconds, self.max_output)

    def _probe(self, messages: list) -> tuple[bool, str, list]:
        """caps_try_execute: render fixed inputs, failures ignored; returns (success, output, tracked msgs)."""
        tracked = [_TrackedDict(m) for m in messages]
        ctx = {"messages": tracked, "tools": [], "bos_token": "", "eos_token": "", "add_generation_prompt": True}
        try:
            out = self.render(ctx)
            return True, out, tracked
        except ChatTemplateStopped:
            raise  # a hostile template fails at once, probes included
        except ChatTemplateError:
            return False, "", tracked  # caps_try_execute ignores other failures

    def _caps(self) -> dict:
        """jinja::caps_get, the part the chat path uses: system role and string/typed content.

        llama.cpp watches which values the render reads: the system role is supported when the first (system)
        message's content is read; string content when a string renders. Typed content (a list of parts) is
        taken as supported here when a string fails and a one-part list renders (llama.cpp looks for list
        operations on the content instead)."""
        caps = {"supports_system_role": True, "supports_string_content": True, "supports_typed_content": False}
        marker = "STRING_MARKER"
        ok, _, _ = self._probe([{"role": "user", "content": marker}])
        if not ok:
            caps["supports_string_content"] = False
            ok_typed, out, _ = self._probe([{"role": "user", "content": [{"type": "text", "text": marker}]}])
            caps["supports_typed_content"] = ok_typed and marker in out
        _, _, tracked = self._probe([{"role": "system", "content": "System message"},
                                     {"role": "user", "content": "User message"}])
        if "content" not in tracked[0].used:
            caps["supports_system_role"] = False
        return caps


__all__ = ["ChatTemplateError", "ChatTemplateStopped", "JinjaTemplate", "MAX_OUTPUT", "MAX_SECONDS", "make_environment",
           "tojson"]
