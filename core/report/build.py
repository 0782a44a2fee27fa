"""The report of one run (`python -m core.bench --json`): what was asked and what ran, every trial's timings,
medians per contestant, the ratios and the verdict, whether the tokens are identical and why not, and the machine.

`format_table` is the report as the CLI prints it. Its keys and schema are core.documents.bench_report's
(BenchReport); old reports are upgraded to them when loaded.
"""

from __future__ import annotations

import datetime as dt
import platform
import statistics
from dataclasses import asdict, replace
from typing import Any

import torch

from core.audit.words import copies_per_step, more_sites, per_step_words, read_in_decode
from core.documents.bench_report import BenchReport, kernel_share_of_timed_steps
from core.documents.kinds import BENCH_SCHEMA
from core.kernels.pdl import pdl_in_effect
from core.loops.step import step_kernels
from core.measure import identity
from core.measure.stats import percentile, spread, verdict, verdict_sentence
from core.measure.waits import step_work_ms, trial_waits
from core.models.loading import LoadedModel
from core.request.options import HF, HF_DEFERRED, NO_CHECK, PIPELINED_AGAIN, BenchRequest, GenerationOptions
from core.request.run_schema import cli_command

COPY_BANDWIDTH_BYTES_PER_S = 4.28e12  # device-to-device copy rate, read + write bytes (docs/NUMBERS.md)


def build_report(loaded: LoadedModel, request: BenchRequest, runs: list[dict[str, Any]],
                 warmups: dict[str, dict[str, Any]], audits: dict[str, dict[str, Any]] | None = None,
                 kernel_measurements: dict[str, dict[str, Any]] | None = None, *,
                 effective: dict[str, tuple[GenerationOptions, list[str]]],
                 loops_ran: GenerationOptions) -> BenchReport:
    """The report of a run: its trials and warm-ups, and the extra measurements' findings where they ran (the sync
    audit's per contestant, the kernel measurement's per contestant). Taken from the run, not worked out again: each
    run's `prompt_tokens` (the prompt's width; left out of the report's runs), what each contestant ran with
    (`effective`, core.request.options.effective_options) and what the loops ran with (`loops_ran`), as
    core.compare.compare used them."""
    audited, measured = audits or {}, kernel_measurements or {}  # None: the phase did not run (no section)
    summary = {name: summarize([r for r in runs if r["contestant"] == name], audited.get(name), measured.get(name),
                               loop_runs(runs)) for name in request.contestants}
    reference = next((r["token_ids"] for r in runs if r["contestant"] == request.contestants[0]), None)
    for entry in runs:
        entry["first_difference"] = first_difference(entry["token_ids"], reference)
    identical = {name: all(r["first_difference"] is None for r in runs if r["contestant"] == name)
                 for name in request.contestants}
    self_consistent = {name: _self_consistent(runs, name) for name in request.contestants}
    width = runs[0]["prompt_tokens"]  # every run has the same prompt
    return {
        "schema": BENCH_SCHEMA,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "environment": environment(loaded, loops_ran.compile, greedy=not loops_ran.do_sample),
        "model": model_facts(loaded),
        "request": {"prompt": request.prompt, "options": asdict(request.options), "trials": request.trials,
                    "contestants": list(request.contestants), "stream": request.stream,
                    "min_seconds": request.min_seconds, "deterministic": request.deterministic,
                    "audit": request.audit, "no_kernel_measurement": request.no_kernel_measurement},
        # What each contestant ran with: the device can change what was asked (CUDA-only modes on the CPU).
        "effective": {name: {"options": asdict(options), "notices": notices}
                      for name, (options, notices) in effective.items()},
        "warmup": warmups,
        "runs": [{key: value for key, value in entry.items() if key != "prompt_tokens"} for entry in runs],
        "summary": summary,
        "ratios": ratios(summary),
        "verdict": verdict(runs) if {"naive", "pipelined"} <= set(request.contestants) else None,
        "identical": identical,
        "all_identical": all(identical.values()),
        # When a contestant disagrees with itself across trials, a mismatch is run-to-run numerics, not the loop.
        "self_consistent": self_consistent,
        "identity": _identity(loaded, replace(request, options=loops_ran), width, runs, identical, self_consistent),
        "command": reproduce_command(loaded, request),
        **({"sync_audit": audits} if audits is not None else {}),
        **({"kernel_measurement": kernel_measurements} if kernel_measurements is not None else {}),
    }


DTYPE_FLAGS = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def reproduce_command(loaded: LoadedModel, request: BenchRequest) -> str:
    """The `python -m core.bench` command that repeats this run, on this model, device and dtype, with
    the tuning switches the model ran with."""
    device = loaded.device
    on_default_gpu = device.type == "cuda" and (loaded.tp > 1 or not device.index)
    return cli_command(request, loaded.spec, device=None if on_default_gpu else str(device),
                       dtype=DTYPE_FLAGS.get(loaded.dtype), tp=loaded.tp, hf_modules=loaded.hf_modules,
                       prompt_tokens=request.prompt_tokens, tuning=loaded.tuning)


def _identity(loaded: LoadedModel, request: BenchRequest, width: int, runs: list[dict[str, Any]],
              identical: dict[str, bool], self_consistent: dict[str, bool]) -> dict[str, Any]:
    keys = identity.attended_keys(width, request.options, identity.longest_row([r["token_ids"] for r in runs]))
    return identity.explain(identical, self_consistent, device_type=loaded.device.type,
                            dtype=str(loaded.dtype).replace("torch.", ""), keys=keys,
                            compile_mode=request.options.compile,
                            fused_attention=_fused_attention(loaded, request.options.compile),
                            pdl=_pdl(loaded, request.options.compile))


def _fused_attention(loaded: LoadedModel, compile_mode: str) -> bool:
    """Whether the decode steps ran a fused attention kernel whose sums may fall differently from run to run:
    everywhere but core.kernels.attention's compiled kernels with a fixed order of sums ("reduce", "split" and "triton",
    whose bf16 trials repeat bitwise: docs/MEASUREMENT.md)."""
    return compile_mode == "off" or loaded.decode_attention not in ("reduce", "split", "triton")


def _self_consistent(runs: list[dict[str, Any]], name: str) -> bool:
    outputs = [r["token_ids"] for r in runs if r["contestant"] == name]
    return all(ids == outputs[0] for ids in outputs)


def loop_runs(runs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The runs of each loop contestant (they share one decode step: core.measure.waits.step_work_ms)."""
    names = dict.fromkeys(r["contestant"] for r in runs if r["contestant"] not in (HF, HF_DEFERRED))
    return [[r for r in runs if r["contestant"] == name] for name in names]


def summarize(runs: list[dict[str, Any]], audit: dict[str, Any] | None = None,
              kernel_measurement: dict[str, Any] | None = None,
              loops: list[list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """One contestant's medians over its trials; per decode step its waits (core.measure.waits, with the step's
    device work from the kernel measurement, else from the spans of `loops`); where the extra runs ran, its device
    reads per step (the sync audit) and the share of the device's time kernels ran (the kernel measurement)."""
    measured = kernel_measurement or {}  # None: no kernel measurement of this contestant
    work_ms, work_source = step_work_ms(loops if loops is not None else [runs], measured.get("kernel_busy_ms_per_step"))
    if not any(r["timings"].get("device_start_ms") for r in runs):  # generate(), the CPU: no step spans to split
        work_ms = work_source = None
    def median_of(key: str) -> float | None:
        values = [r["timings"][key] for r in runs if r["timings"].get(key) is not None]
        return statistics.median(values) if values else None

    rates = [r["timings"]["tokens_per_s"] for r in runs]
    decode = [r["timings"]["decode_tokens_per_s"] for r in runs if r["timings"].get("decode_tokens_per_s")]
    steps = [ms for r in runs for ms in r["timings"]["step_ms"]]
    gaps = [g for r in runs for g in r["timings"].get("gpu_gap_ms", [])]
    return {
        "trials": len(runs),
        "tokens_per_s": statistics.median(rates),
        "tokens_per_s_all": rates,
        "spread": spread(rates),
        "decode_tokens_per_s": statistics.median(decode) if decode else None,
        "decode_tokens_per_s_all": decode,
        "decode_spread": spread(decode) if decode else None,
        "total_ms": median_of("total_ms"),
        "ttft_ms": median_of("ttft_ms"),
        "ttft_gpu_ms": median_of("ttft_gpu_ms"),
        "ms_per_token_p50": statistics.median(steps) if steps else median_of("ms_per_token_p50"),
        "ms_per_token_p95": percentile(steps, 95) if steps else None,
        # The share of the device's time inside some step's span: a span brackets the waits for launches inside it, so
        # this is not how busy the device was (kernel_busy_fraction is).
        "device_span_fraction": median_of("device_span_fraction"),
        "gpu_gap_ms_mean": statistics.fmean(gaps) if gaps else None,
        "gpu_gap_ms_p50": percentile(gaps, 50) if gaps else None,
        "gpu_gap_ms_p99": percentile(gaps, 99) if gaps else None,
        "gpu_gap_ms_max": max(gaps) if gaps else None,
        "new_tokens": median_of("new_tokens"),
        "overshoot_steps": median_of("overshoot_steps"),
        **{f"{key}_per_step": value for key, value in trial_waits(runs, work_ms).items()},
        "step_work_ms": work_ms, "step_work_source": work_source,
        "reads_per_step": audit.get("reads_per_decode_step") if audit else None,
        # The kernel measurement's own share, as its profiler measured it (its host is slowed by the tracing, its
        # slowdown in the measurement), and the kernels' time per step, which the tracing does not change.
        "kernel_busy_fraction": measured.get("kernel_busy_fraction"),
        "kernel_ms_per_step": measured.get("kernel_busy_ms_per_step"),
        "kernel_busy_of_timed_steps": kernel_busy(kernel_measurement, median_of("ms_per_token_p50"),
                                                  median_of("total_ms")),
    }


def kernel_busy(kernel_measurement: dict[str, Any] | None, step_ms: float | None,
                total_ms: float | None) -> float | None:
    """The share of the timed trials' device time that kernels ran
    (core.documents.bench_report.kernel_share_of_timed_steps, which also fills it in for a report written before the
    summary held it)."""
    return kernel_share_of_timed_steps(kernel_measurement, step_ms, total_ms)


def ratios(summary: dict[str, dict[str, Any]]) -> dict[str, float]:
    """pipelined over each other contestant: end to end, and for the decode phase where both have one."""
    out = {}
    pipelined = summary.get("pipelined", {})
    for other in ("naive", NO_CHECK, PIPELINED_AGAIN, HF, HF_DEFERRED):
        base = summary.get(other, {})
        if pipelined.get("tokens_per_s") and base.get("tokens_per_s"):
            out[f"pipelined/{other}"] = pipelined["tokens_per_s"] / base["tokens_per_s"]
        if pipelined.get("decode_tokens_per_s") and base.get("decode_tokens_per_s"):
            out[f"decode pipelined/{other}"] = pipelined["decode_tokens_per_s"] / base["decode_tokens_per_s"]
    return out


def environment(loaded: LoadedModel, compile_mode: str, greedy: bool = True) -> dict[str, Any]:
    """Where the run ran, the tuning switches whole (`tuning`, core.tuning), and what they and prepare_for_decode made
    of the model and its compiled steps (core.loops.step.step_kernels): facts, None where they had no part."""
    import transformers

    gpu = torch.cuda.get_device_name(loaded.device) if loaded.device.type == "cuda" else None
    return {"device": str(loaded.device), "gpu": gpu, "dtype": str(loaded.dtype).replace("torch.", ""),
            "tp": loaded.tp, "tp_all_reduce": loaded.all_reduce_text or None,
            "tuning": loaded.tuning.as_report(),
            "pdl": _pdl(loaded, compile_mode),
            "model_transforms": list(loaded.transforms),  # sentences; the same as facts in the next two
            "decode_attention": loaded.decode_attention, "fused_projections": list(loaded.fused_projections),
            **step_facts(loaded, compile_mode, greedy),
            "gpus": _gpu_facts(loaded),
            "torch": str(torch.__version__), "transformers": str(transformers.__version__),
            "python": platform.python_version(), "host": platform.node()}


def step_facts(loaded: LoadedModel, compile_mode: str, greedy: bool = True) -> dict[str, str | None]:
    """What the compiled steps ran (core.loops.step.step_kernels), None where it had no part: the output projection's
    kernel where the gemv kernel does not take it (`o_proj`), the batch-1 products of CUDA steps (`decode_products`),
    whether the decoder layers ran core.kernels.decode_layer's kernels (`decode_layer`: "fused" or "off", on CUDA),
    what a greedy step-graph step compiled after the forward (`step_commit`), and when the project's kernels read
    (`kernel_reads`: "first" or "late", on CUDA)."""
    kernels = step_kernels(loaded, compile_mode)
    if kernels is None:
        return dict.fromkeys(("o_proj", "decode_products", "decode_layer", "step_commit", "kernel_reads"))
    on_cuda = loaded.device.type == "cuda"
    return {"o_proj": kernels.o_proj, "decode_products": kernels.products if on_cuda else None,
            "decode_layer": ("fused" if kernels.fused_layers else "off") if on_cuda else None,
            "step_commit": kernels.commit if greedy else None, "kernel_reads": kernels.reads if on_cuda else None}


def _pdl(loaded: LoadedModel, compile_mode: str) -> str:
    """The programmatic dependent launch a compile in `compile_mode` got (core.kernels.pdl.pdl_in_effect)."""
    return pdl_in_effect(loaded.device, compile_mode, loaded.tuning.pdl, loaded.tuning.inductor_options)


def _gpu_facts(loaded: LoadedModel) -> list[dict[str, Any]]:
    """NVML's facts (driver, clock and power limits, ...) of the GPUs this run used: every rank's, under TP."""
    if loaded.device.type != "cuda":
        return []
    from core.measure.gpu_monitor import gpu_facts, nvml_index

    first = loaded.device.index or 0
    return gpu_facts([nvml_index(first + offset) for offset in range(loaded.tp)] if loaded.tp > 1
                     else [nvml_index(first)])


def model_facts(loaded: LoadedModel) -> dict[str, Any]:
    """Sizes, and the HBM floor of one batch-1 decode step: each GPU reads its share of the weights once."""
    weight_bytes = loaded.weight_bytes
    return {"spec": loaded.spec, "parameters": loaded.num_parameters, "weight_bytes": weight_bytes,
            "hbm_floor_ms_per_step": weight_bytes / loaded.tp / COPY_BANDWIDTH_BYTES_PER_S * 1000}



def first_difference(a: list[list[int]], b: list[list[int]]) -> int | None:
    """Index of the first token where two results differ (over all rows), or None when identical."""
    for row_a, row_b in zip(a, b):
        for index, (x, y) in enumerate(zip(row_a, row_b)):
            if x != y:
                return index
        if len(row_a) != len(row_b):
            return min(len(row_a), len(row_b))
    return None if len(a) == len(b) else 0


TABLE_KEY = ("decode spread: the decode rate's (max - min) / median over trials; e2e spread: the same of the "
             "end-to-end rate (generate() has only that one); host wait and device idle: per decode step, in us "
             "(core.measure.waits); kernel ms and of step: the kernel measurement's kernel time per step and its "
             "share of the timed trials' step (generate(): of the timed run); reads/step: the sync audit's waits on "
             "the device per decode step")


def format_table(report: dict[str, Any]) -> str:
    rows = [f"{'contestant':<16} {'decode tok/s':>12} {'decode spread':>13} {'e2e tok/s':>9} {'e2e spread':>10} "
            f"{'ttft ms':>8} {'ms/tok p50':>10} {'p95':>7} {'host wait':>9} {'dev idle':>8} {'kernel ms':>9} "
            f"{'of step':>7} {'reads/step':>10} {'same':>5}"]
    for name, s in report["summary"].items():
        rows.append(
            f"{name:<16} {_num(s.get('decode_tokens_per_s')):>12} {_pct(s.get('decode_spread'), 1):>13} "
            f"{s['tokens_per_s']:>9.1f} {_pct(s.get('spread'), 1):>10} {_num(s['ttft_ms']):>8} "
            f"{_num(s['ms_per_token_p50'], 3):>10} {_num(s['ms_per_token_p95'], 3):>7} "
            f"{_us(s.get('host_wait_ms_per_step')):>9} {_us(s.get('device_idle_ms_per_step')):>8} "
            f"{_num(s.get('kernel_ms_per_step'), 3):>9} {_pct(s.get('kernel_busy_of_timed_steps')):>7} "
            f"{_num(s.get('reads_per_step'), 2):>10} "
            f"{identity.sameness(report, name):>5}")
    # The keys say "decode" of the decode phase's ratio and nothing of the end-to-end one: the line names both.
    rows.append("  ".join(f"{k if k.startswith('decode ') else f'end to end {k}'} = {v:.3f}x"
                          for k, v in report["ratios"].items()))
    if report.get("verdict"):
        rows.append(verdict_sentence(report["verdict"]))
    note = identity.difference_note(report)
    if note:
        rows.append(note)
    rows.extend(step_time_lines(report))
    return "\n".join(rows)


def step_time_lines(report: dict[str, Any]) -> list[str]:
    """Where each contestant's decode step went on the device (the kernel measurement): kernel time by kind and the
    gaps between kernels, in µs a step; empty where the measurement did not run or has no kinds (older reports)."""
    lines = []
    for name, measured in report.get("kernel_measurement", {}).items():  # NotRequired
        kinds = measured.get("kinds") or []
        if not kinds:
            continue
        parts = [f"{kind['kind']} {kind['ms_per_step'] * 1000:.0f} ({kind['kernels_per_step']:.0f})" for kind in kinds]
        gaps = measured.get("idle_inside_ms_per_step")
        if gaps is not None:
            parts.append(f"gaps between kernels {gaps * 1000:.0f}")
        lines.append(f"{name} step on the device, us (kernels): " + ", ".join(parts))
    return lines


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _us(ms: float | None) -> str:
    return "-" if ms is None else f"{ms * 1000:.0f}"


def _pct(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}%}"



def audit_lines(report: dict[str, Any], top: int = 3) -> list[str]:
    """The sync audit (core.audit.sync) in a few lines: each contestant's reads and copies per decode step and
    its top sites; empty when the run had no audit."""
    if not report.get("sync_audit"):  # a run without the audit has no section
        return []
    audits = report["sync_audit"]
    lines = ["waits on the device per decode step (sync audit: one more run of each contestant):"]
    for name, audit in audits.items():
        per_step = audit.get("reads_per_decode_step")
        copies = audit.get("copies_per_decode_step", copies_per_step(audit.get("sites") or []))
        cost = audit.get("rate_vs_timed")
        cost_text = f"; audited run at {cost:.0%} of the timed rate" if cost else ""
        said = per_step_words(per_step, copies) if per_step is not None else "no decode step seen"
        lines.append(f"  {name}: {said}, over {audit.get('decode_steps', 0)} decode steps{cost_text}")
        in_decode = [s for s in audit.get("sites", []) if read_in_decode(s)]
        for site in in_decode[:top]:
            cost = ""
            if site.get("host_blocked_ms_per_step") is not None:
                cost = f", host blocked {site['host_blocked_ms_per_step'] * 1000:.0f} us/step"
            if site.get("device_idle_after_ms_per_step") is not None:
                cost += f", device idle after {site['device_idle_after_ms_per_step'] * 1000:.0f} us/step"
            lines.append(f"    {site['per_step']:.2f}/step {site['kind']:<14} {site['file']}:{site['line']}  "
                         f"{site['code'][:70]}{cost}")
        if len(in_decode) > top:
            lines.append(f"    and {more_sites(in_decode[top:])}")
    note = next((a["note"] for a in audits.values() if a.get("note")), None)
    if note:
        lines.append(f"  ({note})")
    return lines


def compile_note(report: dict[str, Any]) -> str | None:
    """One line on what torch.compile did, recompiles included: in the warm-ups, and in timed trials if it did."""
    warm = report.get("warmup", {}).values()
    graphs = sum(w.get("graphs_compiled", 0) for w in warm)
    seconds = sum(w.get("compiling_ms", 0.0) for w in warm) / 1000
    late = [r for r in report.get("runs", []) if r.get("graphs_compiled")]
    if not graphs and not late:
        return None
    line = f"compile: the warm-ups compiled {graphs} graph(s) in {seconds:.1f} s"
    tuned = sum(w.get("autotuning_ms", 0.0) for w in warm) / 1000
    captured = sum(w.get("capturing_ms", 0.0) for w in warm) / 1000
    if tuned or captured:
        line += (f", tuned Triton kernels at their first run in {tuned:.1f} s and captured step graphs in "
                 f"{captured:.1f} s")
    if late:
        line += (f"; timed trials compiled {sum(r['graphs_compiled'] for r in late)} more (recompiles), and their "
                 "times include it")
    return line

