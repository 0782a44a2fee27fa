"""Are the loops token-identical on the GPU, and is each run identical to the last? And if not, why not.

    python benchmarks/determinism.py matrix --model smollm2-135m-instruct --modes step-graph reduce-overhead \\
        --dtypes bf16 --out determinism-matrix.json
    python benchmarks/determinism.py probe --model synthetic:smollm2-135m --modes off reduce-overhead \\
        --out determinism-probe.json

matrix: for each (mode, dtype, decoding, batch, EOS) case, one `core.bench.compare` of naive, pipelined, no-check
and HF generate(); the table says whether the contestants are identical to each other and to generate(), and
whether each is identical to itself across trials ("self-consistent").

probe: the forward alone, teacher-forced. Prefill, then the same fixed tokens fed for `steps` decode steps, the
logits of every step kept; repeated `repeats` times per variant (eager, compiled; deterministic algorithms on/off;
SDPA math backend). Bitwise-equal logits at every step mean the kernels are deterministic; otherwise the first step
that differs and the largest difference say where. It also measures how close the top two logits are at each
step, relative to the spacing of representable numbers there (ulps): with margins of a few ulps, any rounding
difference between two code paths picks another token.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.compare import compare, deterministic_algorithms
from core.loops.prompt import encode_prompt
from core.loops.step import decode_forward, new_decode_cache
from core.models.loading import load_model
from core.request.options import BenchRequest, GenerationOptions, static_cache_length

STARTED = time.monotonic()
PROMPTS = ("Write a short story about a lighthouse keeper who finds a message in a bottle.",
           "Explain in three paragraphs how a lighthouse works.", "List ten uses for a paperclip.")


# ------------------------------------------------------------------------------------------------ matrix

def matrix_cases(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    for mode in args.modes:
        for dtype in args.dtypes:
            for sample in args.decoding:
                for batch in args.batches:
                    yield {"mode": mode, "dtype": dtype, "sample": sample == "sampled", "batch": batch,
                           "ignore_eos": batch == 1}


def past_deadline(args: argparse.Namespace) -> bool:
    return bool(args.deadline_s) and time.monotonic() - STARTED > args.deadline_s


def save(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """Written after every case, so a run cut short by its deadline still leaves what it measured."""
    if args.out:
        Path(args.out).write_text(json.dumps(result))


def run_matrix(args: argparse.Namespace) -> dict[str, Any]:
    rows, loaded_by_dtype = [], {}
    result = {"model": args.model, "label": args.label, "env": environment_flags(), "rows": rows, "skipped": []}
    for case in matrix_cases(args):
        if past_deadline(args):
            result["skipped"].append(case)
            continue
        loaded = loaded_by_dtype.get(case["dtype"]) or load_model(args.model, device=args.device, dtype=case["dtype"])
        loaded_by_dtype[case["dtype"]] = loaded
        prompt = list(PROMPTS[: case["batch"]]) if case["batch"] > 1 else PROMPTS[0]
        options = GenerationOptions(max_new_tokens=args.max_new_tokens, cache="static" if case["mode"] != "off"
                                    else "dynamic", compile=case["mode"], do_sample=case["sample"], seed=7,
                                    temperature=0.8, top_k=50, top_p=0.95, ignore_eos=case["ignore_eos"])
        request = BenchRequest(prompt=prompt, options=options, trials=args.trials,
                               contestants=("naive", "pipelined", "no-check", "hf"))
        started = time.perf_counter()
        report = compare(loaded, request)
        row = {**case, "wall_s": time.perf_counter() - started, "identical": report["identical"],
               "self_consistent": report["self_consistent"], "identity": report.get("identity"),
               "tokens": {n: s["new_tokens"] for n, s in report["summary"].items()},
               "first_difference": {r["contestant"]: r["first_difference"] for r in report["runs"]},
               "report": report}
        rows.append(row)
        save(args, result)
        print(f"{case['mode']:<16} {case['dtype']:<5} {'sampled' if case['sample'] else 'greedy':<8} "
              f"b{case['batch']} {'ignore-eos' if case['ignore_eos'] else 'eos':<10} "
              f"tokens {row['tokens']}  identical {report['identical']}  "
              f"self-consistent {report['self_consistent']}", flush=True)
    if result["skipped"]:
        print(f"deadline: {len(result['skipped'])} case(s) not run", flush=True)
    return result


def environment_flags() -> dict[str, str]:
    """The process-wide switches that decide kernels; read once at start, so each variant is its own process."""
    names = ("CUBLAS_WORKSPACE_CONFIG", "TORCHINDUCTOR_DETERMINISTIC", "CUDA_VISIBLE_DEVICES")
    return {name: os.environ[name] for name in names if name in os.environ}


# ------------------------------------------------------------------------------------------------- probe

@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """deterministic: PyTorch's deterministic algorithms; math-sdpa: the plain math attention kernel."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with contextlib.ExitStack() as stack:
        if "deterministic" in name:
            stack.enter_context(deterministic_algorithms(True))
        if "math-sdpa" in name:
            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        yield


def teacher_forced_logits(loaded: Any, mode: str, tokens: list[int], prompt: Any) -> list[torch.Tensor]:
    """Prefill, then feed `tokens` one by one through the (compiled) forward; every step's last logits."""
    input_ids, mask = encode_prompt(loaded, prompt)
    width = input_ids.shape[1]
    cache_len = static_cache_length(width, len(tokens), lag=1)
    cache = new_decode_cache(loaded, cache_len)
    forward = decode_forward(loaded, mode)
    full_mask = torch.ones(1, cache_len, dtype=torch.long, device=loaded.device)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    out = []
    with torch.inference_mode():
        logits = loaded.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, cache=cache,
                              use_cache=True, logits_to_keep=1).logits[:, -1]
        out.append(logits.float().clone())
        for step, token in enumerate(tokens):
            ids = torch.tensor([[token]], device=loaded.device)
            pos = torch.tensor([[width + step]], device=loaded.device)
            logits = forward(input_ids=ids, attention_mask=full_mask, position_ids=pos, cache=cache,
                             use_cache=True, logits_to_keep=1).logits[:, -1]
            out.append(logits.float().clone())
    return out


def margins_in_ulps(logits: list[torch.Tensor], dtype: torch.dtype) -> list[float]:
    """Top-1 minus top-2 logit at each step, in units of the dtype's spacing at the top-1 value."""
    result = []
    for step in logits:
        top = torch.topk(step[0], 2).values
        spacing = torch.finfo(dtype).eps * max(1.0, abs(float(top[0])))
        result.append(float(top[0] - top[1]) / spacing)
    return result


def run_probe(args: argparse.Namespace) -> dict[str, Any]:
    loaded = load_model(args.model, device=args.device, dtype=args.dtypes[0])
    prompt = PROMPTS[0]
    tokens = torch.randint(100, 10100, (args.steps,), generator=torch.Generator().manual_seed(5)).tolist()
    results: dict[str, Any] = {"model": args.model, "dtype": args.dtypes[0], "steps": args.steps, "label": args.label,
                               "env": environment_flags(), "variants": {}, "skipped": []}
    for mode in args.modes:
        for name in args.variants:
            if past_deadline(args):
                results["skipped"].append(f"{mode}/{name}")
                continue
            with variant(name):
                trials = [teacher_forced_logits(loaded, mode, tokens, prompt) for _ in range(args.repeats)]
            reference = trials[0]
            differing = []
            for other in trials[1:]:
                diffs = [float((a - b).abs().max()) for a, b in zip(reference, other)]
                first = next((i for i, d in enumerate(diffs) if d > 0), None)
                differing.append({"first_step": first, "max_abs_diff": max(diffs), "steps_differing":
                                  sum(d > 0 for d in diffs)})
            margins = margins_in_ulps(reference, loaded.dtype)
            entry = {"bitwise_identical": all(d["first_step"] is None for d in differing), "repeats": differing,
                     "margin_ulps_min": min(margins), "steps_within_4_ulps": sum(m < 4 for m in margins),
                     "margin_ulps_median": sorted(margins)[len(margins) // 2]}
            results["variants"][f"{mode}/{name}"] = entry
            save(args, results)
            print(f"{mode:<16} {name:<28} identical {entry['bitwise_identical']}  repeats {differing}  "
                  f"top-2 margin (ulps): min {entry['margin_ulps_min']:.2f} median {entry['margin_ulps_median']:.1f}"
                  f" steps<4ulp {entry['steps_within_4_ulps']}/{len(margins)}", flush=True)
    return results


# ------------------------------------------------------------------------------------------------- trace

def record_logits_in_every_step() -> None:
    """Make each decode step also copy its logits into a device buffer (graph-safe: one index_copy_ per step)."""
    from core.loops import step

    original = step.DecodeSetup.commit
    if getattr(original, "traced", False):
        return

    def commit(self: Any, logits: torch.Tensor) -> None:
        trace = getattr(self, "logit_trace", None)
        if trace is None or trace.shape[1:] != logits.shape:
            rows = max(self.cache_len, 1024)
            trace = self.logit_trace = torch.zeros(rows, *logits.shape, dtype=torch.float32, device=logits.device)
        trace.index_copy_(0, self.state.step_index, logits.float()[None])
        original(self, logits)

    commit.traced = True  # type: ignore[attr-defined]
    step.DecodeSetup.commit = commit


def run_trace(args: argparse.Namespace) -> dict[str, Any]:
    """The same naive run repeated: the first step whose logits differ from the first run's, bitwise.

    Logits equal up to step k and different at k, with the same tokens fed up to k, mean the forward computed
    something else from the same history; logits that differ already at step 0 mean the prefill did."""
    record_logits_in_every_step()
    loaded = load_model(args.model, device=args.device, dtype=args.dtypes[0])
    result: dict[str, Any] = {"model": args.model, "dtype": args.dtypes[0], "label": args.label,
                              "env": environment_flags(), "modes": {}, "skipped": []}
    for mode in args.modes:
        if past_deadline(args):
            result["skipped"].append(mode)
            continue
        options = dict(max_new_tokens=args.max_new_tokens, cache="static" if mode != "off" else "dynamic",
                       compile=mode, ignore_eos=True)
        runs: list[dict] = []
        with variant(args.variants[0]):
            trace_runs(args, loaded, mode, options, runs)
        result["modes"][mode] = runs
        save(args, result)
        for entry in runs[1:]:
            print(f"{mode:<16} run {entry['run']}: first token difference {entry['first_token_difference']}, "
                  f"first logits difference at step {entry['first_logits_difference']} "
                  f"(max |diff| {entry['max_abs_diff_there']}, {entry['entries_differing_there']} of the vocabulary; "
                  f"top-2 margin there {entry['margin_there']})", flush=True)
    return result


def trace_runs(args: argparse.Namespace, loaded: Any, mode: str, options: dict, runs: list[dict]) -> None:
    from core.loops.generation import generate
    from core.loops.hf_generate import hf_generate

    reference = None
    for index in range(args.runs):
        if args.interleave_hf and index:
            hf_generate(loaded, PROMPTS[0], GenerationOptions(**options))
        out = generate(loaded, PROMPTS[0], loop="naive", **options)
        setup = next(e for key, e in loaded.setups.items() if key[3] == mode)
        logits = setup.logit_trace[: args.max_new_tokens, 0].cpu()
        tokens = out.token_ids[0]
        if reference is None:
            reference = (logits, tokens)
            runs.append({"run": 0})
            continue
        runs.append(compare_traces(reference, (logits, tokens)) | {"run": index})


def compare_traces(reference: tuple[torch.Tensor, list[int]], other: tuple[torch.Tensor, list[int]]) -> dict:
    (ref_logits, ref_tokens), (logits, tokens) = reference, other
    first_token = next((i for i, (a, b) in enumerate(zip(ref_tokens, tokens)) if a != b), None)
    differs = (ref_logits != logits).flatten(1).any(dim=1)
    first = int(differs.nonzero()[0]) if bool(differs.any()) else None
    entry = {"first_token_difference": first_token, "first_logits_difference": first, "max_abs_diff_there": None,
             "entries_differing_there": None, "margin_there": None}
    if first is not None:
        delta = (ref_logits[first] - logits[first]).abs()
        top = torch.topk(ref_logits[first], 2).values
        entry.update(max_abs_diff_there=float(delta.max()), entries_differing_there=int((delta > 0).sum()),
                     margin_there=float(top[0] - top[1]))
    return entry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("matrix", "probe", "trace"))
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--device", default=None)
    parser.add_argument("--modes", nargs="+", default=["step-graph", "reduce-overhead"])
    parser.add_argument("--dtypes", nargs="+", default=["bf16"])
    parser.add_argument("--decoding", nargs="+", default=["greedy", "sampled"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 3])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=300)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=["default", "deterministic", "math-sdpa"])
    parser.add_argument("--out", default=None)
    parser.add_argument("--runs", type=int, default=6, help="trace: naive runs per mode")
    parser.add_argument("--interleave-hf", action="store_true", help="trace: a generate() call between runs")
    parser.add_argument("--label", default="", help="names this process's variant in the output")
    parser.add_argument("--deadline-s", type=float, default=0.0, help="skip the cases that would start after this")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = {"matrix": run_matrix, "probe": run_probe, "trace": run_trace}[args.what](args)
    save(args, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
