"""A run's input: the prompt as left-padded token ids, its EOS ids, where its output ends, and a fixed synthetic
prompt for benchmarks (the same ids on every machine)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from core.models.loading import LoadedModel
from core.request.options import is_int, require

Prompt = str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]]


@dataclass(frozen=True)
class EncodedPrompt:
    """A prompt as the loops feed it: left-padded token ids and their mask on the device, and whether any row is
    padded, known on the host (so that no decode step has to read the mask to find out)."""

    input_ids: torch.Tensor       # [batch, width]
    attention_mask: torch.Tensor  # [batch, width]: 0 over each row's padding, then ones
    padded: bool

    @property
    def width(self) -> int:
        return int(self.input_ids.shape[1])


def encode(loaded: LoadedModel, prompt: Prompt) -> EncodedPrompt:
    """Turn a string, a batch of strings, or token ids into left-padded token ids and their mask."""
    rows = prompt_rows(loaded.tokenizer, prompt)
    width = max(len(row) for row in rows)
    pad = loaded.tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(row)) + row for row in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows], dtype=torch.long)
    return EncodedPrompt(input_ids.to(loaded.device), mask.to(loaded.device),
                         padded=any(len(row) < width for row in rows))


def encode_prompt(loaded: LoadedModel, prompt: Prompt) -> tuple[torch.Tensor, torch.Tensor]:
    """`input_ids` and `attention_mask` of `encode`."""
    encoded = encode(loaded, prompt)
    return encoded.input_ids, encoded.attention_mask


def prompt_rows(tokenizer: Any, prompt: Prompt) -> list[list[int]]:
    if isinstance(prompt, str):
        return [_encode_text(tokenizer, prompt)]
    items = list(prompt) if isinstance(prompt, Sequence) else None
    require(bool(items), "the prompt is empty: give a string, a list of strings, or token ids")
    if all(isinstance(item, str) for item in items):
        return [_encode_text(tokenizer, text) for text in items]
    if all(is_int(item) for item in items):
        return [_checked_ids(tokenizer, items)]
    if all(isinstance(item, Sequence) and not isinstance(item, str) for item in items):
        return [_checked_ids(tokenizer, list(item)) for item in items]
    raise ValueError("the prompt must be a string, a list of strings, a list of token ids, or a list of such lists")


def _encode_text(tokenizer: Any, text: str) -> list[int]:
    require(bool(text.strip()), "the prompt is empty: type something for the model to answer")
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": text}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        return list(ids)
    return list(tokenizer(text)["input_ids"])


def _checked_ids(tokenizer: Any, ids: list[Any]) -> list[int]:
    require(bool(ids), "a prompt row has no token ids")
    vocab = len(tokenizer)
    require(all(is_int(i) and 0 <= i < vocab for i in ids),
             f"token ids must be whole numbers in [0, {vocab}); got {ids[:8]}{'...' if len(ids) > 8 else ''}")
    return [int(i) for i in ids]


def check_length(loaded: LoadedModel, prompt_tokens: int, max_new_tokens: int) -> None:
    limit = loaded.context_length
    require(prompt_tokens + max_new_tokens <= limit,
             f"prompt ({prompt_tokens} tokens) + max_new_tokens ({max_new_tokens}) = "
             f"{prompt_tokens + max_new_tokens} exceeds the model's context of {limit} tokens")



def cut_at_eos(rows: list[list[int]], eos_ids: Sequence[int]) -> list[list[int]]:
    """Cut each sequence after its first EOS: what follows is padding from the batch."""
    stops = set(eos_ids)
    return [row[: next((i + 1 for i, token in enumerate(row) if token in stops), len(row))] for row in rows]



def resolve_eos_ids(loaded: LoadedModel, override: int | Sequence[int] | None) -> list[int]:
    """The EOS ids a run stops at: the override, else the model's generation config, else the tokenizer's."""
    source = override if override is not None else loaded.model.generation_config.eos_token_id
    if source is None:
        source = loaded.tokenizer.eos_token_id
    ids = [source] if isinstance(source, int) else list(source or [])
    require(all(is_int(i) for i in ids), f"eos_token_id must be a whole number or a list of them, got {override!r}")
    vocab = getattr(loaded.model.config, "vocab_size", None)
    outside = [i for i in ids if vocab and not 0 <= i < vocab]
    require(not outside, f"eos_token_id {outside[0] if outside else ''} is outside the model's vocabulary "
                         f"(ids 0 to {vocab - 1 if vocab else '?'}): the model can never produce it")
    return ids



def synthetic_prompt(length: int) -> list[int]:
    """Fixed pseudo-random token ids (ids 100..10099): the same prompt on every machine."""
    if length < 1:
        raise ValueError(f"--prompt-tokens must be >= 1, got {length}")
    generator = torch.Generator().manual_seed(1234)
    return torch.randint(100, 10100, (length,), generator=generator).tolist()
