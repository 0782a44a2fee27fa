"""What streaming tokens out of the engine process costs the decode loop, per channel.

    python benchmarks/channel_cost.py --steps 4000 --step-us 500 --out channel_cost.json

A stand-in decode loop spins `step_us` of host work per step (what a CUDA-graph replay plus bookkeeping costs the
host) and hands one token event per step to a channel; a consumer process reads everything. Measured: the loop's
wall time against the same loop with no channel, as extra microseconds per step. Channels:
  none          the baseline
  pipe-each     one Connection.send per token (what the engine would do without batching)
  pipe-batched  events appended to a list, one Connection.send every 50 ms (what engine.process does)
  queue-each    multiprocessing.Queue.put per token (its feeder thread pickles and writes: a second thread
                competing for the GIL in the decode process)
  shm-ring      a shared-memory ring of token ids and a write index (no pickling; the consumer polls)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time
from typing import Any

FLUSH_S = 0.05
CHANNELS = ("none", "pipe-each", "pipe-batched", "queue-each", "shm-ring")


def spin(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def event(step: int) -> dict[str, Any]:
    return {"type": "tokens", "contestant": "pipelined", "trial": 0, "step": step, "tokens": (1234,),
            "host_time_s": time.perf_counter()}


def consume(kind: str, endpoint: Any, stop: Any) -> None:
    if kind.startswith("pipe"):
        while True:
            if endpoint.recv() is None:
                return
    elif kind == "queue-each":
        while endpoint.get() is not None:
            pass
    elif kind == "shm-ring":
        _, index = endpoint
        seen = 0
        while not stop.value or seen < index.value:
            seen = index.value
            time.sleep(0.001)


def produce(kind: str, steps: int, step_us: float, endpoint: Any) -> float:
    started = time.perf_counter()
    pending: list[dict[str, Any]] = []
    last = started
    for step in range(steps):
        spin(step_us)
        if kind == "pipe-each":
            endpoint.send(event(step))
        elif kind == "pipe-batched":
            pending.append(event(step))
            if pending[-1]["host_time_s"] - last >= FLUSH_S:
                endpoint.send(pending)
                pending, last = [], pending[-1]["host_time_s"]
        elif kind == "queue-each":
            endpoint.put(event(step))
        elif kind == "shm-ring":
            ring, index = endpoint
            ring[step % len(ring)] = 1234
            index.value = step + 1
    if pending:
        endpoint.send(pending)
    return time.perf_counter() - started


def trial(kind: str, steps: int, step_us: float) -> float:
    ctx = mp.get_context("spawn")
    stop = ctx.RawValue("b", 0)
    if kind.startswith("pipe"):
        ours, theirs = ctx.Pipe()
        consumer = ctx.Process(target=consume, args=(kind, theirs, stop))
        endpoint: Any = ours
    elif kind == "queue-each":
        endpoint = ctx.Queue()
        consumer = ctx.Process(target=consume, args=(kind, endpoint, stop))
    elif kind == "shm-ring":
        endpoint = (ctx.RawArray("q", 4096), ctx.RawValue("q", 0))
        consumer = ctx.Process(target=consume, args=(kind, endpoint, stop))
    else:
        return produce(kind, steps, step_us, None)
    consumer.start()
    time.sleep(0.5)
    wall = produce(kind, steps, step_us, endpoint)
    if kind.startswith("pipe"):
        endpoint.send(None)
    elif kind == "queue-each":
        endpoint.put(None)
    stop.value = 1
    consumer.join(30)
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--step-us", type=float, default=500.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    walls: dict[str, list[float]] = {kind: [] for kind in CHANNELS}
    for _ in range(args.repeats):
        for kind in CHANNELS:  # interleaved, so drift hits every channel alike
            walls[kind].append(trial(kind, args.steps, args.step_us))
    base = statistics.median(walls["none"])
    result = {"steps": args.steps, "step_us": args.step_us, "repeats": args.repeats, "channels": {}}
    for kind in CHANNELS:
        median = statistics.median(walls[kind])
        extra_us = (median - base) / args.steps * 1e6
        result["channels"][kind] = {"wall_s": walls[kind], "median_s": median, "extra_us_per_step": extra_us,
                                    "relative_rate": base / median}
        print(f"{kind:<14} median {median:.4f} s  extra {extra_us:7.2f} us/step  rate x{base / median:.4f}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
