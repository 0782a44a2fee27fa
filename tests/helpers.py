"""Shared test helpers: pick EOS ids that make generation stop at chosen steps; wait for a condition; run a piece of
work on two CPU ranks."""

import json
import os
import sys
import time
from pathlib import Path

from core.loops.generation import generate
from core.measure.step_times import StepClock


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


class FakeClock:
    """A clock a test moves by hand (`clock.now += seconds`), for code that takes a `clock` callable."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wait_until(predicate, timeout=30.0):
    """True as soon as `predicate()` is, False after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def first_token_runs(loaded, prompt, *, lag, stream, max_new_tokens=16):
    """One run of each loop, checked to know its first token after prefill alone: when it was known, only step 0
    had begun (step 1 not yet), and TTFT is that moment; streamed, the first event is step 0's tokens. Returns
    {loop: result}. An order of events holds on a busy machine, where comparing two loops' TTFTs did not."""
    results = {}
    for loop in ("naive", "pipelined"):
        events = []
        result = generate(loaded, prompt, loop=loop, lag=lag, max_new_tokens=max_new_tokens, ignore_eos=True,
                          on_tokens=events.append if stream else None)
        t = result.timings
        assert t.ttft_ms == t.host_known_ms[0], loop
        begun = [start for start in t.host_step_start_ms if start <= t.host_known_ms[0]]
        assert len(begun) == 1 and t.host_known_ms[0] <= t.host_step_start_ms[1], (loop, t.host_step_start_ms[:3])
        if stream:
            assert events[0].step == 0 and list(events[0].tokens) == [row[0] for row in result.token_ids], loop
        results[loop] = result
    return results


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
        if dist.is_initialized():
            dist.barrier()
    except BaseException:
        if dist.is_initialized():
            dist.destroy_process_group()
        raise
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: a model sharded by transformers keeps the gloo group alive past
    # destroy_process_group, and its threads can abort the finalizing interpreter ("terminate called without
    # an active exception"), as core.parallel.ranks's ranks do too.
    os._exit(0)


def sync_errors_from_step_one(monkeypatch) -> None:
    """PyTorch's sync debug mode "error" from the first decode step (StepClock's mark before step 1) to the run's
    end, so that any host sync inside a decode step raises (CUDA). A caller sets "default" again in a `finally`."""
    import torch

    before_step, stop = StepClock.before_step, StepClock.stop

    def strict(clock, index):
        if index == 1:
            torch.cuda.set_sync_debug_mode("error")
        before_step(clock, index)

    def relaxed_at_the_end(clock):
        torch.cuda.set_sync_debug_mode("default")
        stop(clock)

    monkeypatch.setattr(StepClock, "before_step", strict)
    monkeypatch.setattr(StepClock, "stop", relaxed_at_the_end)

