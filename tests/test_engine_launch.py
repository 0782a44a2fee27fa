"""core.parallel.launch: the environment every spawned engine and rank gets, a free port, the spawn context."""

from __future__ import annotations

import os
import socket

from core.parallel.launch import CHILD_ENV_DEFAULTS, child_environment, free_port, spawn_context


def test_the_children_get_the_defaults_where_the_environment_says_nothing(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # an operator's own choice stays
    for key in set(CHILD_ENV_DEFAULTS) - {"NCCL_NVLS_ENABLE"}:
        monkeypatch.delenv(key, raising=False)
    before = dict(os.environ)
    with child_environment():
        assert os.environ["NCCL_NVLS_ENABLE"] == "1"
        assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
        assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and os.environ["NVSHMEM_DISABLE_NVLS"] == "1"
    assert dict(os.environ) == before


def test_a_free_port_can_be_bound():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        assert sock.getsockname() == ("127.0.0.1", port) and 1024 <= port <= 65535


def test_children_are_spawned_never_forked():
    assert spawn_context().get_start_method() == "spawn"
