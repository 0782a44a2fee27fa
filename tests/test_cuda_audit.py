"""The sync audit and the kernel measurement on CUDA: skipped without a GPU; on the H200
`python -m pytest -q -m cuda tests/test_cuda_audit.py`."""

from __future__ import annotations

import sys
import threading
import warnings

import pytest
import torch

import core.audit.sites as sync_sites
import core.audit.sync as sync_audit
from core.audit.sync import SyncAudit, loop_steps
from core.compare import compare
from core.loops.generation import generate
from core.loops.hf_generate import hf_generate
from core.request.options import BenchRequest, GenerationOptions
from tests.conftest import requires_cuda
from tests.helpers import sync_errors_from_step_one

pytestmark = [pytest.mark.cuda, requires_cuda]
PADDED = ["Hi", "A much longer prompt, so that the first row is padded"]
STEPS = 5


@pytest.fixture
def tiny_gpu(cuda_models, fast_tiny_compiles):
    return cuda_models("tiny-random", "fp32")


def read_every_kind_on_cuda(x: torch.Tensor, mask: torch.Tensor, pageable: torch.Tensor, pinned: torch.Tensor,
                            stream: torch.cuda.Stream) -> None:
    """One read of each kind a GPU shows, one per line, then look-alikes that read nothing."""
    x.sum().item()
    bool(x[0] > 0)
    x.tolist()
    x.cpu()
    x.nonzero()
    x[mask]
    torch.equal(x, x)
    f"{x}"
    if x.any():
        pass
    torch.tensor([x[0], x[1]])
    torch.cuda.synchronize()
    event = torch.cuda.Event()
    event.record()
    event.synchronize()
    stream.synchronize()
    pageable.copy_(x, non_blocking=True)
    x.to("cpu", non_blocking=True)
    pinned.copy_(x, non_blocking=True)  # an async copy into pinned memory: no read
    late = torch.cuda.Event()
    late.record()
    _ = x * 2  # more work queued behind the event ...
    torch.cuda.Event().record()
    late.synchronize()  # ... so this wait lets the device work: a lagged wait, not a read


def test_each_kind_of_read_is_found_at_its_line_once_per_step_with_its_cost():
    x = torch.arange(6.0, device="cuda")
    mask = x > 2
    pageable, pinned = torch.empty(6), torch.empty(6, pin_memory=True)
    stream = torch.cuda.current_stream()
    audit = SyncAudit("cuda")
    with audit:
        for index in range(STEPS):
            audit.step(index)
            torch.cuda._sleep(1_000_000)  # device work in each step, so that a read waits for it
            audit.queued()
            read_every_kind_on_cuda(x, mask, pageable, pinned, stream)
        audit.step(STEPS)
        audit.end()
    result = audit.result()
    first = read_every_kind_on_cuda.__code__.co_firstlineno
    found = {(s["line"] - first, s["kind"]): s for s in result["sites"]}
    expected = {(3, "item"), (4, "bool"), (5, "tolist"), (6, "copy"), (7, "nonzero"), (8, "masked-index"),
                (9, "equal"), (10, "print"), (11, "bool"), (13, "scalar"), (14, "synchronize"),
                (17, "event-synchronize"), (18, "stream-synchronize"), (19, "pageable-copy"), (20, "pageable-copy")}
    assert set(found) == expected, sorted(set(found) ^ expected)
    assert all(site["per_step"] == 1.0 for site in found.values())
    assert result["lagged_waits"] == STEPS
    first_read = found[(3, "item")]  # it waits for the step's 1M-cycle sleep, then the device idles until the next
    assert first_read["host_blocked_ms"] > 0 and first_read["device_idle_after_ms"] is not None


def copies_to_the_device_on_cuda(x: torch.Tensor, pageable: torch.Tensor, pinned: torch.Tensor,
                                 buffer: torch.Tensor) -> None:
    """One blocking copy from host memory to the device per line, then look-alikes that copy nothing or queue it."""
    torch.tensor([1, 2], device="cuda")
    x[:, [-1]]
    pageable.to("cuda")
    buffer.copy_(pageable)
    pinned.to("cuda", non_blocking=True)  # from pinned memory, queued: no read
    x[:, -1:]  # a slice: nothing to copy


def reads_on_a_thread(x: torch.Tensor, mask: torch.Tensor) -> None:
    x.sum().item()  # a wrapper sees it
    x[mask]  # only PyTorch's sync debug mode sees it


def test_host_to_device_copies_are_h2d_copies_and_a_thread_s_reads_are_counted_under_sync_warnings():
    x = torch.arange(12.0, device="cuda").view(3, 4)
    mask = x > 5
    pageable, pinned, buffer = torch.ones(4), torch.ones(4, pin_memory=True), torch.empty(4, device="cuda")
    audit = SyncAudit("cuda")
    with audit:
        assert torch.cuda.get_sync_debug_mode() == 1  # "warn", for every thread
        for index in range(STEPS):
            audit.step(index)
            torch.cuda._sleep(1_000_000)
            audit.queued()
            copies_to_the_device_on_cuda(x, pageable, pinned, buffer)
            reader = threading.Thread(target=reads_on_a_thread, args=(x, mask), name="reader")
            reader.start()
            reader.join()
        audit.step(STEPS)
        audit.end()
    result = audit.result()

    def found(function) -> dict:
        first = function.__code__.co_firstlineno
        return {(s["line"] - first, s["kind"]): s for s in result["sites"] if s["function"] == function.__name__}

    copies = found(copies_to_the_device_on_cuda)  # its def takes two lines and a docstring: the copies are 3 to 6
    assert set(copies) == {(3, "h2d-copy"), (4, "h2d-copy"), (5, "h2d-copy"), (6, "h2d-copy")}, sorted(copies)
    assert all(site["per_step"] == 1.0 and site["thread"] is None for site in copies.values())
    # the list index (line 4) is seen by the sync debug mode alone: no wrapper times it
    assert all(copies[(line, "h2d-copy")]["host_blocked_ms"] is not None for line in (3, 5, 6))
    assert copies[(3, "h2d-copy")]["device_idle_after_ms"] is not None  # it waited for the step's sleep
    on_thread = found(reads_on_a_thread)
    assert set(on_thread) == {(1, "item"), (2, "masked-index")}, sorted(on_thread)
    assert all(site["per_step"] == 1.0 and site["thread"] == "reader" for site in on_thread.values())
    assert result["threads"] == {"reader": 2 * STEPS}


@pytest.mark.parametrize("prompt", ["Hello there", PADDED], ids=["batch-1", "padded-batch-2"])
@pytest.mark.parametrize(("cache", "compile_mode", "sample"), [
    ("dynamic", "off", False), ("static", "off", False), ("dynamic", "off", True), ("static", "default", False),
    ("static", "reduce-overhead", False), ("static", "step-graph", False), ("static", "step-graph", True)])
def test_the_pipelined_loop_runs_its_decode_steps_under_sync_errors(tiny_gpu, monkeypatch, prompt, cache,
                                                                    compile_mode, sample):
    """PyTorch's sync debug mode set to "error" from the first decode step to the run's end: any sync would raise."""
    options = dict(loop="pipelined", cache=cache, compile=compile_mode, max_new_tokens=24, ignore_eos=True,
                   do_sample=sample, seed=5)
    generate(tiny_gpu, prompt, **options)  # the shape's setup run (compile, capture) happens before the check
    sync_errors_from_step_one(monkeypatch)
    try:
        result = generate(tiny_gpu, prompt, **options)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert result.timings.kept_steps == 24


def sync_debug_sites(run) -> set[tuple[str, int]]:
    """Where plain `torch.cuda.set_sync_debug_mode("warn")` warns during `run()`, each at the innermost frame outside
    torch (as the audit places its reads), explicit synchronize() calls left out."""
    sites = set()
    shown = warnings.showwarning

    def showwarning(message, *args, **kwargs):
        if sync_audit.SYNC_WARNING not in str(message):
            shown(message, *args, **kwargs)
            return
        frame = sys._getframe(1)
        while frame.f_code.co_filename.startswith(sync_sites._TORCH_DIR) or frame.f_code.co_filename in (
                warnings.__file__, sync_audit.__file__):
            frame = frame.f_back
        code = sync_sites.linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        if "synchronize(" not in code:  # explicit waits: the audit records them as what they are
            sites.add((sync_sites.path_from_root(frame.f_code.co_filename), frame.f_lineno))

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = showwarning
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sites


@pytest.mark.parametrize("contestant", ["naive", "pipelined", "hf", "hf-deferred"])
def test_the_audit_lists_the_sites_pytorchs_sync_debug_mode_warns_at(tiny_gpu, contestant):
    if contestant.startswith("hf"):
        options = GenerationOptions(max_new_tokens=16, ignore_eos=True)

        def run():
            with torch.inference_mode():
                hf_generate(tiny_gpu, PADDED, options, deferred=contestant == "hf-deferred")
    else:
        def run():
            generate(tiny_gpu, PADDED, loop=contestant, max_new_tokens=16, ignore_eos=True)
    run()
    explicit = ("synchronize", "event-synchronize", "stream-synchronize", "pageable-copy")  # which it does not see
    warned = sync_debug_sites(run)
    audit = SyncAudit("cuda")
    with audit, loop_steps(audit):
        run()
    audited = {(s["file"], s["line"]) for s in audit.result()["sites"] if s["kind"] not in explicit}
    assert audited == warned, (sorted(audited - warned), sorted(warned - audited))


def test_the_kernel_measurement_reads_kernel_busy_per_step_on_the_devices_clock(tiny_gpu):
    request = BenchRequest(prompt="Hello there", options=GenerationOptions(max_new_tokens=32, ignore_eos=True),
                           trials=1, contestants=("naive", "pipelined", "hf"), audit=True)
    report = compare(tiny_gpu, request)
    for name in ("naive", "pipelined"):
        trial = report["kernel_measurement"][name]
        assert trial["alignment"] > 0.9 and 0 < trial["kernel_busy_fraction"] <= 1
        assert trial["decode_steps"] == 31 and trial["idle_inside_ms_per_step"] > 0  # eager: launches one by one
        assert report["summary"][name]["kernel_busy_fraction"] == trial["kernel_busy_fraction"]
        assert report["summary"][name]["step_work_source"] == "kernel measurement"
        assert trial["intervals"]["steps"] and trial["slowdown"] > 0
    assert 0 < report["kernel_measurement"]["hf"]["kernel_busy_fraction"] <= 1
    audits = report["sync_audit"]
    assert audits["pipelined"]["reads_per_decode_step"] == 0 and audits["naive"]["reads_per_decode_step"] == 1
    naive = next(s for s in audits["naive"]["sites"] if s["in_decode_steps"])
    assert naive["host_blocked_ms_per_step"] > 0 and naive["device_idle_after_ms_per_step"] > 0
