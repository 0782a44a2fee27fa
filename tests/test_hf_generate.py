"""core.loops.hf_generate: the generate() contestant. Its tokens cut at each row's EOS (or not, with ignore_eos), its
host-clock timings, its per-step marks that never stop a run, the compile it leaves off on the CPU, its seeded
sampling, and transformers' DeferredStopCheck switched on only while it runs. (That its greedy tokens are the loops'
is in test_generation.py; its audit in test_sync_audit.py; hf-deferred on a GPU in test_cuda*.py.)"""

from __future__ import annotations

import pytest
import torch

from core.loops.hf_generate import _deferred_stop_check, hf_generate, hf_run
from core.request.options import GenerationOptions

BATCH = ["Hi", "Tell me about the sea and the ships on it."]
STEPS = 12


def tokens(loaded, prompt=BATCH, **options):
    return hf_generate(loaded, prompt, GenerationOptions(max_new_tokens=STEPS, **options))


@pytest.fixture(scope="module")
def free(tiny):
    """Each row's tokens when nothing stops it."""
    rows, _ = tokens(tiny, ignore_eos=True)
    assert [len(row) for row in rows] == [STEPS, STEPS]
    return rows


def test_each_row_ends_with_its_first_eos_and_the_count_is_of_the_tokens_kept(tiny, free):
    eos = next(token for position, token in enumerate(free[1]) if position >= 3 and token not in free[1][:position]
               and token not in free[0])
    rows, timings = tokens(tiny, eos_token_id=eos)
    stop = free[1].index(eos)
    assert rows == [free[0], free[1][: stop + 1]]
    assert timings.new_tokens == STEPS + stop + 1
    assert timings.kept_steps == timings.computed_steps == STEPS  # row 0 never stopped: generate() ran every step


def test_ignore_eos_keeps_every_token_past_eos(tiny, free):
    rows, timings = tokens(tiny, eos_token_id=free[1][2], ignore_eos=True)
    assert rows == free and timings.new_tokens == 2 * STEPS


def test_the_timings_are_the_host_clocks_over_the_whole_call(tiny):
    _, timings = tokens(tiny, ignore_eos=True)
    assert timings.clock == "host" and timings.ttft_ms is None and timings.step_ms == []
    assert timings.total_ms > 0
    assert timings.tokens_per_s == pytest.approx(2 * STEPS / (timings.total_ms / 1000))
    assert timings.ms_per_token_p50 == pytest.approx(timings.total_ms / STEPS)


def test_a_run_says_how_wide_its_prompt_was(tiny, free):
    from core.loops.prompt import encode

    result = hf_run(tiny, BATCH, GenerationOptions(max_new_tokens=STEPS, ignore_eos=True))
    assert result.prompt_tokens == encode(tiny, BATCH).width  # the longer row: the padded batch generate() got
    assert result.token_ids == free


def test_on_step_marks_every_step_and_never_stops_the_run(tiny, free):
    marks = []
    rows, _ = hf_generate(tiny, BATCH, GenerationOptions(max_new_tokens=STEPS, ignore_eos=True),
                          on_step=lambda: marks.append(1))
    assert rows == free
    assert len(marks) == STEPS


def test_a_marked_run_still_stops_at_eos(tiny, free):
    eos = free[0][4] if free[0][4] not in free[0][:4] else free[0][5]
    marks = []
    rows, _ = hf_generate(tiny, "Hi", GenerationOptions(max_new_tokens=STEPS, eos_token_id=eos),
                          on_step=lambda: marks.append(1))
    assert rows == [free[0][: free[0].index(eos) + 1]]
    assert len(marks) == len(rows[0])


@pytest.fixture
def configs(tiny, monkeypatch):
    """The GenerationConfig of each generate() call, which still runs."""
    seen = []
    generate = tiny.model.generate

    def recorded(**kwargs):
        seen.append(kwargs["generation_config"])
        return generate(**kwargs)

    monkeypatch.setattr(tiny.model, "generate", recorded)
    return seen


def test_generate_gets_the_loops_cache_and_sampling_settings(tiny, configs):
    tokens(tiny, prompt="Hi", cache="static")
    tokens(tiny, prompt="Hi", do_sample=True, temperature=1.5, top_k=50, top_p=0.9, ignore_eos=True)
    static, sampled = configs
    assert static.cache_implementation == "static" and static.do_sample is False
    assert static.temperature is None and static.top_k is None and static.top_p is None  # greedy: none set
    assert static.eos_token_id == [tiny.model.generation_config.eos_token_id]
    assert static.pad_token_id == tiny.tokenizer.pad_token_id and static.max_new_tokens == STEPS
    assert sampled.cache_implementation is None and sampled.do_sample is True
    assert (sampled.temperature, sampled.top_k, sampled.top_p) == (1.5, 50, 0.9)
    assert sampled.eos_token_id is None  # ignore_eos: generate() must not stop either


def test_compile_asked_for_on_the_cpu_is_turned_off_in_generate(tiny, configs, free):
    rows, _ = tokens(tiny, cache="static", compile="default", ignore_eos=True)
    assert rows == free
    assert configs[0].disable_compile is True


def test_seeded_sampling_repeats_and_another_seed_differs(tiny, free):
    sample = dict(do_sample=True, temperature=1.5, top_k=50, ignore_eos=True)
    first, _ = tokens(tiny, seed=3, **sample)
    assert tokens(tiny, seed=3, **sample)[0] == first
    assert tokens(tiny, seed=4, **sample)[0] != first
    assert first != free


# ------------------------------------------------------------------------------------------------ DeferredStopCheck

def deferred_on(device: str) -> bool:
    from transformers.generation.utils import DeferredStopCheck

    return DeferredStopCheck.is_supported(torch.device(device), None, False, False)


def test_deferred_stop_check_is_on_for_cuda_only_inside_and_never_for_an_assistant():
    from transformers.generation.utils import DeferredStopCheck

    original = DeferredStopCheck.__dict__["is_supported"]
    assert not deferred_on("cuda")  # transformers' own choice: mps only
    with _deferred_stop_check(True):
        assert deferred_on("cuda")
        assert not DeferredStopCheck.is_supported(torch.device("cuda"), None, False, True)
    assert DeferredStopCheck.__dict__["is_supported"] is original and not deferred_on("cuda")
    with _deferred_stop_check(False):
        assert not deferred_on("cuda")


def test_a_deferred_run_that_fails_leaves_generate_as_it_was(tiny):
    """On the CPU DeferredStopCheck fails (its events need a device): later generate() calls must not inherit it."""
    from transformers.generation.utils import DeferredStopCheck

    original = DeferredStopCheck.__dict__["is_supported"]
    with pytest.raises(RuntimeError):
        hf_generate(tiny, "Hi", GenerationOptions(max_new_tokens=4), deferred=True)
    assert DeferredStopCheck.__dict__["is_supported"] is original
    assert len(tokens(tiny, prompt="Hi", ignore_eos=True)[0][0]) == STEPS
