"""The headless runner: same path as core.bench, streaming, cancel, queue, failed loads, history."""

from __future__ import annotations

import csv
import io
import itertools
import json
import subprocess
import sys
import time

import pytest

from core.request.options import Cancelled
from core.request.run_schema import Limits
from dashboard.service.jobs import CANCELLED, DONE, FAILED
from dashboard.service.page_record import public_report
from dashboard.service.run_history import HISTORY_FIELDS
from tests.conftest import TINY, fast_settings, make_runner
from tests.helpers import wait_until

FAST = fast_settings()
LONG = dict(prompt="Count forever", model=TINY, max_new_tokens=800, ignore_eos=True, trials=5)


def finish(runner, job, timeout=60):
    assert job.wait(timeout), f"job {job.id} still {job.state}"
    return runner.snapshot(job)


def test_greedy_run_streams_identical_texts(tiny_runner):
    job = tiny_runner.submit(FAST, owner="a")
    snap = finish(tiny_runner, job)
    assert job.state == DONE, job.error
    panes = snap["panes"]
    assert panes["naive"]["text"] and panes["naive"]["text"] == panes["pipelined"]["text"]
    assert panes["naive"]["tokens_per_s"] > 0 and panes["pipelined"]["tokens_per_s"] > 0
    report = job.report
    assert report["all_identical"] and report["request"]["stream"] is True
    assert report["summary"]["naive"]["new_tokens"] == 16
    assert set(snap["series"]) == {"naive", "pipelined"}


def test_loops_run_one_after_the_other_warmup_first(tiny_runner):
    job = tiny_runner.submit(fast_settings(trials=2))
    finish(tiny_runner, job)
    spans = job.page.spans
    assert [s["phase"] for s in spans[:2]] == ["warmup", "warmup"]
    assert [s["contestant"] for s in spans[2:]] == ["naive", "pipelined", "pipelined", "naive"]
    for earlier, later in itertools.pairwise(spans):
        assert earlier["t1"] <= later["t0"] + 1e-9


@pytest.mark.slow
def test_seeded_sampling_is_identical_between_loops(tiny_runner):
    settings = dict(prompt="Once upon a time", model=TINY, max_new_tokens=16, do_sample=True, seed=7,
                           temperature=0.8, top_k=50, top_p=0.9)
    assert tiny_runner.run(settings)["all_identical"]


def test_no_check_baseline_joins_the_summary_but_not_the_live_curve(tiny_runner):
    job = tiny_runner.submit(fast_settings(no_check=True))
    snap = finish(tiny_runner, job)
    assert job.report["identical"]["no-check"] and "pipelined/no-check" in job.report["ratios"]
    assert "no-check" not in snap["series"]


def cancel_bound_s(report: dict) -> float:
    """How soon a cancel must land on this machine: it stops the run at its next step, so 2 s plus 20 of the
    slowest loop's p95 steps of a run made just now (a busy machine's steps are slower, and so is the bound)."""
    step_ms = max(s.get("ms_per_token_p95") or 0.0 for s in report["summary"].values())
    return 2.0 + 20 * step_ms / 1000


def test_cancel_stops_a_run_within_two_seconds(tiny_runner):
    job = tiny_runner.submit(LONG)
    assert wait_until(lambda: tiny_runner.snapshot(job)["panes"]["naive"]["tokens"] > 0 or
                      tiny_runner.snapshot(job)["panes"]["pipelined"]["tokens"] > 0)
    asked = time.monotonic()
    assert tiny_runner.cancel(job.id)
    assert job.wait(60), "still running 60 s after cancel"
    took = time.monotonic() - asked
    assert job.state == CANCELLED and tiny_runner.snapshot(job)["status"] == "Cancelled."
    after = tiny_runner.run(FAST)
    assert after["all_identical"], "the next run works"
    assert took < cancel_bound_s(after), (took, cancel_bound_s(after))


def test_cancel_during_warm_up_lands_within_two_seconds(tiny_runner):
    long_warmup = dict(prompt="Count to a thousand.", max_new_tokens=1500, ignore_eos=True, trials=1)
    job = tiny_runner.submit(long_warmup)
    assert wait_until(lambda: job.state == "running")
    time.sleep(0.3)  # inside the naive loop's untimed warm-up pass
    asked = time.monotonic()
    assert tiny_runner.cancel(job.id)
    assert job.wait(60), "still warming up 60 s after cancel"
    took = time.monotonic() - asked
    assert job.state == CANCELLED
    after = tiny_runner.run(FAST)
    assert took < cancel_bound_s(after), (took, cancel_bound_s(after))


def test_cancel_while_queued_drops_the_job(tiny_runner):
    first = tiny_runner.submit(LONG, owner="first")
    second = tiny_runner.submit(FAST, owner="second")
    assert tiny_runner.position(second) == 1
    assert tiny_runner.cancel(second.id, owner="second")
    assert second.state == CANCELLED and second.wait(0)
    assert not tiny_runner.cancel(first.id, owner="someone else")
    assert tiny_runner.cancel(first.id, owner="first")
    first.wait(30)
    with pytest.raises(Cancelled):
        tiny_runner.run(LONG, timeout=0.5)


def test_cancel_pending_stops_the_owners_runs_of_that_work_and_no_others(tiny_runner):
    from dashboard.service.jobs import COMPARE, DONE, UNDER_LOAD

    first = tiny_runner.submit(LONG, owner="first")
    second = tiny_runner.submit(FAST, owner="second")
    assert tiny_runner.cancel_pending("first", UNDER_LOAD) == 0, "first has no run under load"
    assert tiny_runner.cancel_pending("first", COMPARE) == 1
    assert first.wait(60) and first.state == CANCELLED
    assert second.wait(120) and second.state == DONE, "another owner's run goes on"
    assert tiny_runner.cancel_pending("first", COMPARE) == 0, "nothing left to cancel"


def test_queue_serializes_runs_and_reports_positions(tiny_runner):
    jobs = [tiny_runner.submit(FAST, owner=f"user{i}") for i in range(3)]
    positions = [tiny_runner.position(job) for job in jobs]
    assert positions == sorted(positions) and positions[-1] >= 2
    queued = tiny_runner.snapshot(jobs[-1])
    assert queued["state"] in ("queued", "running", "done")
    if queued["state"] == "queued":
        assert "ahead of yours in the queue" in queued["status"]
    for job in jobs:
        finish(tiny_runner, job)
    windows = sorted((job.t0, job.t_end) for job in jobs)
    for (_, end), (start, _) in itertools.pairwise(windows):
        assert end <= start, "two runs overlapped on the device"
    assert all(job.report["all_identical"] for job in jobs)


def test_one_run_per_user_at_a_time(tiny_runner):
    job = tiny_runner.submit(LONG, owner="eager")
    with pytest.raises(ValueError, match="already have a run"):
        tiny_runner.submit(FAST, owner="eager")
    tiny_runner.cancel(job.id)
    job.wait(30)


def test_failed_model_load_keeps_the_previous_model(tiny_runner):
    with pytest.raises(ValueError, match=r"could not load model 'no-such-org/no-such-model'.*still using tiny-random"):
        tiny_runner.load("no-such-org/no-such-model", timeout=60)
    assert tiny_runner.model_spec == TINY
    failed = tiny_runner.submit(dict(prompt="hi", model="/definitely/not/a/model", max_new_tokens=4))
    finish(tiny_runner, failed)
    assert failed.state == FAILED and "still using tiny-random" in failed.error
    assert tiny_runner.run(FAST)["all_identical"]


def test_a_refused_model_directory_keeps_the_previous_model_loaded_and_running(tiny_runner, tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "my-custom", "auto_map": {"AutoModelForCausalLM": "m.M"}}')
    with pytest.raises(ValueError, match=r"needs custom code from its repository.*; still using tiny-random"):
        tiny_runner.load(str(tmp_path), timeout=60)
    assert tiny_runner.model_spec == TINY and tiny_runner.run(FAST)["all_identical"]


def test_a_5000_character_model_spec_is_refused_in_one_short_line_before_it_is_queued(tiny_runner):
    queued = len(tiny_runner.pending())
    with pytest.raises(ValueError) as refused:
        tiny_runner.submit(dict(prompt="hi", model="/" + "x" * 4999))
    assert len(str(refused.value)) < 200 and "\n" not in str(refused.value) and "is too long" in str(refused.value)
    assert len(tiny_runner.pending()) == queued and tiny_runner.model_spec == TINY


def test_with_8_gib_free_an_exposed_server_offers_no_70b_and_a_local_one_refuses_it_in_one_line(tiny_runner,
                                                                                               monkeypatch):
    from core.models.memory import GIB
    from core.models.specs import BUILTIN_SPECS
    from dashboard.service.runner import Runner

    exposed = Runner(None, device="cpu", monitor=False, allowed_models=set(BUILTIN_SPECS),
                     free_memory=lambda: 8 * GIB, in_process_engine=True)
    try:
        offered = exposed.model_choices()
        assert "synthetic:llama-70b" not in offered and "synthetic:llama-8b" not in offered  # 330 and 38 GiB in fp32
        assert "synthetic:llama-1b" in offered and TINY in offered
        with pytest.raises(ValueError, match=r"^model 'synthetic:llama-70b' does not fit"):
            exposed.submit(dict(prompt="hi", model="synthetic:llama-70b"))
    finally:
        exposed.close()
    monkeypatch.setattr(tiny_runner, "_free_memory", lambda: 8 * GIB)
    queued = len(tiny_runner.pending())
    with pytest.raises(ValueError) as refused:
        tiny_runner.submit_load("synthetic:llama-70b")
    line = str(refused.value)
    assert line.startswith("model 'synthetic:llama-70b' does not fit: it needs about 329.5 GiB") and "\n" not in line
    assert "8.0 GiB of host memory is free" in line
    assert len(tiny_runner.pending()) == queued and tiny_runner.model_spec == TINY, "nothing was queued or unloaded"


def test_a_startup_model_that_cannot_fit_is_said_on_the_banner_and_the_server_starts():
    from core.models.memory import GIB
    from dashboard.service.runner import Runner

    runner = Runner("synthetic:llama-1b", device="cpu", monitor=False, free_memory=lambda: 2 * GIB,
                    in_process_engine=True)
    try:
        assert runner.last_load_error.startswith("Could not load synthetic:llama-1b: model 'synthetic:llama-1b' does "
                                                 "not fit: it needs about 6.8 GiB")
        assert runner.pending() == [] and runner.model_spec is None
    finally:
        runner.close()


def test_a_failing_run_reports_and_the_next_one_works(tiny_runner):
    job = tiny_runner.submit(dict(prompt="Hi", model="./no-such-model-directory", max_new_tokens=16))
    finish(tiny_runner, job)
    assert job.state == FAILED and "no such directory" in job.error
    assert tiny_runner.run(FAST)["all_identical"]


def test_a_run_longer_than_the_context_is_refused_before_it_is_queued(tiny_runner):
    too_long = dict(prompt="word " * 3000, model=TINY, max_new_tokens=16)
    queued = len(tiny_runner.pending())
    with pytest.raises(ValueError, match=r"^prompt \(at least \d+ tokens\) \+ max new tokens \(16\) = \d+ exceeds the "
                                         r"model's context of 2048 tokens$"):
        tiny_runner.submit(too_long)
    assert len(tiny_runner.pending()) == queued
    with pytest.raises(ValueError, match="exceeds the model's context"):  # the new tokens alone can be too many
        tiny_runner.submit(dict(prompt="Hi", model=TINY, max_new_tokens=2048))


@pytest.mark.slow
def test_unknown_and_disallowed_models_are_refused():
    runner = make_runner(allowed_models={TINY, "smollm2-135m-instruct"}, monitor=False, in_process_engine=True)
    try:
        with pytest.raises(ValueError, match="not allowed on this dashboard"):
            runner.submit(dict(prompt="hi", model="evil/remote-code-model"))
        with pytest.raises(ValueError, match="no model chosen"):
            runner.check_model("  ")
        assert runner.model_choices()[-1] == TINY
    finally:
        runner.close()


def test_history_downloads_hold_run_data_only(tiny_runner):
    secret = "my secret prompt text"
    tiny_runner.run(dict(prompt=secret, model=TINY, max_new_tokens=8))
    job = tiny_runner.submit(dict(prompt=secret, model=TINY, max_new_tokens=8), owner="alice")
    finish(tiny_runner, job)
    rows = list(csv.DictReader(io.StringIO(tiny_runner.history_csv("alice"))))
    assert len(rows) == 1 and tuple(rows[0]) == HISTORY_FIELDS
    assert rows[0]["status"] == "done" and rows[0]["identical"] == "yes" and float(rows[0]["naive_tok_s"]) > 0
    data = json.loads(tiny_runner.history_json("alice"))
    assert data["schema"] == "syncscope.history/1" and len(data["runs"]) == 1
    everything = tiny_runner.history_csv() + tiny_runner.history_json()
    assert secret not in everything
    assert "host" not in public_report(job.report)["environment"]


def test_runner_imports_neither_gradio_nor_plotly_nor_torch():
    code = ("import sys, dashboard.service.runner, dashboard.service.limits, dashboard.service.page_record, "
            "dashboard.views.summary_table, dashboard.service.run_history, dashboard.service.rate_series, "
            "core.measure.gpu_monitor; "
            "print(sorted({'gradio', 'plotly', 'torch'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


RUNS_WATCHED = 40  # the soak's 100 (or more): `python benchmarks/soak.py runner-runs --runs 100`
GROWTH_MIB_A_RUN = 0.5  # 50 MiB over the 100 runs this test made before; 3 MiB over 40 measured (0.2 the engine)
KEPT_IN_THE_TEST = 8  # finished jobs the queue keeps here (KEEP_FINISHED_JOBS, 64), so that most runs are forgotten


@pytest.mark.slow
def test_forty_runs_keep_memory_and_state_bounded(tiny_runner, monkeypatch):
    """The server (this process) and the engine each grow less than 20 MiB over 40 runs (0.5 MiB a run, as the
    50 MiB over 100 runs this test made before), and the queue forgets all but its newest finished jobs: it keeps 8
    here instead of 64, so that 42 of these 50 runs (the first 10 with them) are forgotten, as 46 of 110 were with
    64. The 100 runs (or more) are a soak: `python benchmarks/soak.py runner-runs --runs 100`."""
    import psutil

    import dashboard.service.job_queue as job_queue

    monkeypatch.setattr(job_queue, "KEEP_FINISHED_JOBS", KEPT_IN_THE_TEST)
    process = psutil.Process()
    short = dict(prompt="Hello", model=TINY, max_new_tokens=8)
    for _ in range(10):
        tiny_runner.run(short)
    start = process.memory_info().rss
    engine = psutil.Process(tiny_runner.engine_client.pids[0])
    engine_start = engine.memory_info().rss
    for _ in range(RUNS_WATCHED):
        assert tiny_runner.run(short)["all_identical"]
    grown_mb = (process.memory_info().rss - start) / 2**20
    engine_grown_mb = (engine.memory_info().rss - engine_start) / 2**20
    print(f"over {RUNS_WATCHED} runs: the server's RSS grew {grown_mb:.1f} MiB, the engine's {engine_grown_mb:.1f}")
    bound_mb = GROWTH_MIB_A_RUN * RUNS_WATCHED
    assert grown_mb < bound_mb, f"the server's RSS grew {grown_mb:.0f} MiB over {RUNS_WATCHED} runs"
    assert engine_grown_mb < bound_mb, f"the engine's RSS grew {engine_grown_mb:.0f} MiB over {RUNS_WATCHED} runs"
    assert len(tiny_runner.queue.remembered()) <= KEPT_IN_THE_TEST + 1 and len(tiny_runner.history()) <= 500


# ---- what the page is told: logging, the engine's own memory and CPU, the run's edges (issue 20)

def test_a_failed_load_is_logged_with_its_reason(tiny_runner, caplog):
    caplog.set_level("ERROR", logger="syncscope")
    with pytest.raises(ValueError):
        tiny_runner.load("/no/such/model", timeout=60)
    logged = [r.getMessage() for r in caplog.records if r.name == "syncscope"]
    assert any("/no/such/model" in line and "failed" in line for line in logged), logged


@pytest.mark.slow
def test_a_startup_model_that_fails_to_load_is_said_at_once(caplog):
    from dashboard.service.runner import Runner

    caplog.set_level("ERROR", logger="syncscope")
    runner = Runner("no-such-org/no-such-model", device="cpu", monitor=False, in_process_engine=True)
    try:
        assert wait_until(lambda: runner.last_load_error is not None, 120), "the failure is kept for the banner"
        assert runner.last_load_error.startswith("Could not load no-such-org/no-such-model: ")
        assert any("no-such-org/no-such-model" in r.getMessage() for r in caplog.records if r.name == "syncscope")
        runner.load(TINY, timeout=180)
        assert runner.last_load_error is None, "a model that loads clears it"
    finally:
        runner.close()


def test_the_cpu_sampler_reads_the_engine_processes_memory_all_ranks(tiny_runner):
    import psutil

    monitor = tiny_runner.monitor
    if monitor.available:
        pytest.skip("an NVIDIA GPU is read here: the CPU fallback is not used")
    monitor.sample_now()
    sample = monitor.samples()[-1]
    engine = sum(psutil.Process(pid).memory_info().rss for pid in tiny_runner.engine_client.pids) / 2**20
    assert sample["mem_used_mb"] == pytest.approx(engine, rel=0.1), "the engine's memory, not the web server's"
    assert "engine processes" in monitor.description


@pytest.mark.slow
def test_a_cpu_run_shows_no_nvml_utilization(tiny_runner):
    if tiny_runner.monitor.available:
        pytest.skip("an NVIDIA GPU is read here")
    job = tiny_runner.submit(fast_settings(min_seconds=1.0))
    finish(tiny_runner, job)
    assert job.page.monitor["samples"], "the engine's CPU was sampled during the run"
    assert job.page.nvml_by_contestant == {}, "no NVML: the NVML util % column is a dash"


def test_the_utilization_line_reaches_the_end_of_the_run(tiny_runner, monkeypatch):
    from core.measure.gpu_monitor import GpuMonitor

    slow = GpuMonitor(interval_s=60.0, host_pids=lambda: tiny_runner.engine_client.pids).start()
    monkeypatch.setattr(tiny_runner, "monitor", slow)
    try:
        job = tiny_runner.submit(fast_settings(max_new_tokens=64))
        finish(tiny_runner, job)
    finally:
        slow.stop()
    page = job.page
    last = page.monitor["samples"][-1]["t"]
    assert last >= page.t_end - 0.05, f"the line ends at {last:.2f} s, the run at {page.t_end:.2f} s"


def test_after_a_cancel_no_pane_says_warm_up(tiny_runner):
    from dashboard.views.report_text import rate_md as _rate_md

    job = tiny_runner.submit(dict(prompt="Count to a thousand.", max_new_tokens=1500, ignore_eos=True,
                                         trials=1))
    assert wait_until(lambda: any(p["warmup"] for p in tiny_runner.snapshot(job)["panes"].values()))
    tiny_runner.cancel(job.id)
    assert job.wait(5) and job.state == CANCELLED
    panes = tiny_runner.snapshot(job)["panes"]
    assert all("warm-up" not in _rate_md(name, pane) for name, pane in panes.items()), panes


@pytest.mark.slow
def test_a_run_past_the_time_limit_is_stopped_and_says_why():
    runner = make_runner(monitor=False, limits=Limits(max_run_s=1.5), in_process_engine=True)
    try:
        job = runner.submit(dict(prompt="Count", model=TINY, max_new_tokens=1500, ignore_eos=True, trials=5))
        assert job.wait(30)
        assert job.state == CANCELLED and "limits the length of a run" in job.error
    finally:
        runner.close()


# ---- the pages that stream a run (dashboard.service.watchers): the Compare and Under load tabs share the rule


class _CancelsRecorder:
    def __init__(self):
        self.cancelled: list[tuple[int, str | None]] = []

    def cancel(self, job_id: int, owner: str | None = None, reason: str | None = None) -> bool:
        self.cancelled.append((job_id, reason))
        return True


def _job(job_id: int):
    from dashboard.service.jobs import COMPARE, Job

    return Job(id=job_id, work=COMPARE, owner="o", model=None)


def _within(seconds: float, done) -> bool:
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    return done()


def test_a_run_whose_last_page_left_is_cancelled_once_after_the_grace_counted_from_the_last_leave():
    from dashboard.service.watchers import JobWatchers

    runner, grace = _CancelsRecorder(), 0.3
    watchers = JobWatchers(runner, grace_s=grace)
    job = _job(1)
    with watchers.watching(job):
        with watchers.watching(job):  # two tabs on one run: one closing leaves it watched
            assert watchers.count(job) == 2
        assert watchers.count(job) == 1
    left = time.monotonic()
    with watchers.watching(job):  # a reload, back within the grace, then gone again
        time.sleep(grace * 0.6)
    left_again = time.monotonic()
    assert _within(10 * grace + 5, lambda: runner.cancelled)
    assert time.monotonic() - left_again >= grace * 0.9, "the first leave's timer cancelled it before the last grace"
    assert time.monotonic() - left >= grace * 1.5
    time.sleep(grace)
    assert [job_id for job_id, _ in runner.cancelled] == [1], "cancelled exactly once"
    assert "not opened again within" in runner.cancelled[0][1] and watchers.count(job) == 0


def test_a_page_back_within_the_grace_keeps_the_run_and_a_finished_run_is_never_cancelled():
    from dashboard.service.jobs import DONE
    from dashboard.service.watchers import JobWatchers

    runner, grace = _CancelsRecorder(), 0.1
    watchers = JobWatchers(runner, grace_s=grace)
    kept, finished = _job(1), _job(2)
    with watchers.watching(kept):
        pass
    with watchers.watching(kept):  # back in time, and still streaming when the grace has run out
        time.sleep(grace * 4)
        assert not runner.cancelled
    with watchers.watching(finished):
        finished.state = DONE
    assert _within(10 * grace + 5, lambda: runner.cancelled)
    time.sleep(grace * 2)
    assert [job_id for job_id, _ in runner.cancelled] == [1], "kept left at last; the finished run is left alone"
