"""The audit: which line of a program makes the GPU wait, on each decode step, and what it costs.

    python -m core.audit [OPTIONS] -- SCRIPT [ARGS...]      # syncscope-audit when installed

    from core.audit import watch, assert_no_syncs            # a block, or a step function, of your own code

Its modules:
- runner: the command line (`main`, `cli`), a script run under the audit (`audit_script`) and the Python API
  (`watch`, `assert_no_syncs`); it chooses inductor's cache folder before it imports torch;
- steps (the decode steps of a script), compile (what it compiles), stop (Ctrl-C, SIGTERM, `--timeout`);
- report (the audit report, the summary, the trace) and words (how its numbers are said; torch-free);
- the sync audit itself: sync (SyncAudit, KINDS, loop_steps), wrappers (the wrapped entry points), dispatch (host
  memory and the CPU's dispatch mode), sites (where a read is placed), results (its reads counted per step) and
  fixes (what to do about each read; torch-free).

The names below load lazily, so that importing a torch-free part (words, fixes: the dashboard's server does) imports
no torch, and so that `python -m core.audit` imports torch only where core.audit.runner chooses to.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {  # relative to this package, which is `core.audit` in the checkout and `syncscope.core.audit` installed
    "Watch": ".runner", "watch": ".runner", "assert_no_syncs": ".runner", "audit_script": ".runner",
    "main": ".runner", "cli": ".runner",
    "SyncAudit": ".sync", "KINDS": ".sync", "loop_steps": ".sync", "host_memory": ".dispatch",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
