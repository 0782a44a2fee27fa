"""Under load (core.load): the workload, the slots, the naive, pipelined and ceiling loops with admission, transformers'
continuous batching beside them, the protocol's report and the CLI, on tiny-random on the CPU (fp32 greedy: every
request's tokens must equal its solo decode)."""

from __future__ import annotations

import inspect
import json
import math

import pytest

from core.bench import main
from core.documents.kinds import LOAD, ReportError
from core.documents.schema import load
from core.load import protocol
from core.load.batching import BatchedRun, read_row_by_row, run_batched
from core.load.hf_batching import HF_BATCH, run_hf_batching
from core.load.protocol import check_memory, run_load
from core.load.report import build_load_report, load_trace
from core.load.slots import Slots
from core.load.words import load_findings, load_text
from core.loops.generation import run as solo_run
from core.loops.prompt import resolve_eos_ids
from core.models.loading import load_model
from core.request.load import MAX_REQUESTS, LoadRequest, WorkloadSpec
from core.request.load_schema import load_command
from core.request.options import GenerationOptions, static_cache_length

SPEC = WorkloadSpec(requests=12, max_new_tokens=24, seed=1)
STATIC = GenerationOptions(cache="static")


# ------------------------------------------------------------------------------------------------ the workload

def test_a_workload_is_the_same_requests_for_the_same_seed_and_others_for_another():
    one, again, other = SPEC.build(), WorkloadSpec(requests=12, max_new_tokens=24, seed=1).build(), \
        WorkloadSpec(requests=12, max_new_tokens=24, seed=2).build()
    assert one.requests == again.requests and one.requests != other.requests
    assert all(8 <= len(r.prompt) <= 32 and 1 <= r.max_new_tokens <= 24 for r in one.requests)
    assert len({r.max_new_tokens for r in one.requests}) > 3, "output lengths vary"
    assert all(r.arrival_s == 0 for r in one.requests)


def test_poisson_arrivals_come_in_order_at_about_the_rate():
    requests = WorkloadSpec(requests=2000, max_new_tokens=8, rate=50.0, seed=3).build().requests
    arrivals = [r.arrival_s for r in requests]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0
    assert 1999 / arrivals[-1] == pytest.approx(50, rel=0.1)


def test_output_lengths_max_give_every_request_the_cap_and_built_in_prompts_are_text():
    spec = WorkloadSpec(requests=3, max_new_tokens=7, prompts="built-in", output_lengths="max")
    assert [r.max_new_tokens for r in spec.build().requests] == [7, 7, 7]
    assert all(isinstance(r.prompt, str) for r in spec.build().requests)


@pytest.mark.parametrize(("changes", "message"), [
    ({"requests": 0}, "requests must be between 1 and 4096, got 0"),
    ({"requests": MAX_REQUESTS + 1}, "requests must be between 1 and 4096"),
    ({"requests": 2.0}, "requests must be a whole number, got 2.0"),
    ({"rate": -1}, "the arrival rate must be between 0 and 10000, got -1"),
    ({"rate": math.inf}, "the arrival rate must be between 0 and 10000, got inf"),
    ({"prompt_min": 9, "prompt_max": 8}, r"prompt lengths must be MIN-MAX with MIN <= MAX, got \(9, 8\)"),
    ({"output_lengths": "uniform"}, "unknown output lengths 'uniform'; use one of: lognormal, max"),
    ({"output_median": 99}, r"the median output length must be between 0 and 24 \(max new tokens\), got 99"),
])
def test_a_bad_workload_is_one_line(changes, message):
    with pytest.raises(ValueError, match=message):
        WorkloadSpec(**{"requests": 12, "max_new_tokens": 24, **changes})


# ------------------------------------------------------------------------------------------------ the loops

@pytest.fixture(scope="module")
def workload_and_solo(tiny):
    workload = SPEC.build()
    prompts = [list(r.prompt) for r in workload.requests]
    solo = [solo_run(tiny, [ids], GenerationOptions(cache="static", max_new_tokens=r.max_new_tokens)).token_ids[0]
            for ids, r in zip(prompts, workload.requests)]
    return workload, prompts, solo


def slots_for(loaded, workload, prompts, count=4):
    cache_len = static_cache_length(max(map(len, prompts)), workload.longest_output, 3)
    return Slots(loaded, count, cache_len, 130, STATIC)


@pytest.mark.parametrize(("loop", "lag"), [("naive", 1), ("naive-per-row", 1), ("pipelined", 1), ("pipelined", 3),
                                         ("no-check", 1)])
def test_every_request_decoded_in_slots_gives_its_solo_tokens(tiny, workload_and_solo, loop, lag):
    workload, prompts, solo = workload_and_solo
    slots = slots_for(tiny, workload, prompts)
    run = run_batched(loop, slots, workload, prompts, eos_ids=resolve_eos_ids(tiny, None), ignore_eos=False, lag=lag,
                      known_lengths=[len(s) for s in solo])
    assert [r.tokens for r in run.requests] == solo
    assert sorted({r.slot for r in run.requests}) == [0, 1, 2, 3] and len(run.requests) == 12, "slots are reused"
    wasted = [r.wasted_steps for r in run.requests]
    assert wasted == ([lag] * 12 if loop == "pipelined" else [0] * 12)
    holders = {}  # no two requests hold one slot at once: each is admitted after the last one there was released
    for request in sorted(run.requests, key=lambda r: r.first_step):
        assert request.first_step > holders.get(request.slot, -1)
        holders[request.slot] = request.released_step
    assert run.steps >= max(len(s) for s in solo) - 1


def test_admissions_as_one_graph_per_padded_width_give_the_solo_tokens_too(tiny, workload_and_solo):
    # On CUDA the graph modes admit so (core.load.slots.Slots.admit_as_graph); here its body runs as it is.
    workload, prompts, solo = workload_and_solo
    slots = Slots(tiny, 4, static_cache_length(max(map(len, prompts)), workload.longest_output, 1), 130,
                  STATIC)
    slots.graph_prefill = True
    for loop in ("naive", "pipelined"):
        run = run_batched(loop, slots, workload, prompts, eos_ids=resolve_eos_ids(tiny, None), ignore_eos=False)
        assert [r.tokens for r in run.requests] == solo, loop
    assert sorted(slots.admission_rows) == [32], "prompts of 8 to 32 tokens share one padded width"


def test_a_loop_admits_no_request_before_it_arrives(tiny):
    workload = WorkloadSpec(requests=6, max_new_tokens=6, rate=40.0, seed=5).build()
    prompts = [list(r.prompt) for r in workload.requests]
    run = run_batched("pipelined", slots_for(tiny, workload, prompts, 2), workload, prompts,
                      eos_ids=resolve_eos_ids(tiny, None), ignore_eos=False)
    for request in run.requests:
        assert request.admitted_s >= request.arrival_s and request.first_token_s >= request.admitted_s
        assert request.finished_s >= request.first_token_s


def test_tokens_reach_the_listener_as_the_loop_learns_them(tiny, workload_and_solo):
    workload, prompts, solo = workload_and_solo
    seen: dict[int, list[int]] = {}
    run_batched("pipelined", slots_for(tiny, workload, prompts), workload, prompts,
                eos_ids=resolve_eos_ids(tiny, None), ignore_eos=False,
                on_tokens=lambda index, new, at_s: seen.setdefault(index, []).extend(new))
    assert [seen[i] for i in range(12)] == solo


def test_transformers_continuous_batching_gives_the_solo_tokens(tiny, workload_and_solo):
    workload, prompts, solo = workload_and_solo
    run = run_hf_batching(tiny, HF_BATCH, workload, prompts, slots=4, eos_ids=resolve_eos_ids(tiny, None),
                          ignore_eos=False, compiled=False)
    assert [r.tokens for r in run.requests] == solo
    assert all(r.first_token_s is not None and r.finished_s >= r.first_token_s for r in run.requests)
    assert tiny.model.config._attn_implementation.startswith("syncscope_decode"), "its own attention is back"


def test_a_sliding_window_model_is_refused_in_one_line():
    loaded = load_model("tiny-random:mistral-sliding", device="cpu")
    with pytest.raises(ValueError, match="cannot run under load here: its layers attend over a sliding window"):
        run_load(loaded, LoadRequest(workload=WorkloadSpec(requests=2, max_new_tokens=4), max_batch=2, trials=1))


def test_a_cache_that_does_not_fit_is_one_line(tiny, monkeypatch):
    monkeypatch.setattr("core.models.memory.free_host_bytes", lambda: 1000)
    with pytest.raises(ValueError, match=r"the KV cache of 64 slots of 256 positions .* needs .* GiB, and 0.0 GiB is "
                                         r"free on this host: give fewer slots \(--max-batch\)"):
        check_memory(tiny, 64, 256)


# ------------------------------------------------------------------------------------------------ the protocol

@pytest.fixture(scope="module")
def report(tiny):
    request = LoadRequest(workload=SPEC, max_batch=4, trials=2, audit=True, sweep_batch=(2,))
    section = run_load(tiny, request)
    return build_load_report(tiny, request, section, load_command(request, "tiny-random", device="cpu"))


def test_both_loops_decode_the_workload_identically_to_solo_and_only_the_naive_one_reads(report):
    main_point = report["load"]["contestants"]
    assert set(main_point) == {"naive", "pipelined", "no-check", HF_BATCH}
    assert report["load"]["notices"] == ["hf-batch-async left out: transformers' async batching needs CUDA (its "
                                         "ContinuousBatchingAsyncIOs refuses the CPU)"]
    for name, entry in main_point.items():
        assert entry["identical_to_solo"] is True and entry["repeatable"] is True, name
        assert len(entry["requests"]) == 12 and entry["trials"] == 2 and entry["tokens_per_s"] > 0
    assert main_point["pipelined"]["reads_per_decode_step"] == 0
    assert main_point["no-check"]["reads_per_decode_step"] == 0
    assert main_point["naive"]["reads_per_decode_step"] >= 1
    site = main_point["naive"]["sync_audit"]["sites"][0]
    assert site["file"] == "core/load/batching.py" and site["kind"] == "tolist"
    assert main_point["pipelined"]["wasted_slot_steps"] == 12 and main_point["naive"]["wasted_slot_steps"] == 0
    assert main_point["no-check"]["ttft_ms_p50"] is None, "the ceiling learns its tokens only at the end"


@pytest.fixture(scope="module")
def per_row_report(tiny):
    request = LoadRequest(workload=WorkloadSpec(requests=8, max_new_tokens=16, seed=1), max_batch=4, trials=1,
                          audit=True, contestants=("naive", "naive-per-row"))
    section = run_load(tiny, request)
    return build_load_report(tiny, request, section, load_command(request, "tiny-random", device="cpu"))


def test_the_per_row_loop_gives_the_naive_loops_tokens_and_the_audit_finds_two_reads_per_live_row(per_row_report):
    per_row = per_row_report["load"]["contestants"]["naive-per-row"]
    assert per_row["identical_to"] == {"contestant": "naive", "identical": True}
    assert per_row["identical_to_solo"] is True and per_row["wasted_slot_steps"] == 0
    audit = per_row["sync_audit"]
    # Every arrival at 0 s: the audited run admits as the timed one did, so its requests' steps are the report's.
    # A request's row is read from its first step to the one that freed it; the audit counts the steps but the first
    # and the last, so the mean is over those, and the reads match it exactly.
    live_rows = [sum(r["first_step"] <= step <= r["released_step"] for r in per_row["requests"])
                 for step in range(1, audit["steps"] - 1)]
    assert len(live_rows) == audit["decode_steps"] and max(live_rows) == 4
    assert per_row["reads_per_decode_step"] == pytest.approx(2 * sum(live_rows) / len(live_rows), abs=1e-9)
    assert per_row_report["load"]["contestants"]["naive"]["reads_per_decode_step"] == 1


def test_the_per_row_loops_reads_are_at_its_two_lines_and_their_fix_is_the_pipelined_batched_loop(per_row_report):
    lines, first = inspect.getsourcelines(read_row_by_row)
    reading = {first + i for i, line in enumerate(lines) if ".item()" in line and not line.lstrip().startswith("#")}
    sites = per_row_report["load"]["contestants"]["naive-per-row"]["sync_audit"]["sites"]
    assert len(reading) == 2 and {(s["file"], s["line"]) for s in sites} == {("core/load/batching.py", line)
                                                                             for line in reading}
    assert all("(as the pipelined batched loop does)" in s["fix"] for s in sites)
    said = [line for line in load_findings(per_row_report) if line.startswith("The sync audit, per loop")]
    per_row_said = said[0].split("naive, per row: ")[1]
    assert all(f"core/load/batching.py:{line}" in per_row_said for line in reading), said


def test_the_report_holds_each_request_and_each_point(report):
    section = report["load"]
    assert [(p["slots"], p["rate"]) for p in section["points"]] == [(4, 0.0), (2, 0.0)]
    request = section["contestants"]["naive"]["requests"][0]
    assert set(request) >= {"arrival_ms", "first_token_ms", "finished_ms", "tokens", "slot", "first_step",
                            "last_step", "released_step"}
    assert section["solo_checked"] == 12 and section["workload"]["spec"]["requests"] == 12


def test_the_report_loads_as_a_load_report_and_not_as_a_bench_report(report, tmp_path):
    path = tmp_path / "load.json"
    path.write_text(json.dumps(report))
    assert load(path, expect=LOAD)["load"]["slots"] == 4
    with pytest.raises(ReportError, match="this JSON is a load report"):
        load(path, expect="bench")
    damaged = {**report, "load": {**report["load"], "points": []}}
    with pytest.raises(ReportError, match="its load section has no points"):
        load(json.dumps(damaged), expect=LOAD)


def test_the_text_says_what_the_run_shows_and_how_to_repeat_it(report):
    lines = load_text(report)
    assert lines[0].startswith("tiny-random on cpu (float32), 4 slots of a static cache, compile off, lag 1: 12 "
                               "requests, all at once")
    assert any(line.startswith("  naive ") for line in lines)
    assert lines[-1].startswith("reproduce: ") and " -m core.bench --model tiny-random" in lines[-1]
    findings = " ".join(load_findings(report))
    assert "of its solo decode" in findings
    assert "naive: 1 read of a device value per decode step (core/load/batching.py:" in findings
    assert "pipelined: no reads of device values per decode step" in findings or "pipelined: 0" in findings
    assert "On the CPU host and device are one processor" in findings


def test_the_trace_has_a_lane_per_slot_and_marks_the_steps_past_a_stop(report):
    events = load_trace(report)["traceEvents"]
    pipelined = next(e["pid"] for e in events if e["ph"] == "M" and e["args"]["name"] == "pipelined")
    spans = [e for e in events if e.get("pid") == pipelined and e["ph"] == "X"]
    assert {e["tid"] for e in spans} == {0, 1, 2, 3}
    assert sum(1 for e in spans if e["name"] == "past its stop") == 12


def test_the_kernel_measurement_under_load_is_a_single_runs_with_kernel_busy_over_the_run(monkeypatch):
    """core.measure.kernel_measurement reads the measured run per decode step (its CUDA part is
    tests/test_cuda_load.py's); under load it is given the trials' median step and adds kernel-busy from the first
    kernel to the last and the whole run's slowdown."""
    def batched(total_s: float, step_ms: float) -> BatchedRun:
        return BatchedRun(loop="pipelined", requests=[], steps=10, slots=2, total_s=total_s,
                          timings={"ms_per_token_p50": step_ms}, started_s=1.0)

    asked = {}

    def measured(run_once, timed_step_ms=None, center_step=None):
        outcome = run_once()
        asked.update(timed_step_ms=timed_step_ms, outcome=outcome)
        return {"kernel_busy_ms": 30.0, "device_span_ms": 40.0, "kinds": [{"kind": "products", "ms_per_step": 1.0}]}

    runner = type("Runner", (), {"run": lambda self, name, trial: batched(3.0, 9.0)})()
    monkeypatch.setattr(protocol, "kernel_measurement", measured)
    trials = [batched(1.0, 4.0), batched(2.0, 6.0), batched(3.0, 8.0)]
    result = protocol._kernel_measurement(runner, "pipelined", trials)
    assert asked == {"timed_step_ms": 6.0, "outcome": {"timings": {"ms_per_token_p50": 9.0}, "started_s": 1.0}}
    assert result["kinds"] and result["run_busy_fraction"] == 0.75 and result["run_slowdown"] == 1.5


# ------------------------------------------------------------------------------------------------ the CLI

def test_the_cli_runs_a_workload_and_writes_the_load_section(tmp_path, capsys):
    out = tmp_path / "R.json"
    code = main(["--model", "tiny-random", "--device", "cpu", "--requests", "12", "--max-batch", "4", "--trials", "1",
                 "--max-new-tokens", "16", "--solo-checks", "4", "--contestants", "naive,pipelined", "--json",
                 str(out)])
    assert code == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert report["schema"] == "syncscope.load/1"
    for entry in report["load"]["contestants"].values():
        assert entry["identical_to_solo"] is True and len(entry["requests"]) == 12
    printed = capsys.readouterr().out
    assert " -m core.bench --model tiny-random --device cpu --dtype fp32 --requests 12" in printed


@pytest.mark.parametrize(("argv", "message"), [
    (["--max-batch", "0"], "--max-batch must be between 1 and 256, got 0"),
    (["--prompt-lengths", "8-x"], "--prompt-lengths must be MIN-MAX, as 8-32; got '8-x'"),
    (["--contestants", "naive,fast"], "unknown --contestants 'fast'; use some of: naive, naive-per-row, pipelined"),
    (["--sweep-rate", "1,-2"], "a value of --sweep-rate must be between 0 and 10000, got '-2'"),
    (["--sweep-batch", "2,2"], "--sweep-batch: 2 is given twice"),
    (["--lag", "65"], "--lag must be between 1 and 64, got 65"),
    (["--tp", "2"], "under load (--requests) the loops run on one device: leave out --tp"),
    (["--sample"], "--sample, --profile, --hf, --no-check and --aa are for a single request"),
])
def test_a_bad_load_flag_is_one_line_and_exit_2(argv, message, capsys):
    code = main(["--model", "tiny-random", "--device", "cpu", "--requests", "4", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_the_help_names_the_built_in_models_and_the_load_flags(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "a built-in spec (smollm2-135m-instruct, synthetic:smollm2-135m, synthetic:llama-1b" in text
    assert "--requests N" in text and "--max-batch B" in text and "--sweep-batch LIST" in text


@pytest.mark.parametrize(("ratios", "said"), [
    ({4: 1.3, 16: 1.2, 64: 1.1}, "keeps its gain at every B (B=4 1.30x, B=16 1.20x, B=64 1.10x)"),
    ({4: 1.3, 16: 1.02, 64: 0.99}, "gain is gone (under 5%) from B=16 on"),
    ({1: 0.76, 2: 1.09}, "gains less than 5% at B=1 and more elsewhere (B=1 0.76x, B=2 1.09x)"),
    ({1: 1.01, 2: 0.99}, "gains less than 5% at every B, and slower at B=2 (B=1 1.01x, B=2 0.99x)"),
    ({1: 0.74, 2: 0.9}, "is slower than the naive loop at every B (B=1 0.74x, B=2 0.90x)"),
])
def test_the_sweep_sentence_says_where_the_gain_is(ratios, said):
    def point(slots, ratio):
        return {"slots": slots, "rate": 0.0, "contestants": {"naive": {"tokens_per_s": 100.0},
                                                             "pipelined": {"tokens_per_s": 100.0 * ratio}}}

    section = {"points": [point(b, r) for b, r in ratios.items()]}
    from core.load.words import _gain_sentences

    assert said in " ".join(_gain_sentences(section))


def _hf_point(slots: int, ours: float, theirs: float, spread: float | None) -> dict:
    entry = {"tokens_per_s": ours, "spread": spread}
    return {"slots": slots, "rate": 0.0, "contestants": {"pipelined": entry,
                                                         "hf-batch-async": {"tokens_per_s": theirs, "spread": spread}}}


def test_the_sentence_against_transformers_calls_no_winner_inside_the_trials_spread():
    from core.load.words import _against_transformers

    ahead = _against_transformers({"points": [_hf_point(4, 120.0, 100.0, 0.05), _hf_point(16, 300.0, 200.0, 0.1)]})
    assert ahead == ["The pipelined loop beats transformers' async batching (hf-batch-async) at every point measured "
                     "(2), by more than the trials' spread."]
    # a 0.8% lead inside 12-44% spreads is no win, and a loss beyond the spread is said as one
    (said,) = _against_transformers({"points": [_hf_point(4, 100.8, 100.0, 0.44), _hf_point(16, 150.0, 200.0, 0.1),
                                                _hf_point(64, 90.0, 80.0, None)]})
    assert "beats" not in said
    assert "behind it at 1 (B=16" in said and "within the trials' spread at 1 (B=4" in said
    assert "one trial, no spread to judge by at 1 (B=64" in said


def test_a_pipelined_loop_above_the_ceiling_is_said_to_be_noise():
    from core.load.words import _ceiling_sentence

    (said,) = _ceiling_sentence({"pipelined": {"tokens_per_s": 125.0}, "no-check": {"tokens_per_s": 100.0}})
    assert "125% of the ceiling, above the bound it cannot pass" in said and "noise" in said
    (said,) = _ceiling_sentence({"pipelined": {"tokens_per_s": 98.0}, "no-check": {"tokens_per_s": 100.0}})
    assert said.startswith("The pipelined loop reaches 98% of the ceiling")
