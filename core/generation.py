"""Two token-generation loops over one shared decode step.

The *naive* loop asks the device after every step whether generation is over (`.item()` on the stop flag),
so the host waits for the device each step and cannot queue the next one meanwhile.
The *pipelined* loop copies the stop flag and the new tokens asynchronously into pinned host memory and reads
them `lag` steps later, so the host keeps the device's queue full. Steps it computes past the end (overshoot)
are discarded. Everything else (prefill, the decode step, cache, compile, sampling, stop rules) is shared.
The one step the pipelined loop waits for is prefill: it reads the first token as soon as that copy lands, before
queuing step 1 (on a GPU the device idles for one launch gap, once per run), so its time to first token is naive's
and both loops' decode phase (core.step_times) starts at the same point: the first token known, step 1 not yet queued.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from core.models import LoadedModel, compile_failure, new_static_cache
from core.options import (
    CUDA_GRAPH_COMPILE_MODES,
    NO_CHECK,
    STEP_GRAPH,
    GenerationOptions,
    adapt_to_device,
    inductor_options_from_env,
    is_int,
    require,
    static_cache_length,
)
from core.parallel import SYMMETRIC, gather_device_spans
from core.pdl import pdl_inductor_options
from core.step_times import StepClock, Timings

WARMUP_STEPS = 4

Prompt = str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]]


@dataclass(frozen=True)
class TokenEvent:
    """New tokens of one decode step: one entry per sequence, None where that sequence had already ended."""

    step: int
    tokens: tuple[int | None, ...]
    host_time_s: float


@dataclass
class GenerationResult:
    """What one run produced: per-sequence token ids (through the first EOS), their text, and timings."""

    token_ids: list[list[int]]
    texts: list[str]
    prompt_tokens: int
    options: GenerationOptions
    timings: Timings
    notices: list[str] = field(default_factory=list)
    started_s: float = 0.0  # perf_counter when the timed run began: the origin of its timings' host times

    @property
    def text(self) -> str:
        return self.texts[0]

    @property
    def new_tokens(self) -> int:
        return sum(len(ids) for ids in self.token_ids)


def generate(loaded: LoadedModel, prompt: Prompt, *, on_tokens: Callable[[TokenEvent], None] | None = None,
             **options: Any) -> GenerationResult:
    """Generate with the naive or the pipelined loop; see the module docstring for how they differ. `options` are
    GenerationOptions' fields by name (loop, max_new_tokens, cache, compile, lag, ...), each defaulting as there."""
    return run(loaded, prompt, GenerationOptions(**options), on_tokens=on_tokens)


def run(
    loaded: LoadedModel,
    prompt: Prompt,
    options: GenerationOptions,
    *,
    on_tokens: Callable[[TokenEvent], None] | None = None,
) -> GenerationResult:
    """`generate` with the options already gathered (and checked: GenerationOptions cannot be made invalid)."""
    notices: list[str] = []
    options = _adapt_to_device(loaded, options, notices)
    input_ids, attention_mask = encode_prompt(loaded, prompt)
    _check_length(loaded, input_ids.shape[1], options.max_new_tokens)
    setup = _setup_for(loaded, input_ids.shape, options)
    try:
        warmup_ms = setup.warm_up(input_ids, attention_mask, options) if not setup.warmed else 0.0
        with torch.inference_mode():
            kept, computed, clock = _timed_run(setup, input_ids, attention_mask, options, on_tokens)
    except Exception as exc:  # the compiler's pages of text become one line; any other error is raised as it is
        failure = compile_failure(loaded, options.compile, exc)
        if failure is None:
            raise
        raise failure from exc
    token_ids = cut_at_eos(setup.state.out[:kept].T.tolist(), [] if options.ignore_eos else setup.eos_ids_list)
    timings = clock.summary(kept_steps=kept, computed_steps=computed, new_tokens=sum(map(len, token_ids)),
                            warmup_ms=warmup_ms, compile_ms=setup.take_compile_ms(warmup_ms),
                            rows=len(token_ids))
    timings.rank_device_spans = gather_device_spans(clock.t0, timings.device_start_ms, timings.device_end_ms)
    if options.loop == NO_CHECK:
        _forget_host_observations(timings)
    texts = [loaded.tokenizer.decode(ids, skip_special_tokens=True) for ids in token_ids]
    return GenerationResult(token_ids=token_ids, texts=texts, prompt_tokens=int(input_ids.shape[1]),
                            options=options, timings=timings, notices=notices, started_s=clock.t0)


def _forget_host_observations(timings: Timings) -> None:
    """The no-check loop learns all its tokens at the end, so when each became known says nothing about it."""
    timings.ttft_ms = timings.decode_tokens = timings.decode_ms = timings.decode_tokens_per_s = None
    if timings.clock == "host":
        timings.step_ms, timings.ms_per_token_p50, timings.ms_per_token_p95 = [], None, None


# ----------------------------------------------------------------------------------------------- input checks

def _adapt_to_device(loaded: LoadedModel, options: GenerationOptions, notices: list[str]) -> GenerationOptions:
    adapted, changes = adapt_to_device(options, loaded.device.type)
    notices.extend(changes)
    return adapted


def encode_prompt(loaded: LoadedModel, prompt: Prompt) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn a string, a batch of strings, or token ids into left-padded `input_ids` and `attention_mask`."""
    rows = _prompt_rows(loaded.tokenizer, prompt)
    width = max(len(row) for row in rows)
    pad = loaded.tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(row)) + row for row in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows], dtype=torch.long)
    return input_ids.to(loaded.device), mask.to(loaded.device)


def _prompt_rows(tokenizer: Any, prompt: Prompt) -> list[list[int]]:
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


def _check_length(loaded: LoadedModel, prompt_tokens: int, max_new_tokens: int) -> None:
    limit = loaded.context_length
    require(prompt_tokens + max_new_tokens <= limit,
             f"prompt ({prompt_tokens} tokens) + max_new_tokens ({max_new_tokens}) = "
             f"{prompt_tokens + max_new_tokens} exceeds the model's context of {limit} tokens")


def cut_at_eos(rows: list[list[int]], eos_ids: Sequence[int]) -> list[list[int]]:
    """Cut each sequence after its first EOS: what follows is padding from the batch."""
    stops = set(eos_ids)
    return [row[: next((i + 1 for i, token in enumerate(row) if token in stops), len(row))] for row in rows]


# ------------------------------------------------------------------------------------------ the shared step

@dataclass
class DecodeState:
    """Device buffers of one run. The step writes step i's tokens to out[i] and its stop flag to done[i]."""

    tokens: torch.Tensor      # [B] the token each sequence feeds into the next step
    positions: torch.Tensor   # [B] its position id
    unfinished: torch.Tensor  # [B] bool
    record: torch.Tensor      # [max_steps, B + 1]: each step's tokens, then its stop flag (all finished)
    mask: torch.Tensor        # [B, cache length] attention mask: prompt padding, then ones
    step_index: torch.Tensor  # [1] index of the step being computed, kept on the device for CUDA graphs

    @classmethod
    def allocate(cls, batch: int, mask_len: int, out_rows: int, device: torch.device) -> DecodeState:
        def zeros(*shape: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        return cls(tokens=zeros(batch), positions=zeros(batch), unfinished=zeros(batch, dtype=torch.bool),
                   record=zeros(out_rows, batch + 1), mask=zeros(batch, mask_len), step_index=zeros(1))

    @property
    def out(self) -> torch.Tensor:
        return self.record[:, :-1]

    @property
    def done(self) -> torch.Tensor:
        return self.record[:, -1]

    def fits(self, batch: int, mask_len: int, out_rows: int) -> bool:
        return self.mask.shape == (batch, mask_len) and self.record.shape[0] >= out_rows

    def reset(self, attention_mask: torch.Tensor) -> None:
        """Refill in place: a captured CUDA graph keeps pointing at these same buffers."""
        self.tokens.zero_()
        self.positions.copy_(attention_mask.sum(dim=1))
        self.unfinished.fill_(True)
        self.mask.fill_(1)
        self.mask[:, : attention_mask.shape[1]] = attention_mask
        self.step_index.zero_()


class DecodeSetup:
    """What decoding one input shape needs, shared by both loops: for one (batch, cache, compile) shape, the cache,
    the (compiled) forward and step, the device buffers, and the warm-up that builds them."""

    def __init__(self, loaded: LoadedModel, batch: int, cache_len: int, options: GenerationOptions):
        self.loaded = loaded
        self.model = loaded.model
        self.device = loaded.device
        self.batch = batch
        self.cache_len = cache_len
        self.cache_kind = options.cache
        self.compile_mode = options.compile
        self.static_cache = _new_static_cache(loaded, cache_len) if options.cache == "static" else None
        self.forward = _forward_fn(loaded, options.compile)
        self.step_graph: StepGraph | None = StepGraph() if options.compile == STEP_GRAPH else None
        self.argmax = _compiled_argmax() if self.step_graph is not None else None
        self.warmed = False
        self._compile_ms_pending = options.compile != "off"
        self.state: DecodeState = None  # type: ignore[assignment]
        self.eos_ids_list: list[int] = []
        self.eos_ids: torch.Tensor | None = None
        self.pad = torch.tensor(loaded.tokenizer.pad_token_id, dtype=torch.long, device=loaded.device)
        self.graph_key: tuple = ()
        self.reusables: dict = {}  # events and pinned buffers, allocated once per shape and reused across runs

    def take_compile_ms(self, warmup_ms: float) -> float:
        """The first warm-up of a compiled shape is its compile time; report it once."""
        if self._compile_ms_pending and warmup_ms > 0:
            self._compile_ms_pending = False
            return warmup_ms
        return 0.0

    def warm_up(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, options: GenerationOptions) -> float:
        """Run a few untimed steps so compilation, CUDA-graph capture and library set-up stay out of the timings."""
        start = time.perf_counter()
        warm = replace(options, max_new_tokens=min(options.max_new_tokens, WARMUP_STEPS), loop="naive")
        with torch.inference_mode():
            _timed_run(self, input_ids, attention_mask, warm, None)
        _synchronize(self.device)
        self.warmed = True
        return (time.perf_counter() - start) * 1000

    def begin(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, options: GenerationOptions) -> Any:
        """Reset the cache and buffers for a new run; return the cache object the forward uses."""
        batch, width = input_ids.shape
        max_steps = options.max_new_tokens
        cache = self._fresh_cache()
        eos_ids = resolve_eos_ids(self.loaded, options.eos_token_id) or [-1]  # -1: matches no token
        if self.eos_ids is None or eos_ids != self.eos_ids_list:
            # A new tensor only when the ids change: a captured step graph reads this very memory.
            self.eos_ids = torch.tensor(eos_ids, dtype=torch.long, device=self.device)
        self.eos_ids_list = eos_ids
        self.options = options
        self.generator = _generator(self.device, options, use_default=self.step_graph is not None)
        mask_len = self.cache_len if self.static_cache is not None else width + max_steps
        out_rows = max(self.cache_len, max_steps)
        if self.state is None or not self.state.fits(batch, mask_len, out_rows):
            self.state = DecodeState.allocate(batch, mask_len, out_rows, self.device)
            if self.step_graph is not None:
                self.step_graph.invalidate()
        self.state.reset(attention_mask)
        self.prompt_width = width
        self.graph_key = step_graph_key(options, eos_ids, self.state)
        return cache

    def _fresh_cache(self) -> Any:
        if self.static_cache is not None:
            self.static_cache.reset()
            return self.static_cache
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: Any) -> None:
        """Step 0: the whole prompt through the model (eager), then the first token."""
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        self.commit(logits)

    def decode(self, index: int, cache: Any) -> None:
        """Step `index` >= 1: feed the previous tokens, pick the next ones (one graph launch in step-graph mode)."""
        if self.step_graph is not None:
            self.step_graph.replay(lambda: self.decode_body(index, cache), self.graph_key)
        else:
            self.decode_body(index, cache)

    def decode_body(self, index: int, cache: Any) -> None:
        state = self.state
        kv_len = self.cache_len if self.static_cache is not None else self.prompt_width + index
        logits = self.forward(input_ids=state.tokens[:, None], attention_mask=state.mask[:, :kv_len],
                              position_ids=state.positions[:, None], cache=cache, use_cache=True,
                              logits_to_keep=1).logits[:, -1]
        state.positions.add_(1)
        self.commit(logits)

    def commit(self, logits: torch.Tensor) -> None:
        """Pick the next tokens, pad finished rows, write this step's out and done rows: no host sync anywhere."""
        state, options = self.state, self.options
        if self.argmax is not None and not options.do_sample:
            tokens = self.argmax(logits)
        else:
            tokens = select_next_tokens(logits, options, self.generator)
        tokens = torch.where(state.unfinished, tokens, self.pad)
        if not options.ignore_eos:
            # Not torch.isin: from about 17 ids on it sorts and calls unique(), a host sync that also breaks capture.
            state.unfinished &= ~(tokens[:, None] == self.eos_ids).any(dim=1)
        # Tokens and stop flag share one row, so the pipelined loop moves them with a single copy.
        finished = state.unfinished.any().logical_not().long()
        state.record.index_copy_(0, state.step_index, torch.cat((tokens, finished[None]))[None])
        state.tokens.copy_(tokens)
        state.step_index.add_(1)


def select_next_tokens(logits: torch.Tensor, options: GenerationOptions, generator: Any) -> torch.Tensor:
    """Greedy argmax, or temperature / top-k / top-p sampling without a host sync."""
    if not options.do_sample:
        return logits.argmax(dim=-1)
    scores = logits.float() / options.temperature
    if options.top_k:
        kth = torch.topk(scores, min(options.top_k, scores.shape[-1]), dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if options.top_p < 1.0:
        scores = _top_p_filter(scores, options.top_p)
    probs = torch.softmax(scores, dim=-1)
    # Gumbel-style sampling: argmax(p / Exp(1)) draws from p, and unlike torch.multinomial never syncs.
    noise = torch.empty_like(probs).exponential_(1.0, generator=generator)
    return (probs / noise).argmax(dim=-1)


ARGMAX_BLOCK = 256


def _compiled_argmax() -> Callable[[torch.Tensor], torch.Tensor]:
    """Greedy choice in two compiled stages: ATen's argmax over a 128K vocabulary at batch 1 runs on one block and
    took 28 µs of a 3.6 ms step on the H200 (Llama-8B, TP=2); inductor's single reduction, 20 µs."""
    return torch.compile(blockwise_argmax, dynamic=False)


def blockwise_argmax(logits: torch.Tensor) -> torch.Tensor:
    """`logits.argmax(-1)` for (batch, vocab) logits, as the maximum of each block of 256 and then the best block,
    so the first stage spreads over the whole GPU. Ties go to the lowest index, as with argmax: the first block
    holding the maximum, and the first position in it."""
    batch, vocab = logits.shape
    padded = F.pad(logits, (0, -vocab % ARGMAX_BLOCK), value=float("-inf")).view(batch, -1, ARGMAX_BLOCK)
    block_max, block_index = padded.max(dim=-1)
    best_block = block_max.argmax(dim=-1, keepdim=True)
    return (best_block * ARGMAX_BLOCK + block_index.gather(-1, best_block)).squeeze(-1)


def _top_p_filter(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_scores, order = torch.sort(scores, descending=False, dim=-1)
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative <= (1.0 - top_p)
    drop_sorted[..., -1:] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return scores.masked_fill(drop, float("-inf"))


def _generator(device: torch.device, options: GenerationOptions, use_default: bool = False) -> Any:
    if not options.do_sample:
        return None
    seed = options.seed if options.seed is not None else torch.seed()
    if use_default:
        # A graph captures the default CUDA generator and advances its offset on every replay; a private
        # generator would need registering with each graph. Seeding it here is a side effect on global state.
        torch.cuda.manual_seed(seed)
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


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


def _new_static_cache(loaded: LoadedModel, cache_len: int) -> Any:
    return new_static_cache(loaded.model, cache_len)


def _forward_fn(loaded: LoadedModel, mode: str) -> Callable[..., Any]:
    if mode == "off":
        return loaded.model
    if mode not in loaded.compiled_forwards:
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        # In step-graph mode we capture the graph ourselves, so inductor must not add CUDA graphs of its own.
        # That mode also turns on coordinate-descent tuning, with which inductor rewrites batch-1 matmuls as
        # fused Triton reductions that read the weights closer to HBM bandwidth than cuBLAS's GEMV.
        inductor_mode = "max-autotune-no-cudagraphs" if mode == STEP_GRAPH else mode
        extra = pdl_inductor_options(loaded.device) if mode == STEP_GRAPH else {}
        if mode == STEP_GRAPH and loaded.all_reduce in SYMMETRIC:
            extra["_collective.auto_select"] = True
        extra.update(inductor_overrides())
        if extra:
            options = {**torch._inductor.list_mode_options(inductor_mode), **extra}
            compiled = torch.compile(loaded.model.forward, options=options, dynamic=False, fullgraph=False)
        else:
            compiled = torch.compile(loaded.model.forward, mode=inductor_mode, dynamic=False, fullgraph=False)
        wants_marks = mode in CUDA_GRAPH_COMPILE_MODES and mode != STEP_GRAPH
        loaded.compiled_forwards[mode] = _mark_steps(compiled) if wants_marks else compiled
    return loaded.compiled_forwards[mode]


def inductor_overrides() -> dict[str, Any]:
    """Inductor options a user adds to every compile, as JSON in SYNCSCOPE_INDUCTOR_OPTIONS (reported with results)."""
    return inductor_options_from_env()


def _mark_steps(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """Tell CUDA-graph trees that each call is a new step, so the last step's outputs may be overwritten."""

    def forward(**kwargs: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(**kwargs)

    return forward


def _setup_for(loaded: LoadedModel, shape: torch.Size, options: GenerationOptions) -> DecodeSetup:
    """The decode setup of this input shape, built on first use and kept on `loaded` for later runs."""
    batch, width = shape
    static = options.cache == "static"
    cache_len = static_cache_length(width, options.max_new_tokens, options.lag) if static else 0
    key = (batch, options.cache, cache_len, options.compile)
    if key not in loaded.setups:
        loaded.setups[key] = DecodeSetup(loaded, batch, cache_len, options)
    return loaded.setups[key]


class StepGraph:
    """One CUDA graph holding a whole decode step: forward, token choice, EOS masking, output write, stop flag.

    The first call runs the step eagerly twice on a side stream (compiling and warming the kernels), then
    captures it; every later call is a single `replay()`, so the host launches once per step. The graph points
    at the decode setup's persistent buffers and static cache, which every run refills in place.
    """

    WARM_RUNS = 2

    def __init__(self) -> None:
        self.graph: Any = None
        self.key: tuple = ()

    def invalidate(self) -> None:
        self.graph = None

    def needs_capture(self, key: tuple) -> bool:
        return self.graph is None or key != self.key

    def replay(self, body: Callable[[], None], key: tuple) -> None:
        """Replay; capture first when nothing is captured yet or the step's baked-in choices changed."""
        if self.needs_capture(key):
            self.graph = None
            self.graph = self._capture(body)
            self.key = key
        self.graph.replay()

    def _capture(self, body: Callable[[], None]) -> Any:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.WARM_RUNS):
                body()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
        return graph


def step_graph_key(options: GenerationOptions, eos_ids: list[int], state: DecodeState) -> tuple:
    """What a captured step bakes in besides its buffers: a change in any of these needs a new capture."""
    return (options.do_sample, options.temperature, options.top_k, options.top_p, options.ignore_eos,
            tuple(eos_ids), id(state))


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------------------------- the loops

@dataclass
class _LoopContext:
    setup: DecodeSetup
    cache: Any
    clock: StepClock
    on_tokens: Callable[[TokenEvent], None] | None
    eos_ids: frozenset[int]
    ignore_eos: bool
    mirror: HostMirror | None = None
    finished_rows: set[int] = field(default_factory=set)

    def queue_step(self, index: int, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """Queue step `index` (0: prefill) between the clock's two host marks; on the CPU this computes it."""
        self.clock.before_step(index)
        if index == 0:
            self.setup.prefill(input_ids, attention_mask, self.cache)
        else:
            self.setup.decode(index, self.cache)
        self.clock.after_step(index)

    def deliver(self, index: int, tokens: list[int]) -> None:
        """Hand one step's tokens to the watcher; rows that ended before this step get None."""
        visible = tuple(None if row in self.finished_rows else token for row, token in enumerate(tokens))
        if not self.ignore_eos:
            self.finished_rows.update(row for row, token in enumerate(visible) if token in self.eos_ids)
        self.on_tokens(TokenEvent(step=index, tokens=visible, host_time_s=time.perf_counter()))


def _timed_run(
    setup: DecodeSetup,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    options: GenerationOptions,
    on_tokens: Callable[[TokenEvent], None] | None,
) -> tuple[int, int, StepClock]:
    """One run of the chosen loop; returns (steps kept, steps computed, the clock)."""
    clock = StepClock.for_run(setup, options.max_new_tokens)
    # Pinned buffers and events are set up before the clock starts, so their first allocation is never timed.
    mirror = HostMirror.for_run(setup, options) if options.loop == "pipelined" else None
    clock.start()
    cache = setup.begin(input_ids, attention_mask, options)
    context = _LoopContext(setup=setup, cache=cache, clock=clock, on_tokens=on_tokens,
                           eos_ids=frozenset(setup.eos_ids_list), ignore_eos=options.ignore_eos, mirror=mirror)
    loop = {"naive": _naive_loop, "pipelined": _pipelined_loop, NO_CHECK: _no_check_loop}[options.loop]
    kept, computed = loop(context, input_ids, attention_mask, options)
    clock.stop()
    return kept, computed, clock


def _naive_loop(ctx: _LoopContext, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                options: GenerationOptions) -> tuple[int, int]:
    state = ctx.setup.state
    for index in range(options.max_new_tokens):
        ctx.queue_step(index, input_ids, attention_mask)
        ctx.clock.waiting(index)
        # What a streamer does: one more sync (the one that blocks, when there is a streamer).
        tokens = state.out[index].tolist() if ctx.on_tokens is not None else None
        finished = read_stop_flag(state, index)
        ctx.clock.known(index)  # before the watcher's callback, so a wait span is the wait alone
        if tokens is not None:
            ctx.deliver(index, tokens)
        if finished:
            return index + 1, index + 1
    return options.max_new_tokens, options.max_new_tokens


def read_stop_flag(state: DecodeState, index: int) -> bool:
    """The naive loop's per-step sync: the host waits here until the device has computed step `index`."""
    return bool(state.done[index].item())


def _pipelined_loop(ctx: _LoopContext, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    options: GenerationOptions) -> tuple[int, int]:
    mirror = ctx.mirror
    mirror.state = ctx.setup.state
    last = options.max_new_tokens
    for index in range(last):
        ctx.queue_step(index, input_ids, attention_mask)
        mirror.send(index)
        # The first token is read as soon as prefill's copy lands, before step 1 is queued: the time to first token
        # is naive's, for the price of one wait (on a GPU, one launch gap before step 1) per run, not per step.
        seen = index - options.lag if index > 0 else 0
        if (index == 0 or seen > 0) and _receive(ctx, mirror, seen):
            return seen + 1, index + 1
    for seen in range(max(1, last - options.lag), last):
        if _receive(ctx, mirror, seen):
            return seen + 1, last
    return last, last


def _no_check_loop(ctx: _LoopContext, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   options: GenerationOptions) -> tuple[int, int]:
    """Upper-bound baseline: all max_new_tokens steps, never asking whether generation is over."""
    for index in range(options.max_new_tokens):
        ctx.queue_step(index, input_ids, attention_mask)
    ctx.clock.waiting(0)  # one wait for everything; each later step is read from what it brought back
    _synchronize(ctx.setup.device)
    done = ctx.setup.state.done[: options.max_new_tokens].tolist()
    kept = next((i + 1 for i, flag in enumerate(done) if flag), options.max_new_tokens)
    for index in range(kept):
        if index:
            ctx.clock.waiting(index)
        tokens = ctx.setup.state.out[index].tolist() if ctx.on_tokens is not None else None
        ctx.clock.known(index)
        if tokens is not None:
            ctx.deliver(index, tokens)
    return kept, options.max_new_tokens


def _receive(ctx: _LoopContext, mirror: HostMirror, index: int) -> bool:
    """Read step `index` from pinned host memory once its copy has landed; True when generation is over."""
    ctx.clock.waiting(index)
    mirror.wait(index)
    ctx.clock.known(index)
    if ctx.on_tokens is not None:
        ctx.deliver(index, mirror.tokens[index].tolist())  # host memory: no device sync
    return bool(mirror.done[index])


class HostMirror:
    """Pinned host copies of each step's tokens and stop flag, sent with non_blocking copies and an event.

    With streams=2 the copies run on a second CUDA stream that waits for the step's event, so they never sit in
    the compute stream's queue between two steps.
    """

    def __init__(self, device: torch.device, max_steps: int, batch: int, streams: int):
        cuda = device.type == "cuda"
        self.cuda = cuda
        self.rows = torch.empty(max_steps, batch + 1, dtype=torch.long, pin_memory=cuda)
        self.tokens = self.rows[:, :-1]
        self.done = self.rows[:, -1]
        self.copy_stream = torch.cuda.Stream(device) if cuda and streams == 2 else None
        self.events: list[Any] = [torch.cuda.Event() for _ in range(max_steps)] if cuda else []
        self.ready: list[Any] = [torch.cuda.Event() for _ in range(max_steps)] if self.copy_stream else []
        self.state: DecodeState = None  # type: ignore[assignment]

    @classmethod
    def for_run(cls, setup: DecodeSetup, options: GenerationOptions) -> HostMirror:
        key = ("mirror", options.max_new_tokens, setup.batch, options.streams)
        mirror = setup.reusables.get(key)
        if mirror is None:
            mirror = setup.reusables[key] = cls(setup.device, options.max_new_tokens, setup.batch,
                                                  options.streams)
        return mirror

    def send(self, index: int) -> None:
        state = self.state
        if self.copy_stream is None:
            self.rows[index].copy_(state.record[index], non_blocking=True)
            if self.cuda:
                self.events[index].record()
            return
        self.ready[index].record()
        with torch.cuda.stream(self.copy_stream):
            self.copy_stream.wait_event(self.ready[index])
            self.rows[index].copy_(state.record[index], non_blocking=True)
            self.events[index].record(self.copy_stream)

    def wait(self, index: int) -> None:
        if self.cuda:
            self.events[index].synchronize()
