"""core.parallel.ranks: `core.bench --tp N`'s launcher. Each rank gets torchrun's environment and rank 0 alone prints;
the first rank that fails fails the run and the others are ended; an interrupt is passed on to the ranks in shared
memory, and they agree to stop together; a second one ends them at once.

The fast tests start ranks that run a small function of this file, not core.bench (a spawned rank imports only it);
the slow ones run `core.bench --tp 2` on tiny-random under gloo."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from core.parallel import ranks
from core.parallel.launch import CHILD_ENV_DEFAULTS
from core.parallel.ranks import interrupts_handled, noted_interrupts, run_ranks
from tests import rank_entries
from tests.helpers import on_two_ranks, wait_until

REPO = Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-m", "core.bench", "--model", "tiny-random", "--device", "cpu"]


# ------------------------------------------------------------------------------------------------ the launcher

def spawned_children() -> list[psutil.Process]:
    """The spawned children of this process that still run (ranks, and any engine process another test started)."""
    alive = []
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if "spawn_main" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
    return alive


@pytest.fixture
def live_ranks():
    """The ranks this test spawned that still run: spawned children that were not there when it began."""
    before = {child.pid for child in spawned_children()}
    return lambda: [child for child in spawned_children() if child.pid not in before]


def test_each_rank_gets_torchruns_environment_and_rank_0_alone_prints(tmp_path, capfd):
    assert run_ranks(2, [str(tmp_path)], rank_entries.report_environment) == 0
    envs = [json.loads((tmp_path / f"env-{rank}.json").read_text()) for rank in (0, 1)]
    for rank, env in enumerate(envs):
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank) and env["WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        for key, value in CHILD_ENV_DEFAULTS.items():
            assert env[key] == os.environ.get(key, value), key
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"] and int(envs[0]["MASTER_PORT"]) > 0
    out = capfd.readouterr().out
    assert "rank 0 prints" in out and "rank 1 prints" not in out
    assert "RANK" not in os.environ  # the launcher's own environment is untouched


@pytest.mark.parametrize(("how", "code", "said"), [("exit", 3, "failed (exit code 3)"),
                                                    ("kill", 1, "was killed by signal 9")])
def test_a_failing_rank_fails_the_run_at_once_and_the_others_are_ended(tmp_path, capfd, live_ranks, how, code, said):
    assert run_ranks(2, [str(tmp_path), how], rank_entries.rank_1_fails) == code
    assert not (tmp_path / "finished-0.json").exists(), "the launcher waited for rank 0 instead of ending it"
    assert f"core.bench: error: rank 1 of 2 {said}; the other ranks were stopped" in capfd.readouterr().err
    assert not live_ranks()


def test_a_rank_that_does_not_stop_within_the_grace_after_the_others_is_ended(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(ranks, "INTERRUPTED_GRACE_S", 1.0)
    assert run_ranks(2, [str(tmp_path)], rank_entries.one_stops_one_hangs) == 1
    assert "core.bench: error: rank 1 of 2 did not stop within 1 s of the others; ended" in capfd.readouterr().err


@contextlib.contextmanager
def signals_noted():
    """SIGINT and SIGTERM only noted in the test process around a launcher, so that no signal a test sends can
    reach pytest; yields the handler, to tell when the launcher has put its own in place."""
    noted: list[int] = []

    def note(signum, frame):
        noted.append(signum)

    with interrupts_handled(note):
        yield note


def signal_launcher_when_ready(note, *then_wait_for: Path) -> threading.Thread:
    """From a helper thread: once the launcher handles SIGINT itself, send it one; once the files exist, another."""
    def send() -> None:
        assert wait_until(lambda: signal.getsignal(signal.SIGINT) not in (note, signal.SIG_IGN), 60)
        os.kill(os.getpid(), signal.SIGINT)
        if then_wait_for:
            assert wait_until(lambda: all(path.exists() for path in then_wait_for), 60)
            os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_the_launchers_first_signal_reaches_every_rank_in_shared_memory(tmp_path, capfd):
    with signals_noted() as note:
        sender = signal_launcher_when_ready(note)
        code = run_ranks(2, [str(tmp_path), "stop"], rank_entries.stop_when_asked)
        sender.join(5)
    assert code == 128 + signal.SIGINT
    assert [json.loads((tmp_path / f"asked-{rank}.json").read_text()) for rank in (0, 1)] == [signal.SIGINT] * 2
    err = capfd.readouterr().err
    assert f"core.bench: SIGINT: {ranks.STOPPING}; interrupt once more" in err and "error" not in err


def test_a_second_signal_ends_every_rank_at_once(tmp_path, capfd, live_ranks):
    asked = [tmp_path / f"asked-{rank}.json" for rank in (0, 1)]
    with signals_noted() as note:
        sender = signal_launcher_when_ready(note, *asked)
        code = run_ranks(2, [str(tmp_path), "ignore"], rank_entries.stop_when_asked)
        sender.join(5)
    assert code == 128 + signal.SIGINT
    assert "core.bench: interrupted again: every rank was ended; no report written" in capfd.readouterr().err
    assert not live_ranks()


# ------------------------------------------------------------------------------------------------ in a rank

def test_interrupts_handled_puts_the_handlers_back_however_it_ends():
    before = {signum: signal.getsignal(signum) for signum in ranks.INTERRUPT_SIGNALS}
    with pytest.raises(RuntimeError), interrupts_handled(signal.SIG_IGN):
        assert all(signal.getsignal(signum) is signal.SIG_IGN for signum in ranks.INTERRUPT_SIGNALS)
        raise RuntimeError
    assert {signum: signal.getsignal(signum) for signum in ranks.INTERRUPT_SIGNALS} == before


@pytest.mark.parametrize(("rank", "launched", "says"), [(0, False, True), (1, False, False), (0, True, False)])
def test_a_rank_only_notes_a_signal_and_rank_0_under_torchrun_says_so_once(capsys, monkeypatch, rank, launched, says):
    monkeypatch.setattr(ranks, "_launcher_stop", object() if launched else None)  # this launcher says it itself
    with noted_interrupts(rank) as received:
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
    assert received == [signal.SIGTERM, signal.SIGINT]
    said = capsys.readouterr().err
    assert said == (f"core.bench: SIGTERM: {ranks.STOPPING}\n" if says else "")


def test_off_the_main_thread_a_rank_notes_nothing_and_changes_no_handler():
    before = signal.getsignal(signal.SIGINT)
    seen: list = []

    def in_a_thread() -> None:
        with noted_interrupts(0) as received:
            seen.append((received, signal.getsignal(signal.SIGINT)))

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join(10)
    assert seen == [([], before)]


def test_one_rank_alone_agrees_with_itself_and_stops_on_its_own_or_the_launchers_signal(tmp_path, monkeypatch):
    import torch.distributed as dist

    from core.parallel.ranks import agreed_stop

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        shared = type("Value", (), {"value": 0})()
        monkeypatch.setattr(ranks, "_launcher_stop", shared)
        received: list[int] = []
        check = agreed_stop(received, "cpu")
        assert check(True) is True and check(False) is False
        shared.value = signal.SIGTERM  # the launcher passed a signal on
        with pytest.raises(KeyboardInterrupt):
            check(True)
        assert received == [signal.SIGTERM]  # what rank 0's report will name
        own = [int(signal.SIGINT)]  # a signal this rank received itself wins over the launcher's
        with pytest.raises(KeyboardInterrupt):
            agreed_stop(own, "cpu")(False)
        assert own == [signal.SIGINT]
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------------------ core.bench --tp 2

@pytest.mark.slow
def test_a_rank_that_dies_fails_the_run_and_leaves_no_process_behind():
    long = [*COMMAND, "--max-new-tokens", "1500", "--trials", "20", "--ignore-eos", "--tp", "2"]
    parent = subprocess.Popen(long, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        ranks: list[psutil.Process] = []
        while time.monotonic() < deadline and len(ranks) < 2:
            ranks = [p for p in psutil.Process(parent.pid).children() if "spawn_main" in " ".join(p.cmdline())]
            time.sleep(0.2)
        time.sleep(8)  # both ranks loaded and running
        os.kill(ranks[-1].pid, signal.SIGKILL)
        _, stderr = parent.communicate(timeout=60)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert parent.returncode != 0
    assert "was killed by signal 9; the other ranks were stopped" in stderr
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks)


def _agree_on_rank(rank: int, init_method: str) -> list:
    import torch.distributed as dist

    from core.parallel.ranks import agreed_stop

    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=2)
    received: list[int] = []
    check = agreed_stop(received, "cpu")
    answers = [check(rank == 1), check(False)]  # one rank's clock wants one more round: both run it
    if rank == 1:
        received.append(signal.SIGTERM)  # a signal that reached rank 1 alone
    try:
        check(True)
        stopped = False
    except KeyboardInterrupt:
        stopped = True
    return [answers, stopped, received]


@pytest.mark.slow
def test_the_ranks_agree_on_another_round_and_on_a_signal_only_one_of_them_received(tmp_path):
    assert on_two_ranks(_agree_on_rank, tmp_path) == [[True, False], True, [int(signal.SIGTERM)]]


# ------------------------------------------------------------------------------------------------ interrupts

def _session_bench(tmp_path: Path, *flags: str) -> subprocess.Popen:
    """`core.bench --tp 2` in a process group of its own, as a terminal runs it (SIGINT back to its default: a
    suite started in the background hands its children SIGINT ignored)."""
    def as_in_a_terminal() -> None:
        os.setpgrp()
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    return subprocess.Popen([*COMMAND, "--prompt-tokens", "8", "--ignore-eos", "--tp", "2", "--progress", *flags],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=as_in_a_terminal)


def _lines_until(process: subprocess.Popen, marker: str) -> list[str]:
    seen = []
    for line in process.stderr:
        seen.append(line)
        if marker in line:
            return seen
    raise AssertionError(f"the run ended before {marker!r}: {''.join(seen)}")


def _ranks_of(process: subprocess.Popen) -> list[psutil.Process]:
    return [p for p in psutil.Process(process.pid).children() if "spawn_main" in " ".join(p.cmdline())]


def _none_left(ranks: list[psutil.Process]) -> bool:
    return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks)


@pytest.mark.slow
def test_ctrl_c_under_tensor_parallelism_stops_every_rank_together_and_keeps_the_finished_rounds(tmp_path):
    """A terminal's Ctrl-C reaches the launcher and both ranks. Neither rank may stop where it stands (the other would
    wait for it in a collective): they agree at the end of a round, and rank 0 writes that round's report."""
    from dashboard.service.page_record import open_report

    out = tmp_path / "r.json"
    process = _session_bench(tmp_path, "--max-new-tokens", "24", "--trials", "500", "--json", str(out))
    try:
        _lines_until(process, "round 1 of 500 done")
        ranks = _ranks_of(process)
        assert len(ranks) == 2
        os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "error" not in stderr, stderr
    assert "the ranks stop together after the warm-up or round they are in" in stderr
    report = open_report(out.read_bytes()).report
    done = report["interruption"]["trials_done"]
    assert report["interrupted"] is True and done >= 1 and report["interruption"]["signal"] == "SIGINT"
    assert report["environment"]["tp"] == 2 and report["all_identical"]
    assert report["summary"]["naive"]["trials"] == report["summary"]["pipelined"]["trials"] == done
    assert f"note: this run was cut short by SIGINT after {done} of 500 rounds of trials" in stdout
    assert stdout.count("What this run shows:") == 1, "rank 0 alone prints"
    assert wait_until(lambda: _none_left(ranks), 10)


@pytest.mark.slow
def test_sigterm_to_the_launcher_while_its_ranks_start_is_one_line_and_a_second_ends_them_at_once(tmp_path):
    out = tmp_path / "r.json"
    process = _session_bench(tmp_path, "--max-new-tokens", "24", "--trials", "3", "--json", str(out))
    try:
        assert wait_until(lambda: len(_ranks_of(process)) == 2, 60)
        ranks = _ranks_of(process)
        process.send_signal(signal.SIGTERM)  # the launcher alone: the ranks are still importing torch
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 143, stderr
    lines = stderr.strip().splitlines()
    assert lines[0].startswith("core.bench: SIGTERM: the ranks stop together"), stderr
    assert lines[-1] == ("core.bench: interrupted (SIGTERM) before every contestant had finished a timed trial; "
                         "no report written"), stderr
    assert len(lines) == 2 and stdout == "" and not out.exists()
    assert wait_until(lambda: _none_left(ranks), 10)

    impatient = _session_bench(tmp_path, "--max-new-tokens", "2000", "--trials", "3")
    try:
        _lines_until(impatient, "warm-up of naive")
        ranks = _ranks_of(impatient)
        for _ in range(2):
            os.killpg(impatient.pid, signal.SIGINT)
            time.sleep(0.5)
        _, stderr = impatient.communicate(timeout=60)
    finally:
        if impatient.poll() is None:
            os.killpg(impatient.pid, signal.SIGKILL)
    assert impatient.returncode == 130
    assert stderr.strip().splitlines()[-1] == ("core.bench: interrupted again: every rank was ended; no report "
                                               "written"), stderr
    assert wait_until(lambda: _none_left(ranks), 10)
