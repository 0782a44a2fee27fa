"""The generate() contestant: transformers' own `model.generate()` with the loops' cache and compile settings, and
with its DeferredStopCheck forced on for CUDA (transformers 5.24 enables it on mps only)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from core.kernels.products import traced_with
from core.loops.prompt import cut_at_eos, encode_prompt, resolve_eos_ids
from core.loops.step import step_kernels
from core.measure.nvtx import StepRanges, wanted
from core.measure.step_times import StepClock, Timings
from core.models.loading import LoadedModel
from core.request.options import HF, HF_DEFERRED, GenerationOptions, hf_generate_options


@dataclass(frozen=True)
class HFRun:
    """One generate() run: each row's token ids (through its first EOS), the prompt's width in tokens (its longest
    row: the padded prompt generate() was given) and the host's timings."""

    token_ids: list[list[int]]
    prompt_tokens: int
    timings: Timings


def hf_generate(loaded: LoadedModel, prompt: Any, options: GenerationOptions, deferred: bool = False,
                on_step: Callable[[], None] | None = None) -> tuple[list[list[int]], Timings]:
    """The token ids and timings of `hf_run`."""
    result = hf_run(loaded, prompt, options, deferred, on_step)
    return result.token_ids, result.timings


def hf_run(loaded: LoadedModel, prompt: Any, options: GenerationOptions, deferred: bool = False,
           on_step: Callable[[], None] | None = None) -> HFRun:
    """transformers' own generate() with the same cache and compile settings, timed on the host. `on_step` is called
    once per decode step, after its token is chosen (the sync audit's step marks).

    With options.nvtx (on CUDA) and `on_step`, each step also gets an NVTX range ("hf prefill", "hf step 1", ...,
    each from the mark before the step's forward to the next mark). Without `on_step` there is none: generate()
    calls no hook per step that costs no device work (a stopping criterion is one more kernel and tensor a step), so
    a timed run keeps its path and gets only the run's range (core.compare.run_contestant)."""
    from transformers import GenerationConfig, StoppingCriteriaList

    options, _ = hf_generate_options(options, loaded.device.type)
    input_ids, attention_mask = encode_prompt(loaded, prompt)
    config = GenerationConfig(
        max_new_tokens=options.max_new_tokens, do_sample=options.do_sample,
        temperature=options.temperature if options.do_sample else None,
        top_k=options.top_k if options.do_sample else None, top_p=options.top_p if options.do_sample else None,
        pad_token_id=loaded.tokenizer.pad_token_id, bos_token_id=loaded.model.generation_config.bos_token_id,
        eos_token_id=None if options.ignore_eos else (resolve_eos_ids(loaded, options.eos_token_id) or None),
        cache_implementation="static" if options.cache == "static" else None,
        disable_compile=options.compile == "off",
    )
    if options.compile != "off":
        from transformers import CompileConfig

        config.compile_config = CompileConfig(mode=options.compile)
    if options.seed is not None:
        torch.manual_seed(options.seed)
    ranges = StepRanges(HF_DEFERRED if deferred else HF, options.max_new_tokens) \
        if on_step is not None and wanted(options, loaded.device.type) else None
    kernels = step_kernels(loaded, options.compile)  # generate() compiles the model's forward with them too
    traced = (traced_with(kernels.products, kernels.o_proj, kernels.reads) if kernels is not None
              else contextlib.nullcontext())
    clock = StepClock(loaded.device, 1)
    clock.start()
    with _deferred_stop_check(deferred), torch.inference_mode(), traced:
        markers = StoppingCriteriaList([_StepMarker(on_step, ranges)]) if on_step is not None else None
        if ranges is not None:
            ranges.step(0)
        try:
            output = loaded.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                           generation_config=config, stopping_criteria=markers)
        finally:
            if ranges is not None:
                ranges.close()
    clock.stop()
    rows = output[:, input_ids.shape[1]:].tolist()
    token_ids = cut_at_eos(rows, [] if options.ignore_eos else resolve_eos_ids(loaded, options.eos_token_id))
    total_ms = (clock.t_end - clock.t0) * 1000
    new_tokens = sum(map(len, token_ids))
    timings = Timings(clock="host", total_ms=total_ms, ttft_ms=None, tokens_per_s=new_tokens / (total_ms / 1000),
                      new_tokens=new_tokens, kept_steps=len(rows[0]), computed_steps=len(rows[0]), step_ms=[],
                      ms_per_token_p50=total_ms / max(1, len(rows[0])), ms_per_token_p95=0.0,
                      host_queued_ms=[], host_known_ms=[])
    return HFRun(token_ids=token_ids, prompt_tokens=int(input_ids.shape[1]), timings=timings)


class _StepMarker:
    """A stopping criterion that never stops: generate() calls it once per step, and it tells `on_step` (and, with
    `ranges`, opens the next step's NVTX range: the step whose forward comes next)."""

    def __init__(self, on_step: Callable[[], None], ranges: StepRanges | None = None):
        self.on_step = on_step
        self.ranges = ranges
        self.steps = 0
        self.never: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        self.on_step()
        self.steps += 1
        if self.ranges is not None:
            # The mark after the last token has no step after it (nor has one of DeferredStopCheck's overshoot steps).
            if self.steps < len(self.ranges.names):
                self.ranges.step(self.steps)
            else:
                self.ranges.close()
        if self.never is None or self.never.shape[0] != input_ids.shape[0]:
            self.never = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        return self.never


@contextlib.contextmanager
def _deferred_stop_check(enabled: bool) -> Iterator[None]:
    """Turn on transformers' DeferredStopCheck for CUDA (5.24 enables it only on mps)."""
    if not enabled:
        yield
        return
    from transformers.generation import utils as generation_utils

    check = generation_utils.DeferredStopCheck
    original = check.__dict__["is_supported"]
    check.is_supported = staticmethod(lambda device, cache, cache_is_returned, is_assistant: not is_assistant)
    try:
        yield
    finally:
        check.is_supported = original
