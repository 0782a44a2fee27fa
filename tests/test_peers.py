"""benchmarks/peers.py: the table of the peers beside ours, read from each contestant's report (the H200 run of
2026-12-02 for ours), and the refusals before any process starts."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CALL1 = ROOT / "benchmarks/lab/results/h200-2026-12-02/call1"


@pytest.fixture(scope="module")
def peers():
    spec = importlib.util.spec_from_file_location("peers", ROOT / "benchmarks/peers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ours_is_read_from_core_bench_s_report_and_a_peer_from_its_own(peers):
    ours = peers.read_rates("ours-step-graph",
                            json.loads(gzip.decompress((CALL1 / "ours-step-graph-llama-8b.json.gz").read_bytes())))
    assert ours["decode_tokens_per_s"] == pytest.approx(187.04, abs=0.01)
    assert ours["naive_decode_tokens_per_s"] < ours["decode_tokens_per_s"] and ours["warm_up_s"] > 30
    peer = peers.read_rates("gpt-fast-greedy",
                            json.loads(gzip.decompress((CALL1 / "gpt-fast-greedy-llama-8b.json.gz").read_bytes())))
    assert peer["new_tokens"] == 256 and len(peer["decode_tokens_per_s_all"]) == 5


def test_the_table_gives_each_decode_rate_over_ours_and_names_a_failure(peers):
    rows = [{"name": "ours-step-graph", "decode_tokens_per_s": 200.0, "tokens_per_s": 190.0,
             "naive_decode_tokens_per_s": 180.0},
            {"name": "gpt-fast-greedy", "decode_tokens_per_s": 150.0, "tokens_per_s": 140.0},
            {"name": "hf-generate", "error": "ran past 220 s"}]
    table = peers.peers_table(rows)
    assert [(row["contestant"], row["of_ours"]) for row in table] == [
        ("ours-step-graph", 1.0), ("ours-step-graph (naive loop)", 0.9), ("gpt-fast-greedy", 0.75),
        ("hf-generate", None)]
    text = peers.format_table(table, "synthetic:llama-8b")
    assert "gpt-fast-greedy" in text and "0.750" in text and "hf-generate" in text and "failed: ran past 220 s" in text
    assert peers.peers_table(rows[1:])[0]["of_ours"] is None, "without ours there is no ratio"


def test_the_committed_table_matches_its_reports(peers):
    document = json.loads((CALL1 / "peers-llama-8b.json").read_text())
    assert document["table"] == peers.peers_table(document["contestants"])


def test_gpt_fast_rows_need_a_checkout(peers, tmp_path, capsys):
    with pytest.raises(SystemExit):
        peers.parse_args(["--contestants", "gpt-fast-greedy"])
    assert "need --gpt-fast PATH" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="is not a gpt-fast checkout"):
        peers.import_gpt_fast(tmp_path)
    with pytest.raises(SystemExit):
        peers.parse_args(["--contestants", "vllm"])
    assert "unknown contestant vllm" in capsys.readouterr().err


def test_a_child_s_rates_are_its_trials_medians(peers):
    trials = [{"new_tokens": 256, "total_s": 1.0 + i / 10, "decode_s": 0.9 + i / 10} for i in range(3)]
    rates = peers.rates_of(trials)
    assert rates["tokens_per_s"] == pytest.approx(256 / 1.1) and rates["decode_tokens_per_s"] == pytest.approx(255)
