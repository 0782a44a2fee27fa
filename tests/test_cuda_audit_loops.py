"""The audit on the loops people write (tests/audit_loops/), on CUDA. Each loop runs once under plain PyTorch sync
debug mode ("warn"), with each warning put at the innermost frame outside torch and counted per decode step (the
steps found as core.audit finds them), and once under core.audit. The two must agree line by line, h2d copies
included, and the audit must find what the loop says it reads. Skipped without a GPU; on the H200:
`python -m pytest -q -m cuda tests/test_cuda_audit_loops.py` (benchmarks/lab/calls/audit_loops_gpu.sh)."""

from __future__ import annotations

import bisect
import collections
import sys
import time
import warnings
from typing import Any

import pytest
import torch

import core.audit.sites as sync_sites
import core.audit.sync as sync_audit
from core.audit.runner import _as_main, _run, _watching, audit_script
from core.audit.steps import StepWatcher
from tests.conftest import requires_cuda
from tests.test_audit_loops import ALL, LOOPS, loop_truth, per_step_sites

pytestmark = [pytest.mark.cuda, requires_cuda]
NEW_TOKENS = 8
Line = tuple[str, int]


class _Clock:
    """What StepWatcher asks of an audit: a launch point at each step's start, and the time in ms."""

    def __init__(self) -> None:
        self.starts_ms: list[float] = []

    def now_ms(self) -> float:
        return time.perf_counter() * 1000

    def launch_point(self) -> int:
        self.starts_ms.append(self.now_ms())
        return len(self.starts_ms) - 1


def _innermost_outside_torch() -> Line:
    frame = sys._getframe(2)
    while frame.f_code.co_filename.startswith(sync_sites._TORCH_DIR) or frame.f_code.co_filename == warnings.__file__:
        frame = frame.f_back
    return sync_sites.path_from_root(frame.f_code.co_filename), frame.f_lineno


def sync_debug_per_step(script: str, args: list[str]) -> tuple[dict[Line, float], str | None]:
    """Where plain `torch.cuda.set_sync_debug_mode("warn")` warns while `script` runs, on any thread: each line's
    warnings per decode step (the first and last step left out, as the audit does), and the steps' name."""
    clock = _Clock()
    watcher = StepWatcher(clock)
    warned: list[tuple[float, Line]] = []
    shown = warnings.showwarning

    def showwarning(message: Any, *rest: Any, **kwargs: Any) -> None:
        if sync_audit.SYNC_WARNING in str(message):
            warned.append((clock.now_ms(), _innermost_outside_torch()))
        else:
            shown(message, *rest, **kwargs)

    with warnings.catch_warnings(), _as_main(script, args):
        warnings.simplefilter("always")
        warnings.showwarning = showwarning
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with _watching(watcher):
                assert _run(script) == (0, None)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    name, _, starts, _ = watcher.steps()
    begins = [clock.starts_ms[i] for i in starts]
    decode = range(1, len(begins) - 1)
    counts = collections.Counter(line for t, line in warned if bisect.bisect_right(begins, t) - 1 in decode)
    return {line: count / len(decode) for line, count in counts.items()}, name


@pytest.mark.parametrize("name", ALL)
def test_the_audit_finds_each_sync_the_debug_mode_sees_with_the_same_count_per_step(name):
    script, args = str(LOOPS / f"{name}.py"), ["cuda", str(NEW_TOKENS)]
    warned, warned_steps = sync_debug_per_step(script, args)
    report, code = audit_script(script, args)
    assert code == 0 and report["steps"] == NEW_TOKENS
    assert report["step_module"].partition(" on thread ")[0] == warned_steps == loop_truth(name).step
    audited = {(s["file"], s["line"]): s["per_step"] for s in report["sites"] if s["per_step"]}
    assert audited == warned, (sorted(audited.items()), sorted(warned.items()))
    assert per_step_sites(report, name) == loop_truth(name).reads
    assert not report["not_seen"]  # on CUDA the audit sees inside compiled code too
