"""A flood of sessions from one client against a served app, and a new visitor after it (issue 42, item 2).

    python app.py --model tiny-random --device cpu --host 0.0.0.0 --port 7871 &
    python benchmarks/flood.py --flood-url http://192.0.2.2:7871/ --visitor-url http://127.0.0.1:7871/ \
        --out flood.json

The flood opens `--sessions` gradio_client sessions from one address (the flood URL's), each asking at once for the
longest run the exposed limits allow; a few seconds later the visitor (from another address: the visitor URL's) asks
for a short run. It prints, and writes as JSON, what each call got: refused (and in which words), or when its run
started (its status stopped saying "Waiting for the device") and ended, in seconds from the flood's start.
"""

from __future__ import annotations

import argparse
import collections
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gradio_client import Client

LONGEST = dict(prompt="Count from one to a thousand", max_new_tokens=1024, batch=8, trials=10, min_seconds=10.0,
               ignore_eos=True)
SHORT = dict(prompt="Hello", max_new_tokens=16, trials=1)


def follow(client: Client, form: dict[str, Any], t0: float) -> dict[str, Any]:
    """Submit a run and watch its streamed status: when it started, when it ended, and its last status."""
    asked = time.monotonic() - t0
    job = client.submit(**form, api_name="/run")
    started, seen = None, []  # seen: (seconds, status) at each change of the streamed status
    while not job.done():
        outputs = job.outputs()
        status = str(outputs[-1][0]) if outputs else ""
        if status and (not seen or seen[-1][1] != status[:80]):
            seen.append((round(time.monotonic() - t0, 2), status[:80]))
        if started is None and _started(status):
            started = time.monotonic() - t0
        time.sleep(0.1)
    try:
        status = str(job.result()[0])
    except Exception as exc:  # "Queue is full" and other refusals of Gradio's own
        status = f"error: {exc}"
    return {"asked_s": round(asked, 2), "started_s": _rounded(started), "ended_s": round(time.monotonic() - t0, 2),
            "status": status[:200], "statuses": seen}


def _started(status: str) -> bool:
    """The status of a run the device has taken (the engine's phases, or its end once it ran)."""
    return bool(status) and not any(words in status for words in (
        "Waiting for the device", "Not started", "Press **Run**", "Cancelled", "error:"))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def flood(flood_url: str, visitor_url: str, sessions: int, visitor_after_s: float) -> dict[str, Any]:
    with ThreadPoolExecutor(8) as pool:
        clients = list(pool.map(lambda _: Client(flood_url, verbose=False), range(sessions)))
    visitor = Client(visitor_url, verbose=False)
    t0 = time.monotonic()
    results: dict[str, Any] = {"flood": [None] * sessions}

    def flood_one(index: int) -> None:
        results["flood"][index] = follow(clients[index], LONGEST, t0)

    threads = [threading.Thread(target=flood_one, args=(i,), daemon=True) for i in range(sessions)]
    for thread in threads:
        thread.start()
    time.sleep(visitor_after_s)
    results["visitor"] = follow(visitor, SHORT, t0)
    for client in clients:  # the flood's runs still going or queued are cancelled: the measurement is over
        client.predict(api_name="/cancel")
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return results


def summary(results: dict[str, Any]) -> dict[str, Any]:
    calls = [r for r in results["flood"] if r]
    flood_runs = [r for r in calls if r["started_s"] is not None]
    refusals = collections.Counter(r["status"] for r in calls if r["started_s"] is None)
    visitor = results["visitor"]
    started = visitor["started_s"]
    before = [r for r in flood_runs if started is not None and r["started_s"] < started]
    run_length = max((r["ended_s"] - r["started_s"] for r in before), default=None)
    return {"flood_calls": len(calls), "flood_runs_started": len(flood_runs),
            "flood_runs_started_before_the_visitors": len(before), "flood_refusals": dict(refusals),
            "visitor_asked_s": visitor["asked_s"], "visitor_started_s": started,
            "visitor_waited_s": _rounded(started - visitor["asked_s"]) if started is not None else None,
            "longest_flood_run_before_it_s": _rounded(run_length), "visitor_status": visitor["status"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood-url", required=True)
    parser.add_argument("--visitor-url", required=True)
    parser.add_argument("--sessions", type=int, default=85)
    parser.add_argument("--visitor-after-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results = flood(args.flood_url, args.visitor_url, args.sessions, args.visitor_after_s)
    results["summary"] = summary(results)
    print(json.dumps(results["summary"], indent=1))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
