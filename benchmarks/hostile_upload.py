"""Hostile audit uploads through the served app (issue 42, items 1 and 5): app.py on tiny-random, the files of
benchmarks/hostile_audits.py posted to the Your loop endpoint (/audit) with gradio_client, the server's RSS sampled
every 20 ms (and the peak of its audit reader, a child process), and each answer's size and time.

    python benchmarks/hostile_upload.py --out /tmp/hostile_upload.json [--reads 2000000]

Prints one line per upload and writes them all as JSON. The files are written under a temporary folder, removed at
the end, never committed.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hostile_audits import field_audits, long_audit_bytes, nested_audit  # noqa: E402


def rss_mib(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    return int(match.group(1)) / 1024 if match else 0.0


def reader_pids(server: int) -> list[int]:
    """The server's audit readers (dashboard.edge.audit_process children) running now."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if "audit_process" in (entry / "cmdline").read_bytes().decode(errors="replace") and \
                        f"PPid:\t{server}\n" in (entry / "status").read_text():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


class Sampler:
    """The peak RSS of the server and of its audit readers while a block runs."""

    def __init__(self, pid: int):
        self.pid, self.server_peak, self.reader_peak, self._stop = pid, 0.0, 0.0, threading.Event()

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.server_peak = max(self.server_peak, rss_mib(self.pid))
            for child in reader_pids(self.pid):
                self.reader_peak = max(self.reader_peak, rss_mib(child))
            time.sleep(0.02)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "app.py", "--model", "tiny-random", "--device", "cpu", "--port",
                             str(port)], cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 180
    while time.time() < deadline:
        if "Serving on" in log.read_text():
            return proc
        if proc.poll() is not None:
            raise SystemExit(f"app.py exited: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("app.py did not start in 180 s")


def shown_text(markdown: str) -> str:
    return html.unescape(re.sub(r"\\(.)", r"\1", markdown.replace("**", "")))


def upload(url: str, pid: int, name: str, path: Path) -> dict[str, Any]:
    from gradio_client import Client, handle_file

    client = Client(url, verbose=False)
    before = rss_mib(pid)
    began = time.perf_counter()
    with Sampler(pid) as sampler:
        answer = client.predict(handle_file(str(path)), api_name="/audit")
    took = time.perf_counter() - began
    time.sleep(2.0)
    status, summary = (a if isinstance(a, str) else "" for a in answer[:2])
    return {"file": name, "file_mb": round(path.stat().st_size / 1e6, 2), "seconds": round(took, 2),
            "answer_bytes": len(json.dumps(answer)), "server_rss_before_mib": round(before, 1),
            "server_rss_peak_mib": round(sampler.server_peak, 1), "server_rss_after_mib": round(rss_mib(pid), 1),
            "reader_rss_peak_mib": round(sampler.reader_peak, 1), "status": shown_text(status)[:300],
            "summary_chars": len(summary), "longest_summary_line": max((len(x) for x in summary.split("\n")),
                                                                      default=0),
            "raw_html": "<img" in status + summary or "<a " in status + summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=2_000_000)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-fields", action="store_true", help="only the long audit")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="post the long audit N times")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hostile-audits-"))
    # The small file first: what a server's first upload costs it, whatever the file, is then not the long one's.
    files = {"nested 200,000 deep": nested_audit(), "long audit": long_audit_bytes(args.reads)}
    if not args.no_fields:
        files.update({f"10 MB {key}": data for key, data in field_audits().items()})
    paths = {}
    for index, (name, data) in enumerate(files.items()):
        paths[name] = folder / f"audit-{index}.json"
        paths[name].write_bytes(data)
    del files
    port, log = free_port(), folder / "app.log"
    proc = start_app(port, log)
    results = []
    uploads = list(paths.items())
    uploads[2:2] = [("long audit", paths["long audit"])] * (args.repeat - 1)
    try:
        for name, path in uploads:
            result = upload(f"http://127.0.0.1:{port}/", proc.pid, name, path)
            results.append(result)
            print(json.dumps(result), flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(folder, ignore_errors=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
