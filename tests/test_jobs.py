"""A job (dashboard.service.jobs): its states, waiting for it, and the clock its engine events are kept on."""

from __future__ import annotations

import time

from dashboard.service.jobs import COMPARE, DONE, FINISHED, LOAD, QUEUED, RUNNING, Job
from tests.conftest import TINY


def test_an_event_keeps_its_own_time_and_one_without_a_time_gets_its_arrival():
    job = Job(id=1, work=COMPARE, owner=None, model=TINY)
    before = time.perf_counter()
    job.add_events([{"type": "phase", "phase": "trial", "t": 5.0},
                    {"type": "tokens", "step": 0, "host_time_s": 6.0},
                    {"type": "log", "message": "no time of its own"}])
    stamps = [stamp for stamp, _ in job.events]
    assert stamps[:2] == [5.0, 6.0] and before <= stamps[2] <= time.perf_counter()
    assert [event["type"] for _, event in job.events] == ["phase", "tokens", "log"]


def test_a_job_is_done_in_each_finished_state_and_wait_returns_when_it_is_marked_finished():
    job = Job(id=2, work=LOAD, owner="someone", model=TINY)
    assert job.state == QUEUED and not job.done and not job.wait(0)
    job.state = RUNNING
    assert not job.done
    for state in FINISHED:
        job.state = state
        assert job.done
    job.state = DONE
    job.finished.set()
    assert job.wait(0)
