"""The decode step both loops share: per-shape device buffers and cache (the decode setup), the (compiled) forward,
the token choice, and the whole step captured in one CUDA graph (step-graph mode).

A step never reads the device from the host: `DecodeSetup.commit` picks the next tokens, pads finished rows and writes
the step's tokens and stop flag into one device row, which the naive loop reads at once and the pipelined loop copies
to pinned host memory (core.loops.generation).

What a compiled step runs follows the model's tuning (core.tuning, `LoadedModel.tuning`), decided once per compile
mode by `step_kernels`: the step compiles with it, and the report records it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from core.kernels.pdl import pdl_inductor_options
from core.kernels.products import traced_by_default, traced_with
from core.loops.prompt import EncodedPrompt, resolve_eos_ids
from core.models.loading import LoadedModel, new_static_cache
from core.parallel.tensor_parallel import SYMMETRIC
from core.request.options import CUDA_GRAPH_COMPILE_MODES, STEP_GRAPH, GenerationOptions, static_cache_length


@dataclass(frozen=True)
class StepKernels:
    """What a decode step compiled in one mode runs, from the model's tuning and what prepare_for_decode did to it:
    the batch-1 products' kernel, "triton" (core.kernels.triton_gemv) or "inductor"; the output projection's where
    the gemv kernel does not take it, "library" or "inductor"; whether the decoder layers run
    core.kernels.decode_layer's six kernels; what a greedy step compiles after the forward, "argmax" or "whole"
    (step-graph only); and when the project's kernels read what they use, "first" or "late" (core.kernels.reads)."""

    products: str
    o_proj: str
    fused_layers: bool
    commit: str | None
    reads: str = "first"


def step_kernels(loaded: LoadedModel, mode: str) -> StepKernels | None:
    """What a step compiled in `mode` runs on `loaded` (None for "off": nothing is compiled). The step compiles with
    it (`decode_forward`, `DecodeSetup`) and the report records it (core.report.build.environment)."""
    if mode == "off":
        return None
    tuning = loaded.tuning
    products = tuning.decode_products_for(step_graph=mode == STEP_GRAPH)
    on_cuda = loaded.device.type == "cuda"
    return StepKernels(products=products, o_proj=tuning.o_proj,
                       fused_layers=loaded.decode_layers and mode == STEP_GRAPH and on_cuda and products == "triton",
                       commit=tuning.step_commit if mode == STEP_GRAPH else None,
                       reads=tuning.kernel_reads_for(loaded.model.config.get_text_config().hidden_size))


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
    the (compiled) forward and step, and the device buffers. Its setup run (core.loops.generation) compiles and
    captures what it needs, once, before its first timed run."""

    def __init__(self, loaded: LoadedModel, batch: int, cache_len: int, options: GenerationOptions):
        self.loaded = loaded
        self.model = loaded.model
        self.device = loaded.device
        self.batch = batch
        self.cache_len = cache_len
        self.static_cache = new_decode_cache(loaded, cache_len) if options.cache == "static" else None
        self.forward = decode_forward(loaded, options.compile)
        self.step_graph: StepGraph | None = StepGraph() if options.compile == STEP_GRAPH else None
        self.argmax = compiled_argmax() if self.step_graph is not None else None
        # the greedy step's token choice and bookkeeping in one compile (the `step_commit` switch at "whole")
        kernels = step_kernels(loaded, options.compile)
        self.whole_commit = _compiled_whole_commit() if kernels is not None and kernels.commit == "whole" else None
        self.ready = False  # its setup run has happened
        self._compile_ms_pending = options.compile != "off"
        self.state: DecodeState = None  # type: ignore[assignment]
        self.eos_ids_list: list[int] = []
        self.eos_ids: torch.Tensor | None = None
        self.pad = torch.tensor(loaded.tokenizer.pad_token_id, dtype=torch.long, device=loaded.device)
        self.graph_key: tuple = ()
        self.reusables: dict = {}  # events and pinned buffers, allocated once per shape and reused across runs
        self.decode_mask = True  # whether decode steps pass the mask (begin: not when no row is padded)

    def take_compile_ms(self, setup_ms: float) -> float:
        """The first setup run of a compiled shape is its compile time; report it once."""
        if self._compile_ms_pending and setup_ms > 0:
            self._compile_ms_pending = False
            return setup_ms
        return 0.0

    def begin(self, prompt: EncodedPrompt, options: GenerationOptions) -> Any:
        """Reset the cache and buffers for a new run; return the cache object the forward uses."""
        batch, width = prompt.input_ids.shape
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
        self.state.reset(prompt.attention_mask)
        self.prompt_width = width
        # A dynamic cache's decode step with a mask makes transformers read it on the host every step, to see
        # whether it needs it: with no row padded it needs none, and a static cache's step keeps its mask.
        self.decode_mask = prompt.padded or self.static_cache is not None
        self.graph_key = step_graph_key(options, eos_ids, self.state)
        return cache

    def _fresh_cache(self) -> Any:
        if self.static_cache is not None:
            self.static_cache.reset()
            return self.static_cache
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def prefill(self, prompt: EncodedPrompt, cache: Any) -> None:
        """Step 0: the whole prompt through the model (eager), then the first token."""
        mask = prompt.attention_mask
        position_ids = (mask.cumsum(dim=1) - 1).clamp(min=0)
        logits = self.model(input_ids=prompt.input_ids, attention_mask=mask, position_ids=position_ids, cache=cache,
                            use_cache=True, logits_to_keep=1).logits[:, -1]
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
        mask = state.mask[:, :kv_len] if self.decode_mask else None
        logits = self.forward(input_ids=state.tokens[:, None], attention_mask=mask,
                              position_ids=state.positions[:, None], cache=cache, use_cache=True,
                              logits_to_keep=1).logits[:, -1]
        if self.whole_commit is not None and not self.options.do_sample:
            self.whole_commit(logits, state.tokens, state.positions, state.unfinished, state.record, state.step_index,
                              self.pad, self.eos_ids, not self.options.ignore_eos)
            return
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


def greedy_commit(logits: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, unfinished: torch.Tensor,
                  record: torch.Tensor, step_index: torch.Tensor, pad: torch.Tensor, eos_ids: torch.Tensor,
                  check_eos: bool) -> None:
    """A greedy decode step's `commit` and the position moved on, as one function of the state's tensors (written in
    place), for one compile: the same values as `decode_body`'s eager path."""
    chosen = torch.where(unfinished, blockwise_argmax(logits), pad)
    if check_eos:
        unfinished &= ~(chosen[:, None] == eos_ids).any(dim=1)
    finished = unfinished.any().logical_not().long()
    record.index_copy_(0, step_index, torch.cat((chosen, finished[None]))[None])
    tokens.copy_(chosen)
    step_index.add_(1)
    positions.add_(1)


def _compiled_whole_commit() -> Callable[..., None]:
    return torch.compile(greedy_commit, dynamic=False, fullgraph=True)


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


def compiled_argmax() -> Callable[[torch.Tensor], torch.Tensor]:
    """Greedy choice in two compiled stages: ATen's argmax over a large vocabulary at batch 1 runs on one block, and
    inductor's single reduction is not much faster (the times: docs/TUNING.md, "The model, prepared for decoding")."""
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


def new_decode_cache(loaded: LoadedModel, cache_len: int) -> Any:
    """A static cache of `cache_len` positions for `loaded`'s decode loop (core.models.loading.new_static_cache)."""
    return new_static_cache(loaded.model, cache_len)


def decode_forward(loaded: LoadedModel, mode: str) -> Callable[..., Any]:
    """What a decode step calls under compile `mode`: the model itself for "off", else its forward compiled for that
    mode with the kernels `step_kernels` gives it, once, and kept on `loaded`."""
    kernels = step_kernels(loaded, mode)
    if kernels is None:
        return loaded.model
    if mode not in loaded.compiled_forwards:
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        # In step-graph mode we capture the graph ourselves, so inductor must not add CUDA graphs of its own.
        # That mode also turns on coordinate-descent tuning, with which inductor rewrites batch-1 matmuls as
        # fused Triton reductions that read the weights closer to HBM bandwidth than cuBLAS's GEMV.
        inductor_mode = "max-autotune-no-cudagraphs" if mode == STEP_GRAPH else mode
        extra = _inductor_options(loaded, mode, kernels)
        if extra:
            options = {**torch._inductor.list_mode_options(inductor_mode), **extra}
            compiled = torch.compile(loaded.model.forward, options=options, dynamic=False, fullgraph=False)
        else:
            compiled = torch.compile(loaded.model.forward, mode=inductor_mode, dynamic=False, fullgraph=False)
        mark_steps = mode != STEP_GRAPH and mode in CUDA_GRAPH_COMPILE_MODES
        loaded.compiled_forwards[mode] = _traced_with_kernels(compiled, kernels, mark_steps)
    return loaded.compiled_forwards[mode]


def _inductor_options(loaded: LoadedModel, mode: str, kernels: StepKernels) -> dict[str, Any]:
    """What a compile in `mode` adds to its mode's inductor options: PDL and the one-shot all-reduce in step-graph
    mode, coordinate descent off where the products are the gemv kernel's, then the `inductor_options` switch, which
    wins."""
    extra = pdl_inductor_options(loaded.device, loaded.tuning.pdl) if mode == STEP_GRAPH else {}
    if mode == STEP_GRAPH and loaded.all_reduce in SYMMETRIC:
        extra["_collective.auto_select"] = True
    if mode == STEP_GRAPH and loaded.device.type == "cuda" and kernels.products == "triton":
        # the products are the gemv kernel's: coordinate descent would only tune the small norm and rotary
        # kernels, and it mis-tuned them by up to 3x in some compiles (docs/TUNING.md)
        extra["coordinate_descent_tuning"] = False
    extra.update(loaded.tuning.inductor_options)
    return extra


def _traced_with_kernels(compiled: Callable[..., Any], kernels: StepKernels, mark_steps: bool) -> Callable[..., Any]:
    """The compiled forward, tracing with `kernels`' products (core.kernels.products); with `mark_steps`, telling
    CUDA-graph trees that each call is a new step, so the last step's outputs may be overwritten."""

    def forward(*args: Any, **kwargs: Any) -> Any:
        if mark_steps:
            torch.compiler.cudagraph_mark_step_begin()
        with traced_with(kernels.products, kernels.o_proj, kernels.reads):
            return compiled(*args, **kwargs)

    def marked(*args: Any, **kwargs: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args, **kwargs)

    # With the module's own choices the wrapper is left out: a reduce-overhead step calls the forward every step
    if traced_by_default(kernels.products, kernels.o_proj, kernels.reads):
        return marked if mark_steps else compiled
    return forward


def decode_setup_for(loaded: LoadedModel, shape: torch.Size, options: GenerationOptions) -> DecodeSetup:
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
        began = time.perf_counter()
        with torch.cuda.graph(graph):
            body()
        CAPTURE_MS.append((time.perf_counter() - began) * 1000)
        return graph


# Milliseconds of every step-graph capture in this process (the warm runs before it not included): the warm-up's
# split into compile, autotuning and capture reads it (core.compare.warm_up_split).
CAPTURE_MS: list[float] = []


def step_graph_key(options: GenerationOptions, eos_ids: list[int], state: DecodeState) -> tuple:
    """What a captured step bakes in besides its buffers: a change in any of these needs a new capture."""
    return (options.do_sample, options.temperature, options.top_k, options.top_p, options.ignore_eos,
            tuple(eos_ids), id(state))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)

