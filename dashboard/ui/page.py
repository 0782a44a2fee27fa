"""What every tab of the page shares (`PageContext`): the runner, the page's configuration, the banner, who each
request is for (`Visitors`: a browser's id, kept in its localStorage, so a reload keeps its runs and history), their
download folders, and the page-level components the tabs update (the banner, what the page shows, the browser's id);
and the row of controls for an uploaded or bundled report that Replay and Your loop share (`upload_row`).
"""

from __future__ import annotations

import collections
import dataclasses
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from core.documents.files import MAX_REPORT_BYTES
from dashboard.edge.downloads import DownloadFolders
from dashboard.service.runner import Runner
from dashboard.views.banner import ServerBanner

MAX_BROWSERS = 10_000
_BROWSER_ID = re.compile(r"[0-9a-f]{32}")


@dataclass
class PageConfig:
    defaults: dict[str, Any]  # the form's first values: run options by name (RUN_OPTIONS) and model
    replay_files: dict[str, Path]
    audit_files: dict[str, Path] = dataclasses.field(default_factory=dict)  # bundled audit reports (Your loop)
    live_interval_s: float = 0.25
    chart_interval_s: float = 1.0
    # On a CPU host the page's redraws share the processor with the loop it times: while a trial is timed there, the
    # page refreshes this seldom and redraws no chart (on a 2-core machine an open page at 4 Hz halved the rate)
    cpu_trial_interval_s: float = 3.0
    download_dir: Path | None = None
    max_report_bytes: int = MAX_REPORT_BYTES  # launch the page with max_file_size at least this


class Visitors:
    """Who a request is for: its browser's id once the page has loaded (`tie`), else its session (API clients)."""

    def __init__(self, max_browsers: int = MAX_BROWSERS):
        self.max_browsers = max_browsers
        self._browsers: collections.OrderedDict[str, str] = collections.OrderedDict()  # session hash -> browser id
        self._lock = threading.Lock()

    def owner(self, request: gr.Request | None) -> str:
        session = getattr(request, "session_hash", None) if request is not None else None
        if not session:
            return "anonymous"
        with self._lock:
            return self._browsers.get(session, session)

    @staticmethod
    def is_browser_id(value: Any) -> bool:
        """Whether `value` is a browser's id as `tie` makes them (what a returning browser's storage holds)."""
        return isinstance(value, str) and bool(_BROWSER_ID.fullmatch(value))

    def tie(self, browser_id: Any, request: gr.Request) -> str:
        """Tie `request`'s session to its browser's id (made here on a first visit, or when the one kept is not an
        id this page made); returns the id."""
        browser_id = browser_id if self.is_browser_id(browser_id) else secrets.token_hex(16)
        session = getattr(request, "session_hash", None)
        if session:
            with self._lock:
                self._browsers[session] = browser_id
                self._browsers.move_to_end(session)
                while len(self._browsers) > self.max_browsers:
                    self._browsers.popitem(last=False)
        return browser_id

    def leave(self, request: gr.Request | None, when_last: Callable[[str], None]) -> str:
        """`request`'s page has closed: its session's tie goes, and `when_last(owner)` runs if no other open page
        is the same browser's (a reload opens the new page before the old one's close arrives, and both are one
        owner: what the owner keeps must outlive the old page). `when_last` runs under the lock that `tie` takes, so
        a page of that browser opening meanwhile ties itself only after it. Returns the owner."""
        session = getattr(request, "session_hash", None) if request is not None else None
        with self._lock:
            owner = self._browsers.pop(session, session) if session else "anonymous"
            if owner not in self._browsers.values():
                when_last(owner)
        return owner


@dataclass
class PageContext:
    """What the tabs share. The components are the page's own (build_demo makes them); a tab's components are the
    tab's."""

    runner: Runner
    config: PageConfig
    banner: ServerBanner
    banner_md: Any = None  # the banner's gr.Markdown
    view_state: Any = None  # gr.State of what this page shows: its tab, and the report open in Replay
    browser_state: Any = None  # gr.BrowserState of this browser's id
    visitors: Visitors = dataclasses.field(default_factory=Visitors)
    downloads: DownloadFolders = dataclasses.field(init=False)  # a folder per visitor, bounded, removed at exit

    def __post_init__(self) -> None:
        self.downloads = DownloadFolders(self.config.download_dir)

    def owner(self, request: gr.Request | None) -> str:
        return self.visitors.owner(request)


def upload_row(components: dict[str, Any], prefix: str, label: str, bundled: dict[str, Path],
               bundled_label: str, *, as_path: bool = False) -> None:
    """A file upload (`{prefix}-upload`) and, where the server bundles files, a picker of them and its Open button
    (`{prefix}-bundled`, `{prefix}-open`), put into `components` as "upload", "bundled" and "open_btn". The upload
    hands its handler the file's bytes, or with `as_path` the path Gradio streamed it to."""
    with gr.Row():
        components["upload"] = gr.File(label=label, file_types=[".json", ".gz"],
                                       type="filepath" if as_path else "binary", elem_id=f"{prefix}-upload")
        if bundled:
            with gr.Column():
                components["bundled"] = gr.Dropdown(sorted(bundled), label=bundled_label,
                                                    elem_id=f"{prefix}-bundled")
                components["open_btn"] = gr.Button("Open", elem_id=f"{prefix}-open")
