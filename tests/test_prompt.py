"""core.loops.prompt: a run's input. Prompts as left-padded ids with their mask and padded flag, the checks on token
ids and lengths, the EOS ids a run stops at, cutting rows at EOS, and the synthetic benchmark prompt. (How generate()
takes each prompt form, and its errors for empty prompts, are in test_generation.py.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from core.loops.prompt import check_length, cut_at_eos, encode, resolve_eos_ids, synthetic_prompt

VOCAB = 49152  # tiny-random's


def test_a_batch_of_id_rows_is_left_padded_with_a_mask_over_the_padding_only(tiny):
    pad = tiny.tokenizer.pad_token_id
    encoded = encode(tiny, [[5, 6, 7, 8], [9], [10, 11]])
    assert encoded.input_ids.tolist() == [[5, 6, 7, 8], [pad, pad, pad, 9], [pad, pad, 10, 11]]
    assert encoded.attention_mask.tolist() == [[1, 1, 1, 1], [0, 0, 0, 1], [0, 0, 1, 1]]
    assert encoded.padded is True and encoded.width == 4
    assert encoded.input_ids.dtype == encoded.attention_mask.dtype == torch.long
    assert encoded.input_ids.device == tiny.device


def test_rows_of_one_length_are_not_padded(tiny):
    assert encode(tiny, [[5, 6], [7, 8]]).padded is False
    assert encode(tiny, "Hello").padded is False
    assert encode(tiny, [1, 2, 3]).input_ids.tolist() == [[1, 2, 3]]  # one row of ids


def test_each_string_of_a_batch_is_encoded_as_it_would_be_alone(tiny):
    batch = encode(tiny, ["Hi", "Tell me about the sea and the ships on it."])
    for row, text in enumerate(["Hi", "Tell me about the sea and the ships on it."]):
        alone = encode(tiny, text)
        kept = batch.attention_mask[row].bool()
        assert batch.input_ids[row][kept].tolist() == alone.input_ids[0].tolist()
    assert batch.padded


def test_a_tokenizer_without_a_chat_template_encodes_the_text_as_it_is():
    class Plain:
        chat_template = None
        pad_token_id = 0

        def __call__(self, text):
            return {"input_ids": [ord(c) for c in text]}

        def __len__(self):
            return 200

    loaded = SimpleNamespace(tokenizer=Plain(), device=torch.device("cpu"))
    assert encode(loaded, ["ab", "c"]).input_ids.tolist() == [[97, 98], [0, 99]]


@pytest.mark.parametrize(("prompt", "message"), [
    ([0, VOCAB], rf"whole numbers in \[0, {VOCAB}\)"),  # one past the vocabulary
    ([[1, 2], []], "a prompt row has no token ids"),
    ([[1, True]], "whole numbers"),  # a bool is no token id, though Python counts it an int
    ([[1, 2.0]], "whole numbers"),
    (["text", [1, 2]], "the prompt must be"),
    (["fine", "  "], "the prompt is empty"),  # every string of a batch
])
def test_a_bad_prompt_is_a_value_error_that_says_what_is_wrong(tiny, prompt, message):
    with pytest.raises(ValueError, match=message):
        encode(tiny, prompt)


def test_the_last_id_of_the_vocabulary_is_a_token(tiny):
    assert encode(tiny, [0, VOCAB - 1]).input_ids.tolist() == [[0, VOCAB - 1]]


def test_a_long_row_of_bad_ids_is_shown_cut_short(tiny):
    with pytest.raises(ValueError, match=r"got \[-1, 0, 0, 0, 0, 0, 0, 0\]\.\.\.$"):
        encode(tiny, [-1] + [0] * 20)


def test_the_prompt_and_new_tokens_may_fill_the_context_exactly(tiny):
    limit = tiny.context_length
    check_length(tiny, limit - 10, 10)
    with pytest.raises(ValueError, match=rf"= {limit + 1} exceeds the model's context of {limit} tokens"):
        check_length(tiny, limit - 10, 11)


# ------------------------------------------------------------------------------------------------ EOS

def test_each_row_is_cut_after_its_first_eos():
    rows = [[4, 2, 9, 2], [4, 5, 6], [7, 3, 8], [2]]
    assert cut_at_eos(rows, [2, 3]) == [[4, 2], [4, 5, 6], [7, 3], [2]]
    assert cut_at_eos(rows, []) == rows


def model_with(generation_eos, tokenizer_eos=1, vocab=100):
    return SimpleNamespace(model=SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=generation_eos),
                                                 config=SimpleNamespace(vocab_size=vocab)),
                           tokenizer=SimpleNamespace(eos_token_id=tokenizer_eos))


def test_the_eos_ids_come_from_the_run_then_the_generation_config_then_the_tokenizer():
    assert resolve_eos_ids(model_with(7), 9) == [9]
    assert resolve_eos_ids(model_with(7), [9, 10]) == [9, 10]
    assert resolve_eos_ids(model_with(7), None) == [7]
    assert resolve_eos_ids(model_with([7, 8]), None) == [7, 8]
    assert resolve_eos_ids(model_with(None, tokenizer_eos=3), None) == [3]
    assert resolve_eos_ids(model_with(None, tokenizer_eos=None), None) == []


def test_the_tiny_models_eos_is_its_generation_configs(tiny):
    assert resolve_eos_ids(tiny, None) == [tiny.model.generation_config.eos_token_id]


@pytest.mark.parametrize(("override", "message"), [
    (100, "eos_token_id 100 is outside the model's vocabulary"),
    ([5, -1], "eos_token_id -1 is outside"),
    (["2"], "must be a whole number or a list of them"),
    ([True], "must be a whole number or a list of them"),
])
def test_an_eos_id_the_model_cannot_produce_is_refused(override, message):
    with pytest.raises(ValueError, match=message):
        resolve_eos_ids(model_with(7), override)


# ------------------------------------------------------------------------------------------------ synthetic prompt

def test_the_synthetic_prompt_is_the_same_ids_everywhere():
    """Reports from different machines compare the same prompt only if these ids never change."""
    assert synthetic_prompt(8) == [9875, 9271, 6906, 9465, 6416, 664, 9532, 5725]
    longer = synthetic_prompt(500)
    assert longer[:8] == synthetic_prompt(8) and len(longer) == 500
    assert all(100 <= token < 10100 for token in longer)


def test_a_synthetic_prompt_needs_a_token():
    with pytest.raises(ValueError, match="--prompt-tokens must be >= 1, got 0"):
        synthetic_prompt(0)
