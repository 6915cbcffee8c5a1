"""Chat templates through the package (chat.h)."""
import pytest

import memra


def test_render_chat_buffer_and_alloc(lib_path: str) -> None:
    tmpl = "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
    ctx = {"messages": [{"role": "user", "content": " héllo "}], "add_generation_prompt": True}
    assert memra.render_chat(tmpl, ctx) == "<user>héllo<a>"
    assert memra.render_chat_alloc(tmpl, ctx) == "<user>héllo<a>"
    long_ctx = {"messages": [{"role": "user", "content": "x" * 10000}], "add_generation_prompt": False}
    assert memra.render_chat(tmpl, long_ctx) == "<user>" + "x" * 10000  # past the first 4096-byte buffer


def test_render_chat_errors_carry_the_template_message() -> None:
    with pytest.raises(memra.MemraError) as e:
        memra.render_chat("{{ raise_exception('roles must alternate') }}", {"messages": []})
    assert "roles must alternate" in str(e.value)
    with pytest.raises(memra.MemraError):
        memra.render_chat("{% if %}", {"messages": []})


def test_strftime_now_is_fixed_by_params() -> None:
    p = memra.chat_default_params(now="2026-12-02T10:00:00")
    assert memra.render_chat("{{ strftime_now('%Y-%m-%d') }}", {}, p) == "2026-12-02"


def test_model_chat_streams_text(model: memra.Model) -> None:
    m = model
    assert m.chat_template
    prompt = m.tokenizer.render_chat({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True})
    assert prompt.endswith("assistant\n")
    text = "".join(m.chat([{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0.0))
    assert isinstance(text, str)
