"""Gradio's folder of files (its GRADIO_TEMP_DIR: the uploads, and the copies of every file the page offered): one per
server, and what each visitor and page may keep there.

- `server_folder()`: the server's own folder, `syncscope-gradio-<pid>-*` in the temporary directory, removed at exit;
  those of servers no longer running go when the next one starts. Gradio reads GRADIO_TEMP_DIR when its components
  and app are made, so app.py sets it before it builds the page.
- `GradioFiles`: the uploads under a quota (`admit` before an upload is read, `arrived` after it), and the files each
  page used or was given (`claim`, from the paths in its requests and answers); a page's files go when it closes
  (`forget`), unless another open page has them too. An upload no page claimed goes `keep_s` after it came, or
  sooner for room.
No gradio here.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dashboard.service.limits import (
    UPLOAD_FILES,
    UPLOAD_FOLDER_BYTES,
    UPLOAD_KEEP_S,
    UPLOAD_REQUEST_BYTES,
    UPLOAD_VISITOR_BYTES,
)

PREFIX = "syncscope-gradio-"


def server_folder(temp: Path | None = None) -> Path:
    """A new folder for this server's Gradio files, removed at exit; the folders of servers gone are removed first."""
    temp = temp or Path(tempfile.gettempdir())
    remove_stale_folders(temp)
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=temp))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def remove_stale_folders(temp: Path, prefix: str = PREFIX) -> list[Path]:
    """Remove the folders `<prefix><pid>-*` under `temp` whose process no longer runs (a folder whose name holds no
    process id, from before ids were in the names, too)."""
    removed = []
    for folder in temp.glob(f"{prefix}*"):
        pid = folder.name[len(prefix):].split("-", 1)[0]
        if folder.is_dir() and not (pid.isdigit() and _running(int(pid))):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class UploadRefused(Exception):
    """An upload the quota has no room for, with the one-line answer (status 413 or 503)."""

    def __init__(self, status: int, line: str):
        super().__init__(line)
        self.status, self.line = status, line


@dataclass(eq=False)
class _File:
    path: Path
    size: int
    visitor: str
    at: float
    pages: set[str] = field(default_factory=set)
    claimed: bool = False  # once a page has used it, it goes when the last such page closes


class GradioFiles:
    """The uploads and page files under `root` (see the module). Thread-safe: pages close on Gradio's worker
    threads."""

    def __init__(self, root: Path, folder_bytes: int = UPLOAD_FOLDER_BYTES, visitor_bytes: int = UPLOAD_VISITOR_BYTES,
                 request_bytes: int = UPLOAD_REQUEST_BYTES, files: int = UPLOAD_FILES, keep_s: float = UPLOAD_KEEP_S,
                 clock: Callable[[], float] = time.monotonic):
        self.root = Path(os.path.abspath(root))
        self.folder_bytes, self.visitor_bytes, self.request_bytes = folder_bytes, visitor_bytes, request_bytes
        self.files, self.keep_s, self._clock = files, keep_s, clock
        self._uploads: dict[Path, _File] = {}  # oldest first
        self._given: dict[Path, set[str]] = {}  # files of Gradio's cache a page was given: the pages
        self._coming: dict[str, int] = {}  # bytes of uploads being received, by visitor
        self._lock = threading.Lock()
        self._paths = re.compile(re.escape(str(self.root).encode()) + rb"/[^\"\\\x00-\x1f]+")

    # ------------------------------------------------------------------------------------------------ uploads

    def admit(self, visitor: str, length: int) -> None:
        """Make room for an upload of `length` bytes from `visitor` (its own oldest uploads first, then everyone's)
        and count it as coming; UploadRefused when it cannot be."""
        if length > self.request_bytes:
            raise UploadRefused(413, f"an upload of {length:,} bytes is over this server's limit of "
                                     f"{self.request_bytes:,} bytes a request")
        with self._lock:
            self._expire()
            coming = self._coming.get(visitor, 0)
            if coming + length > self.visitor_bytes or sum(self._coming.values()) + length > self.folder_bytes:
                raise UploadRefused(503, "too many uploads are being received now: try again when they are done")
            self._drop_oldest(lambda f: f.visitor == visitor, self.visitor_bytes - coming - length)
            self._drop_oldest(lambda f: True, self.folder_bytes - sum(self._coming.values()) - length)
            self._coming[visitor] = coming + length

    def arrived(self, visitor: str, length: int, paths: Iterable[str]) -> None:
        """The upload `admit` counted has ended, with these files (none if it failed)."""
        with self._lock:
            left = self._coming.pop(visitor, 0) - length
            if left > 0:
                self._coming[visitor] = left
            for path in map(Path, paths):
                self._uploads.pop(path, None)
                self._uploads[path] = _File(path, _size(path), visitor, self._clock())

    def remove(self, paths: Iterable[str]) -> None:
        """Remove files an upload brought that it may not keep."""
        with self._lock:
            for path in map(Path, paths):
                self._uploads.pop(path, None)
                self._unlink(path)

    def files_of(self, page: str) -> list[Path]:
        """The files claimed for `page`: the uploads it used, then the copies of what it was offered."""
        with self._lock:
            return ([path for path, upload in self._uploads.items() if page in upload.pages]
                    + [path for path, pages in self._given.items() if page in pages])

    def close(self) -> None:
        """Remove every file this has tracked (a server whose folder is not its own to remove)."""
        with self._lock:
            for path in [*self._uploads, *self._given]:
                self._unlink(path)
            self._uploads.clear()
            self._given.clear()

    @property
    def upload_bytes(self) -> int:
        with self._lock:
            return sum(f.size for f in self._uploads.values())

    # ------------------------------------------------------------------------------------------------ pages

    def paths_in(self, data: bytes) -> list[Path]:
        """The paths under this folder named in a request's or an answer's bytes (JSON, Gradio's events)."""
        if not data or str(self.root).encode() not in data:
            return []
        return [Path(os.path.normpath(m.decode(errors="replace"))) for m in self._paths.findall(data)]

    def claim(self, page: str, paths: Iterable[Path]) -> None:
        """The page `page` (a session) used or was given these files: they go when it closes."""
        with self._lock:
            for path in paths:
                if not _is_under(path, self.root):
                    continue
                upload = self._uploads.get(path)
                if upload is not None:
                    upload.pages.add(page)
                    upload.claimed = True
                elif path.is_file():
                    self._given.setdefault(path, set()).add(page)

    def forget(self, page: str) -> None:
        """The page has closed: the files only it had go."""
        with self._lock:
            for path, upload in list(self._uploads.items()):
                upload.pages.discard(page)
                if upload.claimed and not upload.pages:
                    del self._uploads[path]
                    self._unlink(path)
            for path, pages in list(self._given.items()):
                pages.discard(page)
                if not pages:
                    del self._given[path]
                    self._unlink(path)

    # ------------------------------------------------------------------------------------------------ inside

    def _expire(self) -> None:
        now = self._clock()
        for path, upload in list(self._uploads.items()):
            if now - upload.at > self.keep_s:
                del self._uploads[path]
                self._unlink(path)

    def _drop_oldest(self, whose: Callable[[_File], bool], room: int) -> None:
        """Remove the oldest uploads `whose` says until theirs hold at most `room` bytes."""
        held = sum(f.size for f in self._uploads.values() if whose(f))
        for path, upload in list(self._uploads.items()):
            if held <= room:
                return
            if whose(upload):
                del self._uploads[path]
                self._unlink(path)
                held -= upload.size

    def _unlink(self, path: Path) -> None:
        """Remove a file and, when empty, the folder Gradio made for it (named by its content's hash)."""
        path.unlink(missing_ok=True)
        if path.parent != self.root:
            with contextlib.suppress(OSError):
                path.parent.rmdir()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _is_under(path: Path, root: Path) -> bool:
    return path.is_relative_to(root) and ".." not in path.parts
