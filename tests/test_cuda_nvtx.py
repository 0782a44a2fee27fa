"""NVTX ranges on CUDA (core.measure.nvtx): skipped without a GPU; on the H200
`python -m pytest -q -m cuda tests/test_cuda_nvtx.py`.

The real torch.cuda.nvtx calls are made (and counted); the pipelined loop's decode steps run with ranges on under
PyTorch's sync debug mode "error", as tests/test_cuda_audit.py runs them without."""

from __future__ import annotations

import pytest
import torch

from core.compare import compare
from core.loops.generation import generate
from core.request.options import BenchRequest, GenerationOptions
from tests.conftest import requires_cuda
from tests.helpers import sync_errors_from_step_one
from tests.test_nvtx import steps_of, tree

pytestmark = [pytest.mark.cuda, requires_cuda]
PROMPT = "Hello there"
STEPS = 24


@pytest.fixture
def tiny_gpu(cuda_models, fast_tiny_compiles):
    return cuda_models("tiny-random", "fp32")


@pytest.fixture
def counted(monkeypatch):
    """The real NVTX push and pop, each call also recorded: ("push", name) or ("pop", None)."""
    calls: list[tuple[str, str | None]] = []
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop

    def counted_push(name):
        calls.append(("push", name))
        return push(name)

    def counted_pop():
        calls.append(("pop", None))
        return pop()

    monkeypatch.setattr(torch.cuda.nvtx, "range_push", counted_push)
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", counted_pop)
    return calls


@pytest.mark.parametrize("loop", ["naive", "pipelined"])
@pytest.mark.parametrize(("cache", "compile_mode"), [("dynamic", "off"), ("static", "off"),
                                                     ("static", "reduce-overhead")])
def test_ranges_add_no_sync_to_the_pipelined_steps_and_change_no_token(tiny_gpu, counted, monkeypatch, loop, cache,
                                                                       compile_mode):
    options = dict(loop=loop, cache=cache, compile=compile_mode, max_new_tokens=STEPS, ignore_eos=True)
    plain = generate(tiny_gpu, PROMPT, **options)  # also the shape's setup run (compile, capture), before the check
    assert counted == []
    if loop == "pipelined":  # the naive loop's .item() is a sync by design
        sync_errors_from_step_one(monkeypatch)
    try:
        ranged = generate(tiny_gpu, PROMPT, nvtx=True, **options)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert ranged.timings.kept_steps == STEPS and ranged.token_ids == plain.token_ids
    assert tree(counted) == steps_of(loop, STEPS)


def test_a_compare_with_ranges_closes_every_one_and_its_audit_still_finds_no_pipelined_read(tiny_gpu, counted):
    request = BenchRequest(prompt=PROMPT, options=GenerationOptions(max_new_tokens=16, ignore_eos=True, nvtx=True),
                           trials=1, contestants=("naive", "pipelined", "pipelined-again", "hf", "hf-deferred"),
                           audit=True)
    report = compare(tiny_gpu, request)
    runs = tree(counted)
    kinds = ("warm-up", "trial 0", "audited run", "kernel measurement")
    assert [name for name, _ in runs] == [f"{c} {kind}" for kind in kinds for c in request.contestants]
    for name, inside in runs:
        contestant = name.split(" ")[0]
        if not contestant.startswith("hf"):
            assert [r for r in inside if not r[0].endswith("setup run")] == steps_of(contestant, 16), name
        elif name.endswith("audited run"):  # generate() has step ranges only where the audit marks its steps
            assert inside and inside == steps_of(contestant, 16)[: len(inside)], name
        else:
            assert inside == [], name
    audits = report["sync_audit"]
    assert audits["pipelined"]["reads_per_decode_step"] == 0 and audits["pipelined-again"]["reads_per_decode_step"] == 0
    assert report["identical"]["pipelined"] and report["identical"]["pipelined-again"]
