"""The page's files to download (history CSV and JSON, the last run's report and trace): a folder per visitor
under one folder per server, in the temporary directory.

Gradio copies each file it offers into its own cache as the handler returns, so a visitor's folder only stages
them: it may go at any time. It goes when the visitor's page closes (`forget`), when more than MAX_VISITORS
visitors have one (the least recently written first), and with the server's folder when the server ends; the folders
of servers that are no longer running go when the next one starts. No gradio here.
"""

from __future__ import annotations

import collections
import hashlib
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

from dashboard.edge.gradio_files import remove_stale_folders

PREFIX = "syncscope-downloads-"
MAX_VISITORS = 256


class DownloadFolders:
    """A folder per visitor (owner) under `root`: made on first use, at most `max_visitors` of them."""

    def __init__(self, root: Path | None = None, max_visitors: int = MAX_VISITORS):
        if root is None:
            remove_stale_roots(Path(tempfile.gettempdir()))
            root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
            self._removal = weakref.finalize(self, shutil.rmtree, root, True)  # also at interpreter exit
        else:
            self._removal = None  # a folder the caller chose is the caller's to remove
        self.root, self.max_visitors = root, max_visitors
        self._folders: collections.OrderedDict[str, Path] = collections.OrderedDict()
        self._lock = threading.Lock()

    def folder_for(self, owner: str) -> Path:
        """`owner`'s folder, made if needed; the least recently used one goes past `max_visitors`."""
        # Owners come from the client: hash them rather than use them in a path.
        folder = self.root / hashlib.sha256(owner.encode()).hexdigest()[:16]
        with self._lock:
            self._folders[owner] = folder
            self._folders.move_to_end(owner)
            while len(self._folders) > self.max_visitors:
                _, oldest = self._folders.popitem(last=False)
                shutil.rmtree(oldest, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)
        return folder

    def forget(self, owner: str) -> None:
        """`owner`'s page has closed: their folder goes."""
        with self._lock:
            folder = self._folders.pop(owner, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def __len__(self) -> int:
        return len(self._folders)

    def close(self) -> None:
        """Remove the server's folder (when this made it)."""
        if self._removal is not None:
            self._removal()


def remove_stale_roots(temp: Path) -> list[Path]:
    """Remove the download folders of servers that are no longer running (their process id is in the name)."""
    return remove_stale_folders(temp, PREFIX)
    return True
