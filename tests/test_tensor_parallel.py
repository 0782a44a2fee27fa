"""core.parallel.tensor_parallel on the CPU (gloo): `core.bench --tp 2` gives `--tp 1`'s tokens, every rank's device
spans on rank 0's time base, and a TP degree the model cannot be split by refused before any rank starts. (The
launcher, its failing ranks and its interrupts: test_ranks.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import on_two_ranks

REPO = Path(__file__).resolve().parent.parent
ARGS = ["--model", "tiny-random", "--device", "cpu", "--max-new-tokens", "12", "--trials", "2", "--no-check"]
BASE = [sys.executable, "-m", "core.bench", *ARGS]


def bench(tmp_path: Path, tp: int, *extra: str) -> dict:
    """`core.bench --tp N` as typed; `--tp 1`, the reference, runs in this process (core.bench.main): nothing of it
    is about processes, and its own process cost a Python start and imports (about 5 s) a test."""
    out = tmp_path / f"tp{tp}-{len(extra)}.json"
    if tp == 1:
        from core.bench import main

        assert main([*ARGS, "--tp", "1", *extra, "--json", str(out)]) == 0
        return json.loads(out.read_text())
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


def test_every_width_the_ranks_split_must_divide(tiny):
    """tiny-random has 4 attention heads but 2 KV heads: 4 ranks would each need half a KV head."""
    from core.parallel.tensor_parallel import check_shardable

    with pytest.raises(ValueError, match=r"--tp 4 does not divide the model's num_key_value_heads \(2\)"):
        check_shardable(tiny.model.config, 4)
    config = type("Config", (), {"num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 100})()
    with pytest.raises(ValueError, match=r"--tp 8 does not divide the model's intermediate_size \(100\)"):
        check_shardable(config, 8)


def test_without_a_process_group_each_helper_gives_one_processs_answer(tiny):
    """A --tp 1 run calls the same helpers as a rank: they must not need a process group."""
    import torch

    from core.parallel.tensor_parallel import (
        gather_device_spans,
        gather_objects,
        local,
        tp_device,
        use_one_shot_all_reduce,
        world,
    )

    assert world() == (0, 1)
    assert gather_objects({"reads": 1.0}) == [{"reads": 1.0}]
    assert gather_device_spans(100.0, [1.0], [2.0]) == []
    assert tp_device("cpu") == torch.device("cpu")
    weight = tiny.model.get_input_embeddings().weight
    assert local(weight) is weight
    assert use_one_shot_all_reduce(tiny.model) == ("gloo", "")
