"""How often does the verdict call a difference between a loop and itself? (issue 20, item 1)

    python benchmarks/aa_false_positive.py --device cpu --out benchmarks/lab/results/cpu/aa_false_positive.json
    python benchmarks/aa_false_positive.py --model synthetic:smollm2-135m --comparisons 20 --out $OUT/aa-gpu.json
    python benchmarks/aa_false_positive.py --reports benchmarks/lab/results     # both rules on committed reports
    python benchmarks/aa_false_positive.py --rejudge aa.json                # an A/A result judged again

An A/A comparison is one core.bench.compare of the pipelined loop against itself (contestants `pipelined` and
`pipelined-again`) at the dashboard's default settings for the device (app.py CPU_FORM / GPU_FORM; flags override
them). All comparisons run in one process on one loaded model; every comparison's per-trial rates are kept, and
the rule before issue 20 (`old_verdict` below) and today's rule (core.measure.stats.verdict) are both evaluated on the
same data. False-positive rate: the share of A/A comparisons called "faster" or "slower". Writes JSON to --out and
prints a summary table last.

With --reports DIR it loads no model: it finds every bench report (a dict with "runs" of naive and pipelined) in
the JSON files under DIR and prints both rules' calls side by side, so a new rule can be checked against the real
effects measured before.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from core.documents.files import read_report_bytes, report_paths  # noqa: E402
from core.measure.stats import paired_trials, spread, verdict  # noqa: E402
from core.request.options import DEFAULT_PROMPT, PIPELINED_AGAIN  # noqa: E402
from core.request.run_schema import option_defaults, request_from_values, static_cache_for  # noqa: E402

CONTESTANTS = ("pipelined", PIPELINED_AGAIN)
CALLED = ("faster", "slower")


def old_verdict(runs: list[dict[str, Any]], contender: str = "pipelined", baseline: str = "naive") -> str:
    """The rule before issue 20: every pair agrees on the direction and the median ratio is further from 1 than
    half the larger trial spread (or the A/A control's distance, when the contender is `pipelined`)."""
    by_trial, pairs, metric = paired_trials(runs, contender, baseline)
    if not pairs:
        return "no-data"
    if len(pairs) < 3:
        return "too-few-trials"
    rate = {n: [by_trial[n][t][metric] for t in pairs] for n in (contender, baseline)}
    ratio = statistics.median(rate[contender]) / statistics.median(rate[baseline])
    noise = max(spread(rate[contender]) or 0.0, spread(rate[baseline]) or 0.0) / 2
    control = [by_trial[PIPELINED_AGAIN][t][metric] for t in pairs if t in by_trial[PIPELINED_AGAIN]]
    if control and contender == "pipelined":
        noise = max(noise, abs(statistics.median(rate[contender]) / statistics.median(control) - 1))
    paired = [a / b for a, b in zip(rate[contender], rate[baseline])]
    if all(r > 1 for r in paired) and ratio - 1 > noise:
        return "faster"
    if all(r < 1 for r in paired) and 1 - ratio > noise:
        return "slower"
    return "within-noise"


# ---------------------------------------------------------------------------------------------- A/A runs

def form_for(cuda: bool, args: argparse.Namespace) -> dict[str, Any]:
    """The dashboard's default form for the device, with the flags that were given laid over it."""
    overrides = {"max_new_tokens": args.max_new_tokens, "trials": args.trials, "min_seconds": args.min_seconds,
                 "compile": args.compile, "prompt": args.prompt}
    form = {**option_defaults(cuda), **{k: v for k, v in overrides.items() if v is not None}}
    form["cache"] = static_cache_for(form["compile"], form["cache"])[0]
    return form


def slim_runs(report: dict[str, Any]) -> list[dict[str, Any]]:
    """What the rules read from each run: enough to evaluate any rule again from the JSON."""
    keys = ("decode_tokens_per_s", "tokens_per_s", "ttft_ms", "total_ms", "clock")
    return [{"contestant": r["contestant"], "trial": r["trial"], "order": r["order"],
             "timings": {k: r["timings"].get(k) for k in keys}} for r in report["runs"]]


def judge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    new = verdict(runs, contender=PIPELINED_AGAIN, baseline="pipelined")
    return {"old": old_verdict(runs, contender=PIPELINED_AGAIN, baseline="pipelined"), "new": new["call"],
            "ratio": new["ratio"], "interval": new.get("interval"), "paired_ratios": new.get("paired_ratios")}


def run_comparisons(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from core.compare import compare
    from core.models.loading import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    load_s = time.perf_counter() - started
    cuda = loaded.device.type == "cuda"
    form = form_for(cuda, args)
    request, notices = request_from_values(form, deferred_with_hf=cuda)
    request = replace(request, contestants=CONTESTANTS)
    comparisons: list[dict[str, Any]] = []
    header = {"schema": "syncscope.aa_false_positive/1", "model": args.model, "device": str(loaded.device),
              "gpu": torch.cuda.get_device_name(loaded.device) if cuda else None, "torch": torch.__version__,
              "settings": {"max_new_tokens": request.options.max_new_tokens, "cache": request.options.cache,
                           "compile": request.options.compile, "trials": request.trials,
                           "min_seconds": request.min_seconds, "stream": request.stream,
                           "prompt_is_default": form["prompt"] == DEFAULT_PROMPT, "contestants": list(CONTESTANTS)},
              "torch_threads": torch.get_num_threads(), "notices": notices, "load_s": load_s}
    for index in range(args.comparisons):
        t0 = time.perf_counter()
        report = compare(loaded, request)
        runs = slim_runs(report)
        comparisons.append({"index": index, "wall_s": time.perf_counter() - t0, "runs": runs, **judge(runs)})
        c = comparisons[-1]
        print(f"A/A {index + 1:>3}/{args.comparisons}: ratio {c['ratio']:.3f}  old {c['old']:<14} new {c['new']:<14}"
              f"({c['wall_s']:.1f} s)", flush=True)
        if args.out:  # after every comparison, so a run cut short keeps what it measured
            write_json(args.out, {**header, "comparisons": comparisons, "rates": rates(comparisons)})
    return {**header, "comparisons": comparisons, "rates": rates(comparisons), "wall_s": time.perf_counter() - started}


def write_json(path: str, data: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(data, indent=1), encoding="utf-8")


def rates(comparisons: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(comparisons)
    out: dict[str, Any] = {"comparisons": n}
    for rule in ("old", "new"):
        called = sum(c[rule] in CALLED for c in comparisons)
        out[rule] = {"called": called, "false_positive_rate": called / n if n else None,
                     "too_few_trials": sum(c[rule] == "too-few-trials" for c in comparisons)}
    spreads = [abs(c["ratio"] - 1) for c in comparisons if c["ratio"]]
    out["aa_ratio_distance_median"] = statistics.median(spreads) if spreads else None
    out["aa_ratio_distance_max"] = max(spreads) if spreads else None
    return out


def rejudge(result: dict[str, Any]) -> dict[str, Any]:
    """The same A/A data judged again by both rules as they are now (the runs are all a rule reads)."""
    comparisons = [{**c, **judge(_with_clock(c["runs"], result))} for c in result["comparisons"]]
    return {**result, "comparisons": comparisons, "rates": rates(comparisons)}


def _with_clock(runs: list[dict[str, Any]], result: dict[str, Any]) -> list[dict[str, Any]]:
    """Runs saved before the clock was kept: a CPU result's runs were timed on the host clock."""
    clock = "host" if str(result.get("device", "")).startswith("cpu") else "cuda-events"
    return [{**r, "timings": {"clock": clock, **r["timings"]}} for r in runs]


def aa_table(result: dict[str, Any]) -> str:
    s, r = result["settings"], result["rates"]
    rows = [f"A/A false positives: {result['model']} on {result['gpu'] or result['device']}, "
            f"{s['max_new_tokens']} tokens, {s['cache']}/{s['compile']}, {s['trials']} trials, "
            f"min_seconds {s['min_seconds']:g}, {r['comparisons']} comparisons",
            f"{'rule':<48} {'called':>7} {'rate':>7}"]
    names = {"old": "before issue 20 (every pair agrees, > spread/2)",
             "new": "t 95% (host clock 99%) + 0.5% + old (today)"}
    for rule in ("old", "new"):
        rows.append(f"{names[rule]:<48} {r[rule]['called']:>7} {r[rule]['false_positive_rate']:>7.1%}")
    rows.append(f"A/A median-ratio distance from 1: median {r['aa_ratio_distance_median']:.1%}, "
                f"max {r['aa_ratio_distance_max']:.1%}")
    return "\n".join(rows)


# ------------------------------------------------------------------------------------- committed reports

def find_reports(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every bench report (a dict whose "runs" hold naive and pipelined entries) inside a JSON document."""
    if isinstance(node, dict):
        runs = node.get("runs")
        if isinstance(runs, list) and runs and all(isinstance(r, dict) and "contestant" in r for r in runs):
            if {"naive", "pipelined"} <= {r["contestant"] for r in runs}:
                yield where, node
            return
        for key, value in node.items():
            yield from find_reports(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from find_reports(value, f"{where}[{index}]")


def with_trials(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Early reports numbered no trials: their runs are in order, so count each contestant's."""
    if all("trial" in r for r in runs):
        return runs
    seen: dict[str, int] = {}
    numbered = []
    for r in runs:
        numbered.append({**r, "trial": seen.get(r["contestant"], 0)})
        seen[r["contestant"]] = numbered[-1]["trial"] + 1
    return numbered


def judge_reports(root: Path) -> list[dict[str, Any]]:
    rows = []
    for path in report_paths(root, recursive=True):
        try:
            document = json.loads(read_report_bytes(path))
        except (OSError, ValueError):
            continue
        for where, report in find_reports(document):
            runs = with_trials(report["runs"])
            new = verdict(runs)
            options = (report.get("request") or {}).get("options") or {}
            rows.append({"file": str(path.relative_to(root)), "where": where or "/", "compile": options.get("compile"),
                         "model": (report.get("model") or {}).get("spec"), "trials": new["trials"],
                         "ratio": new["ratio"], "interval": new.get("interval"), "old": old_verdict(runs),
                         "new": new["call"], "separated": clearly_separated(runs)})
    return rows


def clearly_separated(runs: list[dict[str, Any]]) -> bool:
    """Every pipelined trial beats every naive trial (decode rate where there is one): a real effect."""
    def values(name: str) -> list[float]:
        t = [r["timings"] for r in runs if r["contestant"] == name]
        key = "decode_tokens_per_s" if all(x.get("decode_tokens_per_s") for x in t) else "tokens_per_s"
        return [x[key] for x in t]

    pipelined, naive = values("pipelined"), values("naive")
    return len(pipelined) >= 3 and min(pipelined) > max(naive)


def reports_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'report':<62} {'compile':<15} {'n':>3} {'ratio':>7} {'old':<14} {'new':<14} sep"]
    for r in rows:
        name = r["file"] + ("" if r["where"] == "/" else r["where"])
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        flag = " <-- differs" if r["old"] != r["new"] else ""
        lines.append(f"{name[-62:]:<62} {r['compile']!s:<15} {r['trials']:>3} {ratio:>7} {r['old']:<14} "
                     f"{r['new']:<14} {'yes' if r['separated'] else 'no'}{flag}")
    lost = [r for r in rows if r["old"] == "faster" and r["separated"] and r["new"] != "faster"]
    lines.append(f"{len(rows)} reports; old 'faster' with clearly separated trials that the new rule does not call: "
                 f"{len(lost)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- CLI

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python benchmarks/aa_false_positive.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model spec (default: the offline default, smollm2-135m-instruct)")
    p.add_argument("--device", default=None, help="cuda, cpu (default: CUDA when present)")
    p.add_argument("--dtype", default=None)
    p.add_argument("--comparisons", type=int, default=20, help="A/A comparisons to run (default: 20)")
    p.add_argument("--trials", type=int, default=None, help="default: the dashboard's (5 on a GPU, 3 on the CPU)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default: the dashboard's (256 GPU, 64 CPU)")
    p.add_argument("--min-seconds", type=float, default=None, help="default: the dashboard's (2 GPU, 0 CPU)")
    p.add_argument("--compile", default=None, help="default: the dashboard's (reduce-overhead GPU, off CPU)")
    p.add_argument("--prompt", default=None, help="default: the dashboard's")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's); 1 keeps a shared, loaded CPU from thrashing")
    p.add_argument("--out", default=None, help="write the JSON here")
    p.add_argument("--rejudge", type=Path, nargs="+", default=None, metavar="JSON",
                   help="load no model: judge written A/A results (of one setting) again with today's rule, as one "
                        "result (and --out it)")
    p.add_argument("--reports", type=Path, default=None, metavar="DIR",
                   help="load no model: judge every committed report under DIR with both rules")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.comparisons < 1:
        sys.stderr.write("aa_false_positive: error: --comparisons must be 1 or more\n")
        return 2
    if args.rejudge is not None:
        parts = [json.loads(path.read_text(encoding="utf-8")) for path in args.rejudge]
        result = rejudge({**parts[0], "parts": len(parts), "comparisons": [c for p in parts for c in p["comparisons"]]})
        table = aa_table(result)
    elif args.reports is not None:
        rows = judge_reports(args.reports)
        result: dict[str, Any] = {"schema": "syncscope.verdict_on_reports/1", "reports": rows}
        table = reports_table(rows)
    else:
        from core.models.specs import DEFAULT_MODEL

        args.model = args.model or DEFAULT_MODEL
        result = run_comparisons(args)
        table = aa_table(result)
    if args.out:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
