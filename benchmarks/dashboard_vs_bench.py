"""Does the dashboard change what it watches? Its run path against the headless benchmark, same process, same GPU.

    python benchmarks/dashboard_vs_bench.py --model synthetic:llama-1b --out results/dashboard_vs_bench.json

The dashboard path is `dashboard.runner.Runner.run` (what the Run button calls: a worker thread, the live token
view, the NVML sampler running); the headless path is `core.bench.compare` with the same request. They alternate,
two rounds each after one warm-up, and the medians of the pipelined and naive tokens/s are compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.bench import compare
from dashboard.runner import Runner, RunSettings

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="synthetic:llama-1b")
    parser.add_argument("--compile", default="reduce-overhead")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--out", default="dashboard_vs_bench.json")
    args = parser.parse_args()
    runner = Runner(model=args.model, monitor=True)
    settings = RunSettings(prompt=PROMPT, max_new_tokens=256, ignore_eos=True, static_cache=True,
                           compile=args.compile, trials=args.trials)
    request, _ = settings.to_request()
    runner.run(settings)  # warm-up: compilation and graph capture
    rates: dict[str, dict[str, list[float]]] = {"dashboard": {}, "headless": {}}
    for _ in range(args.rounds):
        for path, report in (("headless", compare(runner.loaded, request)), ("dashboard", runner.run(settings))):
            for name, summary in report["summary"].items():
                rates[path].setdefault(name, []).append(summary["tokens_per_s"])
    result = {"model": args.model, "compile": args.compile, "trials_per_round": args.trials, "rates": rates,
              "ratio_dashboard_over_headless": {
                  name: statistics.median(rates["dashboard"][name]) / statistics.median(rates["headless"][name])
                  for name in rates["headless"]}}
    runner.close()
    Path(args.out).write_text(json.dumps(result, indent=1))
    for name, ratio in result["ratio_dashboard_over_headless"].items():
        print(f"{name:<10} dashboard {statistics.median(rates['dashboard'][name]):8.1f} tok/s   headless "
              f"{statistics.median(rates['headless'][name]):8.1f} tok/s   ratio {ratio:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
