"""Benchmark report files on disk: plain JSON, or gzipped JSON (benchmarks/results keeps its large reports gzipped,
so that a device call, which carries the whole working tree, stays under its 64 MiB)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

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
