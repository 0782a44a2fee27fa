"""The engine in its own process: what runs where, and what happens when it dies, hangs or will not stop.

Checked from outside where it matters: process ids, /proc/<pid>/maps, signals sent with os.kill.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import weakref
from pathlib import Path

import pytest

from dashboard.service.jobs import CANCELLED, DONE, FAILED
from engine.process import EngineConfig, EngineCore, EventBatcher
from engine.protocol import Compare, Done, Events, Failed, FailureCategory, Load
from tests.conftest import TINY, fast_settings, make_runner
from tests.helpers import wait_until

REPO = Path(__file__).resolve().parent.parent
LONG = dict(prompt="Count forever", model=TINY, max_new_tokens=1500, ignore_eos=True, trials=5)



def streaming(runner, job) -> bool:
    panes = runner.snapshot(job).get("panes", {})
    return any(p["tokens"] for p in panes.values())


# ------------------------------------------------------------------------------------- what runs where

@pytest.mark.slow
def test_the_engine_is_a_child_process_and_the_server_holds_no_torch_and_no_model(tmp_path):
    script = textwrap.dedent("""
        import json, os, sys
        sys.path.insert(0, sys.argv[1])
        from dashboard.service.runner import Runner

        def maps(pid):
            with open(f"/proc/{pid}/maps") as handle:
                return handle.read()

        if __name__ == "__main__":
            runner = Runner("tiny-random", device="cpu", monitor=False)
            report = runner.run(dict(prompt="Hello there", model="tiny-random", max_new_tokens=8, trials=1))
            engine = runner.engine_client.pids[0]
            print(json.dumps({"server": os.getpid(), "engine": engine, "identical": report["all_identical"],
                              "server_torch": "torch" in sys.modules, "server_libtorch": "libtorch" in maps("self"),
                              "engine_libtorch": "libtorch" in maps(engine),
                              "engine_parent": int(open(f"/proc/{engine}/stat").read().split()[3])}))
            runner.close()
    """)
    path = tmp_path / "serve_once.py"
    path.write_text(script)
    out = subprocess.run([sys.executable, str(path), str(REPO)], capture_output=True, text=True, timeout=240)
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["identical"]
    assert facts["engine"] != facts["server"] and facts["engine_parent"] == facts["server"]
    assert facts["engine_libtorch"], "the model runs in the engine process"
    assert not facts["server_torch"] and not facts["server_libtorch"], "the server never loads torch (nor CUDA)"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_an_engine_whose_server_was_killed_ends_itself_even_while_busy(tmp_path):
    """A busy engine reads and writes no pipe for minutes (a compile, a load); its heartbeat thread still sees that
    its server is gone. The stand-in here sleeps 120 s after the engine's heartbeat starts."""
    script = textwrap.dedent("""
        import multiprocessing, sys, time
        sys.path.insert(0, sys.argv[1])
        from engine.process import _beat_forever

        def busy(heartbeat):
            _beat_forever(heartbeat)
            time.sleep(120)

        if __name__ == "__main__":
            context = multiprocessing.get_context("spawn")
            heartbeat = context.Value("d", 0.0)
            engine = context.Process(target=busy, args=(heartbeat,))
            engine.start()
            while heartbeat.value == 0.0:
                time.sleep(0.01)
            print(engine.pid, flush=True)
            time.sleep(120)
    """)
    path = tmp_path / "server.py"
    path.write_text(script)
    server = subprocess.Popen([sys.executable, str(path), str(REPO)], stdout=subprocess.PIPE, text=True)
    try:
        engine = int(server.stdout.readline())
        assert _alive(engine)
        server.kill()
        server.wait(30)
        assert wait_until(lambda: not _alive(engine), timeout=30), "the engine outlived its server by 30 s"
    finally:
        server.kill()


# ------------------------------------------------------------------------------------------------ faults

@pytest.fixture
def runner():
    runner = make_runner(monitor=False, engine={"hang_s": 3.0, "cancel_grace_s": 2.0})
    yield runner
    runner.close()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV], ids=["sigkill", "segfault"])
def test_an_engine_that_dies_mid_run_fails_that_run_and_the_queued_one_still_runs(runner, sig, caplog):
    caplog.set_level("INFO", logger="syncscope")
    running = runner.submit(LONG, owner="first")
    queued = runner.submit(fast_settings(), owner="second")
    assert wait_until(lambda: streaming(runner, running))
    killed_at = time.monotonic()
    os.kill(runner.engine_client.pids[0], sig)
    assert running.wait(60), "the page learns that the engine died"
    took = time.monotonic() - killed_at
    assert running.state == FAILED and signal.Signals(sig).name in running.error
    assert f"engine lost (signal {sig}), restarting in 1 s" in running.error
    assert queued.wait(120) and queued.state == DONE, queued.error  # not lost: it ran on the new engine
    after = runner.run(fast_settings())
    assert after["all_identical"], "and the next run works"
    assert took < 3.0 + machine_margin_s(after), "the page learns within seconds that the engine died"
    assert runner.history()[-3]["status"] == FAILED
    logged = [r.getMessage() for r in caplog.records if r.name == "syncscope"]
    assert any(line.startswith(f"engine lost (signal {sig})") and signal.Signals(sig).name in line
               for line in logged), logged
    assert any(line.startswith("restarting the engine process") for line in logged), logged
    assert all(r.created for r in caplog.records), "each line has its time"


@pytest.mark.slow
def test_after_five_sigkills_in_a_minute_the_server_serves_again_within_two_minutes_of_the_last(caplog):
    """Issue 32's "done when": each new engine is killed as soon as it has said hello, five times; the restarts wait
    twice as long each time; a run submitted right after the last kill completes on the engine that follows, within
    two minutes of it with the default backoff's last wait (16 s). The backoff here starts at 1/16 s, so that the
    test does not sleep 31 s (it slept 7.75 s with a quarter second: now 1.9 s); the default's 1, 2, 4, 8 and 16 s
    are test_supervisor's."""
    from dashboard.service.runner import Runner
    from dashboard.service.supervisor import BACKOFF_FIRST_S, RestartPolicy

    caplog.set_level("INFO", logger="syncscope")
    first_s = 1 / 16
    runner = Runner(TINY, device="cpu", monitor=False, restart_policy=RestartPolicy(first_s=first_s))
    try:
        assert wait_until(lambda: runner.model_spec == TINY, 180)
        kills = []
        for _ in range(5):
            assert wait_until(runner.engine_client.hello_event.is_set, 120), "a new engine started"
            pid = runner.engine_client.pids[0]
            os.kill(pid, signal.SIGKILL)
            kills.append(time.monotonic())
            assert wait_until(lambda pid=pid: pid not in runner.engine_client.pids, 10), "the loss is noticed"
        job = runner.submit(fast_settings())
        assert job.wait(120) and job.state == DONE, job.error
        served_after = time.monotonic() - kills[-1]
        print(f"5 SIGKILLs in {kills[-1] - kills[0]:.1f} s; served again {served_after:.1f} s after the last")
        assert served_after - first_s * 16 + BACKOFF_FIRST_S * 16 < 120, "within two minutes at the default backoff"
        assert runner.supervisor.policy.streak == 5 and runner.model_spec == TINY, "the default is never unloaded"
    finally:
        runner.close()
    logged = [r.getMessage() for r in caplog.records if r.name == "syncscope"]
    waits = [line.split("restarting in ")[1].split(" s")[0] for line in logged if line.startswith("engine lost")]
    assert waits == ["0.0625", "0.125", "0.25", "0.5", "1"], logged  # twice as long after each loss in a row


@pytest.mark.slow
def test_a_run_submitted_just_after_the_engine_died_still_runs(runner):
    os.kill(runner.engine_client.pids[0], signal.SIGKILL)
    job = runner.submit(fast_settings())  # before or after the death is noticed: either way it must run
    assert job.wait(120) and job.state == DONE, job.error


@pytest.mark.slow
def test_a_hung_engine_is_noticed_within_seconds_and_replaced(runner):
    job = runner.submit(LONG)
    assert wait_until(lambda: streaming(runner, job))
    stopped_at = time.monotonic()
    os.kill(runner.engine_client.pids[0], signal.SIGSTOP)
    assert job.wait(60)
    took = time.monotonic() - stopped_at
    assert job.state == FAILED and "stopped responding" in job.error
    after = runner.run(fast_settings())
    assert after["all_identical"]
    assert took < runner.engine_client.hang_s + machine_margin_s(after), took  # the heartbeat's 3 s, and a margin


def machine_margin_s(report: dict) -> float:
    """A margin for how soon the server notices: 2 s plus 20 of the slowest loop's p95 steps of a run made just now
    on this machine (a busy machine's steps, and its threads, are slower)."""
    step_ms = max(s.get("ms_per_token_p95") or 0.0 for s in report["summary"].values())
    return 2.0 + 20 * step_ms / 1000


@pytest.fixture(scope="module")
def compiling_runner():
    """One runner for the tests that cancel during a compile (each such cancel restarts its engine): inductor's
    caches are off in the engine it starts here, and each test turns them off for the engines its cancels restart.
    Inductor compiling on the CPU is a step of seconds with no token in it: a cancel cannot land inside it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
        runner = make_runner(monitor=False)
    yield runner
    runner.close()


@pytest.fixture
def cancels_cannot_land(compiling_runner, monkeypatch):
    """The shared runner, with inductor's caches off for the engines started during the test: the engine's grace
    for a cancel is set by the test (its `cancel_grace_s`, read at each check)."""
    monkeypatch.setenv("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    return compiling_runner


@pytest.mark.slow
def test_a_cancel_that_does_not_land_restarts_the_engine(cancels_cannot_land, monkeypatch, caplog):
    runner = cancels_cannot_land
    monkeypatch.setattr(runner.engine_client, "cancel_grace_s", 2.0)
    caplog.set_level("INFO", logger="syncscope")
    _cancel_during_compile(runner)
    logged = [r.getMessage() for r in caplog.records if r.name == "syncscope"]
    assert any("engine restarted on purpose (cancel)" in line and "did not stop within 2 s" in line
               for line in logged), logged
    assert runner.supervisor.policy.streak == 0, "a restart the server chose is no loss"


OLD_POLICY_RESTARTS = 3  # the policy before issue 32 restarted the engine three times, and gave up at the 4th loss
RESTARTING_CANCELS = OLD_POLICY_RESTARTS + 1
MOST_CANCELS = 2 * RESTARTING_CANCELS  # a cancel that reaches the engine before its compile lands, restarting nothing


@pytest.mark.slow
def test_four_cancels_during_compilation_in_a_row_then_a_normal_run_works(cancels_cannot_land, monkeypatch):
    """Issue 32's "done when": "compile, Run, Cancel during warm-up" ten times; each cancel that cannot land kills
    the engine, which the server chose, so none counts against it (the old policy gave up at the fourth). Here
    cancels in a row until four have restarted the engine: the fourth is a restart the old policy would have
    refused, and each takes about 7 s on the 2-core machine (a cancel that reaches the engine before its compile
    lands: it is cancelled too, and restarts nothing). The issue's ten (or more) in a row are a soak:
    `python benchmarks/soak.py cancels --count 10`."""
    runner = cancels_cannot_land
    monkeypatch.setattr(runner.engine_client, "cancel_grace_s", 1.0)
    starts_before, restarting = runner.engine_client.starts, 0
    for _ in range(MOST_CANCELS):
        job = runner.submit(fast_settings(compile="default", cache="static", max_new_tokens=8))
        assert wait_until(lambda job=job: runner.snapshot(job)["state"] == "running", 120)
        time.sleep(0.3)
        runner.cancel(job.id)
        assert job.wait(60) and job.state == CANCELLED, job.error
        assert runner.supervisor.policy.streak == 0, "a restart the server chose is no loss"
        restarting += "did not stop within 1 s of the cancel" in (job.error or "")
        if restarting == RESTARTING_CANCELS:
            break
    assert restarting == RESTARTING_CANCELS, f"{restarting} of {MOST_CANCELS} cancels restarted the engine"
    assert runner.run(fast_settings(), timeout=180)["all_identical"]  # on the engine the last cancel restarted
    restarts = runner.engine_client.starts - starts_before  # counted once that engine runs (it starts just after)
    print(f"engine restarts: {restarts}")
    assert restarts >= RESTARTING_CANCELS > OLD_POLICY_RESTARTS, "more restarts than the old policy allowed"
    assert runner.supervisor.policy.streak == 0


def _cancel_during_compile(runner):
    compiling = fast_settings(compile="default", cache="static", max_new_tokens=8)
    job = runner.submit(compiling)
    assert wait_until(lambda: runner.snapshot(job)["state"] == "running", 60)
    time.sleep(0.5)
    asked = time.monotonic()
    runner.cancel(job.id)
    assert job.wait(60)
    took = time.monotonic() - asked
    assert job.state == CANCELLED and "did not stop within 2 s of the cancel" in job.error
    assert took >= 2.0
    after = runner.run(fast_settings())
    assert after["all_identical"]
    assert took < 2.0 + 3.0 + machine_margin_s(after), took  # the grace, and the old 5 s scaled to this machine


@pytest.mark.slow
def test_the_server_keeps_answering_while_its_engine_is_down(runner):
    from tests.conftest import page_client, serve

    app = serve(runner)
    try:
        os.kill(runner.engine_client.pids[0], signal.SIGKILL)
        assert page_client(app.url).predict(api_name="/cancel") == "Nothing to cancel."
        assert wait_until(lambda: runner.model_spec == TINY, 120), "the model is loaded again on the new engine"
    finally:
        app.demo.close()


# ------------------------------------------------------------------------------------ EngineCore in-process

def test_an_out_of_memory_run_frees_its_cache_before_it_reports(monkeypatch):
    import torch
    from transformers import cache_utils

    import core.loops.step as step
    from core.request.options import BenchRequest, GenerationOptions

    caches: list[weakref.ref] = []
    make_cache = step.new_decode_cache

    def tracked_cache(loaded, length):
        cache = make_cache(loaded, length)
        caches.append(weakref.ref(cache))
        return cache

    allocate = cache_utils.StaticLayer.lazy_initialization

    def allocate_then_run_out(layer, *args, **kwargs):
        allocate(layer, *args, **kwargs)
        if layer.keys.shape[0] == 5:  # only the "huge" batch below runs out, after some layers got their memory
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 36.50 GiB")

    alive_when_reported = []

    def send(message):
        if isinstance(message, Failed):
            alive_when_reported.append(caches[-1]() is not None)
        sent.append(message)

    sent: list[dict] = []
    monkeypatch.setattr(step, "new_decode_cache", tracked_cache)
    monkeypatch.setattr(cache_utils.StaticLayer, "lazy_initialization", allocate_then_run_out)
    core = EngineCore(send, EngineConfig(device="cpu"))
    huge = BenchRequest(prompt=["Hello"] * 5, options=GenerationOptions(max_new_tokens=4, cache="static",
                                                                          ignore_eos=True), trials=1)
    core.handle(Compare(job=1, spec=TINY, request=huge))
    failed = sent[-1]
    assert isinstance(failed, Failed) and failed.category == FailureCategory.OOM
    assert "ran out of memory" in failed.error
    assert alive_when_reported == [False]  # its memory was back before anyone was told the run had failed
    assert failed.loaded == TINY and not core.must_restart
    small = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=4), trials=1)
    core.handle(Compare(job=2, spec=TINY, request=small))
    assert isinstance(sent[-1], Done) and sent[-1].report["all_identical"]


def test_a_cuda_error_is_reported_and_the_engine_asks_for_a_fresh_process(monkeypatch):
    import core.compare as compare_module
    from core.request.options import BenchRequest, GenerationOptions

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    sent: list[dict] = []
    core = EngineCore(sent.append, EngineConfig(device="cpu"))
    core.handle(Load(job=1, spec=TINY))
    monkeypatch.setattr(compare_module, "compare", broken)
    request = BenchRequest(prompt="Hi", options=GenerationOptions(max_new_tokens=2), trials=1)
    core.handle(Compare(job=2, spec=TINY, request=request))
    assert isinstance(sent[-1], Failed) and sent[-1].category == FailureCategory.DEVICE
    assert "illegal memory access" in sent[-1].error and core.must_restart


def test_a_bad_model_spec_fails_before_the_loaded_model_is_let_go():
    sent: list[dict] = []
    core = EngineCore(sent.append, EngineConfig(device="cpu"))
    core.handle(Load(job=1, spec=TINY))
    core.handle(Load(job=2, spec="/no/such/model"))
    assert isinstance(sent[-1], Failed) and sent[-1].category == FailureCategory.INPUT and sent[-1].loaded == TINY
    assert core.loaded is not None and core.loaded.spec == TINY


def _refused_dir(tmp_path: Path, kind: str) -> str:
    """A spec the engine must refuse before it lets the loaded model go: of a directory, or one too long."""
    if kind == "too-long":
        return "x" * 5000
    folder = tmp_path / kind
    folder.mkdir()
    if kind == "remote-code":
        (folder / "config.json").write_text('{"model_type": "my-custom", "auto_map": '
                                            '{"AutoModelForCausalLM": "modeling.MyModel"}}')
    elif kind == "broken-config":
        (folder / "config.json").write_text('{"model_type": "llama", ')
    return str(folder)  # "no-config": an empty directory


@pytest.mark.parametrize("kind", ["remote-code", "no-config", "broken-config", "too-long"])
def test_a_refused_model_leaves_the_loaded_one_untouched_and_usable(tmp_path, monkeypatch, kind):
    from core.request.options import BenchRequest, GenerationOptions

    sent: list = []
    core = EngineCore(sent.append, EngineConfig(device="cpu"))
    core.handle(Load(job=1, spec=TINY))
    before = core.loaded
    import core.models.loading as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the refused model was loaded"))
    core.handle(Load(job=2, spec=_refused_dir(tmp_path, kind)))
    failed = sent[-1]
    assert isinstance(failed, Failed) and failed.category == FailureCategory.INPUT and failed.loaded == TINY
    assert core.loaded is before, "the previous model was never let go"
    assert "\n" not in failed.error and len(failed.error) < 400, failed.error
    assert {"remote-code": "needs custom code", "no-config": "no config.json", "broken-config": "config.json cannot be",
            "too-long": "is too long"}[kind] in failed.error
    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=4), trials=1)
    core.handle(Compare(job=3, spec=None, request=request))
    assert isinstance(sent[-1], Done) and sent[-1].report["all_identical"], "the previous model still runs"


def test_a_model_that_cannot_fit_is_refused_in_one_line_before_anything_is_allocated(monkeypatch):
    import core.models.loading as models
    import core.models.memory as memory

    monkeypatch.setattr(memory, "free_host_bytes", lambda: 8 * memory.GIB)  # a host with 8 GiB free
    sent: list = []
    core = EngineCore(sent.append, EngineConfig(device="cpu"))
    core.handle(Load(job=1, spec=TINY))
    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model that cannot fit was loaded"))
    core.handle(Load(job=2, spec="synthetic:llama-70b"))
    failed = sent[-1]
    assert isinstance(failed, Failed) and failed.category == FailureCategory.INPUT and failed.loaded == TINY
    assert failed.error.startswith("model 'synthetic:llama-70b' does not fit: it needs about 329.5 GiB")
    assert "8.0 GiB of host memory is free" in failed.error and "\n" not in failed.error
    assert core.loaded.spec == TINY


def test_the_loaded_model_counts_as_room_for_the_next_and_an_unknown_size_is_said(monkeypatch, tmp_path):
    import torch

    import core.models.memory as memory

    monkeypatch.setattr(memory, "free_host_bytes", lambda: 3 * memory.GIB)
    assert memory.room_for_a_model(torch.device("cpu"), 5 * memory.GIB) == (8 * memory.GIB, "host memory")
    core = EngineCore(lambda message: None, EngineConfig(device="cpu"))
    with pytest.raises(ValueError, match=r"synthetic:llama-1b' does not fit: it needs about 6\.8 GiB"):
        core._check_room("synthetic:llama-1b")
    assert core._check_room(TINY) == ("", True), "it fits beside the loaded model (none here)"
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ValueError, match=r"does not fit: it needs about 32\.4 GiB \(6\.74B parameters"):
        core._check_room(str(tmp_path))  # sized as transformers would fill it in: a 6.7B Llama
    (tmp_path / "config.json").write_text('{"model_type": "not-a-known-type"}')
    note, beside = core._check_room(str(tmp_path))
    assert "its size is unknown before loading" in note and not beside, "an unknown size lets the old model go first"


def test_a_load_that_fails_inside_from_pretrained_keeps_the_model_it_fit_beside(tmp_path):
    import json as json_module

    from core.models.specs import TINY_SHAPE
    from core.request.options import BenchRequest, GenerationOptions

    (tmp_path / "config.json").write_text(json_module.dumps({**TINY_SHAPE, "model_type": "llama"}))  # no weights
    sent: list = []
    core = EngineCore(sent.append, EngineConfig(device="cpu"))
    core.handle(Load(job=1, spec=TINY))
    before = core.loaded
    core.handle(Load(job=2, spec=str(tmp_path)))
    failed = sent[-1]
    assert isinstance(failed, Failed) and "no file named model.safetensors" in failed.error, failed
    assert failed.loaded == TINY and core.loaded is before
    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=4), trials=1)
    core.handle(Compare(job=3, spec=None, request=request))
    assert isinstance(sent[-1], Done) and sent[-1].report["all_identical"]


def test_events_travel_in_batches_not_one_message_per_token():
    sent: list[dict] = []
    batcher = EventBatcher(sent.append, job=7)
    start = time.perf_counter()
    for step in range(1000):  # 1000 tokens in 20 ms of "engine time"
        batcher({"type": "tokens", "contestant": "naive", "trial": 0, "step": step, "tokens": (5,),
                 "host_time_s": start + step * 2e-5})
    batcher({"type": "run", "contestant": "naive", "trial": 0})
    assert 1 <= len(sent) <= 3 and all(isinstance(m, Events) for m in sent)
    assert sum(len(m.events) for m in sent) == 1001 and sent[-1].events[-1]["type"] == "run"
    silent = EventBatcher(sent.append, job=8, stream=False)  # ranks other than 0 send no stream at all
    silent({"type": "tokens", "host_time_s": 0.0})
    silent.flush()
    assert all(m.job == 7 for m in sent)


@pytest.mark.slow
def test_tensor_parallel_engines_on_the_cpu_match_one_engine_and_survive_a_dead_rank():
    one = make_runner(monitor=False, in_process_engine=True)  # the reference's tokens: no process boundary needed
    try:
        expected = [r["token_ids"] for r in one.run(fast_settings(trials=2))["runs"]]
    finally:
        one.close()
    from dashboard.service.supervisor import RestartPolicy

    # The dead rank is a real loss: the new group starts after a tenth of a second, not the default's second.
    runner = make_runner(monitor=False, tp=2, restart_policy=RestartPolicy(first_s=0.1))
    try:
        assert len(runner.engine_client.pids) == 2 and runner.model_facts.tp == 2
        assert "tensor parallel over 2 GPUs (all-reduce: gloo); fused qkv, fused gate_up" in runner.device_label()
        report = runner.run(fast_settings(trials=2))
        assert [r["token_ids"] for r in report["runs"]] == expected and report["environment"]["tp"] == 2
        pids = runner.engine_client.pids
        os.kill(pids[1], signal.SIGKILL)  # one rank dies: the whole group goes, and a new one starts
        assert runner.run(fast_settings())["all_identical"]
        assert not any(_running(pid) for pid in pids), "no process of the old group is left behind"
    finally:
        runner.close()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().split()[2] != "Z"
