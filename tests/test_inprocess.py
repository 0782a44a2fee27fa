"""engine.inprocess: the engine on a thread of this process, behind EngineClient's interface, so that the runner,
the supervisor and the page cannot tell it from an engine process."""

from __future__ import annotations

import os
import threading

import pytest

from dashboard.service.jobs import CANCELLED, DONE
from engine.inprocess import InProcessEngineClient
from engine.protocol import Done, Events, Load, Ready, Started
from tests.conftest import TINY, fast_settings, make_runner
from tests.helpers import wait_until


@pytest.fixture
def started():
    """A started in-process engine on the CPU, what it told the server, and the losses it reported."""
    told: list = []
    lost: list = []
    client = InProcessEngineClient(told.append, lambda job, loss: lost.append((job, loss)), device="cpu")
    client.start()
    yield client, told, lost
    client.close()


def test_a_load_is_answered_in_the_order_the_engine_sends_and_hello_becomes_ready(started):
    client, told, lost = started
    assert client.hello_event.wait(120), "the engine says hello"
    assert isinstance(told[0], Ready) and client.hello.pid == os.getpid() and not client.hello.cuda
    assert client.alive and client.pids == [os.getpid()]
    client.submit(Load(job=1, spec=TINY))
    wait_until(lambda: any(isinstance(m, Done) for m in told), 180)
    kinds = [type(m).__name__ for m in told]
    assert kinds[:2] == ["Ready", "Started"] and kinds[-2:] == ["ModelFacts", "Done"], kinds
    assert lost == []
    client.close()
    assert not client.alive


def test_a_tensor_parallel_engine_needs_processes():
    with pytest.raises(ValueError, match="one rank"):
        InProcessEngineClient(lambda m: None, lambda job, loss: None, world_size=2)


def test_after_a_kill_the_old_engine_says_nothing_more_and_a_restart_serves_again(started):
    client, told, lost = started
    assert client.hello_event.wait(120)
    client.submit(Load(job=1, spec=TINY))
    client.kill()
    assert not client.alive and not client.hello_event.is_set()
    assert lost and lost[0][0] == 1 and "in-process" in lost[0][1].reason
    before = len(told)
    client.restart()
    assert client.hello_event.wait(120) and client.starts == 2
    client.submit(Load(job=2, spec=TINY))
    wait_until(lambda: any(isinstance(m, Done) and m.job == 2 for m in told), 180)
    assert not any(getattr(m, "job", None) == 1 for m in told[before:]), "the killed engine's job is dropped"


def test_a_runner_with_an_in_process_engine_runs_cancels_and_runs_again():
    runner = make_runner(monitor=False, in_process_engine=True)
    try:
        assert isinstance(runner.engine_client, InProcessEngineClient)
        assert threading.current_thread() is not runner.engine_client._worker
        report = runner.run(fast_settings(), timeout=240)
        assert report["all_identical"] and report["request"]["options"]["max_new_tokens"] == 16
        long = runner.submit(fast_settings(max_new_tokens=1500, ignore_eos=True, trials=5))
        wait_until(lambda: long.state not in ("queued", "loading"), 120)
        runner.cancel(long.id)
        assert long.wait(60) and long.state == CANCELLED
        again = runner.submit(fast_settings())
        assert again.wait(240) and again.state == DONE
    finally:
        runner.close()


def test_events_reach_the_server_in_batches_as_from_a_process(started):
    client, told, _ = started
    from core.request.run_schema import request_from_values
    from dashboard.service.limits import LOCAL_LIMITS
    from engine.protocol import Compare

    request, _ = request_from_values(fast_settings(), limits=LOCAL_LIMITS)
    assert client.hello_event.wait(120)
    client.submit(Compare(job=3, spec=TINY, request=request))
    wait_until(lambda: any(isinstance(m, Done) for m in told), 240)
    assert any(isinstance(m, Started) and m.job == 3 for m in told)
    batches = [m for m in told if isinstance(m, Events)]
    assert batches and sum(len(b.events) for b in batches) > len(batches), "events travel batched"
    done = next(m for m in told if isinstance(m, Done))
    assert done.report["engine_process"]["pid"] == os.getpid()


def test_app_runs_its_engine_in_process_only_when_asked_and_with_one_rank():
    import app

    assert not app.build_parser().parse_args([]).engine_in_process
    asked = app.build_parser().parse_args(["--engine-in-process", "--device", "cpu"])
    assert asked.engine_in_process and app.check_args(asked)["model"]
    with pytest.raises(ValueError, match="one rank"):
        app.check_args(app.build_parser().parse_args(["--engine-in-process", "--tp", "2"]))
