"""Benchmark report files on disk: plain JSON, or gzipped JSON (benchmarks/results keeps its large reports gzipped,
so that a device call, which carries the whole working tree, stays under its 64 MiB)."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import sys
import zlib
from pathlib import Path
from typing import Any

SUFFIXES = (".json", ".json.gz")


def report_paths(folder: Path, *, recursive: bool = False) -> list[Path]:
    """The JSON files in `folder` (and below it, if `recursive`), plain and gzipped, sorted by path."""
    find = folder.rglob if recursive else folder.glob
    return sorted(path for suffix in SUFFIXES for path in find(f"*{suffix}"))


def read_report_bytes(path: Path) -> bytes:
    """The JSON text of a report file, decompressed when its name ends in .gz; ValueError for a damaged .gz (as for
    damaged JSON, which callers already refuse)."""
    data = path.read_bytes()
    if not path.name.endswith(".gz"):
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{path.name} is not a readable gzip file ({exc})") from None


def write_json(path: str, data: dict[str, Any], what: str, indent: int | None = None) -> str | None:
    """Write `data` as JSON to `path`. When that fails after all the work (a full disk), one line on stderr and the
    same data saved in the temporary folder, else the working folder, named in the line. Returns where it landed."""
    text = json.dumps(data, indent=indent)
    try:
        _write_text(path, text)
    except OSError as exc:
        saved, outcome = _save_elsewhere(text, what)
        sys.stderr.write(f"core.bench: error: could not write the {what} to {path} ({exc.strerror or exc}); "
                         f"{outcome}\n")
        return saved
    print(f"wrote {path}")
    return path


def _write_text(path: str, text: str) -> None:
    """Write `text` to `path`; a regular file left half written (a full disk) is removed, not left as bad JSON."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError:
        if os.path.isfile(path):
            with contextlib.suppress(OSError):
                os.remove(path)
        raise


def _save_elsewhere(text: str, what: str) -> tuple[str | None, str]:
    """Save what could not go where it was asked; (where, the end of the sentence that says so)."""
    import tempfile

    problems = []
    for folder in dict.fromkeys((tempfile.gettempdir(), os.getcwd())):
        try:
            handle, path = tempfile.mkstemp(prefix=f"syncscope-{what}-", suffix=".json", dir=folder)
            os.close(handle)
            _write_text(path, text)
        except OSError as exc:
            problems.append(f"{folder}: {exc.strerror or exc}")
            continue
        return path, f"the {what} was saved to {path} instead"
    return None, f"it could not be saved elsewhere either ({'; '.join(problems)})"


def check_output_path(path: str | None, flag: str = "--json") -> None:
    """ValueError now, before any work, when the file could not be written there at the end."""
    if not path:
        return
    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    if os.path.isdir(target):
        raise ValueError(f"{flag} {path}: that is a directory; give a file name")
    if not os.path.isdir(folder):
        raise ValueError(f"{flag} {path}: the folder {folder} does not exist")
    writable = os.access(target, os.W_OK) if os.path.exists(target) else os.access(folder, os.W_OK)
    if not writable:
        raise ValueError(f"{flag} {path}: no permission to write there")


def check_profile_dir(path: str | None) -> None:
    """ValueError now when --profile names a folder that cannot be made or written."""
    if not path:
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--profile {path}: cannot make that folder ({exc.strerror})") from exc
    if not os.access(path, os.W_OK):
        raise ValueError(f"--profile {path}: no permission to write there")
