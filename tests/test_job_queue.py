"""dashboard.service.job_queue: first in, first out, one job at a time, cancel, positions; with a stand-in for the
engine."""

from __future__ import annotations

import threading

import pytest

from dashboard.service.job_queue import KEEP_FINISHED_JOBS, JobQueue
from dashboard.service.jobs import CANCELLED, COMPARE, DONE, LOAD, QUEUED, RUNNING, Job
from tests.helpers import wait_until


class FakeEngine:
    """Runs a job until the test releases it (or asks it to stop)."""

    def __init__(self, queue: JobQueue):
        self.queue = queue
        self.ran: list[int] = []
        self.stopped: list[int] = []
        self.release = threading.Event()
        self.busy = 0
        self.most_busy = 0

    def execute(self, job: Job) -> None:
        self.busy += 1
        self.most_busy = max(self.most_busy, self.busy)
        job.state = RUNNING
        self.ran.append(job.id)
        self.release.wait(10)
        self.busy -= 1
        self.queue.finish(job, CANCELLED if job.id in self.stopped else DONE, None)

    def stop(self, job: Job) -> None:
        self.stopped.append(job.id)
        self.release.set()


class WatchedQueue(JobQueue):
    """A queue of 3 places started with a FakeEngine; `finished` records (id, state, woken already) per end."""

    def __init__(self) -> None:
        self.finished: list[tuple[int, str, bool]] = []
        super().__init__(max_queue=3, on_finish=lambda job: self.finished.append(
            (job.id, job.state, job.finished.is_set())))
        self.engine = FakeEngine(self)
        self.start(self.engine.execute, self.engine.stop)


@pytest.fixture
def queue():
    queue = WatchedQueue()
    yield queue
    queue.engine.release.set()
    queue.close()


def job(queue: JobQueue, owner: str | None = None, internal: bool = False, key: str | None = None) -> Job:
    return Job(id=queue.next_id(), work=COMPARE, owner=owner, model=None, internal=internal, share_key=key)


def test_jobs_run_one_at_a_time_in_the_order_they_came(queue):
    jobs = [queue.add(job(queue, f"user{i}")) for i in range(3)]
    assert wait_until(lambda: jobs[0].state == RUNNING)
    assert [queue.position(j) for j in jobs] == [0, 1, 2]
    assert queue.pending() == jobs
    queue.engine.release.set()
    assert all(j.wait(10) for j in jobs)
    assert queue.engine.ran == [j.id for j in jobs] and queue.engine.most_busy == 1
    assert queue.pending() == [] and [queue.position(j) for j in jobs] == [0, 0, 0]


def test_a_job_ends_once_and_its_end_is_recorded_before_anyone_waiting_wakes(queue):
    first = queue.add(job(queue))
    assert wait_until(lambda: first.state == RUNNING)
    queue.engine.release.set()
    assert first.wait(10)
    queue.finish(first, CANCELLED, "too late")
    assert first.state == DONE and queue.finished == [(first.id, DONE, False)]


def test_cancel_drops_a_waiting_job_and_stops_the_running_one_for_its_owner_only(queue):
    running, waiting = queue.add(job(queue, "a")), queue.add(job(queue, "b"))
    assert wait_until(lambda: running.state == RUNNING)
    assert not queue.cancel(waiting.id, owner="a"), "not yours"
    assert queue.cancel(waiting.id, owner="b", reason="changed my mind")
    assert waiting.state == CANCELLED and waiting.error == "changed my mind" and waiting.wait(0)
    assert queue.cancel(running.id)
    assert running.wait(10) and running.state == CANCELLED and queue.engine.stopped == [running.id]
    assert not queue.cancel(running.id), "already done"
    assert not queue.cancel(12345), "unknown"


def test_a_full_queue_refuses_visitors_but_not_the_servers_own_jobs(queue):
    queue.add(job(queue))
    assert wait_until(lambda: queue.pending()[0].state == RUNNING)
    for _ in range(3):
        queue.add(job(queue))
    with pytest.raises(ValueError, match="the queue is full"):
        queue.add(job(queue))
    reload = queue.add(Job(id=queue.next_id(), work=LOAD, owner=None, model="tiny-random", internal=True),
                       front=True)
    assert queue.position(reload) == 1, "a reload goes first"


def test_a_job_put_back_waits_at_the_front_and_waiting_jobs_can_be_taken(queue):
    running, waiting = queue.add(job(queue)), queue.add(job(queue))
    assert wait_until(lambda: running.state == RUNNING)
    again = job(queue)
    again.state, again.t0 = RUNNING, 1.0
    queue.put_back(again)
    assert again.state == QUEUED and again.t0 is None and queue.pending()[1:] == [again, waiting]
    assert queue.take_waiting() == [again, waiting] and queue.pending() == [running]


def test_close_cancels_what_waits_and_stops_what_runs(queue):
    running, waiting = queue.add(job(queue)), queue.add(job(queue))
    assert wait_until(lambda: running.state == RUNNING)
    queue.close()
    assert waiting.state == CANCELLED and waiting.error == "the server is shutting down"
    assert running.state == CANCELLED and queue.closed
    with pytest.raises(ValueError, match="shutting down"):
        queue.add(job(queue))


def test_close_ends_a_running_job_whose_stop_cannot_land_without_waiting_for_it():
    """A server shutting down while its engine loads or compiles (steps a cancel cannot enter) ends that job at once;
    the engine itself is stopped after it (EngineSupervisor.close)."""
    queue = JobQueue(max_queue=3)
    started = threading.Event()

    def execute(running: Job) -> None:  # as EngineSupervisor does: send it, then wait for its end
        running.state = RUNNING
        started.set()
        running.wait(60)

    queue.start(execute, lambda running: None)
    running = queue.add(job(queue))
    assert started.wait(10)
    queue.close(timeout=60)
    assert running.state == CANCELLED and running.error == "the server is shutting down"


def test_finished_jobs_are_forgotten_beyond_a_bound(queue):
    queue.engine.release.set()
    for _ in range(KEEP_FINISHED_JOBS + 10):
        queue.add(job(queue)).wait(10)
    queue.add(job(queue)).wait(10)
    assert len(queue.remembered()) <= KEEP_FINISHED_JOBS + 1


def test_clients_take_turns_so_a_second_run_waits_behind_a_newer_clients_first(queue):
    queue.max_queue = 10
    first, second = queue.add(job(queue, "a1", key="A")), queue.add(job(queue, "a2", key="A"))
    assert wait_until(lambda: first.state == RUNNING)
    third = queue.add(job(queue, "a3", key="A"))
    newcomer = queue.add(job(queue, "b1", key="B"))
    assert queue.pending() == [first, newcomer, second, third]
    assert [queue.position(j) for j in (newcomer, second, third)] == [1, 2, 3]
    queue.engine.release.set()
    assert all(j.wait(10) for j in (first, second, third, newcomer))
    assert queue.engine.ran == [first.id, newcomer.id, second.id, third.id]


def test_a_reload_runs_first_but_is_not_counted_as_a_job_ahead(queue):
    running, waiting = queue.add(job(queue, "a")), queue.add(job(queue, "b"))
    assert wait_until(lambda: running.state == RUNNING)
    reload = queue.add(Job(id=queue.next_id(), work=LOAD, owner=None, model="tiny-random", internal=True),
                       front=True)
    assert queue.pending() == [running, reload, waiting]
    assert queue.position(waiting) == 1, "only the visitor's run going is ahead"
    queue.engine.release.set()
    assert waiting.wait(10) and queue.engine.ran == [running.id, reload.id, waiting.id]
