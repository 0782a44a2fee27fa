"""Issue 42's hostile visitor, against app.py served on tiny-random on the CPU: uploads (item 3), slow bodies (item 4),
logins under --auth (item 8). Prints one JSON object of what it measured.

    python benchmarks/server_edge.py [--uploads] [--slow-bodies] [--logins]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
MB = 1000 * 1000
BOUNDARY = "b0undary"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(*extra: str) -> tuple[subprocess.Popen, int, list[str]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "app.py", "--model", "tiny-random", "--device", "cpu", "--port",
                             str(port), *extra], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    deadline = time.monotonic() + 180
    while not any("Serving on" in line for line in lines):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("app.py did not serve:\n" + "".join(lines)[-3000:])
        time.sleep(0.2)
    return proc, port, lines


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def gradio_folder(pid: int) -> Path:
    return next(Path("/tmp").glob(f"syncscope-gradio-{pid}-*"))


def folder_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20 if folder.exists() else 0.0


def part_head(name: str) -> bytes:
    return (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
            "Content-Type: application/json\r\n\r\n").encode()


def upload(port: int, files: int, size: int, fill: bytes = b"x") -> str:
    """An upload of `files` files of `size` bytes each (of `fill`), streamed; the first line of the answer."""
    length = files * (len(part_head("f0.json")) + size + 2) + len(f"--{BOUNDARY}--\r\n")
    block = fill * (1 << 20)
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(f"POST /gradio_api/upload HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n"
                     f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n\r\n".encode())
        try:
            for i in range(files):
                sock.sendall(part_head(f"f{i}.json"))
                for start in range(0, size, len(block)):
                    sock.sendall(block[:min(len(block), size - start)])
                sock.sendall(b"\r\n")
            sock.sendall(f"--{BOUNDARY}--\r\n".encode())
        except OSError:  # the server answered and closed before the body was sent
            pass
        return sock.recv(4096).decode(errors="replace").split("\r\n", 1)[0]


def uploads() -> dict:
    proc, port, _ = serve()
    folder = gradio_folder(proc.pid)
    before = folder_mib(folder)
    started = time.monotonic()
    big = [upload(port, 5, 90 * MB) for _ in range(4)]
    big_s = time.monotonic() - started
    after_big = folder_mib(folder)
    single = [upload(port, 1, 90 * MB, fill=bytes([65 + i])) for i in range(4)]  # four different files
    after_single = folder_mib(folder)
    proc.terminate()
    proc.wait(60)
    return {"folder_mib_before": round(before, 2), "answers_5x90MB": big, "seconds_5x90MB": round(big_s, 2),
            "folder_mib_after_5x90MB": round(after_big, 2), "answers_1x90MB": single,
            "folder_mib_after_4x1x90MB": round(after_single, 2), "folder_left_after_sigterm": folder.exists()}


def slow_body(port: int, length: int, answers: list[tuple[str, float]], opened: threading.Barrier) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(f"POST /gradio_api/queue/join HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {length}\r\n\r\n".encode())
        started = time.monotonic()
        with contextlib.suppress(OSError):  # the server may answer and close before it is all sent
            sock.sendall(b"{" + b" " * (length - 2))  # all but the last byte
        opened.wait()
        try:
            first = sock.recv(4096).decode(errors="replace").split("\r\n", 1)[0]
        except OSError as exc:
            first = f"closed: {exc}"
        answers.append((first or "closed", time.monotonic() - started))


def slow_bodies(connections: int = 200, length: int = 4 * MB - 1) -> dict:
    proc, port, _ = serve()
    httpx.get(f"http://127.0.0.1:{port}/config")  # the page as a visitor first opens it
    time.sleep(2.0)
    before = rss_mib(proc.pid)
    answers: list[tuple[str, float]] = []
    opened = threading.Barrier(connections + 1)
    threads = [threading.Thread(target=slow_body, args=(port, length, answers, opened)) for _ in range(connections)]
    for thread in threads:
        thread.start()
    peak, start = before, time.monotonic()
    opened.wait()
    while any(t.is_alive() for t in threads) and time.monotonic() - start < 120:
        peak = max(peak, rss_mib(proc.pid))
        time.sleep(0.2)
    time.sleep(2.0)
    after = rss_mib(proc.pid)
    proc.terminate()
    proc.wait(60)
    kinds: dict[str, int] = {}
    for first, _ in answers:
        kinds[first] = kinds.get(first, 0) + 1
    return {"connections": connections, "body_bytes": length, "rss_mib_before": round(before, 1),
            "rss_mib_peak": round(peak, 1), "rss_mib_after_closed": round(after, 1), "answers": kinds,
            "last_answer_s": round(max(s for _, s in answers), 1)}


def logins() -> dict:
    proc, port, _ = serve("--auth", "alice:secret")
    url = f"http://127.0.0.1:{port}/"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /gradio_api/queue/join HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 4000000\r\n\r\n{")
        unread = sock.recv(4096).decode(errors="replace").split("\r\n", 1)[0]
    wrong = []
    for i in range(5):
        started = time.monotonic()
        status = httpx.post(url + "login", data={"username": "alice", "password": f"guess{i}"}).status_code
        wrong.append((status, round(time.monotonic() - started, 2)))
    right = httpx.post(url + "login", data={"username": "alice", "password": "secret"}).status_code
    proc.terminate()
    proc.wait(60)
    return {"body_without_login": unread, "wrong_passwords": wrong, "right_password_after": right}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag in ("--uploads", "--slow-bodies", "--logins"):
        parser.add_argument(flag, action="store_true")
    args = parser.parse_args()
    every = not (args.uploads or args.slow_bodies or args.logins)
    out = {}
    if every or args.logins:
        out["logins"] = logins()
    if every or args.uploads:
        out["uploads"] = uploads()
    if every or args.slow_bodies:
        out["slow_bodies"] = slow_bodies()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    main()
