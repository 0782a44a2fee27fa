"""The repository's top level holds what the project card names and the build needs, nothing else: a stray file at
the root (a shell's mistyped redirection, a notebook's scratch) fails here before it is committed twice."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOT_NAMES = {
    ".ci", ".gitignore", "CONTRIBUTING.md", "MANIFEST.in", "Makefile", "README.md", "RELIABILITY.md", "app.py",
    "benchmarks", "build_support", "core", "dashboard", "docs", "engine", "examples", "pyproject.toml",
    "requirements-dev.txt", "requirements.txt", "setup.py", "tests",
}


def tracked_top_level() -> set[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    return {path.split("/", 1)[0] for path in listed.stdout.split("\0") if path}


def test_the_root_holds_only_the_allowed_names():
    stray = sorted(tracked_top_level() - ROOT_NAMES)
    assert not stray, f"files at the repository's root that are not on its allow-list: {stray}"
