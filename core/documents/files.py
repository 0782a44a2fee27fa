"""Benchmark report files on disk: plain JSON, or gzipped JSON (benchmarks/lab/results keeps its large reports gzipped,
so that a device call, which carries the whole working tree, stays under its 64 MiB). Every read is bounded: a file,
a pipe or a gzip that would give more than the limit is refused once the limit is passed, not read to its end."""

from __future__ import annotations

import codecs
import contextlib
import datetime as dt
import gzip
import io
import json
import os
import re
import stat
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

SUFFIXES = (".json", ".json.gz")
# The largest report read (core.documents.schema.load, read_report_bytes, and the page's upload limit), decompressed. A
# 4096-token, 20-trial run of 5 contestants with every per-step list and the page's record is about 65 MiB
# (tests/test_reports.py builds one); the rest is room for per-step fields yet to come.
MAX_REPORT_BYTES = 100 * 2**20
GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 2**20
_HEAD_BYTES = 4096  # a report's "created" is its second field
_CREATED = re.compile(rb'"created":\s*"([0-9T:+.\-Z]{10,40})"')


def report_paths(folder: Path, *, recursive: bool = False) -> list[Path]:
    """The JSON files in `folder` (and below it, if `recursive`), plain and gzipped, sorted by path."""
    find = folder.rglob if recursive else folder.glob
    return sorted(path for suffix in SUFFIXES for path in find(f"*{suffix}"))


def read_report_bytes(path: Path, limit: int = MAX_REPORT_BYTES) -> bytes:
    """The JSON text of a report file, decompressed when it is gzip (or named .gz), without a UTF-8 byte-order mark
    (an editor on Windows may add one). ValueError in one line naming the file when it cannot be read, is a device
    or a directory, holds more than `limit` bytes, decompresses to more, or is a damaged .gz (as for damaged JSON,
    which callers refuse)."""
    try:
        data = read_bounded(path, limit)
        if data[:2] == GZIP_MAGIC or path.name.endswith(".gz"):
            data = gunzip_bounded(data, limit)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return data.removeprefix(codecs.BOM_UTF8)


def too_large(size: int, limit: int = MAX_REPORT_BYTES) -> str:
    """Why a file of `size` bytes is refused, in one sentence."""
    return f"the file is {size / 2**20:,.2f} MiB; reports here are limited to {_mib(limit)}"


def read_bounded(path: Path, limit: int = MAX_REPORT_BYTES, what: str = "a report") -> bytes:
    """The bytes of the file at `path`, at most `limit` of them. ValueError in one line (without the path) when it
    cannot be read, is a directory or a device (/dev/zero never ends), or holds more than `what` may: a regular file
    is told by its size before a byte is read, anything else (a pipe, /proc) is read and stopped one byte past the
    limit."""
    try:
        with open(path, "rb") as handle:
            mode = os.fstat(handle.fileno())
            if stat.S_ISCHR(mode.st_mode) or stat.S_ISBLK(mode.st_mode):
                raise ValueError("it is a device, not a file")
            if stat.S_ISREG(mode.st_mode) and mode.st_size > limit:
                raise ValueError(too_large(mode.st_size, limit) if what == "a report" else
                                 f"the file is {mode.st_size / 2**20:,.2f} MiB, more than {what} here may hold "
                                 f"({_mib(limit)})")
            data = _read_at_most(handle, limit)
    except OSError as exc:
        raise ValueError(f"cannot read it ({exc.strerror or exc})") from None
    if data is None:
        raise ValueError(f"it holds more than {_mib(limit)}, the most {what} here may hold")
    return data


def gunzip_bounded(data: bytes, limit: int = MAX_REPORT_BYTES) -> bytes:
    """Every gzip member of `data` decompressed, a chunk at a time, stopped as soon as the output passes `limit`
    bytes: a small file that inflates to gigabytes costs at most `limit`. ValueError in one line when it passes, or
    is not gzip, or is damaged or cut short."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            out = _read_at_most(stream, limit)
    except EOFError:
        raise ValueError("it is not a readable gzip file (it is cut short)") from None
    except (OSError, zlib.error) as exc:
        raise ValueError(f"it is not a readable gzip file ({exc})") from None
    if out is None:
        raise ValueError(f"it decompresses to more than {_mib(limit)}, the most a report here may hold")
    return out


def _read_at_most(stream: Any, limit: int) -> bytes | None:
    """All of `stream`, read a chunk at a time (a pipe or a gzip gives what it has); None, as soon as it is known,
    when it holds more than `limit` bytes."""
    out = bytearray()
    while chunk := stream.read(min(_CHUNK, limit + 1 - len(out))):
        out += chunk
        if len(out) > limit:
            return None
    return bytes(out)


def _mib(count: int) -> str:
    return f"{count / 2**20:,.0f} MiB" if count >= 2**20 else f"{count:,} bytes"


def write_json(path: str, data: dict[str, Any], what: str, indent: int | None = None) -> str | None:
    """Write `data` as JSON to `path`, through a temporary file in the same folder and an atomic rename, so that a
    reader never sees half a file; says so when it replaced an earlier file there. When the write fails after all
    the work (a full disk), one line on stderr and the same data saved in the temporary folder, else the working
    folder, named in the line. Returns where it landed."""
    text = json.dumps(data, indent=indent)
    replaced = _what_is_there(path, what)
    try:
        _write_text(path, text)
    except OSError as exc:
        saved, outcome = _save_elsewhere(text, what)
        sys.stderr.write(f"core.bench: error: could not write the {what} to {path} ({exc.strerror or exc}); "
                         f"{outcome}\n")
        return saved
    print(f"replaced {path} (it held {replaced})" if replaced else f"wrote {path}")
    return path


def _what_is_there(path: str, what: str) -> str | None:
    """What a write to `path` would replace, in words ("a report from 2026-12-01T11:20:43+00:00"); None when there
    is no regular file there."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
        modified = dt.datetime.fromtimestamp(os.path.getmtime(path), dt.UTC).isoformat(timespec="seconds")
    except OSError:
        return "a file that could not be read"
    found = _CREATED.search(head)
    if found and b'"schema"' in head:
        article = "an" if what[:1] in "aeiou" else "a"
        return f"{article} {what} from {found.group(1).decode('ascii')}"
    return f"a file last written {modified}"


def _write_text(path: str, text: str) -> None:
    """Write `text` to `path`: a regular file (or a new one) through a temporary file beside it and os.replace,
    which is atomic; anything else (/dev/stdout, a pipe) in place. Nothing half written is left behind."""
    target = os.path.realpath(path)
    if os.path.exists(target) and not os.path.isfile(target):
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(text)
        return
    handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                                         dir=os.path.dirname(target))
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, _mode_for(target))
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def _mode_for(target: str) -> int:
    """The replaced file's permissions, or a new file's (0666 less the umask), not mkstemp's 0600."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(os.stat(target).st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _save_elsewhere(text: str, what: str) -> tuple[str | None, str]:
    """Save what could not go where it was asked; (where, the end of the sentence that says so)."""
    problems = []
    for folder in dict.fromkeys((tempfile.gettempdir(), os.getcwd())):
        path = None
        try:
            handle, path = tempfile.mkstemp(prefix=f"syncscope-{what.replace(' ', '-')}-", suffix=".json", dir=folder)
            with os.fdopen(handle, "w", encoding="utf-8") as out:  # a new file of its own: no rename needed
                out.write(text)
        except OSError as exc:
            if path:
                with contextlib.suppress(OSError):
                    os.remove(path)
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
