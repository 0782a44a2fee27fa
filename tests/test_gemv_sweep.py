"""benchmarks/gemv_sweep.py on the CPU: the cases it times (a product alone, gate/up with the norm before it, the
q/k/v kernel with the norm, the rotary embedding and the cache write) computed by the kernels in Triton's interpreter
against the script's own fp32 steps, and the table it writes keyed by part. The sweep itself needs a GPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SMALL = {"hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
         "vocab_size": 64}  # head size 32; widths the column blocks divide and do not (96)
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")


def load_sweep():
    spec = importlib.util.spec_from_file_location("gemv_sweep", REPO / "benchmarks" / "gemv_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case_errors() -> dict[str, float]:
    """Run with TRITON_INTERPRET=1: each part's case of a small Llama shape, its error from the fp32 steps with two
    configurations (the q/k/v kernel's rows of a program in one pair and in four)."""
    from core.kernels.triton_gemv import GemvConfig

    sweep = load_sweep()
    errors = {}
    for part, name in (("", "o"), ("", "down"), ("norm", "gate_up"), ("qkv", "qkv")):
        (product,) = [p for p in sweep.part_products(SMALL, part) if p[0] == name]
        case = sweep.Case(SMALL, *product[1:], part, device="cpu")
        for config in (GemvConfig(2, 64, 4, 1), GemvConfig(8, 32, 4, 1)):
            errors[f"{part or 'plain'} {name} {config.block_n}"] = case.error(case.run(config))
    return errors


@pytest.mark.slow
@needs_triton
def test_the_sweeps_cases_are_what_the_kernels_compute():
    script = "import json; from tests.test_gemv_sweep import case_errors; print(json.dumps(case_errors()))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TRITON_INTERPRET": "1"}, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    errors = json.loads(result.stdout.splitlines()[-1])
    assert len(errors) == 8
    # bf16 in the interpreter (rounding by truncation); a wrong row, rotation or cache slot is off by the output itself
    assert all(error < 0.05 for error in errors.values()), errors


def test_the_table_keeps_each_part_under_a_key_of_its_own(tmp_path):
    sweep = load_sweep()
    best = {"block_n": 4, "block_k": 512, "num_warps": 8, "num_stages": 1, "us": 1.0}
    results = [{"n": 28672, "k": 4096, "act_mul": False, "part": part, "best": best, "complete": True}
               for part in ("", "norm")]
    results.append({"n": 6144, "k": 4096, "act_mul": False, "part": "qkv", "best": best, "complete": False})
    table = tmp_path / "gemv_configs.json"
    sweep.merge_table(table, "NVIDIA H200", results)
    entries = json.loads(table.read_text())["devices"]["NVIDIA H200"]
    assert set(entries) == {"28672x4096", "28672x4096-norm"}  # an incomplete sweep is not written
    assert entries["28672x4096-norm"] == {k: best[k] for k in ("block_n", "block_k", "num_warps", "num_stages")}
    assert all(config.block_n >= 2 for config in sweep.grid("qkv")) and len(sweep.grid("qkv")) < len(sweep.grid())
    assert sweep.part_products("llama-1b", "norm") == [("gate_up", 16384, 2048, False)]


def test_a_graph_cycles_through_enough_weight_copies_to_overflow_the_cache():
    sweep = load_sweep()
    assert sweep.copies_for(235 * 2**20, 512 * 2**20) == 3  # Llama-8B's gate/up: three copies
    assert sweep.copies_for(8 * 2**20, 512 * 2**20) == 64  # Llama-1B's output projection
    assert sweep.copies_for(2**30, 512 * 2**20) == 1
    assert sweep.graph_launches(3) == 66 and sweep.graph_launches(64) == 64 and sweep.graph_launches(100) == 100


@pytest.mark.cuda
@pytest.mark.skipif(importlib.util.find_spec("triton") is None or not __import__("torch").cuda.is_available(),
                    reason="needs an NVIDIA GPU (CUDA) and the triton package")
@pytest.mark.parametrize("part", ["", "norm", "qkv"])
def test_the_graph_timing_times_each_part_and_its_copies_compute_the_same(part):
    from core.kernels.triton_gemv import GemvConfig

    sweep = load_sweep()
    name = {"": "o", "norm": "gate_up", "qkv": "qkv"}[part]
    (product,) = [p for p in sweep.part_products("llama-1b", part) if p[0] == name]
    case = sweep.Case("llama-1b", *product[1:], part)
    weights = case.weight_copies(64 * 2**20)
    assert len(weights) == sweep.copies_for(case.weight.numel() * 2, 64 * 2**20)
    config = GemvConfig(4, 1024, 4, 3)
    first = case.run(config).clone()
    assert case.error(case.run(config, weights[-1])) < 2e-2
    result = sweep.measure(case, [config], deadline=float("inf"), timing="graph")
    assert result["complete"] and result["timing"] == "graph" and 0 < result["best"]["us"] < 1e4
    assert case.error(first) < 2e-2
