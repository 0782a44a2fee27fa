"""Shared test helpers: pick EOS ids that make generation stop at chosen steps; wait for a condition; run a piece of
work on two CPU ranks."""

import json
import time
from pathlib import Path

from core.loops.generation import generate


def free_run(loaded, prompt, steps, **kwargs):
    """The tokens each row produces when EOS is ignored."""
    return generate(loaded, prompt, max_new_tokens=steps, ignore_eos=True, **kwargs).token_ids


def first_new_at(row, position):
    """A token whose first appearance in `row` is at `position`, or None."""
    token = row[position]
    return token if token not in row[:position] else None


def eos_for_steps(rows, wanted):
    """One EOS id per row so that row i stops first at about wanted[i]; returns (eos ids, stop steps)."""
    eos, stops = [], []
    for row, target in zip(rows, wanted):
        for position in range(target, len(row)):
            token = row[position]
            if token not in row[:position] and token not in eos:
                eos.append(token)
                break
        else:
            raise AssertionError("no suitable EOS token found")
    for row in rows:
        stops.append(next(i for i, token in enumerate(row) if token in eos))
    return eos, stops


def ids_not_in(rows, count, vocab=49152):
    """`count` token ids inside the vocabulary that none of `rows` contains: EOS ids that are checked, never hit."""
    seen = {token for row in rows for token in row}
    return [token for token in range(vocab - 1, 0, -1) if token not in seen][:count]


def wait_until(predicate, timeout=30.0):
    """True as soon as `predicate()` is, False after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def first_token_timings(loaded, prompt, *, lag, stream, runs=5, max_new_tokens=16):
    """Both loops, interleaved `runs` times: (naive result, pipelined result, fastest TTFT of each loop in ms,
    median naive decode step in ms). The fastest, because on a shared CPU other jobs only ever add time."""
    import statistics

    ttft = {"naive": [], "pipelined": []}
    steps, last = [], {}
    for _ in range(runs):
        for loop in ("naive", "pipelined"):
            events = []
            last[loop] = generate(loaded, prompt, loop=loop, lag=lag, max_new_tokens=max_new_tokens, ignore_eos=True,
                                  on_tokens=events.append if stream else None)
            ttft[loop].append(last[loop].timings.ttft_ms)
            if loop == "naive":
                steps.extend(last[loop].timings.step_ms)
    fastest = {loop: min(values) for loop, values in ttft.items()}
    return last["naive"], last["pipelined"], fastest, statistics.median(steps)


def on_two_ranks(work, tmp_path):
    """Run `work(rank, init_method)` in two spawned processes (it joins the process group with `init_method`, a
    file:// rendezvous) and return rank 0's result, which must be JSON; the group is torn down either way."""
    import torch.multiprocessing as mp

    out = tmp_path / "rank0.json"
    mp.spawn(_rank_entry, args=(work, f"file://{tmp_path / 'init'}", str(out)), nprocs=2, join=True)
    return json.loads(out.read_text())


def _rank_entry(rank, work, init_method, out_file):
    import torch.distributed as dist

    try:
        result = work(rank, init_method)
        if rank == 0:
            Path(out_file).write_text(json.dumps(result))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
