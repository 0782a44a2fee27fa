"""core.caches and core.models.sources under a read-only HOME or compile cache (issue 42, item 10): a folder that cannot
be written is replaced by a temporary one, or what would be kept is used unkept, each said in one line."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from core import caches
from core.models import sources as model_sources

REPO = Path(__file__).resolve().parent.parent


def test_a_compile_cache_that_cannot_be_written_is_replaced_by_a_temporary_folder_and_said(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv(caches.INDUCTOR, str(tmp_path / "a-file" / "inductor"))
    monkeypatch.setenv(caches.TRITON, str(tmp_path / "writable" / "triton"))
    notices = caches.usable_compile_caches()
    moved = os.environ[caches.INDUCTOR]
    assert len(notices) == 1 and f"the inductor cache {tmp_path}/a-file/inductor cannot be written" in notices[0]
    assert moved in notices[0] and os.path.isdir(moved) and os.access(moved, os.W_OK)
    assert os.environ[caches.TRITON] == str(tmp_path / "writable" / "triton"), "a writable one is left alone"
    assert not (tmp_path / "writable").exists(), "and nothing is made to find that out"
    os.rmdir(moved)


def test_a_read_only_file_system_counts_as_not_writable(monkeypatch, tmp_path):
    monkeypatch.setattr(caches.os, "access", lambda path, mode: False)  # what access(2) says on a read-only mount
    assert not caches._writable(tmp_path / "cache")


def test_the_default_tokenizer_is_used_unkept_where_the_cache_cannot_be_written(tmp_path, monkeypatch, capsys):
    import transformers

    class Tokenizer:
        def save_pretrained(self, folder):
            raise PermissionError(13, "Permission denied", str(folder))

    (tmp_path / "home").write_text("a read-only HOME, as far as writing goes")
    monkeypatch.setenv("SYNCSCOPE_CACHE", str(tmp_path / "home" / "cache"))
    monkeypatch.setattr(model_sources, "_gguf_dir", lambda: tmp_path)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Tokenizer())
    model_sources.default_tokenizer.cache_clear()
    model_sources._say_not_kept.cache_clear()
    try:
        assert isinstance(model_sources.default_tokenizer(), Tokenizer)
    finally:
        model_sources.default_tokenizer.cache_clear()
    err = capsys.readouterr().err.strip()
    assert err == (f"syncscope: the default tokenizer cannot be kept in {tmp_path}/home/cache (Permission denied), so "
                   "it is made again in each process; set SYNCSCOPE_CACHE to a writable folder to keep it")


@pytest.mark.slow
def test_the_cli_runs_with_an_unwritable_home_and_inductor_cache(tmp_path):
    (tmp_path / "home").write_text("not a folder")
    env = {**os.environ, "HOME": str(tmp_path / "home"), caches.INDUCTOR: str(tmp_path / "home" / "inductor")}
    env.pop("SYNCSCOPE_CACHE", None)
    env.pop(caches.TRITON, None)
    done = subprocess.run([sys.executable, "-m", "core.bench", "--model", "tiny-random", "--device", "cpu", "--trials",
                           "1", "--max-new-tokens", "2"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "note: the inductor cache" in done.stderr


def test_processes_that_make_the_default_tokenizer_at_once_make_it_once(tmp_path, monkeypatch):
    """Three makers start with no tokenizer kept (as the suite's first engine and its two workers do on a fresh
    machine): one reads it from the GGUF and keeps it, the others wait at its lock and load what it kept. (Threads,
    each with the lock file open on its own, wait at a flock as processes do.)"""
    import transformers

    class Tokenizer:
        def save_pretrained(self, folder):
            Path(folder).mkdir(parents=True)
            (Path(folder) / "tokenizer.json").write_text("{}")

    reads = []

    def from_pretrained(source, gguf_file=None, **kwargs):
        if gguf_file is None:
            return f"loaded {Path(source).name}"
        reads.append(source)
        time.sleep(0.5)  # a GGUF read takes seconds: the others arrive meanwhile
        return Tokenizer()

    monkeypatch.setenv("SYNCSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(model_sources, "_gguf_dir", lambda: tmp_path)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", from_pretrained)
    got: list = []
    makers = [threading.Thread(target=lambda: got.append(model_sources.default_tokenizer.__wrapped__()))
              for _ in range(3)]
    for maker in makers:
        maker.start()
    for maker in makers:
        maker.join(60)
    assert len(reads) == 1, "one GGUF read"
    assert sorted(t if isinstance(t, str) else "made" for t in got) == ["loaded smollm2-tokenizer"] * 2 + ["made"]
