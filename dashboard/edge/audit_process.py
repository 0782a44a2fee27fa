"""Where an uploaded audit report is read: a file of more than IN_PROCESS_BYTES (or any gzip) in a short-lived child
process under a memory and a CPU limit, which hands back only the digest (dashboard.service.audit_digest). The server
never holds a visitor's JSON as Python objects: however the file is built, what it costs the server is the digest, and
what it costs the machine is at most CHILD_MEMORY_BYTES for a few seconds (the Your loop tab reads one at a time).

`python -m dashboard.edge.audit_process LIMIT PATH MEMORY` (PATH `-`: the bytes on stdin) is the child: under MEMORY
bytes of address space it prints one JSON line, {"digest": ...} or {"refused": "<why, in one line>"}.
"""

from __future__ import annotations

import json
import logging
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

from core.documents.files import GZIP_MAGIC, too_large
from core.documents.kinds import ReportError
from dashboard.service import audit_digest

IN_PROCESS_BYTES = 2**20  # parsing a plain JSON file this small costs the server a few tens of MiB at most
CHILD_MEMORY_BYTES = 2**30  # the child's address space: the file's text twice, the kept part and the interpreter
CHILD_CPU_S = 60
CHILD_WALL_S = 90
MEMORY_EXIT = 3
# Run as `-m` from above the top-level package: `dashboard` here, `syncscope.dashboard` when installed.
_MODULE = __spec__.name if __spec__ is not None else __name__
_ROOT = Path(__file__).resolve().parents[_MODULE.count(".")]
OUT_OF_MEMORY = ("reading it needed more than the {:,.1f} GiB of memory one upload may use here, which no audit "
                 "written by python -m core.audit needs")
OUT_OF_TIME = f"reading it took more than the {CHILD_WALL_S} s one upload may use here"
BROKEN = "it could not be read here (the reader stopped without saying why; the server's log has the details)"

log = logging.getLogger(__name__)


def read_audit(source: bytes | str | Path, limit: int) -> dict[str, Any]:
    """The digest of an audit report given as its bytes or a path; ReportError in one line. Small plain files are
    read here, the rest in a child process (the module's docstring)."""
    if isinstance(source, bytes | bytearray):
        if len(source) <= IN_PROCESS_BYTES and bytes(source[:2]) != GZIP_MAGIC:
            return audit_digest.digest_bytes(bytes(source), limit)
        if len(source) > limit:
            raise ReportError(too_large(len(source), limit))
        return _in_child("-", limit, bytes(source))
    path = Path(source)
    try:
        size = path.stat().st_size
        with path.open("rb") as file:
            head = file.read(2)
    except OSError as exc:
        raise ReportError(f"cannot read it ({exc.strerror or 'no such file'})") from None
    if size > limit:
        raise ReportError(too_large(size, limit))
    if size <= IN_PROCESS_BYTES and head != GZIP_MAGIC:
        return audit_digest.digest_bytes(path.read_bytes(), limit)
    return _in_child(str(path), limit, None)


def _in_child(path: str, limit: int, data: bytes | None) -> dict[str, Any]:
    try:
        done = subprocess.run([sys.executable, "-m", _MODULE, str(limit), path, str(CHILD_MEMORY_BYTES)], input=data,
                              capture_output=True, cwd=_ROOT, timeout=CHILD_WALL_S, check=False)
    except subprocess.TimeoutExpired:
        raise ReportError(OUT_OF_TIME) from None
    answer = _answer(done.stdout)
    if "digest" in answer:
        return answer["digest"]
    if "refused" in answer:
        raise ReportError(str(answer["refused"]))
    if done.returncode == MEMORY_EXIT:
        raise ReportError(OUT_OF_MEMORY.format(CHILD_MEMORY_BYTES / 2**30))
    if done.returncode in (-9, -24):  # SIGKILL, SIGXCPU: the CPU limit
        raise ReportError(OUT_OF_TIME)
    log.warning("the audit reader exited %s: %s", done.returncode, done.stderr.decode(errors="replace")[-2000:])
    raise ReportError(BROKEN)


def _answer(stdout: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(stdout)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}



def _limit_self(memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (CHILD_CPU_S, CHILD_CPU_S + 5))


def main(argv: list[str]) -> int:
    """The child: the digest of the file at argv[1] (or stdin) of at most argv[0] bytes, under argv[2] bytes of
    address space, as one JSON line."""
    _limit_self(int(argv[2]))
    try:
        sys.stdout.write(json.dumps(_digest_or_refusal(int(argv[0]), argv[1])))
    except MemoryError:
        return MEMORY_EXIT
    return 0


def _digest_or_refusal(limit: int, path: str) -> dict[str, Any]:
    try:
        data = sys.stdin.buffer.read() if path == "-" else _file_bytes(Path(path), limit)
        return {"digest": audit_digest.digest_bytes(data, limit)}
    except ReportError as exc:
        return {"refused": str(exc)}
    except OSError as exc:
        return {"refused": f"cannot read it ({exc.strerror or 'no such file'})"}


def _file_bytes(path: Path, limit: int) -> bytes:
    if path.stat().st_size > limit:
        raise ReportError(too_large(path.stat().st_size, limit))
    return path.read_bytes()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
