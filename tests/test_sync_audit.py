"""core.measure.sync_audit: every host read of a device value found at its line, per decode step (on the CPU here:
what would block on a GPU; tests/test_cuda.py checks the CUDA side)."""

from __future__ import annotations

import pytest
import torch

from core.bench import main
from core.compare import compare
from core.loops.generation import generate
from core.measure.sync_audit import KINDS, SyncAudit, host_memory, loop_steps
from core.options import BenchRequest, GenerationOptions
from tests.conftest import TINY

STEPS = 5
PADDED = ["Hi", "A much longer prompt, so that the first row is padded"]


def read_every_kind(x: torch.Tensor, mask: torch.Tensor) -> None:
    """One read of each kind the CPU can see, one per line, and look-alikes that read nothing."""
    x.sum().item()
    bool(x[0] > 0)
    x.tolist()
    x.cpu()
    x.numpy()
    x.nonzero()
    x[mask]
    torch.equal(x, x)
    f"{x}"
    if x.any():
        pass
    torch.tensor([x[0], x[1]])
    float(x[2])
    torch.argwhere(x)
    x.masked_select(mask)


def read_nothing(x: torch.Tensor, mask: torch.Tensor, host: torch.Tensor) -> None:
    _ = x.shape[0] + len(x) + x.numel()
    _ = x[1], x[1:3], x[torch.tensor([0, 2])]  # indexing by position reads nothing
    _ = torch.where(mask, x, 0.0), x.masked_fill(mask, 0.0), x.to(torch.float64), x.sum() > 0
    _ = bool(host[0]), host.tolist(), host[0].item()  # host memory: no device value
    filled = x.clone()
    filled[mask] = 0.0  # PyTorch runs this as masked_fill_: no count of the mask


def audited(steps: int, body, device: str = "cpu") -> dict:
    audit = SyncAudit(device)
    with audit:
        for index in range(steps):
            audit.step(index)
            body()
            audit.queued()
        audit.end()
    return audit.result()


def test_each_kind_of_read_is_found_at_its_line_once_per_step():
    x, mask = torch.arange(6.0), torch.arange(6.0) > 2
    result = audited(STEPS, lambda: read_every_kind(x, mask))
    first = read_every_kind.__code__.co_firstlineno
    found = {(site["line"] - first, site["kind"]): site["per_step"] for site in result["sites"]}
    expected = {(2, "item"), (3, "bool"), (4, "tolist"), (5, "copy"), (6, "copy"), (7, "nonzero"), (8, "masked-index"),
                (9, "equal"), (10, "print"), (11, "bool"), (13, "scalar"), (14, "item"), (15, "nonzero"),
                (16, "masked-index")}
    assert set(found) == expected
    assert all(per_step == 1.0 for per_step in found.values())
    assert {kind for _, kind in expected} | {"pageable-copy", "synchronize", "event-synchronize",
                                             "stream-synchronize", "sync"} == set(KINDS)
    site = next(s for s in result["sites"] if s["kind"] == "equal")
    assert site["file"] == "tests/test_sync_audit.py" and site["code"] == "torch.equal(x, x)" and site["fix"]
    assert result["reads_per_step"] == [14] * STEPS and result["most_reads_in_a_decode_step"] == 14
    assert "cost nothing here" in result["note"]


def test_look_alikes_and_host_memory_give_no_site():
    x, mask, host = torch.arange(6.0), torch.arange(6.0) > 2, host_memory(torch.ones(3))
    result = audited(STEPS, lambda: read_nothing(x, mask, host))
    assert result["sites"] == [] and result["reads_per_step"] == [0] * STEPS


def test_reads_outside_steps_and_in_the_first_and_last_step_are_not_decode_reads():
    x = torch.arange(3.0)
    audit = SyncAudit("cpu")
    with audit:
        x.tolist()  # before the first step
        for index in range(4):
            audit.step(index)
            if index in (0, 3):
                x.tolist()  # the prefill's and the final step's waits: every loop has them
        audit.end()
        x.tolist()
    result = audit.result()
    assert result["reads"] == 4 and result["reads_per_step"] == [1, 0, 0, 1]
    assert result["decode_steps"] == 2 and result["reads_per_decode_step"] == 0.0


def test_a_read_is_counted_once_though_torch_reads_again_inside_it():
    x = torch.arange(4.0)
    result = audited(3, lambda: print(x, end=""))  # printing calls item() and tolist() inside torch
    assert [(s["kind"], s["count"]) for s in result["sites"]] == [("print", 3)]


def loop_audit(loaded, prompt, **options) -> dict:
    generate(loaded, prompt, max_new_tokens=10, ignore_eos=True, **options)  # its shape's setup run, before the audit
    audit = SyncAudit("cpu")
    with audit, loop_steps(audit):
        generate(loaded, prompt, max_new_tokens=10, ignore_eos=True, **options)
    return audit.result()


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("prompt", ["Hello there", PADDED], ids=["batch-1", "padded-batch-2"])
def test_the_pipelined_loop_reads_nothing_per_step_and_the_naive_loop_only_its_eos_check(tiny, cache, prompt):
    piped = loop_audit(tiny, prompt, loop="pipelined", cache=cache)
    assert piped["reads_per_decode_step"] == 0.0 and piped["decode_steps"] == 8
    naive = loop_audit(tiny, prompt, loop="naive", cache=cache)
    decode = [s for s in naive["sites"] if s["in_decode_steps"]]
    assert naive["reads_per_decode_step"] == 1.0 and len(decode) == 1
    assert (decode[0]["file"], decode[0]["function"], decode[0]["kind"]) == \
        ("core/loops/generation.py", "read_stop_flag", "item")


@pytest.mark.slow
@pytest.mark.parametrize("options", [dict(cache="static", compile="default"), dict(do_sample=True, seed=3),
                                     dict(lag=3), dict(cache="static", compile="reduce-overhead")],
                         ids=["compiled", "sampled", "lag-3", "cuda-graph-mode-on-the-cpu"])
def test_the_pipelined_loop_reads_nothing_per_step_in_other_modes(tiny, options):
    assert loop_audit(tiny, PADDED, loop="pipelined", **options)["reads_per_decode_step"] == 0.0


@pytest.fixture(scope="module")
def hf_modules_tiny():
    """tiny-random with transformers' modules and mask functions as they are (--hf-modules)."""
    from core.models import load_model

    return load_model(TINY, device="cpu", hf_modules=True)


def mask_read(result: dict) -> dict:
    site = next(s for s in result["sites"] if s["in_decode_steps"])
    assert site["file"] == "transformers/masking_utils.py" and "fast_all(padding_mask)" in site["code"]
    assert site["kind"] == "bool" and site["per_step"] == 1.0 and site["where"] == "inside a step"
    return site


def test_the_audit_sees_transformers_mask_read_where_the_loops_do_not_avoid_it(hf_modules_tiny, monkeypatch):
    """Unprepared (--hf-modules), a padded batch's decode steps read the mask in transformers; with no row padded the
    loops pass no mask, and forced to pass one, they read it too."""
    from core.loops import step

    assert loop_audit(hf_modules_tiny, "Hello there", loop="pipelined")["reads_per_decode_step"] == 0.0
    assert "attention_mask=None" in mask_read(loop_audit(hf_modules_tiny, PADDED, loop="pipelined"))["fix"]
    begin = step.DecodeSetup.begin

    def with_the_mask(self, *args, **kwargs):
        cache = begin(self, *args, **kwargs)
        self.decode_mask = True
        return cache

    monkeypatch.setattr(step.DecodeSetup, "begin", with_the_mask)
    mask_read(loop_audit(hf_modules_tiny, "Hello there", loop="pipelined"))


def test_compare_audits_each_contestant_after_its_trials(tiny):
    request = BenchRequest(prompt="Hello there", options=GenerationOptions(max_new_tokens=12, ignore_eos=True),
                           trials=1, contestants=("naive", "pipelined", "hf"), audit=True)
    report = compare(tiny, request)
    audits = report["sync_audit"]
    assert audits["naive"]["reads_per_decode_step"] == 1.0 and audits["pipelined"]["reads_per_decode_step"] == 0.0
    hf = [s for s in audits["hf"]["sites"] if s["in_decode_steps"]]
    assert len(hf) == 1 and hf[0]["file"] == "transformers/generation/utils.py" and hf[0]["per_step"] == 1.0
    assert "unfinished_sequences.max() == 0" in hf[0]["code"] and "DeferredStopCheck" in hf[0]["fix"]
    assert all(a["rate_vs_timed"] > 0 and a["started_ms"] > 0 for a in audits.values())
    assert len(report["runs"]) == 3  # the audited runs are not trials


def test_the_cli_prints_the_top_sites(capsys):
    assert main(["--model", "tiny-random", "--device", "cpu", "--prompt-tokens", "8", "--max-new-tokens", "8",
                 "--trials", "1", "--ignore-eos", "--audit"]) == 0
    out = capsys.readouterr().out
    assert "naive: 1.00 per step" in out and "pipelined: 0.00 per step" in out
    assert "core/loops/generation.py:" in out and "cost nothing here" in out
