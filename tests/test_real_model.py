"""The real offline model (SmolLM2-135M-Instruct from the shipped GGUF): both loops equal HF generate."""

import pytest

from core.loops.generation import generate
from core.loops.hf_generate import hf_generate
from core.request.options import GenerationOptions

pytestmark = pytest.mark.slow

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about GPUs.",
    "List three prime numbers.",
]


def test_answers_the_known_question(smol):
    result = generate(smol, PROMPTS[0], max_new_tokens=20)
    assert result.text == "The capital of France is Paris."
    assert result.token_ids[0][-1] == 2  # <|im_end|>


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_both_loops_equal_hf_generate(smol, prompt, cache):
    expected, _ = hf_generate(smol, prompt, GenerationOptions(max_new_tokens=40, cache=cache))
    for loop, lag in (("naive", 1), ("pipelined", 1), ("pipelined", 3)):
        result = generate(smol, prompt, loop=loop, cache=cache, max_new_tokens=40, lag=lag)
        assert result.token_ids == expected, (loop, lag)


def test_batch_of_three_with_different_lengths(smol):
    expected, _ = hf_generate(smol, PROMPTS, GenerationOptions(max_new_tokens=48, cache="static"))
    assert len({len(ids) for ids in expected}) > 1, "rows should end at different steps"
    for loop in ("naive", "pipelined"):
        assert generate(smol, PROMPTS, loop=loop, cache="static", max_new_tokens=48).token_ids == expected
