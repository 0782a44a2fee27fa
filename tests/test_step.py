"""core.loops.step: the decode step both loops share. Its decode setup (one per input shape, its static cache, its
buffers refilled in place), the forward it compiles, the token it picks and writes with the stop flag, and when a
captured step graph is replayed or captured again. All on the CPU: the CUDA capture itself is in test_cuda.py."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from core.kernels import products
from core.loops.prompt import encode
from core.loops.step import DecodeSetup, StepGraph, decode_setup_for, greedy_commit, select_next_tokens, step_kernels
from core.request.options import STATIC_CACHE_BUCKET, STEP_GRAPH, GenerationOptions
from core.tuning import Tuning

PAD_ROW = ["Hi", "A much longer prompt, so that the first row is padded"]


@pytest.fixture
def loaded(tiny):
    """tiny-random with no decode setups or compiled forwards of its own: what a test builds stays in it."""
    return dataclasses.replace(tiny, setups={}, compiled_forwards={})


class FakeCompile:
    """torch.compile, recorded: each call's keyword arguments; the function it returns notes its calls."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.functions: list = []
        self.runs: list[dict] = []
        self.traced_with: list[tuple[str, bool]] = []  # what the products were given at each call

    def __call__(self, fn, **kwargs):
        self.calls.append(kwargs)
        self.functions.append(fn)

        def compiled(*args, **kw):
            self.runs.append(kw)
            self.traced_with.append((products._products, products.library_o_proj()))
            return "logits"

        compiled.wrapped = fn
        return compiled


@pytest.fixture
def fake_compile(monkeypatch):
    fake = FakeCompile()
    monkeypatch.setattr(torch, "compile", fake)
    return fake


# ------------------------------------------------------------------------------------------------ decode setups

def test_one_setup_per_shape_and_a_static_cache_bucket_shared_by_similar_lengths(loaded):
    static = GenerationOptions(cache="static", max_new_tokens=20, lag=2)
    short, longer = encode(loaded, "Hi").input_ids.shape, encode(loaded, "Hi there, tell me more").input_ids.shape
    assert short != longer
    first = decode_setup_for(loaded, short, static)
    # Prompts whose prompt + new tokens + lag fall in one bucket share one cache (and one compiled graph).
    assert decode_setup_for(loaded, longer, static) is first
    assert first.cache_len == STATIC_CACHE_BUCKET and first.static_cache is not None
    # Past the bucket: a larger cache, so a setup of its own.
    beyond = decode_setup_for(loaded, short, dataclasses.replace(static, max_new_tokens=STATIC_CACHE_BUCKET))
    assert beyond is not first and beyond.cache_len == 2 * STATIC_CACHE_BUCKET
    assert decode_setup_for(loaded, torch.Size([3, short[1]]), static) is not first  # another batch
    dynamic = decode_setup_for(loaded, short, GenerationOptions(max_new_tokens=20))
    assert dynamic is not first and dynamic.cache_len == 0 and dynamic.static_cache is None
    assert len(loaded.setups) == 4


def test_the_static_cache_holds_the_prompt_the_new_tokens_and_the_pipelined_overshoot(loaded):
    prompt = encode(loaded, "Hi")
    width = prompt.width
    fits = GenerationOptions(cache="static", max_new_tokens=STATIC_CACHE_BUCKET - width - 3, lag=3)
    assert decode_setup_for(loaded, prompt.input_ids.shape, fits).cache_len == STATIC_CACHE_BUCKET
    one_more = dataclasses.replace(fits, lag=4)  # one key more than the bucket holds
    assert decode_setup_for(loaded, prompt.input_ids.shape, one_more).cache_len == 2 * STATIC_CACHE_BUCKET


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_begin_fills_the_buffers_from_the_prompt(loaded, cache):
    prompt = encode(loaded, PAD_ROW)
    options = GenerationOptions(cache=cache, max_new_tokens=12)
    setup = decode_setup_for(loaded, prompt.input_ids.shape, options)
    setup.begin(prompt, options)
    state, width = setup.state, prompt.width
    real = prompt.attention_mask.sum(dim=1).tolist()
    assert real[0] < width and real[1] == width
    assert state.positions.tolist() == real  # the first decode token's position: after each row's prompt
    assert state.unfinished.tolist() == [True, True] and state.step_index.tolist() == [0]
    mask_len = setup.cache_len if cache == "static" else width + 12
    assert state.mask.shape == (2, mask_len)
    assert torch.equal(state.mask[:, :width], prompt.attention_mask) and bool(state.mask[:, width:].all())
    assert state.record.shape[0] >= 12 and state.out.shape[1] == 2


def test_a_second_run_refills_the_same_buffers_in_place(loaded):
    """A captured step graph keeps pointing at these buffers: a run must not move them."""
    options = GenerationOptions(cache="static", max_new_tokens=8)
    prompt = encode(loaded, PAD_ROW)
    setup = decode_setup_for(loaded, prompt.input_ids.shape, options)
    setup.begin(prompt, options)
    state = setup.state
    buffers = {name: getattr(state, name).data_ptr() for name in ("tokens", "positions", "unfinished", "record",
                                                                  "mask", "step_index")}
    state.unfinished.fill_(False)
    state.step_index.fill_(5)
    state.positions.fill_(99)
    setup.begin(encode(loaded, ["Hello", "Hello there, how are you doing today?"]), options)
    assert setup.state is state
    assert {name: getattr(state, name).data_ptr() for name in buffers} == buffers
    assert state.unfinished.all() and state.step_index.item() == 0 and state.positions.max() < 99


def test_a_decode_step_passes_the_mask_only_where_it_matters(loaded):
    """With a dynamic cache and no padded row the mask is left out (transformers would read it on the host each
    step to see that it needs none); a padded row, or a static cache, needs it."""
    def decode_mask(prompt, cache):
        options = GenerationOptions(cache=cache, max_new_tokens=4)
        encoded = encode(loaded, prompt)
        setup = decode_setup_for(loaded, encoded.input_ids.shape, options)
        setup.begin(encoded, options)
        return setup.decode_mask

    assert decode_mask("Hi", "dynamic") is False
    assert decode_mask(PAD_ROW, "dynamic") is True
    assert decode_mask("Hi", "static") is True


def test_begin_takes_the_eos_ids_of_each_run(loaded):
    options = GenerationOptions(max_new_tokens=4)
    prompt = encode(loaded, "Hi")
    setup = decode_setup_for(loaded, prompt.input_ids.shape, options)
    setup.begin(prompt, options)
    assert setup.eos_ids.tolist() == [loaded.model.generation_config.eos_token_id]
    setup.begin(prompt, dataclasses.replace(options, eos_token_id=[5, 9]))
    assert setup.eos_ids.tolist() == [5, 9]


# ------------------------------------------------------------------------------------------------ the token choice

def begun(loaded, prompt, **options):
    options = GenerationOptions(max_new_tokens=8, **options)
    encoded = encode(loaded, prompt)
    setup = decode_setup_for(loaded, encoded.input_ids.shape, options)
    setup.begin(encoded, options)
    return setup


def logits_for(*tokens, vocab=49152):
    logits = torch.zeros(len(tokens), vocab)
    logits[torch.arange(len(tokens)), torch.tensor(tokens)] = 10.0
    return logits


def test_commit_writes_the_tokens_pads_finished_rows_and_raises_the_stop_flag_when_all_are_done(loaded):
    setup = begun(loaded, PAD_ROW, eos_token_id=7)
    pad = loaded.tokenizer.pad_token_id
    setup.commit(logits_for(7, 3))  # row 0 ends here: its EOS is its last token
    setup.commit(logits_for(4, 5))  # row 0 is padded from now on
    setup.commit(logits_for(4, 7))  # row 1 ends: every row done
    record = setup.state.record[:3].tolist()
    assert record == [[7, 3, 0], [pad, 5, 0], [pad, 7, 1]]
    assert setup.state.tokens.tolist() == [pad, 7]  # what the next step feeds
    assert setup.state.step_index.tolist() == [3]
    assert setup.state.unfinished.tolist() == [False, False]


def test_commit_with_ignore_eos_never_finishes_a_row(loaded):
    setup = begun(loaded, PAD_ROW, eos_token_id=7, ignore_eos=True)
    setup.commit(logits_for(7, 7))
    setup.commit(logits_for(7, 3))
    assert setup.state.record[:2].tolist() == [[7, 7, 0], [7, 3, 0]]
    assert setup.state.unfinished.all()


def test_commit_stops_at_any_of_many_eos_ids(loaded):
    """More than 16 EOS ids (where torch.isin would sort and sync): each row still stops at its own."""
    eos = list(range(1000, 1040))
    setup = begun(loaded, PAD_ROW, eos_token_id=eos)
    setup.commit(logits_for(1039, 12))
    setup.commit(logits_for(12, 1000))
    assert setup.state.done[:2].tolist() == [0, 1]
    assert setup.state.out[1, 0].item() == loaded.tokenizer.pad_token_id


@pytest.mark.parametrize(("compiled", "ignore_eos"), [(False, False), (True, False), (True, True)])
def test_the_whole_commit_writes_what_commit_and_the_step_write(loaded, compiled, ignore_eos):
    """The `step_commit` switch at "whole": `greedy_commit`, as it runs and compiled (inductor on the CPU here), leaves
    every buffer as the eager step's commit and position move do, step after step, through rows ending and padding."""
    setup = begun(loaded, PAD_ROW, eos_token_id=[7, 9], ignore_eos=ignore_eos)
    state = setup.state
    copies = {name: getattr(state, name).clone() for name in ("tokens", "positions", "unfinished", "record",
                                                             "step_index")}
    commit = torch.compile(greedy_commit, dynamic=False, fullgraph=True) if compiled else greedy_commit
    for step in (logits_for(7, 3), logits_for(4, 5), logits_for(4, 9), logits_for(2, 2)):
        state.positions.add_(1)
        setup.commit(step)
        commit(step, copies["tokens"], copies["positions"], copies["unfinished"], copies["record"],
               copies["step_index"], setup.pad, setup.eos_ids, not ignore_eos)
        for name, copy in copies.items():
            assert torch.equal(copy, getattr(state, name)), name
    assert state.done[:4].tolist() == ([0] * 4 if ignore_eos else [0, 0, 1, 1])


def test_only_a_greedy_step_graph_step_commits_whole(loaded, fake_compile, captures):
    whole_loaded = dataclasses.replace(loaded, tuning=Tuning(step_commit="whole"), setups={}, compiled_forwards={})
    prompt = encode(loaded, "Hi")
    for mode, whole in (("off", False), ("reduce-overhead", False), (STEP_GRAPH, True)):
        options = GenerationOptions(cache="static", compile=mode, max_new_tokens=8)
        setup = decode_setup_for(whole_loaded, prompt.input_ids.shape, options)
        assert (setup.whole_commit is not None) is whole, mode
    assert setup.whole_commit.wrapped is greedy_commit
    # the default: the argmax compiled alone
    assert decode_setup_for(loaded, prompt.input_ids.shape, options).whole_commit is None


def sampled(logits, draws=4000, seed=3, **options):
    generator = torch.Generator().manual_seed(seed)
    return select_next_tokens(logits.expand(draws, -1), GenerationOptions(do_sample=True, **options), generator)


def test_greedy_choice_is_the_argmax_of_each_row():
    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(0))
    assert torch.equal(select_next_tokens(logits, GenerationOptions(), None), logits.argmax(-1))


def test_sampling_draws_each_token_as_often_as_its_probability():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    tokens = sampled(probs.log()[None], draws=20000)
    frequencies = torch.bincount(tokens, minlength=4).float() / tokens.numel()
    assert torch.allclose(frequencies, probs, atol=0.02), frequencies


def test_top_k_and_top_p_keep_only_the_likeliest_tokens():
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()[None]
    assert set(sampled(logits, top_k=2).tolist()) == {0, 1}
    assert set(sampled(logits, top_k=1).tolist()) == {0}
    # top_p: the smallest set of the likeliest tokens whose probability reaches p.
    assert set(sampled(logits, top_p=0.7).tolist()) == {0, 1}
    assert set(sampled(logits, top_p=0.9).tolist()) == {0, 1, 2}
    assert set(sampled(logits, top_p=0.01).tolist()) == {0}  # the likeliest is always kept


def test_a_low_temperature_samples_the_argmax_and_a_high_one_flattens():
    logits = torch.tensor([2.0, 1.0, 0.0])[None]
    assert set(sampled(logits, temperature=0.01).tolist()) == {0}
    hot = torch.bincount(sampled(logits, temperature=100.0), minlength=3).float() / 4000
    assert hot.min() > 0.28, hot


def test_the_same_seed_draws_the_same_tokens():
    logits = torch.randn(1, 500, generator=torch.Generator().manual_seed(1))
    assert torch.equal(sampled(logits, draws=64, seed=5), sampled(logits, draws=64, seed=5))
    assert not torch.equal(sampled(logits, draws=64, seed=5), sampled(logits, draws=64, seed=6))


# ------------------------------------------------------------------------------------------------ the forward

def test_compile_off_runs_the_model_itself(loaded, fake_compile):
    setup = DecodeSetup(loaded, 1, 0, GenerationOptions())
    assert setup.forward is loaded.model and setup.step_graph is None and setup.argmax is None
    assert fake_compile.calls == []


def test_a_mode_is_compiled_once_per_model_whatever_the_shape(loaded, fake_compile):
    options = GenerationOptions(cache="static", compile="default")
    a = DecodeSetup(loaded, 1, 256, options)
    b = DecodeSetup(loaded, 4, 512, options)
    assert a.forward is b.forward and len(fake_compile.calls) == 1
    assert fake_compile.functions == [loaded.model.forward]
    assert fake_compile.calls[0]["dynamic"] is False  # one graph per shape, never a dynamic one


def test_cuda_graph_modes_mark_each_call_a_new_step(loaded, fake_compile, monkeypatch):
    """reduce-overhead's CUDA-graph trees may overwrite the last step's outputs only once told a new step began."""
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(len(fake_compile.runs)))
    graphs = DecodeSetup(loaded, 1, 256, GenerationOptions(cache="static", compile="reduce-overhead")).forward
    assert graphs(input_ids=1) == "logits" and graphs(input_ids=2) == "logits"
    assert marks == [0, 1], "a mark before each call"
    assert fake_compile.runs == [{"input_ids": 1}, {"input_ids": 2}]
    plain = DecodeSetup(loaded, 1, 256, GenerationOptions(cache="static", compile="default")).forward
    plain(input_ids=3)
    assert marks == [0, 1], "no CUDA graphs, no marks"


def test_step_graph_mode_compiles_without_cuda_graphs_of_inductors_own_and_with_the_users_options(
        loaded, fake_compile):
    loaded = dataclasses.replace(loaded, tuning=Tuning(inductor_options={"max_autotune": False}))
    setup = DecodeSetup(loaded, 1, 256, GenerationOptions(cache="static", compile=STEP_GRAPH))
    assert isinstance(setup.step_graph, StepGraph) and setup.argmax is not None
    forward_call = next(call for call in fake_compile.calls if "options" in call)
    assert not forward_call["options"].get("triton.cudagraphs")  # we capture the step ourselves
    assert forward_call["options"]["coordinate_descent_tuning"] is True
    assert forward_call["options"]["max_autotune"] is False  # the user's override wins
    assert "mode" not in forward_call


def test_the_users_inductor_options_reach_every_compiled_mode(loaded, fake_compile):
    loaded = dataclasses.replace(loaded, tuning=Tuning(inductor_options={"max_autotune": False}))
    DecodeSetup(loaded, 1, 256, GenerationOptions(cache="static", compile="max-autotune"))
    options = fake_compile.calls[0]["options"]
    assert options["max_autotune"] is False and options["triton.cudagraphs"] is True


@pytest.mark.parametrize(("mode", "switches", "traced"), [
    (STEP_GRAPH, {}, ("triton", True)),  # the defaults: auto products (the kernel's in step-graph), cuBLAS's o_proj
    ("default", {}, ("inductor", True)),
    ("reduce-overhead", {"o_proj": "inductor"}, ("inductor", False)),
    ("default", {"decode_products": "triton"}, ("triton", True)),
    (STEP_GRAPH, {"decode_products": "inductor", "o_proj": "inductor"}, ("inductor", False)),
])
def test_every_compiled_mode_traces_with_the_products_its_tuning_gives(loaded, fake_compile, mode, switches, traced):
    """What the model's forward is traced with (core.kernels.products) comes from the model's tuning, resolved for
    the mode by step_kernels: no step reads the environment."""
    loaded = dataclasses.replace(loaded, tuning=Tuning(**switches))
    forward = DecodeSetup(loaded, 1, 256, GenerationOptions(cache="static", compile=mode)).forward
    forward(input_ids=1)
    assert fake_compile.traced_with == [traced]
    assert (products._products, products.library_o_proj()) == ("inductor", True)  # undone after the call
    kernels = step_kernels(loaded, mode)
    assert (kernels.products, kernels.o_proj == "library") == traced
    assert kernels.commit == ("argmax" if mode == STEP_GRAPH else None)
    assert step_kernels(loaded, "off") is None


def test_compile_time_is_reported_once_and_only_for_a_compiled_shape(loaded, fake_compile):
    compiled = DecodeSetup(loaded, 1, 256, GenerationOptions(cache="static", compile="default"))
    assert compiled.take_compile_ms(0.0) == 0.0  # a setup run that took nothing has not compiled yet
    assert compiled.take_compile_ms(900.0) == 900.0
    assert compiled.take_compile_ms(800.0) == 0.0
    eager = DecodeSetup(loaded, 1, 0, GenerationOptions())
    assert eager.take_compile_ms(900.0) == 0.0


# ------------------------------------------------------------------------------------------------ the step graph

class FakeGraph:
    def __init__(self) -> None:
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1


@pytest.fixture
def captures(monkeypatch):
    """StepGraph's CUDA capture replaced: each capture runs the body once and returns a graph that counts replays."""
    made: list[FakeGraph] = []

    def capture(self, body):
        body()
        made.append(FakeGraph())
        return made[-1]

    monkeypatch.setattr(StepGraph, "_capture", capture)
    return made


def test_the_step_graph_is_captured_once_then_only_replayed(captures):
    graph, bodies = StepGraph(), []
    for _ in range(4):
        graph.replay(lambda: bodies.append(1), ("key",))
    assert len(captures) == 1 and captures[0].replays == 4
    assert len(bodies) == 1, "after the capture a step is one replay: the body is not run on the host again"
    graph.replay(lambda: bodies.append(1), ("other key",))
    assert len(captures) == 2 and captures[1].replays == 1
    graph.invalidate()
    graph.replay(lambda: bodies.append(1), ("other key",))
    assert len(captures) == 3


def test_new_buffers_invalidate_a_captured_step_and_the_same_shape_keeps_it(loaded, fake_compile, captures):
    options = GenerationOptions(cache="static", compile=STEP_GRAPH, max_new_tokens=8)
    prompt = encode(loaded, "Hi")
    setup = decode_setup_for(loaded, prompt.input_ids.shape, options)
    setup.begin(prompt, options)
    setup.step_graph.replay(lambda: None, setup.graph_key)
    captured = setup.step_graph.graph
    setup.begin(prompt, options)  # the same buffers: the graph still points at them
    assert not setup.step_graph.needs_capture(setup.graph_key) and setup.step_graph.graph is captured
    # More steps than the record holds (decode_setup_for would give another setup; the setup itself must not keep
    # a graph of buffers it dropped): new buffers, so a new capture.
    longer = dataclasses.replace(options, max_new_tokens=setup.state.record.shape[0] + 1)
    setup.begin(prompt, longer)
    assert setup.step_graph.graph is None and setup.step_graph.needs_capture(setup.graph_key)


def test_decode_in_step_graph_mode_runs_the_step_through_the_graph(loaded, fake_compile, captures, monkeypatch):
    options = GenerationOptions(cache="static", compile=STEP_GRAPH, max_new_tokens=8)
    prompt = encode(loaded, "Hi")
    setup = decode_setup_for(loaded, prompt.input_ids.shape, options)
    cache = setup.begin(prompt, options)
    bodies = []
    monkeypatch.setattr(setup, "decode_body", lambda index, cache: bodies.append(index))
    for index in (1, 2, 3):
        setup.decode(index, cache)
    assert bodies == [1] and captures[0].replays == 3
