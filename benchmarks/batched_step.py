"""The batched decode step alone (core.load.slots.Slots, every row live), timed on the GPU's clock and broken down by
kernel kind, at several B and cache lengths: does its time follow the weights' read and the rows' live positions, or
the cache's length?

Each shape (B, cache length, variant) is set up as the loops set it up (compile and capture, in the `--compile` mode),
then every row is made live at the same positions whatever the cache's length, the cache filled with random keys and
values, and `--steps` steps are timed with CUDA events (warm-up steps first), then `--profile-steps` more run under
torch.profiler (CUDA activity only) for the kernels by kind. One JSON line per shape goes to `--out` as soon as it is
measured, so a call cut short keeps every shape it finished.

Variants (`--variants`): `index-put` is today's step; `scatter` is the step before 2026-12-06, whose cache update was
a `scatter_` (kept here so that the A/B can be run again).

    python benchmarks/batched_step.py --model synthetic:llama-1b --batches 16,64 --cache-lens 256,1024 \
        --variants index-put,scatter --out steps.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch.profiler import ProfilerActivity, profile

from core.load.slots import SlotLayer, Slots
from core.measure.profiling import device_kernels, summarize_kernels
from core.models.loading import LoadedModel, load_model
from core.request.options import GenerationOptions

VARIANTS = ("index-put", "scatter")
FIRST_POSITION = 64  # every row's position when timing starts, whatever the cache's length
WARM_STEPS = 10


class ScatterSlotLayer(SlotLayer):
    """The slot layer as it was before 2026-12-06: each row's new key written by a `scatter_` into the cache, which
    inductor compiled into a copy of the whole cache and a copy back, every step."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if self.pointers.prefill_slot is not None:
            return super().update(key_states, value_states, *args, **kwargs)
        rows, heads = key_states.shape[:2]
        where = self.pointers.positions.view(rows, 1, 1, 1)
        self.keys.scatter_(2, where.expand(rows, heads, 1, key_states.shape[-1]), key_states)
        self.values.scatter_(2, where.expand(rows, heads, 1, value_states.shape[-1]), value_states)
        return self.keys, self.values


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    began = time.perf_counter()
    loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    options = GenerationOptions(cache="static", compile=args.compile, ignore_eos=True)
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    print(f"{args.model} on {torch.cuda.get_device_name(loaded.device) if loaded.device.type == 'cuda' else 'cpu'}: "
          f"weights {weights / 1e9:.2f} GB; compile {args.compile}", flush=True)
    rows = []
    for batch, cache_len, variant in shapes(args):
        spent = time.perf_counter() - began
        if args.budget_s and spent + args.shape_s > args.budget_s:
            print(f"skipped B={batch} L={cache_len} {variant}: {spent:.0f} s spent of {args.budget_s:.0f}", flush=True)
            continue
        row = measure(loaded, options, batch, cache_len, variant, args.steps, args.profile_steps)
        row.update(model=args.model, weights_bytes=weights)
        rows.append(row)
        _append(args.out, row)
        print(_line(row), flush=True)
    print(table(rows))
    return 0


def shapes(args: argparse.Namespace) -> list[tuple[int, int, str]]:
    """(B, cache length, variant) in the order measured: `--shapes` as given, else every B, length and variant."""
    if args.shapes:
        chosen = []
        for word in args.shapes.split(","):
            size, _, variant = word.partition(":")
            batch, _, cache_len = size.partition("x")
            chosen.append((int(batch), int(cache_len), variant or VARIANTS[0]))
        return chosen
    return [(batch, cache_len, variant) for batch in _numbers(args.batches) for cache_len in _numbers(args.cache_lens)
            for variant in args.variants.split(",")]


def measure(loaded: LoadedModel, options: GenerationOptions, batch: int, cache_len: int, variant: str, steps: int,
            profile_steps: int) -> dict[str, Any]:
    """One shape: set up, every row live, `steps` steps timed, `profile_steps` more under the profiler."""
    began = time.perf_counter()
    slots = Slots(loaded, batch, cache_len, 130, options)
    if variant == "scatter":
        for layer in slots.cache.layers:
            layer.__class__ = ScatterSlotLayer
    slots.begin([], ignore_eos=True)
    setup_ms = slots.set_up()
    _all_live(slots)
    cuda = loaded.device.type == "cuda"
    with torch.inference_mode():
        for _ in range(WARM_STEPS):
            slots.decode()
        step_ms = _timed_steps(slots, steps) if cuda else []
        with profile(activities=[ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]) as profiler:
            for _ in range(profile_steps):
                slots.decode()
            if cuda:
                torch.cuda.synchronize()
    summary = summarize_kernels(device_kernels(profiler), profile_steps)
    live = int(slots.state.live.sum())
    row = {"batch": batch, "cache_len": cache_len, "variant": variant, "compile": options.compile,
           "setup_s": round(setup_ms / 1000, 1), "shape_s": round(time.perf_counter() - began, 1),
           "live_rows_at_end": live, "steps": steps,
           "step_ms_p50": statistics.median(step_ms) if step_ms else None,
           "step_ms_min": min(step_ms) if step_ms else None, "step_ms_max": max(step_ms) if step_ms else None,
           "kernel_us_per_step": summary["kernel_us_per_step"], "kernels_per_step": summary["kernels_per_step"],
           "kinds": {k["kind"]: round(k["us_per_step"], 1) for k in summary["kinds"]},
           "top_kernels": [{key: k[key] for key in ("name", "kind", "calls_per_step", "us_per_step")}
                           for k in summary["kernels"][:12]],
           "device": torch.cuda.get_device_name(loaded.device) if cuda else "cpu"}
    del slots
    if cuda:
        torch.cuda.empty_cache()
    return row


def _all_live(slots: Slots) -> None:
    """Every row live at FIRST_POSITION + its index (mod 8), a budget it will not reach, a random cache."""
    state, count = slots.state, slots.count
    with torch.inference_mode():
        state.live.fill_(True)
        state.budget.fill_(1 << 30)
        positions = FIRST_POSITION + torch.arange(count, device=slots.device) % 8
        state.positions.copy_(positions)
        state.tokens.copy_(torch.randint(0, 1000, (count,), device=slots.device))
        state.mask.copy_((slots.positions_range[None, :] < positions[:, None]).long())
        for layer in slots.cache.layers:
            layer.keys.normal_()
            layer.values.normal_()


def _timed_steps(slots: Slots, steps: int) -> list[float]:
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)]
    for start, end in events:
        start.record()
        slots.decode()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def _line(row: dict[str, Any]) -> str:
    kinds = ", ".join(f"{kind} {us:,.0f}" for kind, us in row["kinds"].items())
    step = f"{row['step_ms_p50']:.3f} ms" if row["step_ms_p50"] is not None else "-"
    return (f"B={row['batch']:>3} L={row['cache_len']:>5} {row['variant']:<10} step p50 {step}; kernels "
            f"{row['kernel_us_per_step']:,.0f} µs ({row['kernels_per_step']:.0f}): {kinds}; set-up {row['setup_s']} s")


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table: one row per shape, µs a step by kind."""
    kinds = sorted({kind for row in rows for kind in row["kinds"]})
    lines = ["| B | cache | variant | step ms p50 | kernels µs | " + " | ".join(kinds) + " |",
             "|---:|---:|---|---:|---:|" + "---:|" * len(kinds)]
    for row in rows:
        step = f"{row['step_ms_p50']:.3f}" if row["step_ms_p50"] is not None else "-"
        cells = " | ".join(f"{row['kinds'].get(kind, 0):,.0f}" for kind in kinds)
        lines.append(f"| {row['batch']} | {row['cache_len']} | {row['variant']} | {step} | "
                     f"{row['kernel_us_per_step']:,.0f} | {cells} |")
    return "\n".join(lines)


def _append(path: str | None, row: dict[str, Any]) -> None:
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(row) + "\n")


def _numbers(text: str) -> list[int]:
    return [int(word) for word in text.split(",") if word.strip()]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="synthetic:llama-1b")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--compile", default="step-graph")
    parser.add_argument("--batches", default="16,64")
    parser.add_argument("--cache-lens", default="256")
    parser.add_argument("--variants", default="index-put")
    parser.add_argument("--shapes", default="", help="BxLEN:VARIANT,... in the order to measure (instead of the "
                                                      "three lists above)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--profile-steps", type=int, default=20)
    parser.add_argument("--out", default=None, help="append one JSON line per shape to this file")
    parser.add_argument("--budget-s", type=float, default=0.0, help="start no shape past this many seconds")
    parser.add_argument("--shape-s", type=float, default=60.0, help="the seconds a shape is expected to take")
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
