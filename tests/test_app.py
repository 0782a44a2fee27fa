"""app.py's own checks before it serves (the rest of app.py is driven in tests/test_dashboard_client.py)."""

from __future__ import annotations

import socket
import sys

import pytest

import app


def a_port_its_server_just_left() -> int:
    """A port whose server closed a connection first and then stopped: the connection stays in TIME_WAIT on that
    port for a minute, as after a SIGTERM to a server with visitors. The server binds as uvicorn does (SO_REUSEADDR,
    which its connections inherit)."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as visitor:
            accepted, _ = server.accept()
            accepted.close()  # the server's side closes first: its end of the connection goes to TIME_WAIT
            visitor.recv(1)
    return port


def test_a_port_whose_server_just_stopped_is_free_to_serve_on():
    port = a_port_its_server_just_left()
    app.check_port_free("127.0.0.1", port)


def test_a_port_with_a_listener_is_still_refused():
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {port} on 127.0.0.1 is already in use"):
            app.check_port_free("127.0.0.1", port)


@pytest.mark.parametrize(("argv", "bound"), [([], None), (["--share"], app.SESSIONS_PER_ADDRESS),
                                             (["--host", "0.0.0.0"], app.SESSIONS_PER_ADDRESS)])
def test_sessions_are_bounded_per_address_only_when_others_can_reach_the_page(argv, bound):
    assert app.sessions_per_address(app.build_parser().parse_args(argv)) == bound



@pytest.mark.parametrize(("started", "name"), [("/venv/bin/syncscope", "syncscope"), ("app.py", "python app.py")])
def test_the_usage_line_is_the_command_as_it_was_started(started, name, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [started, "--help"])
    if started == "app.py":
        monkeypatch.setattr(app, "__spec__", None)  # a file run as a script has no module spec
    with pytest.raises(SystemExit):
        app.build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {name} [-h]") and f"`{name}` opens" in " ".join(out.split())
