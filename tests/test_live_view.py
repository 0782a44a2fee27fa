"""The live view: tokens/s curves built from the engine's events, in the server process."""

from __future__ import annotations

import pytest

from core.request.options import BenchRequest, GenerationOptions
from dashboard.service.jobs import COMPARE, RUNNING, Job
from dashboard.service.live_view import LiveView
from dashboard.views import step_charts, timeline
from tests.conftest import TINY, fast_settings, page_request
from tests.test_timeline import lane_labels

pytestmark = pytest.mark.usefixtures("validated")  # figures are built with plotly's validation on

PREFILL_S = 0.5
STEP_S = 0.01  # 100 tokens/s once decoding


def trial_events(t0: float, steps: int) -> list[tuple[float, dict]]:
    """A timed pipelined trial: its phase event, a long prefill, then one token every STEP_S."""
    events = [(t0, {"type": "phase", "phase": "trial", "contestant": "pipelined", "trial": 0, "t": t0})]
    for step in range(steps):
        stamp = t0 + PREFILL_S + step * STEP_S
        events.append((stamp, {"type": "tokens", "contestant": "pipelined", "trial": 0, "step": step,
                               "tokens": (7,), "host_time_s": stamp}))
    return events


def test_a_trials_tokens_per_s_curve_starts_at_the_decode_rate_not_from_zero():
    request = BenchRequest(prompt="Hi", options=GenerationOptions(max_new_tokens=40), trials=1,
                           contestants=("pipelined",))
    job = Job(id=1, work=COMPARE, owner=None, model="tiny-random", request=request, state=RUNNING, t0=100.0)
    job.events.extend(trial_events(100.0, 40))
    view = LiveView(job, lambda: None, None, lambda job: 0)
    rates = [r for r in view.live_series()["series"]["pipelined"]["tokens_per_s"] if r is not None]
    assert rates and all(abs(rate - 1 / STEP_S) < 1 for rate in rates), rates[:4]


def test_the_warm_up_streams_its_text_marked_untimed():
    from dashboard.service.jobs import Job
    from dashboard.service.live_view import LiveView

    request, _ = page_request(fast_settings())
    job = Job(id=1, work=COMPARE, owner=None, model=TINY, request=request, state="running", t0=100.0)
    view = LiveView(job, lambda: None, None, lambda j: 0)
    job.add_events([{"type": "phase", "phase": "warmup", "contestant": "naive", "t": 100.1},
                    {"type": "tokens", "contestant": "naive", "trial": None, "step": 0, "tokens": (5,),
                     "host_time_s": 100.2}])
    snap = view.snapshot()
    assert snap["panes"]["naive"]["warmup"] and snap["panes"]["naive"]["tokens"] == 1
    assert snap["panes"]["naive"]["tokens_per_s"] is None and "Warming up naive" in snap["status"]
    assert snap["series"] == {}, "untimed tokens draw no rate"


def test_the_live_view_keeps_each_trials_run_for_the_timeline(cuda_report):
    request, _ = page_request(fast_settings())
    job = Job(id=1, work=COMPARE, owner=None, model=TINY, request=request, state="running", t0=100.0)
    view = LiveView(job, lambda: None, None, lambda j: 0)
    assert view.snapshot()["runs"] == []
    naive = step_charts.representative_run(cuda_report, "naive")
    job.add_events([{"type": "phase", "phase": "trial", "contestant": "naive", "trial": 0, "t": 100.1},
                    {"type": "run", "t": 100.5, **naive}])
    runs = view.snapshot()["runs"]
    assert [r["contestant"] for r in runs] == ["naive"] and runs[0]["timings"] is naive["timings"]
    assert lane_labels(timeline.timeline_figure({"runs": runs})) == ["naive · host", "naive · GPU"]
