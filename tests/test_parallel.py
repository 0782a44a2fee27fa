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

from tests.helpers import on_two_ranks

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
