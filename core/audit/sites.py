"""Where the sync audit (core.audit.sync) places a read: the innermost frame outside torch and the audit,
with up to two callers beyond it, named as a reader finds the file; what a read and a launch marker record; and the
kind of a sync that only PyTorch's sync debug mode saw, read from its line's text."""

from __future__ import annotations

import contextlib
import functools
import linecache
import os
import re
import runpy
import sys
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

CALLERS = 2  # frames kept beyond a read's own, outermost last
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
AUDIT_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep  # core/audit/: the audit's own package
CORE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # this repository's core/
# No read is placed in the audit's own files: all of core/audit/ (AUDIT_DIR), the sync audit and what runs a program
# under it, `python -m core.audit`'s __main__.py among them (code objects name imported files by absolute paths)
_SKIPPED_FILES = {contextlib.__file__, functools.__file__, warnings.__file__, threading.__file__, runpy.__file__}


@dataclass(frozen=True)
class Site:
    file: str
    line: int
    code: str
    function: str
    path: str = field(default="", compare=False)  # the file's absolute path


Caller = tuple[Any, int]  # (code object, line): a frame that led to a read


@dataclass
class Read:
    kind: str
    site: Site
    step: int | None          # the step it fell in (None: before the first)
    inside_step: bool         # between the step's start and the end of its queuing
    t_ms: float               # host time since the audit began
    host_ms: float | None = None  # CUDA: time the host spent in the call
    drained: Any = None       # CUDA: an event recorded as the read began; it completes when the queue has drained
    idle_after_ms: float | None = None
    thread: str | None = None  # the thread's name, where it is not the one that entered the audit
    callers: tuple[Caller, ...] = ()  # up to CALLERS frames beyond the site, innermost first
    what: str | None = None   # an h2d-copy's source: "list-index", "host-index", "built" or "to-device"


@dataclass
class Marker:
    kind: str     # "step" or "replay"
    t_ms: float
    step: int | None
    event: Any


@functools.lru_cache(maxsize=4096)
def _skipped(filename: str) -> bool:
    """torch's files, the audit's own (core/audit/) and the machinery around a program (threading, runpy)."""
    return (filename.startswith((_TORCH_DIR, AUDIT_DIR)) or filename in _SKIPPED_FILES
            or filename.startswith("<frozen"))


def in_program(filename: str) -> bool:
    """Whether code of `filename` is the audited program's (its own files and its libraries'), where a read is placed:
    not torch's, the audit's or the machinery that runs the program."""
    return not _skipped(filename)


def user_frames(frame: Any, limit: int) -> list[Caller]:
    found: list[Caller] = []
    while frame is not None and len(found) < limit:
        if not _skipped(frame.f_code.co_filename):
            found.append((frame.f_code, frame.f_lineno))
        frame = frame.f_back
    return found


def site_at(code: Any, line: int) -> Site:
    filename = code.co_filename
    return Site(path_from_root(filename), line, linecache.getline(filename, line).strip(), code.co_name,
                os.path.abspath(filename))



def path_from_root(filename: str) -> str:
    """A path of this machine as a reader finds it, by this process's import roots and working folder (as the audit
    records a site): an installed package's file from the package on (transformers/masking_utils.py), wherever it is
    installed; the program's own files relative to the working folder; else relative to the import root that holds
    it, or whole. (A path already in a report, from any machine, is shortened by its text: core.text.shown_path.)"""
    roots = [root for root in sys.path if root and os.path.isabs(root)]
    holding = [root for root in roots if filename.startswith(root.rstrip(os.sep) + os.sep)]
    installed = [root for root in holding if os.path.basename(root.rstrip(os.sep)) in ("site-packages",
                                                                                       "dist-packages")]
    if installed:
        return os.path.relpath(filename, max(installed, key=len))
    here = os.getcwd()
    if filename.startswith(here.rstrip(os.sep) + os.sep):
        return os.path.relpath(filename, here)
    return os.path.relpath(filename, max(holding, key=len)) if holding else filename


_CODE_KINDS = (  # the kind of a read that only PyTorch's sync debug mode saw, from the text of its line
    (re.compile(r"\.item\(\)"), "item"), (re.compile(r"\.tolist\(\)"), "tolist"),
    (re.compile(r"torch\.equal\("), "equal"), (re.compile(r"\bprint\("), "print"),
    (re.compile(r"nonzero|argwhere|unique|repeat_interleave|bincount"), "nonzero"),
    (re.compile(r"\w\[(?:[^\[\]]*,)?\s*\[\s*-?\w|\.cuda\("), "h2d-copy"),  # a list index (x[:, [-1]]), .cuda()
    (re.compile(r"\.(cpu|numpy)\(|\.to\(|copy_\("), "copy"),
    (re.compile(r"\w\[[^\]]+\]"), "masked-index"),
    (re.compile(r"^\s*(if|elif|while|assert)\b|\bbool\(|\b(and|or|not)\b"), "bool"),
)


def _kind_from_code(code: str) -> str:
    return next((kind for pattern, kind in _CODE_KINDS if pattern.search(code)), "sync")


def sync_kind(frame: Any) -> tuple[str, str | None]:
    """The kind (and an h2d-copy's `what`) of a sync only PyTorch's sync debug mode saw, from its line's text and,
    for a subscript, from what the names inside it hold: a list or a host tensor there is copied to the device (as is
    one assigned into a device tensor), where a device mask is counted."""
    while frame is not None and _skipped(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "sync", None
    code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    kind = _kind_from_code(code)
    if kind == "h2d-copy":
        return kind, "to-device" if ".cuda(" in code else "list-index"
    if kind == "masked-index":
        what = _host_operand(frame, code)
        if what is not None:
            return "h2d-copy", what
    return kind, None


_SUBSCRIPT = re.compile(r"(?:\w|\])\[([^\[\]]*)\]")
_ASSIGNED = re.compile(r"^\s*[\w.]+\[.*\]\s*=(?!=)\s*(.+)$")
_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _host_operand(frame: Any, code: str) -> str | None:
    """What a line's subscripts (and, for `t[...] = v`, v) hold that lives in host memory: "list-index" /
    "host-index" for an index, "built" / "to-device" for a value; None where nothing does."""
    assigned = _ASSIGNED.match(code)
    parts = [(inner, "list-index", "host-index") for inner in _SUBSCRIPT.findall(code)]
    if assigned:
        parts.append((assigned.group(1), "built", "to-device"))
    for text, from_list, from_tensor in parts:
        for name in _NAME.findall(text):
            value = _resolve(frame, name)
            if isinstance(value, list | tuple) and value:
                return from_list
            if isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dim() > 0:
                return from_tensor
            if type(value).__module__ == "numpy" and getattr(value, "ndim", 0) > 0:
                return from_tensor
    return None


def _resolve(frame: Any, name: str) -> Any:
    """A (dotted) name's value in `frame`, from its locals and globals and the objects' own attributes only (no
    property runs); None where it has none."""
    first, *rest = name.split(".")
    value = frame.f_locals.get(first, frame.f_globals.get(first))
    for part in rest:
        value = getattr(value, "__dict__", {}).get(part)
    return value


_NAMES_CPU = re.compile(r"""["']cpu(:\d+)?["']""")


def names_the_cpu(code: str) -> bool:
    """Whether a line names the CPU in its text ("cpu"): on the CPU, `.to("cpu")` copies to the host, where
    `.to(device)` moves to the program's device."""
    return bool(_NAMES_CPU.search(code))
