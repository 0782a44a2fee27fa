"""core.models.memory: a model's size from its shape or config.json, the room it would get, and the one-line refusal of
what cannot fit; the free-memory readings from /proc and the cgroup, with the files faked."""

from __future__ import annotations

import json

import pytest

from core.models import memory
from core.models.memory import GIB, admission_problem, fits, memory_need, parameter_count, spec_shape
from core.models.specs import SYNTHETIC_SHAPES


@pytest.mark.parametrize(("spec", "parameters"), [
    ("smollm2-135m-instruct", 134_515_008), ("synthetic:llama-1b", 1.236e9), ("synthetic:llama-8b", 8.030e9),
    ("synthetic:llama-70b", 70.554e9), ("synthetic:qwen2.5-7b", 7.616e9), ("synthetic:mistral-7b", 7.242e9),
])
def test_a_shapes_parameters_are_counted_within_a_percent_of_the_real_count(spec, parameters):
    counted = memory_need(spec, 4).parameters
    assert abs(counted - parameters) / parameters < 0.01, counted


def test_seventy_billion_parameters_do_not_fit_eight_gib_and_one_billion_do():
    problem = admission_problem(memory_need("synthetic:llama-70b", 4), 8 * GIB, "host memory")
    assert problem == ("model 'synthetic:llama-70b' does not fit: it needs about 329.5 GiB (70.55B parameters x 4 "
                       "bytes = 262.8 GiB of weights, +25% and 1.0 GiB for activations and the KV cache), and 8.0 "
                       "GiB of host memory is free for it")
    assert fits("synthetic:llama-1b", 8 * GIB, 4) and not fits("synthetic:llama-8b", 8 * GIB, 4)
    assert fits("synthetic:llama-8b", 24 * GIB, 2), "bf16 halves the weights"


def test_tensor_parallel_ranks_each_need_their_share():
    one, two = memory_need("synthetic:llama-70b", 2), memory_need("synthetic:llama-70b", 2, tp=2)
    assert two.weight_bytes * 2 == one.weight_bytes and "per rank over 2" in two.describe()


def test_an_unknown_size_or_room_is_let_through_for_the_engine_to_find_out(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert memory_need(str(tmp_path), 4) is None and fits(str(tmp_path), 1, 4)
    assert memory_need("no-such-org/no-such-model", 4) is None
    assert admission_problem(memory_need("synthetic:llama-70b", 4), None, "host memory") is None


def test_a_directorys_size_is_read_from_its_config_without_loading_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**SYNTHETIC_SHAPES["llama-8b"], "model_type": "llama"}))
    assert spec_shape(str(tmp_path))["hidden_size"] == 4096
    assert memory_need(str(tmp_path), 2).parameters == memory_need("synthetic:llama-8b", 2).parameters
    experts = {**SYNTHETIC_SHAPES["llama-1b"], "num_local_experts": 8}
    assert parameter_count(experts) > 4 * parameter_count(SYNTHETIC_SHAPES["llama-1b"]), "experts count"


def test_a_config_without_sizes_is_sized_as_its_config_class_fills_it_in_without_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert memory_need(str(tmp_path), 4) is None, "torch-free (the page's server): let through for the engine"
    need = memory_need(str(tmp_path), 4, config_defaults=True)
    assert need.parameters == 6_738_415_616, "LlamaConfig's defaults: the 6.7B Llama transformers would allocate"
    problem = admission_problem(need, 8 * GIB, "host memory")
    assert problem.startswith(f"model '{tmp_path}' does not fit: it needs about 32.4 GiB (6.74B parameters")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    assert memory_need(str(tmp_path), 4, config_defaults=True) is None


def test_an_architecture_the_formula_cannot_read_is_counted_on_the_meta_device(tmp_path):
    import torch
    import transformers

    shape = {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 128, "state_size": 8}  # no attention heads
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba", **shape}))
    assert parameter_count(shape) is None
    real = transformers.AutoModelForCausalLM.from_config(transformers.MambaConfig(**shape), dtype=torch.float32)
    counted = memory_need(str(tmp_path), 4, config_defaults=True).parameters
    assert counted == sum(p.numel() for p in {id(p): p for p in real.parameters()}.values())


def test_the_cli_and_the_engine_refuse_through_one_admission(monkeypatch):
    import torch

    monkeypatch.setattr(memory, "free_host_bytes", lambda: 8 * GIB)
    with pytest.raises(ValueError, match=r"synthetic:llama-70b' does not fit: .* 8\.0 GiB of host memory is free"):
        memory.admit("synthetic:llama-70b", torch.device("cpu"), 4)
    assert memory.admit("synthetic:llama-1b", torch.device("cpu"), 2) == memory.Admission("", beside=True)
    admitted = memory.admit("synthetic:llama-8b", torch.device("cpu"), 2, held_bytes=16 * GIB)
    assert admitted == memory.Admission("", beside=False), "it fits only in the place of the loaded model"


def _cgroup(root, monkeypatch, v2: bool, limit: str, usage: str, oom_kills: int):
    """A fake cgroup mount under `root` for this process (its /proc/self/cgroup read as the root cgroup)."""
    monkeypatch.setattr(memory.Path, "read_text", _reading_fake_proc(memory.Path.read_text))
    folder = root if v2 else root / "memory"
    folder.mkdir(parents=True, exist_ok=True)
    names = ("memory.max", "memory.current", "memory.events") if v2 else \
        ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.oom_control")
    (folder / names[0]).write_text(limit + "\n")
    (folder / names[1]).write_text(usage + "\n")
    (folder / names[2]).write_text(f"oom 0\noom_kill {oom_kills}\n" if v2 else
                                   f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kills}\n")


def _reading_fake_proc(read_text):
    def read(path, *args, **kwargs):
        if str(path) == "/proc/self/cgroup":
            return "0::/\n4:memory:/\n"
        return read_text(path, *args, **kwargs)

    return read


@pytest.mark.parametrize("v2", [True, False], ids=["cgroup-v2", "cgroup-v1"])
def test_the_cgroups_limit_minus_its_use_and_its_oom_kills_are_read(tmp_path, monkeypatch, v2):
    _cgroup(tmp_path, monkeypatch, v2, limit=str(10 * GIB), usage=str(3 * GIB), oom_kills=2)
    assert memory.cgroup_room(tmp_path) == 7 * GIB
    assert memory.oom_kill_count(tmp_path) == 2


def test_no_cgroup_limit_means_meminfo_alone_and_the_lower_of_the_two_is_free(tmp_path, monkeypatch):
    _cgroup(tmp_path, monkeypatch, True, limit="max", usage=str(GIB), oom_kills=0)
    assert memory.cgroup_room(tmp_path) is None
    monkeypatch.setattr(memory, "_mem_available", lambda: 20 * GIB)
    monkeypatch.setattr(memory, "cgroup_room", lambda: 5 * GIB)
    assert memory.free_host_bytes() == 5 * GIB


def test_this_machines_free_memory_reads_as_a_plausible_number():
    free = memory.free_host_bytes()
    with open("/proc/meminfo") as handle:
        total = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("MemTotal:"))
    assert free is not None and 0 < free <= total


def test_naming_a_models_size_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys, core.models.memory as m; m.memory_need('synthetic:llama-8b', 2); m.free_host_bytes(); "
            "print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
