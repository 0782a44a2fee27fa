"""transformers' own continuous batching as a contestant: the machinery of `model.generate_batch`
(`continuous_batching_context_manager`, a ContinuousBatchingManager running its loop on a thread of its own, a paged
cache), given the same workload, with `use_async_batching` off ("hf-batch") or on ("hf-batch-async": two sets of
inputs and outputs, the next batch prepared while the current one runs, the same idea as the pipelined loop).

As its docs use it: a GenerationConfig (greedy, the run's EOS) and a ContinuousBatchingConfig whose
`max_requests_per_batch` is the loops' number of slots; the cache is sized for the workload (`num_blocks`,
`max_batch_tokens`: left to itself it sizes them from the device's free memory, which on the CPU took half a minute).
Requests are added at their arrival times with their own `max_new_tokens` and `record_timestamps`; a token's time is
the manager's timestamp, taken when its loop has the token on the host, as ours are.

Its attention runs through transformers' "sdpa" (or a paged or flash variant it switches to) rather than the decode
kernels this project registers, which its continuous batching does not accept; the model's own implementation is
put back after each run. Async batching needs CUDA (or XPU).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from core.load.batching import BatchedRun, RequestResult, TokensListener
from core.models.loading import LoadedModel
from core.request.load import HF_BATCH, HF_BATCH_ASYNC
from core.request.workload import Workload

HF_BATCHING = (HF_BATCH, HF_BATCH_ASYNC)
PAGE_SIZE = 256  # transformers' default page: tokens of one layer a block holds
RESULT_WAIT_S = 600.0  # a run whose manager gives no result for this long has failed


def hf_batching_problem(loaded: LoadedModel, contestant: str) -> str | None:
    """Why `contestant` cannot run here, in one sentence, or None."""
    if contestant == HF_BATCH_ASYNC and loaded.device.type != "cuda":
        return "transformers' async batching needs CUDA (its ContinuousBatchingAsyncIOs refuses the CPU)"
    if loaded.tp > 1:
        return "transformers' continuous batching is not run here under tensor parallelism"
    return None


def run_hf_batching(loaded: LoadedModel, contestant: str, workload: Workload, prompt_ids: Sequence[list[int]], *,
                    slots: int, eos_ids: list[int], ignore_eos: bool, compiled: bool,
                    on_tokens: TokensListener | None = None) -> BatchedRun:
    """One run of transformers' continuous batching over `workload` (module doc)."""
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=False, eos_token_id=-1 if ignore_eos or not eos_ids else eos_ids,
                              pad_token_id=loaded.tokenizer.pad_token_id)
    batching = _batching_config(loaded, contestant, workload, prompt_ids, slots, compiled)
    with _cb_attention(loaded.model), torch.inference_mode():
        _forget_other_managers(loaded, (contestant, slots, compiled, tuple(eos_ids), ignore_eos))
        with loaded.model.continuous_batching_context_manager(generation_config=config,
                                                              continuous_batching_config=batching,
                                                              persistent_manager=True, warmup=True) as manager:
            return _timed(manager, contestant, workload, prompt_ids, slots, on_tokens)


def _timed(manager: Any, contestant: str, workload: Workload, prompt_ids: Sequence[list[int]], slots: int,
           on_tokens: TokensListener | None) -> BatchedRun:
    results = [RequestResult(r.index, r.arrival_s, len(prompt_ids[r.index])) for r in workload.requests]
    t0 = time.perf_counter()
    feeder = threading.Thread(target=_feed, args=(manager, workload, prompt_ids, t0, results), daemon=True,
                              name=f"{HF_BATCH} arrivals")
    feeder.start()
    finished, last_s = 0, 0.0
    while finished < len(results):
        output = manager.get_result(timeout=RESULT_WAIT_S)
        if output is None:
            raise RuntimeError(f"{contestant}: transformers' continuous batching gave no result for "
                               f"{RESULT_WAIT_S:.0f} s ({finished} of {len(results)} requests done)")
        if not output.is_finished():
            continue
        if output.error:
            raise RuntimeError(f"{contestant}: request {output.request_id} failed: {output.error}")
        result = results[int(output.request_id)]
        stamps = output.timestamps or [time.perf_counter()]
        result.tokens = list(output.generated_tokens)
        result.first_token_s, result.finished_s = stamps[0] - t0, stamps[-1] - t0
        last_s = max(last_s, stamps[-1] - t0)
        finished += 1
        if on_tokens is not None:
            on_tokens(result.index, result.tokens, result.finished_s)
    feeder.join()
    return BatchedRun(loop=contestant, requests=results, steps=0, slots=slots, total_s=last_s, timings={},
                      started_s=t0)


def _feed(manager: Any, workload: Workload, prompt_ids: Sequence[list[int]], t0: float,
          results: list[RequestResult]) -> None:
    """Each request added at its arrival time."""
    for request in sorted(workload.requests, key=lambda r: (r.arrival_s, r.index)):
        wait = t0 + request.arrival_s - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        results[request.index].admitted_s = time.perf_counter() - t0
        manager.add_request(list(prompt_ids[request.index]), request_id=str(request.index),
                            max_new_tokens=request.max_new_tokens, record_timestamps=True)


def _batching_config(loaded: LoadedModel, contestant: str, workload: Workload, prompt_ids: Sequence[list[int]],
                     slots: int, compiled: bool) -> Any:
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    longest = max(len(ids) for ids in prompt_ids) + workload.longest_output
    blocks = slots * -(-longest // PAGE_SIZE) + slots
    options: dict[str, Any] = dict(use_async_batching=contestant == HF_BATCH_ASYNC, max_requests_per_batch=slots,
                                   num_blocks=blocks, max_batch_tokens=max(len(ids) for ids in prompt_ids) + slots)
    if loaded.device.type == "cuda":
        options["use_cuda_graph"] = compiled  # its own graphs, as our compiled loops capture theirs
    return ContinuousBatchingConfig(**options)


def _forget_other_managers(loaded: LoadedModel, key: tuple) -> None:
    """A kept manager is reused only for the same contestant and settings (its cache is sized for them)."""
    model = loaded.model
    if getattr(model, "_syncscope_cb_key", None) != key:
        model.destroy_cached_continuous_batching_manager()
        model._syncscope_cb_key = key


def forget_managers(loaded: LoadedModel) -> None:
    """Free the kept manager and its cache (a run's end)."""
    with contextlib.suppress(Exception):
        loaded.model.destroy_cached_continuous_batching_manager()
    loaded.model._syncscope_cb_key = None


@contextlib.contextmanager
def _cb_attention(model: Any) -> Iterator[None]:
    """transformers' "sdpa" attention while its continuous batching runs (it refuses this project's decode kernels),
    the model's own afterwards."""
    own = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    try:
        yield
    finally:
        model.set_attn_implementation(own)
