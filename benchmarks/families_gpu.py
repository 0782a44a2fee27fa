"""Every family of the CPU support matrix on one GPU, then two more families at real sizes: one device call.

    python benchmarks/families_gpu.py OUT_DIR              # one H200: about 5 minutes (see the budget below)
    python benchmarks/families_gpu.py OUT_DIR --smoke      # the CPU: two tiny families, 20 s; checks the script

Part 1, correctness. Each family of core.models.specs.TINY_FAMILIES (`tiny-random:<family>`: 2 layers, hidden 64, a
sliding window of 32 where the family has one), in fp32, where eager and compiled decoding should agree token for token,
runs through the CLI's path (`core.bench.compare`, naive and pipelined, 1 trial) in eager (static cache, compile off),
reduce-overhead and step-graph, with a 40-token prompt (it crosses the window) and 24 new tokens. A compiled mode's
tokens are compared with eager's. A mode that is refused, or fails, is one row whose `error` is one line. Families
run in `--workers` processes side by side on the one GPU: the time is compiling, on the host.

Part 2, speed. `synthetic:qwen2.5-7b` and `synthetic:mistral-7b` (random weights of the real shapes, bf16), alone on
the GPU after part 1: eager (static cache, the naive loop, 1 trial) for the reference tokens, then reduce-overhead
and step-graph (3 trials of 128 tokens after a 32-token prompt, naive and pipelined), tokens against eager's, the
pipelined loop's decode tok/s and its % of the HBM floor (the report's model.hbm_floor_ms_per_step: the weights read
once at the H200's copy bandwidth). bf16 random logits are flat, so a compiled mode may part from eager after some
tokens (the row gives the first differing token); part 1 is where identity is expected.

Budget: part 1 is about 25 s of compiling per family, 16 families over 4 workers; part 2 about a minute per model
and mode (compiling 28-32 layers). `--deadline-s` (default 280) skips what would start after it, as rows that say
so, so the call ends in about 5 minutes (`--only synthetic` runs part 2 in a call of its own). What ran is written
either way: OUT_DIR/families.json (the rows) and OUT_DIR/families.md (the table).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.models.specs import TINY_FAMILIES, TINY_FAMILY_PREFIX, TINY_WINDOW

CORRECTNESS_MODES = ("off", "reduce-overhead", "step-graph")
SPEED_MODES = ("reduce-overhead", "step-graph")
SPEED_SPECS = ("synthetic:qwen2.5-7b", "synthetic:mistral-7b")
SMOKE_FAMILIES = ("llama", "mistral-sliding")
SMOKE_SPEED_SPECS = ("tiny-random:qwen2", "tiny-random:mistral-sliding")  # stand-ins: a 7B does not fit a CPU run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder for families.json and families.md")
    parser.add_argument("--smoke", action="store_true", help="the CPU, two tiny families: checks the script")
    parser.add_argument("--workers", type=int, default=None,
                        help="part 1: families compiled side by side (default: 4, with --smoke 1)")
    parser.add_argument("--deadline-s", type=float, default=280.0, help="start nothing after this many seconds")
    parser.add_argument("--only", choices=("families", "synthetic"), default=None, help="run one part only")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    deadline = time.time() + args.deadline_s
    rows: list[dict[str, Any]] = []
    if args.only != "synthetic":
        families = SMOKE_FAMILIES if args.smoke else tuple(TINY_FAMILIES)
        workers = args.workers or (1 if args.smoke else 4)
        rows += correctness_rows(families, args.smoke, workers, deadline)
    if args.only != "families":
        for spec in SMOKE_SPEED_SPECS if args.smoke else SPEED_SPECS:
            rows += speed_rows(spec, args.smoke, deadline)
    facts = {"wall_s": round(time.perf_counter() - started, 1), "smoke": args.smoke, "device": _device_name(args.smoke)}
    (out / "families.json").write_text(json.dumps({"facts": facts, "rows": rows}, indent=1))
    (out / "families.md").write_text(markdown(rows, facts))
    print(markdown(rows, facts))
    print(f"wrote {out / 'families.json'} and {out / 'families.md'}")
    return 0


# ---------------------------------------------------------------------------------------------- part 1

def correctness_rows(families: tuple[str, ...], smoke: bool, workers: int, deadline: float) -> list[dict[str, Any]]:
    """Rows of every family and mode; families in `workers` processes (spawned: each its own CUDA context)."""
    if workers <= 1:
        return [row for family in families for row in family_rows(family, smoke, deadline)]
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(1, (os.cpu_count() or 4) // workers)))
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(family_rows, family, smoke, deadline) for family in families]
        rows = []
        for family, future in zip(families, futures):
            try:
                rows += future.result()
            except Exception as exc:  # a worker that died (a CUDA fault) loses its family only
                rows.append(failure_row(f"{TINY_FAMILY_PREFIX}{family}", "all", exc))
        return rows


def family_rows(family: str, smoke: bool, deadline: float) -> list[dict[str, Any]]:
    """Eager, then each compiled mode, of one tiny family in fp32; compiled tokens against eager's."""
    spec = TINY_FAMILY_PREFIX + family
    try:
        loaded = _load(spec, smoke, "fp32")
    except Exception as exc:
        return [failure_row(spec, mode, exc) for mode in CORRECTNESS_MODES]
    new_tokens = 6 if smoke else 24
    rows, eager_tokens = [], None
    for mode in CORRECTNESS_MODES:
        if time.time() > deadline:
            rows.append(skipped_row(spec, mode))
            continue
        row = run_mode(loaded, spec, mode, TINY_WINDOW + 8, new_tokens, trials=1, reference=eager_tokens)
        row["part"] = "correctness"
        if mode == "off" and "tokens" in row:
            eager_tokens = row["tokens"]
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------- part 2

def speed_rows(spec: str, smoke: bool, deadline: float) -> list[dict[str, Any]]:
    """Eager for the reference tokens, then each speed mode, of one model alone on the GPU."""
    if time.time() > deadline:
        return [skipped_row(spec, mode) for mode in ("off", *SPEED_MODES)]
    try:
        loaded = _load(spec, smoke, "fp32" if smoke else "bf16")
    except Exception as exc:
        return [failure_row(spec, mode, exc) for mode in ("off", *SPEED_MODES)]
    new_tokens = 6 if smoke else 128
    eager = run_mode(loaded, spec, "off", 32, new_tokens, trials=1, reference=None, contestants=("naive",))
    rows = [eager]
    for mode in SPEED_MODES:
        if time.time() > deadline:
            rows.append(skipped_row(spec, mode))
            continue
        rows.append(run_mode(loaded, spec, mode, 32, new_tokens, trials=1 if smoke else 3,
                             reference=eager.get("tokens")))
    for row in rows:
        row["part"] = "speed"
    del loaded
    _free()
    return rows


# ---------------------------------------------------------------------------------------------- one mode

def run_mode(loaded: Any, spec: str, mode: str, prompt_tokens: int, new_tokens: int, trials: int,
             reference: list[list[int]] | None,
             contestants: tuple[str, ...] = ("naive", "pipelined")) -> dict[str, Any]:
    """One `core.bench.compare` in `mode`, as a row; a refusal or failure as one line."""
    from core.compare import compare
    from core.loops.prompt import synthetic_prompt
    from core.request.options import BenchRequest, GenerationOptions

    options = GenerationOptions(max_new_tokens=new_tokens, cache="static", compile=mode, ignore_eos=True)
    request = BenchRequest(prompt=synthetic_prompt(prompt_tokens), options=options, trials=trials,
                           contestants=contestants, prompt_tokens=prompt_tokens)
    began = time.perf_counter()
    try:
        report = compare(loaded, request)
    except Exception as exc:
        return failure_row(spec, mode, exc)
    return report_row(spec, mode, report, reference, time.perf_counter() - began)


def report_row(spec: str, mode: str, report: dict[str, Any], reference: list[list[int]] | None,
               wall_s: float) -> dict[str, Any]:
    from core.report.build import first_difference

    tokens = next(r["token_ids"] for r in report["runs"] if r["contestant"] == "naive")
    timed = report["summary"].get("pipelined") or report["summary"]["naive"]
    floor_ms = report["model"]["hbm_floor_ms_per_step"]
    rate = timed.get("decode_tokens_per_s")
    warm = report["warmup"].values()
    differs = None if reference is None else first_difference(tokens, reference)
    return {
        "spec": spec, "mode": mode, "ran": report["effective"]["naive"]["options"]["compile"], "status": "ok",
        "loops_identical": report["all_identical"], "same_as_eager": None if reference is None else differs is None,
        "first_difference": differs, "tokens": tokens, "decode_tokens_per_s": rate,
        "pct_of_hbm_floor": round(100 * rate * floor_ms / 1000, 1) if rate else None,
        "hbm_floor_ms_per_step": floor_ms,
        "compiling_s": round(sum(w.get("compiling_ms", 0.0) for w in warm) / 1000, 1),
        "graphs_compiled": sum(w.get("graphs_compiled", 0) for w in warm),
        "recompiles_in_trials": sum(r.get("graphs_compiled", 0) for r in report["runs"]),
        "warmup_s": round(sum(w["wall_ms"] for w in warm) / 1000, 1), "wall_s": round(wall_s, 1),
        "transforms": report["environment"]["model_transforms"], "dtype": report["environment"]["dtype"],
        "notices": sorted({n for ran in report["effective"].values() for n in ran["notices"]}),
    }


def failure_row(spec: str, mode: str, exc: BaseException) -> dict[str, Any]:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    refused = isinstance(exc, ValueError)
    return {"spec": spec, "mode": mode, "status": "refused" if refused else "failed",
            "error": text if refused else f"{type(exc).__name__}: {text}"[:300]}


def skipped_row(spec: str, mode: str) -> dict[str, Any]:
    return {"spec": spec, "mode": mode, "status": "skipped", "error": "not started: past --deadline-s"}


def _load(spec: str, smoke: bool, dtype: str) -> Any:
    import torch

    from core.models.loading import load_model

    if smoke:
        torch.set_num_threads(1)
    return load_model(spec, device="cpu" if smoke else "cuda", dtype=dtype)


def _free() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _device_name(smoke: bool) -> str:
    import torch

    return "cpu" if smoke or not torch.cuda.is_available() else torch.cuda.get_device_name(0)


# ---------------------------------------------------------------------------------------------- the table

def markdown(rows: list[dict[str, Any]], facts: dict[str, Any]) -> str:
    lines = [f"# Families on {facts['device']} ({facts['wall_s']} s{', smoke' if facts['smoke'] else ''})", "",
             "| model | mode | status | same as eager | naive = pipelined | decode tok/s | % HBM floor | compile s "
             "(graphs) | prepared / why not |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if row["status"] != "ok":
            lines.append(f"| {row['spec']} | {row['mode']} | {row['status']} | | | | | | {row['error']} |")
            continue
        same = "-" if row["same_as_eager"] is None else "yes" if row["same_as_eager"] else \
            f"no, from token {row['first_difference']}"
        ran = row["mode"] if row["ran"] == row["mode"] else f"{row['mode']} (ran {row['ran']})"
        timed = row.get("part") == "speed"  # part 1's tiny models are timed too, but their speed means nothing
        rate = f"{row['decode_tokens_per_s']:.1f}" if timed and row["decode_tokens_per_s"] else "-"
        floor = f"{row['pct_of_hbm_floor']}%" if timed and row["pct_of_hbm_floor"] else "-"
        recompiled = f", {row['recompiles_in_trials']} in trials" if row["recompiles_in_trials"] else ""
        lines.append(f"| {row['spec']} | {ran} | ok | {same} | {'yes' if row['loops_identical'] else 'NO'} | {rate} "
                     f"| {floor} | {row['compiling_s']} ({row['graphs_compiled']}{recompiled}) "
                     f"| {'; '.join(row['transforms'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
