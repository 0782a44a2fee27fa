"""Correctness of the two loops on the CPU (tiny random Llama): same tokens as each other and as HF generate."""

import itertools

import pytest
import torch

from core.loops.generation import generate
from core.loops.hf_generate import hf_generate
from core.loops.prompt import encode_prompt
from core.request.options import GenerationOptions
from tests.helpers import eos_for_steps, first_new_at, first_token_runs, free_run, ids_not_in

PROMPT = "Tell me about pipelines."
BATCH = ["Hi", "Tell me about the sea and the ships on it.", "What is two plus two?"]


def hf_tokens(loaded, prompt, **options):
    token_ids, _ = hf_generate(loaded, prompt, GenerationOptions(**options))
    return token_ids


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_matches_hf_generate_with_rows_ending_at_different_steps(tiny, cache, batch):
    prompt = BATCH[:batch] if batch > 1 else PROMPT
    rows = free_run(tiny, prompt, 24)
    eos, stops = eos_for_steps(rows, [3, 9, 16][:batch])
    if batch > 1:
        assert len(set(stops)) > 1, "rows should finish at different steps"
    expected = hf_tokens(tiny, prompt, max_new_tokens=24, cache=cache, eos_token_id=eos)
    for loop in ("naive", "pipelined"):
        result = generate(tiny, prompt, loop=loop, cache=cache, max_new_tokens=24, eos_token_id=eos)
        assert result.token_ids == expected, loop
        assert [len(ids) for ids in result.token_ids] == [s + 1 for s in stops]


def test_a_long_eos_list_stops_each_row_like_generate(tiny):
    rows = free_run(tiny, BATCH, 24)
    eos, stops = eos_for_steps(rows, [3, 9, 16])
    many = [*eos, *ids_not_in(rows, 29)]  # 32 ids, as in the batch-32 benchmark row; the extra ones never occur
    expected = hf_tokens(tiny, BATCH, max_new_tokens=24, cache="static", eos_token_id=many)
    for loop in ("naive", "pipelined"):
        result = generate(tiny, BATCH, loop=loop, cache="static", max_new_tokens=24, eos_token_id=many)
        assert result.token_ids == expected, loop
        assert [len(ids) for ids in result.token_ids] == [s + 1 for s in stops]


def _lag_cases() -> list:
    """Every lag 1-4, both stream counts, both caches; the fast tier keeps lag 1 and 2 each once per cache."""
    fast = {(1, 1, "dynamic"), (2, 2, "dynamic"), (1, 2, "static"), (2, 1, "static")}
    return [pytest.param(lag, streams, cache, marks=[] if (lag, streams, cache) in fast else [pytest.mark.slow],
                         id=f"{cache}-{streams}-{lag}")
            for lag in (1, 2, 3, 4) for streams in (1, 2) for cache in ("dynamic", "static")]


@pytest.mark.parametrize(("lag", "streams", "cache"), _lag_cases())
def test_pipelined_equals_naive_for_every_lag(tiny, lag, streams, cache):
    rows = free_run(tiny, BATCH, 20)
    eos, _ = eos_for_steps(rows, [2, 7, 12])
    naive = generate(tiny, BATCH, loop="naive", cache=cache, max_new_tokens=20, eos_token_id=eos)
    piped = generate(tiny, BATCH, loop="pipelined", cache=cache, max_new_tokens=20, eos_token_id=eos, lag=lag,
                     streams=streams)
    assert piped.token_ids == naive.token_ids
    assert piped.timings.kept_steps == naive.timings.kept_steps
    assert piped.timings.overshoot_steps == min(lag, 20 - naive.timings.kept_steps)


@pytest.mark.parametrize("position", [0, 1, 8])
@pytest.mark.parametrize("loop", ["naive", "pipelined"])
def test_stops_right_after_eos(tiny, position, loop):
    row = free_run(tiny, PROMPT, 24)[0]
    token = next(first_new_at(row, p) for p in range(position, 24) if first_new_at(row, p) is not None)
    stop = row.index(token)
    result = generate(tiny, PROMPT, loop=loop, max_new_tokens=24, eos_token_id=token, lag=2)
    assert result.token_ids == [row[: stop + 1]]
    assert result.token_ids[0][-1] == token


@pytest.mark.parametrize("loop", ["naive", "pipelined"])
def test_never_hitting_eos_runs_to_max_new_tokens(tiny, loop):
    row = free_run(tiny, PROMPT, 12)[0]
    unused = next(t for t in range(100, 50000) if t not in row)
    result = generate(tiny, PROMPT, loop=loop, max_new_tokens=12, eos_token_id=unused, lag=3)
    assert result.token_ids == [row]
    assert result.timings.overshoot_steps == 0


@pytest.mark.parametrize("loop", ["naive", "pipelined"])
def test_max_new_tokens_one(tiny, loop):
    result = generate(tiny, PROMPT, loop=loop, max_new_tokens=1, lag=4)
    assert len(result.token_ids[0]) == 1
    assert result.token_ids[0] == free_run(tiny, PROMPT, 1)[0]


@pytest.mark.parametrize("loop", ["naive", "pipelined"])
def test_ignore_eos_keeps_going_past_eos(tiny, loop):
    row = free_run(tiny, PROMPT, 16)[0]
    result = generate(tiny, PROMPT, loop=loop, max_new_tokens=16, eos_token_id=row[2], ignore_eos=True)
    assert result.token_ids == [row]
    assert len(result.token_ids[0]) == 16


def test_seeded_sampling_same_for_both_loops_and_differs_by_seed(tiny):
    common = dict(max_new_tokens=20, do_sample=True, temperature=1.3, top_k=50, top_p=0.95, ignore_eos=True)
    naive = generate(tiny, BATCH, loop="naive", seed=7, **common)
    piped = generate(tiny, BATCH, loop="pipelined", seed=7, lag=2, **common)
    other = generate(tiny, BATCH, loop="naive", seed=8, **common)
    greedy = generate(tiny, BATCH, loop="naive", max_new_tokens=20, ignore_eos=True)
    assert naive.token_ids == piped.token_ids
    assert naive.token_ids != other.token_ids
    assert naive.token_ids != greedy.token_ids


@pytest.mark.parametrize("loop", ["naive", "pipelined"])
def test_streaming_callback_sees_exactly_the_result(tiny, loop):
    rows = free_run(tiny, BATCH, 20)
    eos, _ = eos_for_steps(rows, [2, 7, 12])
    events = []
    result = generate(tiny, BATCH, loop=loop, max_new_tokens=20, eos_token_id=eos, lag=3, on_tokens=events.append)
    assert [e.step for e in events] == list(range(len(events)))
    streamed = [[e.tokens[row] for e in events if e.tokens[row] is not None] for row in range(len(BATCH))]
    assert streamed == result.token_ids
    assert len(events) == result.timings.kept_steps
    assert all(e.host_time_s >= prev.host_time_s for prev, e in itertools.pairwise(events))


def test_prompt_forms_agree(tiny):
    ids, _ = encode_prompt(tiny, PROMPT)
    as_text = generate(tiny, PROMPT, max_new_tokens=6).token_ids
    as_ids = generate(tiny, ids[0].tolist(), max_new_tokens=6).token_ids
    as_batch = generate(tiny, [ids[0].tolist()], max_new_tokens=6).token_ids
    assert as_text == as_ids == as_batch


def test_chat_template_applied_to_strings(tiny):
    ids, mask = encode_prompt(tiny, "Hello")
    text = tiny.tokenizer.decode(ids[0])
    assert "<|im_start|>user" in text and text.rstrip().endswith("assistant")
    assert mask.all()


def test_left_padding(tiny):
    ids, mask = encode_prompt(tiny, ["Hi", "A much longer prompt than the first one"])
    assert mask[0, 0] == 0 and mask[0, -1] == 1 and mask[1].all()
    assert ids[0, 0] == tiny.tokenizer.pad_token_id


def test_result_text_and_timings(tiny):
    result = generate(tiny, PROMPT, max_new_tokens=8, ignore_eos=True)
    assert result.text == tiny.tokenizer.decode(result.token_ids[0], skip_special_tokens=True)
    t = result.timings
    assert t.clock == "host" and t.ttft_gpu_ms is None and t.gpu_step_ms == []
    assert t.new_tokens == 8 and t.tokens_per_s > 0 and len(t.step_ms) == 7
    assert 0 < t.ttft_ms <= t.total_ms
    assert t.ms_per_token_p50 <= t.ms_per_token_p95


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(prompt=""), "prompt is empty"),
        (dict(prompt="   "), "prompt is empty"),
        (dict(prompt=[]), "prompt is empty"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(max_new_tokens=-3), "max_new_tokens"),
        (dict(max_new_tokens=10**6), "exceeds the model's context"),
        (dict(lag=0), "lag"),
        (dict(loop="eager"), "unknown loop"),
        (dict(cache="paged"), "unknown cache"),
        (dict(compile="turbo"), "unknown compile mode"),
        (dict(compile="reduce-overhead", cache="dynamic"), "compile needs cache='static'"),
        (dict(streams=3), "streams"),
        (dict(do_sample=True, temperature=0), "temperature"),
        (dict(prompt=[1, -5]), "token ids"),
        (dict(prompt=[1, "x"]), "prompt must be"),
    ],
)
def test_bad_input_is_a_clear_value_error(tiny, kwargs, message):
    args = {"prompt": PROMPT, **kwargs}
    prompt = args.pop("prompt")
    with pytest.raises(ValueError, match=message):
        generate(tiny, prompt, **args)


@pytest.mark.slow
def test_compile_on_cpu_falls_back_visibly(tiny):
    result = generate(tiny, PROMPT, max_new_tokens=4, cache="static", compile="reduce-overhead")
    assert any("CUDA graphs" in notice for notice in result.notices)
    assert result.options.compile == "default"
    assert result.token_ids == [free_run(tiny, PROMPT, 4)[0][: len(result.token_ids[0])]]


def test_decode_setup_reused_across_runs(tiny):
    before = len(tiny.setups)
    generate(tiny, PROMPT, max_new_tokens=5, cache="static")
    first = generate(tiny, PROMPT, max_new_tokens=5, cache="static")
    assert len(tiny.setups) <= before + 1
    assert first.timings.setup_ms == 0.0


def test_no_grad_state_left_behind(tiny):
    generate(tiny, PROMPT, max_new_tokens=3)
    assert not torch.is_grad_enabled() or all(not p.requires_grad for p in tiny.model.parameters())


def test_step_graph_on_cpu_falls_back_visibly(tiny):
    result = generate(tiny, PROMPT, max_new_tokens=6, cache="static", compile="step-graph", ignore_eos=True)
    assert any("step-graph" in notice and "NVIDIA GPU" in notice for notice in result.notices)
    assert result.options.compile == "off"
    assert result.token_ids == free_run(tiny, PROMPT, 6)


def test_no_check_baseline_runs_every_step_but_returns_through_eos(tiny):
    row = free_run(tiny, PROMPT, 16)[0]
    token = next(t for p, t in enumerate(row) if p >= 3 and t not in row[:p])
    result = generate(tiny, PROMPT, loop="no-check", max_new_tokens=16, eos_token_id=token)
    assert result.token_ids == [row[: row.index(token) + 1]]
    assert result.timings.computed_steps == 16


def test_step_graph_is_recaptured_when_baked_in_choices_change(tiny):
    from core.loops.step import StepGraph, step_graph_key
    from core.request.options import GenerationOptions

    graph = StepGraph()
    graph.graph, graph.key = object(), step_graph_key(GenerationOptions(), [2], "state")
    assert not graph.needs_capture(step_graph_key(GenerationOptions(lag=3, loop="pipelined"), [2], "state"))
    for changed in (dict(do_sample=True), dict(temperature=0.5), dict(top_k=5), dict(top_p=0.9),
                    dict(ignore_eos=True)):
        assert graph.needs_capture(step_graph_key(GenerationOptions(**changed), [2], "state")), changed
    assert graph.needs_capture(step_graph_key(GenerationOptions(), [2, 7], "state"))
    assert graph.needs_capture(step_graph_key(GenerationOptions(), [2], "other state"))


def test_eos_tensor_kept_while_the_ids_stay_the_same(tiny):
    before = set(tiny.setups)
    generate(tiny, PROMPT, max_new_tokens=3, cache="static", eos_token_id=5)
    setup = next(s for key, s in tiny.setups.items() if key[1] == "static" and s.eos_ids_list == [5]
                 and (key not in before or s.prompt_width))
    kept = setup.eos_ids
    generate(tiny, PROMPT, max_new_tokens=3, cache="static", eos_token_id=5)
    assert setup.eos_ids is kept
    generate(tiny, PROMPT, max_new_tokens=3, cache="static", eos_token_id=[5, 6])
    assert setup.eos_ids is not kept and setup.eos_ids.tolist() == [5, 6]


@pytest.mark.parametrize("lag", [1, pytest.param(3, marks=pytest.mark.slow)])
@pytest.mark.parametrize("stream", [False, True])
def test_pipelined_knows_the_first_token_as_soon_as_naive_does(tiny, lag, stream):
    """As an order of events, not a race of two clocks (TTFTs compared under load differed by more than a step):
    both loops know the first token after prefill alone, before step 1 began, not `lag` steps later."""
    results = first_token_runs(tiny, PROMPT, lag=lag, stream=stream)
    assert results["pipelined"].token_ids == results["naive"].token_ids
