"""The component copies Gradio leaves in a session after a streamed run, and putting the page's own back.

When a handler yields a dict of some of its outputs, Gradio fills every other output with `gr.skip()`, an update,
and for an update it makes the session a new instance of that component, built from the one it had. /run streams
partial updates, so after one run a session held a copy of most of its 26 outputs (about 0.1 MiB), kept for as long as
the session store keeps the session (dashboard.edge.http_guard: up to --max-sessions): with each run a new session, as
for the API's clients, the server grew about 0.1 MiB a run until the store was full.

A copy is needed only where it differs from the page's own component and some event reads that component as an input
(a run picker's choices, which Gradio checks a chosen value against); every other copy is dropped (`forget`), so the
session uses the page's own component again. No torch here.
"""

from __future__ import annotations

from typing import Any

import gradio as gr


class SessionCopies:
    """Drops a session's needless component copies (see the module) for the page `demo`."""

    def __init__(self, demo: gr.Blocks):
        self.demo = demo
        self._inputs = {block._id for fn in demo.fns.values() for block in fn.inputs}

    def forget(self, session_hash: str | None) -> int:
        """Put the page's own components back in `session_hash`'s state where its copies are not needed; how many
        copies went."""
        session = self.demo.state_holder.session_data.get(session_hash) if session_hash else None
        if session is None:
            return 0
        blocks, own = session.blocks_config.blocks, self.demo.default_config.blocks
        needless = [block_id for block_id, block in blocks.items()
                    if block_id in own and block is not own[block_id] and not self._needed(block, own[block_id])]
        for block_id in needless:
            blocks[block_id] = own[block_id]
        return len(needless)

    def _needed(self, copy: Any, own: Any) -> bool:
        if own._id not in self._inputs:
            return False
        try:
            return bool(_arguments(copy) != _arguments(own))
        except Exception:  # arguments that cannot be compared (an array): keep the copy
            return True


def _arguments(block: Any) -> dict[str, Any]:
    return {k: v for k, v in block.constructor_args.items() if k not in ("render", "value")}  # Gradio drops both
