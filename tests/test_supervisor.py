"""dashboard.service.supervisor: what the engine's replies do to jobs and to what is loaded, and what a loss of the
engine does (restart, reload, requeue, give up), with the engine's replies and losses played in by hand: nothing
spawned. End to end, with real deaths and hangs: tests/test_engine_process.py."""

from __future__ import annotations

import pytest

from dashboard.service.job_queue import JobQueue
from dashboard.service.jobs import CANCELLED, COMPARE, DONE, FAILED, LOAD, QUEUED, RUNNING, Job
from dashboard.service.limits import LOCAL_LIMITS
from dashboard.service.model_policy import ModelPolicy
from dashboard.service.supervisor import CULPRIT_LOSSES, EngineSupervisor, RestartPolicy
from engine.client import EngineLoss
from engine.protocol import Done, Events, Failed, FailureCategory, JobCancelled, ModelFacts, Started

TINY = "tiny-random"
OTHER = "synthetic:smollm2-135m"
KILLED = EngineLoss("was killed by signal 9, SIGKILL (...)", signal=9)
CANCEL_KILLED = EngineLoss("did not stop within 10 s of the cancel (...), so it was stopped and restarted",
                           chosen=True)


def model_facts(spec: str = TINY, job: int = 1) -> ModelFacts:
    return ModelFacts(job=job, spec=spec, device="cpu", device_type="cpu", gpu=None, dtype="float32", parameters=1,
                  weight_bytes=4, context_length=2048, tp=1, all_reduce="", transforms=(), tokenizer_json=None,
                  tokenizer_cleanup=False, load_s=0.1)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Supervised(EngineSupervisor):
    """A supervisor over a queue with no worker; its engine is never started, and a restart only counts. Its clock
    is set by hand, and a restart scheduled after a delay happens at once, the delay recorded in `delays`.
    `reports` records (job id, state) as each report arrives."""

    def __init__(self, default_model: str | None = TINY) -> None:
        self.reports: list[tuple[int, str]] = []
        self.restarts = 0
        self.delays: list[float] = []
        self.clock = Clock()
        super().__init__(JobQueue(), ModelPolicy(named=[TINY, OTHER]), LOCAL_LIMITS,
                         lambda job: self.reports.append((job.id, job.state)),
                         policy=RestartPolicy(clock=self.clock), default_model=default_model,
                         schedule=self._later)
        self.client.restart = self._count_restart  # type: ignore[method-assign]

    def _later(self, delay: float, work) -> None:
        self.delays.append(delay)
        work()

    def _count_restart(self) -> None:
        self.restarts += 1


@pytest.fixture
def supervisor() -> Supervised:
    return Supervised()


def add(supervisor: EngineSupervisor, work=COMPARE, model: str | None = None, owner: str | None = "a") -> Job:
    return supervisor.queue.add(Job(id=supervisor.queue.next_id(), work=work, owner=owner, model=model))


def test_real_losses_in_a_row_wait_longer_each_time_and_a_healthy_engine_starts_the_count_again():
    clock = Clock()
    policy = RestartPolicy(first_s=1, max_s=60, healthy_s=120, clock=clock)
    delays = []
    for _ in range(9):
        delays.append(policy.lost())
        clock.now += delays[-1] + 5  # each new engine lives 5 s
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    clock.now += 120
    assert policy.lost() == 1 and policy.streak == 1, "an engine up for the healthy period ends the run of losses"
    job = Job(id=1, work=COMPARE, owner=None, model=None)
    assert all(policy.may_retry(job) for _ in range(3)) and not policy.may_retry(job)


def test_a_loaded_model_is_what_the_supervisor_knows_and_the_report_is_told_before_the_job_is_done(supervisor):
    job = add(supervisor)
    supervisor._on_message(Started(job=job.id))
    supervisor._on_message(model_facts(job=job.id))
    assert job.started and job.state == RUNNING and supervisor.model_spec == TINY
    assert supervisor.model_facts.tokenizer_json is None and supervisor.decoder is not None
    supervisor._on_message(Events(job=job.id, events=[{"type": "phase", "t": 1.0}]))
    assert [event for _, event in job.events] == [{"type": "phase", "t": 1.0}]
    supervisor._on_message(Done(job=job.id, report={"runs": []}))
    assert supervisor.reports == [(job.id, RUNNING)], "the page's record is made before the job is done"
    assert job.state == DONE and job.report == {"runs": []}


def test_a_failed_load_says_what_is_loaded_now(supervisor):
    supervisor._on_message(model_facts())
    other = add(supervisor, model="no/such")
    supervisor._on_message(Failed(job=other.id, error="no such model", category=FailureCategory.INPUT, loaded=TINY))
    assert other.state == FAILED and other.error == "no such model; still using tiny-random"
    unloaded = add(supervisor, model="huge")
    supervisor._on_message(Failed(job=unloaded.id, error="out of memory", category=FailureCategory.OOM, loaded=None))
    assert "was unloaded to make room" in unloaded.error and supervisor.model_facts is None


def test_a_startup_model_that_fails_to_load_is_kept_for_the_banner_until_a_model_loads(supervisor):
    startup = add(supervisor, work=LOAD, model=TINY, owner=None)
    supervisor._on_message(Failed(job=startup.id, error="gone", category=FailureCategory.INPUT))
    assert supervisor.last_load_error == "Could not load tiny-random: gone; no model is loaded"
    visitor = add(supervisor, work=LOAD, model="someone/else", owner="v")
    supervisor._on_message(Failed(job=visitor.id, error="gone", category=FailureCategory.INPUT))
    assert supervisor.last_load_error.startswith("Could not load tiny-random"), "a visitor's failure is not shown"
    supervisor._on_message(model_facts())
    assert supervisor.last_load_error is None


def test_an_engine_that_cannot_start_says_why(supervisor):
    supervisor._on_message(Failed(job=None, error="ImportError: torch", category=FailureCategory.START))
    assert supervisor.trouble == "the engine process could not start: ImportError: torch"


def test_a_loss_fails_the_running_job_restarts_and_reloads_first(supervisor):
    supervisor._on_message(model_facts())
    running, waiting = add(supervisor), add(supervisor)
    supervisor._on_message(Started(job=running.id))
    supervisor._on_lost(running.id, KILLED)
    assert running.state == FAILED and "was killed by signal 9, SIGKILL (...) during this job" in running.error
    assert "engine lost (signal 9), restarting in 1 s; it loads tiny-random again" in running.error
    assert supervisor.restarts == 1 and supervisor.delays == [1] and supervisor.model_facts is None
    reload, *rest = supervisor.queue.pending()
    assert reload.work == LOAD and reload.model == TINY and reload.internal and rest == [waiting]
    assert supervisor.trouble.startswith("Engine lost (signal 9), restarting in 1 s: the engine process was killed")


def test_a_job_the_lost_engine_never_received_runs_on_the_next_one(supervisor):
    sent = add(supervisor)
    sent.state = RUNNING
    supervisor._on_lost(sent.id, EngineLoss("exited"))
    assert sent.state == QUEUED and sent.attempts == 1 and supervisor.queue.pending() == [sent]


def test_a_cancelled_job_whose_engine_had_to_be_killed_is_cancelled_and_the_restart_counts_for_nothing(
        supervisor, monkeypatch, caplog):
    caplog.set_level("INFO", logger="syncscope")
    monkeypatch.setattr(supervisor.client, "cancel", lambda job_id: None)
    supervisor._on_message(model_facts())
    for _ in range(10):  # "compile, Run, Cancel during warm-up", ten times
        job = add(supervisor)
        supervisor._on_message(Started(job=job.id))
        supervisor.stop(job)
        supervisor._on_lost(job.id, CANCEL_KILLED)
        assert job.state == CANCELLED and "did not stop" in job.error
        assert supervisor.queue.take_waiting()[0].model == TINY, "the model is loaded again first"
        supervisor._on_message(model_facts())
    assert supervisor.delays == [0] * 10 and supervisor.restarts == 10 and supervisor.policy.streak == 0
    assert TINY not in supervisor.models.retired
    supervisor._on_lost(None, KILLED)
    assert supervisor.delays[-1] == 1, "the first real loss after them waits the shortest time"
    logged = [r.getMessage() for r in caplog.records]
    assert sum("engine restarted on purpose (cancel) (job" in line for line in logged) == 10, logged
    other = add(supervisor)
    supervisor._on_message(JobCancelled(job=other.id))
    assert other.state == CANCELLED


def test_a_restart_forced_by_the_run_limit_says_so(supervisor, monkeypatch):
    monkeypatch.setattr(supervisor.client, "cancel", lambda job_id: None)
    job = add(supervisor)
    supervisor._on_message(Started(job=job.id))
    supervisor._stop_causes[job.id] = "run limit"  # what _await records before it cancels a run past the limit
    supervisor.stop(job)
    supervisor._on_lost(job.id, CANCEL_KILLED)
    assert supervisor.trouble.startswith("Restarted on purpose (run limit): the engine process did not stop")
    assert supervisor.delays == [0] and supervisor.policy.streak == 0


def test_an_engine_that_keeps_dying_is_started_again_later_each_time_and_waiting_jobs_wait(supervisor):
    waiting = add(supervisor)
    for _ in range(5):
        supervisor._on_lost(None, KILLED)
        supervisor.clock.now += supervisor.delays[-1] + 1
    assert supervisor.delays == [1, 2, 4, 8, 16] and supervisor.restarts == 5
    assert supervisor.trouble.startswith("Engine lost (signal 9), restarting in 16 s")
    assert not waiting.done and waiting in supervisor.queue.pending(), "a waiting job waits for the new engine"


def test_a_model_that_keeps_killing_its_engine_is_unloaded_named_and_the_default_served(supervisor, caplog):
    caplog.set_level("INFO", logger="syncscope")
    supervisor._on_message(model_facts(OTHER))
    queued_for_it = add(supervisor, model=OTHER)
    for loss in range(1, CULPRIT_LOSSES + 1):
        supervisor._on_lost(None, KILLED)
        supervisor.clock.now += 5
        reload = supervisor.queue.pending()[0]
        if loss < CULPRIT_LOSSES:
            assert reload.model == OTHER, "it is loaded again until it has killed the engine three times"
            supervisor.queue.take_waiting(lambda job, reload=reload: job is reload)
            supervisor._on_message(model_facts(OTHER))
    assert reload.work == LOAD and reload.model == TINY, "the default is loaded instead"
    assert supervisor.trouble.startswith(f"Model {OTHER} unloaded after 3 losses of the engine in a row; serving "
                                         f"the default ({TINY}). Engine lost (signal 9), restarting in 4 s")
    assert queued_for_it.state == FAILED and "unloaded after 3 losses" in queued_for_it.error
    with pytest.raises(ValueError, match="not offered any more"):
        supervisor.models.check(OTHER)
    assert OTHER not in supervisor.models.choices()
    supervisor._on_message(model_facts(TINY))
    assert supervisor.trouble == f"Model {OTHER} unloaded after 3 losses of the engine in a row; serving the " \
                                 f"default ({TINY}).", "the banner keeps naming it once the default is back"
    logged = [r.getMessage() for r in caplog.records]
    assert any(f"model {OTHER} unloaded after 3 losses in a row; serving the default" in line for line in logged)


def test_the_load_that_kills_the_engine_is_the_culprit_and_a_visitors_model_is_not_named(supervisor):
    supervisor._on_message(model_facts(TINY))
    for _ in range(CULPRIT_LOSSES):
        load = add(supervisor, work=LOAD, model="/home/someone/private-model", owner="v")
        supervisor._on_message(Started(job=load.id))
        supervisor._on_lost(load.id, KILLED)
        assert load.state == FAILED
        supervisor.queue.take_waiting()
        supervisor._on_message(model_facts(TINY))
    assert "/home/someone" not in supervisor.trouble
    assert supervisor.trouble.startswith("A visitor's model unloaded after 3 losses of the engine in a row; serving "
                                         "the default (tiny-random).")
    assert "/home/someone/private-model" in supervisor.models.retired


def test_the_default_model_is_never_unloaded_and_losses_with_other_models_do_not_add_up(supervisor):
    supervisor._on_message(model_facts(TINY))
    for _ in range(CULPRIT_LOSSES + 2):
        supervisor._on_lost(None, KILLED)
    assert not supervisor.models.retired and supervisor.queue.pending()[0].model == TINY
    fresh = Supervised()
    for model in (OTHER, TINY, OTHER, TINY):
        fresh._on_message(model_facts(model))
        fresh._on_lost(None, KILLED)
    assert not fresh.models.retired, "losses in a row count per model"


def test_a_job_waiting_for_an_engine_that_cannot_start_fails_with_the_reason_and_a_restart_is_still_scheduled(
        supervisor):
    supervisor._on_message(Failed(job=None, error="ImportError: torch", category=FailureCategory.START))
    supervisor._on_lost(None, EngineLoss("exited with code 3"))
    assert supervisor.delays == [1], "an engine that could not start is tried again after the backoff"
    job = add(supervisor)
    supervisor.execute(job)
    assert job.state == FAILED and job.error == "the engine process could not start: ImportError: torch"
