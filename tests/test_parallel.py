"""Tensor parallelism on the CPU (gloo): `core.bench --tp 2` gives `--tp 1`'s tokens, and a failing rank fails the run
cleanly, leaving no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import on_two_ranks, wait_until

REPO = Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-m", "core.bench", "--model", "tiny-random", "--device", "cpu"]
BASE = [*COMMAND, "--max-new-tokens", "12", "--trials", "2", "--no-check"]


def bench(tmp_path: Path, tp: int, *extra: str) -> dict:
    out = tmp_path / f"tp{tp}-{len(extra)}.json"
    done = subprocess.run([*BASE, "--tp", str(tp), *extra, "--json", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("extra", [(), ("--sample", "--seed", "11", "--temperature", "0.8", "--top-k", "40",
                                        "--cache", "static", "--batch", "3", "--prompt", "Tell me about ships.")],
                         ids=["greedy", "sampled-static-batch3"])
def test_two_ranks_give_the_tokens_of_one(tmp_path, extra):
    one, two = bench(tmp_path, 1, *extra), bench(tmp_path, 2, *extra)
    assert two["environment"]["tp"] == 2 and two["all_identical"] and one["all_identical"]
    assert [r["token_ids"] for r in two["runs"]] == [r["token_ids"] for r in one["runs"]]
    assert two["model"]["hbm_floor_ms_per_step"] == pytest.approx(one["model"]["hbm_floor_ms_per_step"] / 2)
    for run in two["runs"]:  # on the CPU under gloo: an entry per rank, with no device spans in it
        assert run["timings"]["rank_device_spans"] == [{"rank": rank, "device_start_ms": [], "device_end_ms": []}
                                                       for rank in (0, 1)]
    assert all(run["timings"]["rank_device_spans"] == [] for run in one["runs"])


@pytest.mark.slow
def test_under_tensor_parallelism_no_rank_reads_the_device_in_a_pipelined_step(tmp_path):
    report = bench(tmp_path, 2, "--audit", "--prompt", "Hi", "--batch", "2")
    audits = report["sync_audit"]
    assert [rank["reads_per_decode_step"] for rank in audits["pipelined"]["ranks"]] == [0.0, 0.0]
    assert [rank["reads_per_decode_step"] for rank in audits["naive"]["ranks"]] == [1.0, 1.0]


def _gather_on_rank(rank: int, init_method: str) -> list:
    import torch.distributed as dist

    from core.parallel.tensor_parallel import gather_device_spans

    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=2)
    # Rank 1's run began 2 s after rank 0's; its spans count from its own start.
    return gather_device_spans(100.0 + 2.0 * rank, [1.0, 3.0], [2.0, 4.0])


@pytest.mark.slow
def test_every_ranks_device_spans_are_moved_onto_rank_0s_time_base(tmp_path):
    assert on_two_ranks(_gather_on_rank, tmp_path) == [
        {"rank": 0, "device_start_ms": [1.0, 3.0], "device_end_ms": [2.0, 4.0]},
        {"rank": 1, "device_start_ms": [2001.0, 2003.0], "device_end_ms": [2002.0, 2004.0]}]


def test_a_tp_degree_that_does_not_divide_the_heads_is_refused_before_any_rank_starts(tiny):
    from core.parallel.tensor_parallel import check_shardable

    check_shardable(tiny.model.config, 2)
    with pytest.raises(ValueError, match=r"--tp 3 does not divide the model's num_attention_heads \(4\)"):
        check_shardable(tiny.model.config, 3)


@pytest.mark.slow
def test_a_tp_degree_that_does_not_divide_the_model_is_one_clear_line():
    done = subprocess.run([*BASE, "--tp", "3"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "does not divide the model's num_attention_heads (4)" in done.stderr
    assert "Traceback" not in done.stderr


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
    from dashboard.page_record import open_report

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
