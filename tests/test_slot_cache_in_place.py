"""The batched decode step writes each row's new key and value into the slot cache in place: compiled, it has no loop
over the whole cache (a `scatter_` into it compiled into a copy of the whole cache and a copy back, every layer of
every step: docs/TUNING.md, "The batched step's cache written in place")."""

from __future__ import annotations

import pytest
import torch
from torch._inductor.utils import run_and_get_code

from core.load.slots import Slots
from core.request.options import GenerationOptions

SLOTS, CACHE_LEN = 3, 272  # 3 x 2 heads x 272 positions x 16 = 26,112 values a layer: a size nothing else has


def _compiled_step_code(loaded) -> str:
    torch._dynamo.reset()
    loaded.compiled_forwards.clear()
    slots = Slots(loaded, SLOTS, CACHE_LEN, 16, GenerationOptions(cache="static", compile="default"))
    slots.begin([], ignore_eos=True)
    with torch.inference_mode():
        _, code = run_and_get_code(slots.decode)
    torch._dynamo.reset()
    loaded.compiled_forwards.clear()
    return "\n".join(code)


@pytest.mark.slow
def test_the_compiled_batched_step_touches_no_more_of_the_cache_than_each_rows_new_position(tiny):
    keys = tiny.model.config.num_key_value_heads
    head_dim = tiny.model.config.hidden_size // tiny.model.config.num_attention_heads
    whole_cache = SLOTS * keys * CACHE_LEN * head_dim
    code = _compiled_step_code(tiny)
    assert code, "inductor generated no code for the step"
    assert f"{whole_cache}L" not in code and f"xnumel = {whole_cache}" not in code
