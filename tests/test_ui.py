"""The page module (dashboard.ui) built in-process, without serving it: what its text and its updates say."""

from __future__ import annotations

from dashboard.settings import EXPOSED_LIMITS
from dashboard.ui import plain
from tests.conftest import fast_settings
from tests.test_dashboard_client import EVIL, text_of


def test_user_text_is_escaped_for_markdown():
    shown_text = plain(EVIL)
    assert "<" not in shown_text and ">" not in shown_text
    assert "\\*\\*bold\\*\\*" in shown_text and "https\\://evil\\.example" in shown_text
    assert text_of(shown_text) == EVIL  # the characters survive; only their meaning goes


def test_the_form_says_what_a_shared_server_allows(tiny_runner):
    from dashboard.ui import build_demo

    saved = tiny_runner.limits
    tiny_runner.limits = EXPOSED_LIMITS
    try:
        demo = build_demo(tiny_runner, defaults=fast_settings())
        texts = [b.value for b in demo.blocks.values() if getattr(b, "elem_id", None) == "limits"]
        assert texts and "at most 1024 new tokens, batch 8" in text_of(texts[0])
    finally:
        tiny_runner.limits = saved
