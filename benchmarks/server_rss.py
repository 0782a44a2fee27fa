"""The server's RSS over many runs, each in a new session as a new API client's would be (issue 42, item 10).

    python benchmarks/server_rss.py --runs 1000 --every 100 --out server_rss.json

Starts app.py on tiny-random (CPU, 1 new token, 1 trial), runs `--runs` runs through gradio_client from
`--clients` threads, each run in a new session, and reads app.py's own RSS (the engine process apart) from
/proc/<pid>/status every `--every` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from gradio_client import Client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.parallel.launch import free_port  # noqa: E402
from dashboard.ui.form import page_values  # noqa: E402

FORM = dict(prompt="Hello", model="tiny-random", max_new_tokens=1, trials=1, ignore_eos=True)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def start_app(port: int, timeout_s: float = 180) -> subprocess.Popen:
    """app.py on tiny-random on the CPU at `port`, once it serves (its output is drained from then on); exits with
    the output's tail if it does not serve within `timeout_s`."""
    proc = subprocess.Popen([sys.executable, "app.py", "--model", "tiny-random", "--device", "cpu", "--port",
                             str(port), "--max-new-tokens", "1", "--trials", "1"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while not any("Serving on" in line for line in lines) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if proc.poll() is not None or not any("Serving on" in line for line in lines):
        proc.kill()
        raise SystemExit("app.py did not serve:\n" + "".join(lines)[-3000:])
    return proc


def runs_in_parallel(visitors: list[Client], form: dict, count: int, statuses: list[str]) -> None:
    """`count` runs of `form` shared by the visitors (rounded down to a multiple of them), each in a new session;
    benchmarks/soak.py's server soak runs them too."""
    def some(visitor: Client, n: int) -> None:
        for _ in range(n):
            visitor.session_hash = str(uuid.uuid4())
            statuses.append(visitor.predict(**form, api_name="/run")[0])

    threads = [threading.Thread(target=some, args=(v, count // len(visitors))) for v in visitors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    port = free_port()
    proc = start_app(port)
    try:
        visitors = [Client(f"http://127.0.0.1:{port}/", verbose=False) for _ in range(args.clients)]
        statuses: list[str] = []
        samples, t0 = [], time.monotonic()
        while len(statuses) < args.runs:
            runs_in_parallel(visitors, page_values(FORM), args.every, statuses)
            time.sleep(1.0)
            samples.append({"runs": len(statuses), "rss_mib": round(rss_mib(proc.pid), 1),
                            "s": round(time.monotonic() - t0)})
            print(json.dumps(samples[-1]), flush=True)
        done = sum(s.startswith("**Done in") for s in statuses)
        result = {"samples": samples, "runs_done": done, "runs": len(statuses), "pid": proc.pid,
                  "python": sys.version.split()[0], "cpus": os.cpu_count()}
        if args.out:
            args.out.write_text(json.dumps(result, indent=1))
    finally:
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    main()
