"""dashboard.edge.session_copies (issue 42, item 10): when /run returns, the session that streamed it holds no copies of
the page's components but the run pickers' (their choices). Copies of a few outputs (banner, run note, history table,
three download buttons) are back in the session about a second later; they go with the session's whole state once
it is idle without a page (dashboard.edge.session_store, tests/test_session_store.py): these tests check the state at
/run's return only."""

from __future__ import annotations

import uuid

import pytest

from dashboard.ui.form import page_values
from tests.conftest import fast_settings, make_runner, page_client, serve


@pytest.fixture(scope="module")
def served():
    runner = make_runner(monitor=False, in_process_engine=True)
    app = serve(runner)
    yield app
    app.demo.close()
    runner.close()


def copies_in(demo, session_hash: str) -> list[str]:
    """The elem_ids of the components this session holds a copy of (not the page's own)."""
    session = demo.state_holder.session_data[session_hash]
    own = demo.default_config.blocks
    return sorted(str(block.elem_id) for block_id, block in session.blocks_config.blocks.items()
                  if block_id in own and block is not own[block_id])


@pytest.mark.slow
def test_a_session_that_ran_keeps_copies_only_of_the_run_pickers(served):
    visitor = page_client(served.url)
    form = page_values(fast_settings(max_new_tokens=2))
    for _ in range(3):
        visitor.session_hash = str(uuid.uuid4())
        assert visitor.predict(**form, api_name="/run")[0].startswith("**Done in")
        assert copies_in(served.demo, visitor.session_hash) == ["run-a", "run-b"]


@pytest.mark.slow
def test_a_refused_run_leaves_no_copies_in_its_session(served):
    visitor = page_client(served.url)
    status = visitor.predict(**page_values(fast_settings(model="no-such-org/" + "x" * 600)), api_name="/run")[0]
    assert status.startswith("**Not started")
    assert copies_in(served.demo, visitor.session_hash) == []


def test_copies_that_an_input_needs_are_kept():
    import gradio as gr

    from dashboard.edge.session_copies import SessionCopies

    with gr.Blocks() as demo:
        choice = gr.Dropdown(["a"], value="a")
        shown = gr.Markdown("x")
        choice.change(lambda value: value, inputs=[choice], outputs=[shown])
    copies = SessionCopies(demo)
    assert copies._needed(gr.Dropdown(["a", "b"], value="a", render=False), choice)
    assert not copies._needed(gr.Dropdown(["a"], value="a", render=False), choice), "the same arguments"
    assert not copies._needed(gr.Markdown("y", render=False), shown), "no event reads it"
