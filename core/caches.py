"""The folders torch compiles into (inductor's cache, and triton's on CUDA), made usable before torch first reads
them: one that cannot be written (a read-only HOME or temporary folder, a path through a file) is replaced by a new
folder in the temporary folder, and a notice says so; torch would otherwise fail with a traceback, at import. No
torch here."""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from pathlib import Path

INDUCTOR, TRITON = "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"


def usable_compile_caches() -> list[str]:
    """Point each compile cache that cannot be written at a new temporary folder (through its environment
    variable); a notice for each one moved, or that could not be."""
    notices = []
    for variable, name, default in ((INDUCTOR, "inductor", _inductor_default()), (TRITON, "triton", _triton_default())):
        folder = os.environ.get(variable) or default
        if _writable(Path(folder)):
            continue
        try:
            replacement = tempfile.mkdtemp(prefix=f"syncscope-{name}-")
        except OSError as exc:
            notices.append(f"the {name} cache {folder} cannot be written, nor a folder made in "
                           f"{tempfile.gettempdir()} ({exc.strerror or exc}): compiling will fail; set {variable} to "
                           "a writable folder")
            continue
        os.environ[variable] = replacement
        notices.append(f"the {name} cache {folder} cannot be written, so this process compiles into {replacement} "
                       f"(set {variable} to a writable folder to keep what it compiles)")
    return notices


def _writable(folder: Path) -> bool:
    """Whether `folder` could be made (if need be) and written, found without making it: its nearest existing
    ancestor is a folder this process may write (access(2) says no on a read-only file system, to root too)."""
    here = folder.absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    return here.is_dir() and os.access(here, os.W_OK | os.X_OK)


def _inductor_default() -> str:
    """Where inductor compiles without TORCHINDUCTOR_CACHE_DIR (torch._inductor.runtime.cache_dir_utils)."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def _triton_default() -> str:
    """Where triton caches its kernels without TRITON_CACHE_DIR: under TRITON_HOME, else HOME."""
    return os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache")
