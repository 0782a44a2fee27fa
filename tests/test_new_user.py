"""What a new user hits (issue 12): text never becomes HTML, bounded work when exposed, an honest headline, dashes
where a number means nothing, a readable live view, start-up and CLI errors in one line, and a Replay tab that
refuses damaged reports in one line."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gradio_client import Client, handle_file

import app
from core.options import BenchRequest, GenerationOptions
from core.stats import verdict, verdict_sentence
from dashboard.jobs import CANCELLED
from dashboard.reports import SUMMARY_HEADERS, parse_report, summary_rows
from dashboard.settings import EXPOSED_LIMITS, Limits, RunSettings
from dashboard.ui import OUTPUTS, REPLAY_OUTPUTS, headline_md, plain
from tests.conftest import TINY, bench_report, fast_settings, make_runner, serving
from tests.test_dashboard_client import form, shown, text_of

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def served_app(tiny_runner):
    yield from serving(tiny_runner)


# ------------------------------------------------------------------------------------------ 1. text, not HTML

def test_user_text_is_escaped_for_markdown():
    shown_text = plain(EVIL)
    assert "<" not in shown_text and ">" not in shown_text
    assert "\\*\\*bold\\*\\*" in shown_text and "https\\://evil\\.example" in shown_text
    assert text_of(shown_text) == EVIL  # the characters survive; only their meaning goes


# ------------------------------------------------------------------------------- 2. bounded work when exposed


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


# ------------------------------------------------------------------------------------- 3-5. honest numbers


# --------------------------------------------------------------------------------------------- 8. live view


# ----------------------------------------------------------------------------------- 10-12. start-up, CLI


# --------------------------------------------------------------------------------------------- 13. replay


