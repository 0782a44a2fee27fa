"""pip install of the checkout: every package is in it, and its commands run from anywhere (the audit with torch and
transformers alone)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_the_package_list_holds_every_package_of_the_checkout():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {str(p.parent.relative_to(REPO)).replace(os.sep, ".") for p in REPO.glob("*/**/__init__.py")
             if p.parts[len(REPO.parts)] in ("core", "engine", "dashboard")}
    assert listed == found
    assert set(config["project"]["dependencies"]) == {"torch>=2.9", "transformers>=5.24"}


@pytest.mark.slow
def test_the_installed_audit_command_runs_an_example_from_elsewhere(tmp_path):
    source, target = tmp_path / "checkout", tmp_path / "site"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".venv", ".git", "results", "build", "*.egg-info",
                                                                ".whl*", ".carry"))  # setuptools builds in-tree
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(target), str(source)], check=True, capture_output=True, timeout=600)
    assert (target / "core" / "measure" / "sync_audit.py").is_file() and (target / "dashboard" / "explain.md").is_file()
    script = next((target / "bin").glob("syncscope-audit"))
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run([sys.executable, str(script), "--fail-on-sync", "0", "--", str(REPO / "examples" /
                           "naive_loop.py"), "--new-tokens", "8"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 1 and "1.00/step  item" in done.stdout, done.stdout + done.stderr
