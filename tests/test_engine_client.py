"""engine.client: the server's side of the engine processes. How the replies of several ranks become one, how an
exit is told in words, and a real group that starts, says hello and leaves nothing behind. (Deaths, hangs and
cancels that do not land, end to end through the runner: tests/test_engine_process.py.)"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import pytest

from core.parallel.launch import CHILD_ENV_DEFAULTS
from engine.client import EngineClient, EngineLoss, EngineLost, _Rank, describe_exit
from engine.process import RESTART_EXIT_CODE
from engine.protocol import Compare, Done, Failed, FailureCategory, Hello, JobCancelled, Progress, Ready, Started
from tests.helpers import wait_until


@dataclass
class FakeProcess:
    pid: int

    def is_alive(self) -> bool:
        return True


def group(world_size: int) -> tuple[EngineClient, list, list[_Rank]]:
    """A client whose ranks are stand-ins (nothing is spawned): what it passes on is collected in a list."""
    told: list = []
    client = EngineClient(told.append, lambda job, reason: told.append(("lost", job, reason)), world_size=world_size)
    ranks = [_Rank(process=FakeProcess(100 + i), conn=None, heartbeat=None) for i in range(world_size)]
    client._ranks, client._generation = ranks, 1
    return client, told, ranks


def hello(rank: int) -> Hello:
    return Hello(pid=100 + rank, rank=rank, world_size=2, cuda=False, gpus=0, torch="2.13")


def test_the_group_is_ready_once_every_rank_has_said_hello():
    client, told, ranks = group(2)
    client._deliver(ranks[0], 1, hello(0))
    assert told == [] and not client.hello_event.is_set()
    client._deliver(ranks[1], 1, hello(1))
    assert len(told) == 1 and isinstance(told[0], Ready) and client.hello_event.is_set()
    assert client.hello == hello(0), "rank 0's hello is the group's"


def test_a_job_starts_when_every_rank_has_it_and_only_rank_0_streams():
    client, told, ranks = group(2)
    client._active_job = 5
    client._deliver(ranks[1], 1, Started(job=5))
    assert told == []
    client._deliver(ranks[0], 1, Started(job=5))
    client._deliver(ranks[1], 1, Progress(job=5, text="from rank 1"))
    client._deliver(ranks[0], 1, Progress(job=5, text="from rank 0"))
    assert told == [Started(job=5), Progress(job=5, text="from rank 0")]


def test_the_groups_outcome_is_the_worst_of_its_ranks():
    client, told, ranks = group(2)
    client._active_job = 5
    client._deliver(ranks[0], 1, Done(job=5, report={"runs": []}))
    assert told == [] and client._partial_since is not None, "one rank alone has not finished the job"
    client._deliver(ranks[1], 1, Failed(job=5, error="boom", category=FailureCategory.ERROR))
    assert told == [Failed(job=5, error="rank 1: boom", category=FailureCategory.ERROR)]
    assert client._active_job is None
    client._active_job = 6
    client._deliver(ranks[1], 1, JobCancelled(job=6))
    client._deliver(ranks[0], 1, Done(job=6))
    assert told[-1] == JobCancelled(job=6)


def test_replies_of_a_group_that_was_replaced_are_dropped():
    client, told, ranks = group(1)
    client._deliver(ranks[0], 0, Progress(job=1, text="an old engine"))
    assert told == []


class ClosedPipe:
    def send(self, message: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_rank_that_died_just_before_a_job_is_sent_makes_the_engine_lost_not_a_dead_thread():
    """Killed, a rank can still look alive for a moment; the send then hits its closed pipe (seen on two H200s)."""
    client, _, ranks = group(2)
    ranks[1].conn = ClosedPipe()
    ranks[0].conn = type("Pipe", (), {"send": lambda self, message: None})()
    with pytest.raises(EngineLost, match="an engine process exited"):
        client.submit(Compare(job=1, spec=None, request=None))


def test_a_failed_start_reaches_the_runner():
    client, told, ranks = group(1)
    failed = Failed(job=None, error="ImportError: torch", category=FailureCategory.START)
    client._deliver(ranks[0], 1, failed)
    assert told == [failed]


@pytest.mark.parametrize(("code", "words"), [
    (None, "still running"), (0, "exited"), (RESTART_EXIT_CODE, "fresh CUDA context"), (7, "exited with code 7"),
    (-signal.SIGKILL, "was killed by signal 9, SIGKILL (the out-of-memory killer or someone's kill -9"),
    (-signal.SIGSEGV, "segmentation fault"),
])
def test_an_exit_is_told_in_words(code, words):
    assert words in describe_exit(code)


def test_a_sigkill_blames_the_oom_killer_only_when_the_cgroup_counted_an_oom_kill():
    assert "the kernel's out-of-memory killer" in describe_exit(-signal.SIGKILL, oom_killed=True)
    plain = describe_exit(-signal.SIGKILL, oom_killed=False)
    assert "not the out-of-memory killer" in plain and "kill -9" in plain


def test_a_dead_rank_is_a_real_loss_named_by_its_signal_and_the_cgroup_is_asked_about_oom_kills(monkeypatch):
    import engine.client as client_module

    kills = iter([4, 5])  # at the start of the group, then after the death
    monkeypatch.setattr(client_module, "oom_kill_count", lambda: next(kills))
    client, told, ranks = group(1)
    client._oom_kills_at_start = client_module.oom_kill_count()

    class DeadPipe:
        def recv(self):
            raise EOFError

        def close(self):
            pass

    class Killed(FakeProcess):
        exitcode = -signal.SIGKILL

        def is_alive(self) -> bool:
            return False

        def join(self, timeout=None) -> None:
            pass

    ranks[0].process, ranks[0].conn = Killed(100), DeadPipe()
    client._read(ranks[0], 1)
    (_, _, loss), = told
    assert isinstance(loss, EngineLoss) and not loss.chosen and loss.signal == 9 and loss.short == "signal 9"
    assert "the kernel's out-of-memory killer" in loss.reason


def test_a_cancel_that_did_not_land_is_a_restart_the_server_chose_and_a_hang_is_not(monkeypatch):
    import engine.client as client_module

    client, _, ranks = group(1)
    client.hello_event.set()
    now = client_module.time.monotonic()
    ranks[0].heartbeat = type("Beat", (), {"value": now})()
    client._active_job, client._cancel_asked_at = 5, now - client.cancel_grace_s - 1
    cancel = client._trouble()
    assert cancel.chosen and "did not stop within 10 s of the cancel" in cancel.reason
    client._cancel_asked_at = None
    ranks[0].heartbeat.value = now - client.hang_s - 1
    hang = client._trouble()
    assert not hang.chosen and "stopped responding" in hang.reason and hang.short == "stopped responding"


def test_a_started_group_says_hello_with_the_child_environment_and_leaves_nothing_behind():
    before = dict(os.environ)
    client = EngineClient(lambda message: None, lambda job, reason: None, device="cpu")
    try:
        client.start()
        assert client.hello_event.wait(120), "the engine said hello"
        assert dict(os.environ) == before, "this process's environment is as it was"
        pid = client.pids[0]
        assert client.hello.pid == pid and client.hello.cuda is False and client.start_s > 0
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = dict(item.split(b"=", 1) for item in handle.read().split(b"\0") if b"=" in item)
        for key, value in CHILD_ENV_DEFAULTS.items():
            assert environ[key.encode()] == os.environ.get(key, value).encode(), key
    finally:
        client.close()
    assert wait_until(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid), 10)
    assert not client.alive


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().split()[2] == "Z"
