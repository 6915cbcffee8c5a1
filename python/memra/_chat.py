"""Chat templates (include/memra/chat.h): a model's tokenizer.chat_template
rendered by the library's Jinja-subset interpreter (docs/CHAT.md), with the
settings Hugging Face's apply_chat_template uses."""
from __future__ import annotations

import ctypes
import json
from typing import Any, Mapping, Optional, Union

from . import _capi
from ._capi import lib
from ._errors import Status, check, error

Context = Union[str, Mapping[str, Any]]


def chat_default_params(
    *, now: Optional[str] = None, max_output: int = 0, max_steps: int = 0, max_depth: int = 0
) -> _capi.ChatParams:
    """memra_chat_default_params, then the given fields: NOW fixes what
    strftime_now() formats ("YYYY-MM-DD[THH:MM[:SS]]"); 0 keeps a limit's default."""
    p = _capi.ChatParams()
    lib().memra_chat_params_init(ctypes.byref(p), ctypes.sizeof(p))
    if now is not None:
        p.now = now.encode()
    p.max_output, p.max_steps, p.max_depth = max_output, max_steps, max_depth
    return p


def _json(context: Context) -> bytes:
    text = context if isinstance(context, str) else json.dumps(context, ensure_ascii=False)
    return text.encode("utf-8")


def _params(params: Optional[_capi.ChatParams]) -> _capi.ChatParams:
    return params if params is not None else chat_default_params()


def render_chat(template: str, context: Context, params: Optional[_capi.ChatParams] = None) -> str:
    """memra_chat_render: TEMPLATE rendered for CONTEXT (a dict of the
    template's variables, or its JSON text: messages, tools,
    add_generation_prompt, bos_token, ...). Template errors raise, with the
    template's own raise_exception message."""
    tmpl, ctx, p = template.encode("utf-8"), _json(context), _params(params)
    cap, n = 4096, ctypes.c_size_t(0)
    for _ in range(2):
        buf = ctypes.create_string_buffer(cap)
        st = lib().memra_chat_render(tmpl, ctx, ctypes.byref(p), buf, cap, ctypes.byref(n))
        if st == Status.E_RANGE and n.value >= cap:
            cap = n.value + 1
            continue
        check(st, "memra_chat_render")
        return buf.raw[: n.value].decode("utf-8", errors="replace")
    raise error(Status.E_INTERNAL, "memra_chat_render: size changed", "memra_chat_render")


def _take(out: ctypes.c_void_p, n: ctypes.c_size_t) -> str:
    try:
        return ctypes.string_at(out.value, n.value).decode("utf-8", errors="replace") if out.value else ""
    finally:
        lib().memra_free(out)


def render_chat_alloc(template: str, context: Context, params: Optional[_capi.ChatParams] = None) -> str:
    """memra_chat_render_alloc: as render_chat, into memory the library allocates."""
    out, n = ctypes.c_void_p(), ctypes.c_size_t(0)
    check(
        lib().memra_chat_render_alloc(
            template.encode("utf-8"), _json(context), ctypes.byref(_params(params)), ctypes.byref(out), ctypes.byref(n)
        ),
        "memra_chat_render_alloc",
    )
    return _take(out, n)


def render_chat_tokenizer(tokenizer_handle: int, context: Context, params: Optional[_capi.ChatParams] = None) -> str:
    """memra_chat_render_tokenizer: the tokenizer's own template; its BOS/EOS
    texts stand in for a missing bos_token/eos_token."""
    out, n = ctypes.c_void_p(), ctypes.c_size_t(0)
    check(
        lib().memra_chat_render_tokenizer(
            tokenizer_handle, _json(context), ctypes.byref(_params(params)), ctypes.byref(out), ctypes.byref(n)
        ),
        "memra_chat_render_tokenizer",
    )
    return _take(out, n)
