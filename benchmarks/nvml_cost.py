"""What polling NVML costs, per GPU: the old style (four instant reads) against the driver's sample buffers.

    python benchmarks/nvml_cost.py                          # every GPU, intervals 0.05 0.1 0.5 1.0 s
    python benchmarks/nvml_cost.py --gpus 0 1 --seconds 5 --out nvml_cost.json

For each GPU and polling interval it times, with time.perf_counter in this process, one poll of each style:
  instant  nvmlDeviceGetUtilizationRates, GetMemoryInfo, GetPowerUsage and GetClockInfo(SM): one value each;
  samples  nvmlDeviceGetSamples for utilization, power and SM clock (only samples newer than the last seen),
           plus GetMemoryInfo: every value the driver buffered since the previous poll;
  reader   core.measure.gpu_monitor's NvmlReader.read(): the samples style plus the monitor's own Python work.
and prints the median and 95th percentile milliseconds per poll, and how many driver samples per second the
samples style brought back. The buffers fill faster on a busy GPU (an idle one may stop adding utilization
samples), so run it once idle and once beside a workload. Before timing, it records what each buffer holds: value
type, sample period, and whether the timestamps count from the epoch or from boot.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.measure.gpu_monitor import BUFFERED, NvmlReader, import_pynvml

STYLES = ("instant", "samples", "reader")


def open_nvml() -> tuple[ModuleType, int]:
    """pynvml, initialised, and the GPU count; exits with one line where there is no NVIDIA GPU."""
    try:
        nvml = import_pynvml()
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
    except Exception as exc:
        sys.exit(f"nvml_cost: no NVIDIA GPU to measure ({str(exc).strip() or type(exc).__name__})")
    if count == 0:
        sys.exit("nvml_cost: no NVIDIA GPU to measure (NVML sees 0 GPUs)")
    return nvml, count


def instant_poll(nvml: ModuleType, handle: Any) -> Callable[[], int]:
    def poll() -> int:
        nvml.nvmlDeviceGetUtilizationRates(handle)
        nvml.nvmlDeviceGetMemoryInfo(handle)
        nvml.nvmlDeviceGetPowerUsage(handle)
        nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
        return 0

    return poll


def samples_poll(nvml: ModuleType, handle: Any) -> Callable[[], int]:
    """GetSamples on the three buffers from the newest timestamp seen, and memory; returns the samples got."""
    types = [getattr(nvml, metric.sampling_type) for metric in BUFFERED]
    last_seen = {kind: newest(nvml, handle, kind) for kind in types}

    def poll() -> int:
        got = 0
        for kind in types:
            try:
                _, samples = nvml.nvmlDeviceGetSamples(handle, kind, last_seen[kind])
            except nvml.NVMLError:  # NotFound: nothing new; NotSupported: counted as nothing
                continue
            if samples:
                last_seen[kind] = max(s.timeStamp for s in samples)
                got += len(samples)
        nvml.nvmlDeviceGetMemoryInfo(handle)
        return got

    return poll


def reader_poll(nvml: ModuleType, index: int) -> tuple[Callable[[], int], Callable[[], None]]:
    reader = NvmlReader(nvml, [index])
    return (lambda: len(reader.read())), reader.close


def newest(nvml: ModuleType, handle: Any, kind: int) -> int:
    try:
        _, samples = nvml.nvmlDeviceGetSamples(handle, kind, 0)
    except nvml.NVMLError:
        return 0
    return max((s.timeStamp for s in samples), default=0)


def probe(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    """What each buffer holds now: value type, how many samples, their period, and the clock of their stamps."""
    out: dict[str, Any] = {}
    for metric in BUFFERED:
        try:
            value_type, samples = nvml.nvmlDeviceGetSamples(handle, getattr(nvml, metric.sampling_type), 0)
        except nvml.NVMLError as exc:
            out[metric.field] = {"error": str(exc)}
            continue
        samples = sorted(samples, key=lambda s: s.timeStamp)
        stamps = [s.timeStamp for s in samples]
        steps = [b - a for a, b in itertools.pairwise(stamps)]
        entry: dict[str, Any] = {"value_type": value_type, "count": len(stamps),
                                 "period_ms": statistics.median(steps) / 1000 if steps else None}
        if stamps:
            entry["newest_age_s_if_epoch"] = time.time() - stamps[-1] / 1e6
            entry["newest_age_s_if_boot"] = time.clock_gettime(time.CLOCK_BOOTTIME) - stamps[-1] / 1e6
            member = "dVal" if value_type == nvml.NVML_VALUE_TYPE_DOUBLE else "uiVal"
            entry["last_values"] = [getattr(s.sampleValue, member) for s in samples[-5:]]
        out[metric.field] = entry
    return out


def measure(poll: Callable[[], int], interval_s: float, seconds: float) -> dict[str, float]:
    costs, got = [], 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        got += poll()
        costs.append(time.perf_counter() - start)
        time.sleep(interval_s)
    costs.sort()
    return {"median_ms": statistics.median(costs) * 1000, "p95_ms": costs[int(0.95 * (len(costs) - 1))] * 1000,
            "polls": len(costs), "driver_samples_per_s": got / seconds}


def run(nvml: ModuleType, gpus: list[int], intervals: list[float], seconds: float) -> dict[str, Any]:
    results: dict[str, Any] = {"gpus": {}, "rows": []}
    print(HEADER)
    for index in gpus:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = nvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        results["gpus"][index] = {"name": name, "buffers": probe(nvml, handle)}
        for interval in intervals:
            for style in STYLES:
                close = None
                if style == "instant":
                    poll = instant_poll(nvml, handle)
                elif style == "samples":
                    poll = samples_poll(nvml, handle)
                else:
                    poll, close = reader_poll(nvml, index)
                row = {"gpu": index, "interval_s": interval, "style": style, **measure(poll, interval, seconds)}
                if close:
                    close()
                results["rows"].append(row)
                print_row(row)
    return results


HEADER = f"{'gpu':>3} {'interval_s':>10} {'style':>8} {'median_ms':>10} {'p95_ms':>8} {'polls':>6} {'samples/s':>10}"


def print_row(row: dict[str, Any]) -> None:
    print(f"{row['gpu']:>3} {row['interval_s']:>10.3f} {row['style']:>8} {row['median_ms']:>10.3f} "
          f"{row['p95_ms']:>8.3f} {row['polls']:>6} {row['driver_samples_per_s']:>10.1f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, nargs="*", default=None, help="NVML indices (default: all)")
    parser.add_argument("--intervals", type=float, nargs="+", default=[0.05, 0.1, 0.5, 1.0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time spent on each (GPU, interval, style)")
    parser.add_argument("--out", default=None, help="also write the results here as JSON")
    args = parser.parse_args()
    nvml, count = open_nvml()
    try:
        gpus = args.gpus if args.gpus is not None else list(range(count))
        missing = [g for g in gpus if not 0 <= g < count]
        if missing:
            sys.exit(f"nvml_cost: NVML sees {count} GPU(s); there is no GPU {missing[0]}")
        results = run(nvml, gpus, args.intervals, args.seconds)
    finally:
        nvml.nvmlShutdown()
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
