"""What a load report shows, in core.load.report's words (its findings and the CLI's text), for Replay.

Those sentences have one definition, in core.load.report, which imports torch; the server does not. A run of the Under
load tab gets them from its engine with the report (engine.protocol.Done.described); a report opened in Replay has
them made here, in a short-lived child process (`python -m dashboard.service.load_describe`: the report as JSON on
stdin, one JSON line out: {"findings": [...], "text": [...]} or {"refused": "<why, in one line>"}). One child at a time,
under a CPU limit and a deadline, and the answers for the last few reports are kept.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

CHILD_CPU_S = 60
CHILD_WALL_S = 90
KEPT = 32
# Run as `-m` from above the top-level package: `dashboard` here, `syncscope.dashboard` when installed.
_MODULE = __spec__.name if __spec__ is not None else __name__
_ROOT = Path(__file__).resolve().parents[_MODULE.count(".")]
BROKEN = "its findings could not be worded here (the server's log has the details); its tables and charts are shown"

log = logging.getLogger(__name__)
Described = dict[str, list[str]]


class LoadDescriber:
    """Findings and text of load reports, each made once in a child process (one at a time)."""

    def __init__(self, kept: int = KEPT):
        self.kept = kept
        self._answers: collections.OrderedDict[str, Described] = collections.OrderedDict()
        self._lock = threading.Lock()

    def describe(self, report: dict[str, Any]) -> Described:
        """{"findings": [...], "text": [...]} of `report` (a checked load report); ValueError in one line when the
        child cannot word it."""
        data = json.dumps(report).encode()  # in its order: the tables list contestants as the report does
        key = hashlib.sha256(data).hexdigest()
        with self._lock:
            if key not in self._answers:
                self._answers[key] = _in_child(data)
                while len(self._answers) > self.kept:
                    self._answers.popitem(last=False)
            self._answers.move_to_end(key)
            return self._answers[key]


def _in_child(data: bytes) -> Described:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # wording a report needs no device
    try:
        done = subprocess.run([sys.executable, "-m", _MODULE], input=data, capture_output=True, cwd=_ROOT, env=env,
                              timeout=CHILD_WALL_S, check=False)
    except subprocess.TimeoutExpired:
        raise ValueError(f"its findings took more than the {CHILD_WALL_S} s allowed to word them") from None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("refused"), str):
        raise ValueError(answer["refused"])
    if isinstance(answer, dict) and _sentences(answer.get("findings")) and _sentences(answer.get("text")):
        return {"findings": answer["findings"], "text": answer["text"]}
    log.warning("the load report describer exited %s: %s", done.returncode,
                done.stderr.decode(errors="replace")[-2000:])
    raise ValueError(BROKEN)


def _sentences(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(line, str) for line in value)


def main() -> int:
    """The child: the report on stdin, one JSON line on stdout."""
    resource.setrlimit(resource.RLIMIT_CPU, (CHILD_CPU_S, CHILD_CPU_S + 5))
    report = json.loads(sys.stdin.buffer.read())
    from core.load.report import load_findings, load_text

    try:
        answer: dict[str, Any] = {"findings": load_findings(report), "text": load_text(report)}
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError, AttributeError) as exc:
        # A report that passed the format checks but lacks what a sentence reads (an older or hand-made file).
        answer = {"refused": f"its findings could not be worded ({type(exc).__name__}: {str(exc)[:120]}); its tables "
                             "and charts are shown"}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
