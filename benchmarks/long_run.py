"""Long runs through the dashboard's run path: memory and recompiles over many consecutive comparisons.

    python benchmarks/long_run.py --model tiny-random --device cpu --runs 100 --out long_run_cpu.json
    python benchmarks/long_run.py --model synthetic:llama-1b --compile step-graph --runs 50 --out long_run_gpu.json

Each run is one naive-vs-pipelined comparison through `dashboard.service.runner.Runner` (the Run button's path, with the
model in the engine process). After each run it records the server's RSS, and from the report the engine
process's RSS, its GPU memory allocated and reserved (CUDA only), and how many graphs torch.compile produced
during that run: after the first run of a shape that must stay 0.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboard.service.runner import Runner


def memory_now(report: dict | None = None) -> dict[str, float]:
    gc.collect()
    sample = {"server_rss_mib": psutil.Process().memory_info().rss / 2**20}
    engine = (report or {}).get("engine_process") or {}
    sample.update({key: engine[key] for key in ("rss_mib", "gpu_allocated_mib", "gpu_reserved_mib") if key in engine})
    return sample


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny-random")
    parser.add_argument("--device", default=None)
    parser.add_argument("--compile", default="off")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--out", default="long_run.json")
    args = parser.parse_args()
    runner = Runner(None, device=args.device, monitor=True)
    loaded = runner.load(args.model, timeout=600)
    settings = dict(prompt="Tell me a story about a lighthouse.", max_new_tokens=args.max_new_tokens, ignore_eos=True,
                    cache="static" if args.compile != "off" else "dynamic", compile=args.compile, trials=1)
    start = memory_now()
    samples = []
    t0 = time.perf_counter()
    for index in range(args.runs):
        report = runner.run(settings)
        total = report["engine_process"]["graphs_compiled_total"]
        graphs = total - (samples[-1]["graphs_total"] if samples else 0)
        samples.append({"run": index, **memory_now(report), "graphs_compiled": graphs, "graphs_total": total,
                        "pipelined_tokens_per_s": report["summary"]["pipelined"]["tokens_per_s"]})
    runner.close()
    after_first = samples[1:]
    result = {
        "model": args.model, "device": loaded.device,
        "compile": args.compile, "runs": args.runs, "max_new_tokens": args.max_new_tokens,
        "wall_s": time.perf_counter() - t0, "start": start, "after_first_run": samples[0], "end": samples[-1],
        "peak_server_rss_mib": max(s["server_rss_mib"] for s in samples),
        "server_rss_growth_after_first_run_mib": samples[-1]["server_rss_mib"] - samples[0]["server_rss_mib"],
        "engine_rss_growth_after_first_run_mib": samples[-1].get("rss_mib", 0) - samples[0].get("rss_mib", 0),
        "graphs_compiled_first_run": samples[0]["graphs_compiled"],
        "graphs_compiled_after_first_run": sum(s["graphs_compiled"] for s in after_first),
        "samples": samples,
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    keys = ("server_rss_mib", "rss_mib", "gpu_allocated_mib", "gpu_reserved_mib")
    for label, sample in (("start", start), ("after run 1", samples[0]), (f"after run {args.runs}", samples[-1])):
        print(f"{label:<14} " + "  ".join(f"{k} {sample[k]:.1f}" for k in keys if k in sample))
    print(f"graphs compiled: first run {result['graphs_compiled_first_run']}, "
          f"runs 2..{args.runs} {result['graphs_compiled_after_first_run']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
