"""dashboard.supervisor: what the engine's replies do to jobs and to what is loaded, and what a loss of the engine
does (restart, reload, requeue, give up), with the engine's replies and losses played in by hand: nothing spawned.
End to end, with real deaths and hangs: tests/test_engine_process.py."""

from __future__ import annotations

import pytest

from dashboard.job_queue import JobQueue
from dashboard.jobs import CANCELLED, COMPARE, DONE, FAILED, LOAD, QUEUED, RUNNING, Job
from dashboard.limits import LOCAL_LIMITS
from dashboard.model_policy import ModelPolicy
from dashboard.supervisor import EngineSupervisor, RestartPolicy
from engine.protocol import Done, Events, Failed, FailureCategory, JobCancelled, Loaded, Started

TINY = "tiny-random"


def loaded(spec: str = TINY, job: int = 1) -> Loaded:
    return Loaded(job=job, spec=spec, device="cpu", device_type="cpu", gpu=None, dtype="float32", parameters=1,
                  weight_bytes=4, context_length=2048, tp=1, all_reduce="", transforms=(), tokenizer_json=None,
                  tokenizer_cleanup=False, load_s=0.1)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Supervised(EngineSupervisor):
    """A supervisor over a queue with no worker; its engine is never started, and a restart only counts.
    `reports` records (job id, state) as each report arrives."""

    def __init__(self) -> None:
        self.reports: list[tuple[int, str]] = []
        self.restarts = 0
        super().__init__(JobQueue(), ModelPolicy(named=[TINY]), LOCAL_LIMITS,
                         lambda job: self.reports.append((job.id, job.state)),
                         policy=RestartPolicy(allowed=2, window_s=60, clock=Clock()))
        self.client.restart = self._count_restart  # type: ignore[method-assign]

    def _count_restart(self) -> None:
        self.restarts += 1


@pytest.fixture
def supervisor() -> Supervised:
    return Supervised()


def add(supervisor: EngineSupervisor, work=COMPARE, model: str | None = None, owner: str | None = "a") -> Job:
    return supervisor.queue.add(Job(id=supervisor.queue.next_id(), work=work, owner=owner, model=model))


def test_a_restart_policy_gives_up_on_an_engine_that_keeps_dying():
    clock = Clock()
    policy = RestartPolicy(allowed=2, window_s=60, clock=clock)
    assert policy.lost() and policy.lost() and not policy.lost()
    clock.now = 61.0
    assert policy.lost() and policy.recent_losses == 1, "losses older than the window are forgotten"
    job = Job(id=1, work=COMPARE, owner=None, model=None)
    assert policy.may_retry(job) and policy.may_retry(job) and not policy.may_retry(job)


def test_a_loaded_model_is_what_the_supervisor_knows_and_the_report_is_told_before_the_job_is_done(supervisor):
    job = add(supervisor)
    supervisor._on_message(Started(job=job.id))
    supervisor._on_message(loaded(job=job.id))
    assert job.started and job.state == RUNNING and supervisor.model_spec == TINY
    assert supervisor.loaded.tokenizer_json is None and supervisor.decoder is not None
    supervisor._on_message(Events(job=job.id, events=[{"type": "phase", "t": 1.0}]))
    assert [event for _, event in job.events] == [{"type": "phase", "t": 1.0}]
    supervisor._on_message(Done(job=job.id, report={"runs": []}))
    assert supervisor.reports == [(job.id, RUNNING)], "the page's record is made before the job is done"
    assert job.state == DONE and job.report == {"runs": []}


def test_a_failed_load_says_what_is_loaded_now(supervisor):
    supervisor._on_message(loaded())
    other = add(supervisor, model="no/such")
    supervisor._on_message(Failed(job=other.id, error="no such model", category=FailureCategory.INPUT, loaded=TINY))
    assert other.state == FAILED and other.error == "no such model; still using tiny-random"
    unloaded = add(supervisor, model="huge")
    supervisor._on_message(Failed(job=unloaded.id, error="out of memory", category=FailureCategory.OOM, loaded=None))
    assert "was unloaded to make room" in unloaded.error and supervisor.loaded is None


def test_a_startup_model_that_fails_to_load_is_kept_for_the_banner_until_a_model_loads(supervisor):
    startup = add(supervisor, work=LOAD, model=TINY, owner=None)
    supervisor._on_message(Failed(job=startup.id, error="gone", category=FailureCategory.INPUT))
    assert supervisor.last_load_error == "Could not load tiny-random: gone; no model is loaded"
    visitor = add(supervisor, work=LOAD, model="someone/else", owner="v")
    supervisor._on_message(Failed(job=visitor.id, error="gone", category=FailureCategory.INPUT))
    assert supervisor.last_load_error.startswith("Could not load tiny-random"), "a visitor's failure is not shown"
    supervisor._on_message(loaded())
    assert supervisor.last_load_error is None


def test_an_engine_that_cannot_start_says_why(supervisor):
    supervisor._on_message(Failed(job=None, error="ImportError: torch", category=FailureCategory.START))
    assert supervisor.trouble == "the engine process could not start: ImportError: torch"


def test_a_loss_fails_the_running_job_restarts_and_reloads_first(supervisor):
    supervisor._on_message(loaded())
    running, waiting = add(supervisor), add(supervisor)
    supervisor._on_message(Started(job=running.id))
    supervisor._on_lost(running.id, "was killed by SIGKILL")
    assert running.state == FAILED and "was killed by SIGKILL during this job" in running.error
    assert "a new engine was started and is loading tiny-random again" in running.error
    assert supervisor.restarts == 1 and supervisor.loaded is None
    reload, *rest = supervisor.queue.pending()
    assert reload.work == LOAD and reload.model == TINY and reload.internal and rest == [waiting]


def test_a_job_the_lost_engine_never_received_runs_on_the_next_one(supervisor):
    sent = add(supervisor)
    sent.state = RUNNING
    supervisor._on_lost(sent.id, "exited")
    assert sent.state == QUEUED and sent.attempts == 1 and supervisor.queue.pending() == [sent]


def test_a_cancelled_job_whose_engine_had_to_be_killed_is_cancelled(supervisor, monkeypatch):
    job = add(supervisor)
    supervisor._on_message(Started(job=job.id))
    monkeypatch.setattr(supervisor.client, "cancel", lambda job_id: None)
    supervisor.stop(job)
    supervisor._on_lost(job.id, "did not stop within 10 s of the cancel")
    assert job.state == CANCELLED and "did not stop" in job.error
    other = add(supervisor)
    supervisor._on_message(JobCancelled(job=other.id))
    assert other.state == CANCELLED


def test_an_engine_that_keeps_dying_is_given_up_and_the_waiting_jobs_fail_with_the_reason(supervisor):
    for _ in range(2):
        supervisor._on_lost(None, "exited")
    waiting = add(supervisor)
    supervisor._on_lost(None, "exited")
    assert supervisor.restarts == 2
    assert waiting.state == FAILED and "it failed 3 times in 60 s, so it was not restarted" in waiting.error
    assert supervisor.trouble == waiting.error
