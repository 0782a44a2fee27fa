"""The page module (dashboard.ui) built in-process, without serving it: what its text and its updates say."""

from __future__ import annotations

import itertools

import pytest

from dashboard.limits import EXPOSED_LIMITS
from tests.conftest import TINY, fast_settings
from tests.test_dashboard_client import text_of
from tests.test_lanes import lane_labels

pytestmark = pytest.mark.usefixtures("validated")  # figures are built with plotly's validation on


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


def test_the_compare_tab_redraws_the_timeline_each_time_a_trial_ends(cuda_report):
    from dashboard.ui import Dashboard, PageConfig

    class FakeJob:
        id, done = 1, False

        def __init__(self, polls: int):
            self.answers = iter([False] * polls + [True])

        def wait(self, timeout: float) -> bool:
            return next(self.answers)

    trials = [[], cuda_report["runs"][:1], cuda_report["runs"][:1], cuda_report["runs"][:2]]
    snapshots = iter({"status": "Timing…", "runs": runs} for runs in trials)
    runner = type("FakeRunner", (), {"model_spec": TINY, "snapshot": lambda self, job: next(snapshots),
                                     "cancel": lambda self, job_id, **reason: None})()
    app = Dashboard(runner, PageConfig(defaults=dict(), replay_files={}, chart_interval_s=1e9))
    app.c = {key: key for key in ("status", "tokens_plot", "device_plot", "lanes_plot", "banner")}
    following = app._follow(FakeJob(len(trials)), "someone")
    updates = list(itertools.islice(following, len(trials)))
    following.close()
    redrawn = [i for i, update in enumerate(updates) if "lanes_plot" in update]
    assert redrawn == [1, 3], "drawn when a trial's run arrives, not at every poll"
    assert lane_labels(updates[3]["lanes_plot"]) == ["naive · host", "naive · GPU", "pipelined · host",
                                                     "pipelined · GPU"]
