"""B slots of one static cache, each row at its own length, and the batched decode step that moves them on.

A slot holds one request at a time. Its row of the cache, its position, its token budget and whether it still
generates live on the device, and the step moves them on there: no decode step needs anything from the host.

- `SlotLayer`: a static cache layer of B rows in which a decode step writes each row's new key at that row's own
  position (a scatter), and an admission writes one request's prompt into its row from position 0. Its mask (B rows
  of the cache's length) says which positions of each row hold that row's request; the causal limit is the mask's
  (a row's keys all precede its query), so the layer reports the last position as the query's offset.
- `Slots`: the device buffers (each row's fed token, position, budget, live flag and mask), the record ring the step
  writes (each step's fed tokens, new tokens, live rows before it and finished rows after it), `admit` (a prefill
  of one request into a slot while the other rows keep their state) and `decode` (the step, eager, compiled or as
  one CUDA graph).

Why not transformers' StaticCache as it is: its layers keep one length for the whole batch (`cumulative_length`),
so every row writes at the same position. Models whose layers attend over a sliding window are refused: their mask
is cut from that shared length.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import StaticLayer

from core.loops.generation import SETUP_STEPS
from core.loops.step import StepGraph, compiled_argmax, decode_forward, step_graph_key, synchronize
from core.models.loading import LoadedModel
from core.request.options import CUDA_GRAPH_COMPILE_MODES, STEP_GRAPH, GenerationOptions, require

RECORD_FIELDS = 4  # per row: the token fed into the step, the token it chose, live before it, finished after it
# In CUDA-graph modes an admission's prompt is padded on the right to a multiple of this many tokens, and each such
# width is one graph: an eager prefill launches hundreds of kernels (about 12 ms for the Llama-1B shape on an H200,
# measured, more than ten decode steps of 16 rows), which would bury the decode steps the loops differ in.
PREFILL_BUCKET = 32


class SlotPointers:
    """What every layer of one slot cache shares: each row's position (a device tensor the step moves on) and the
    slot an admission is writing (None during decode steps): a host int, or a one-element device tensor where the
    admission is a graph."""

    def __init__(self, positions: torch.Tensor):
        self.positions = positions
        self.rows = torch.arange(positions.shape[0], device=positions.device)
        self.prefill_slot: int | torch.Tensor | None = None


class SlotLayer(StaticLayer):
    """A static cache layer whose rows each write at their own position (module doc)."""

    def __init__(self, max_cache_len: int, pointers: SlotPointers):
        super().__init__(max_cache_len=max_cache_len)
        self.pointers = pointers
        self.last_position: torch.Tensor | None = None

    def allocate(self, slots: int, heads: int, key_dim: int, value_dim: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        """The rows, before the first forward (a prefill of one row would otherwise size them to one)."""
        self.device, self.batch_size, self.num_heads = device, slots, heads
        self.k_head_dim, self.v_head_dim = key_dim, value_dim
        self.keys = torch.zeros(slots, heads, self.max_cache_len, key_dim, dtype=dtype, device=device)
        self.values = torch.zeros(slots, heads, self.max_cache_len, value_dim, dtype=dtype, device=device)
        self.cumulative_length = torch.tensor(0, dtype=torch.long, device=device)
        self.last_position = torch.tensor(self.max_cache_len - 1, dtype=torch.long, device=device)
        for tensor in (self.keys, self.values, self.cumulative_length, self.last_position):
            torch._dynamo.mark_static_address(tensor)
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise RuntimeError("a slot cache layer is allocated with its slots before its first forward")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        slot = self.pointers.prefill_slot
        if isinstance(slot, int):  # an admission: one request's prompt into its row, from position 0
            width = key_states.shape[-2]
            self.keys[slot, :, :width] = key_states[0]
            self.values[slot, :, :width] = value_states[0]
            return self.keys[slot: slot + 1], self.values[slot: slot + 1]
        if slot is not None:  # the same with the slot on the device (one graph for every slot)
            width = key_states.shape[-2]
            self.keys[slot, :, :width] = key_states
            self.values[slot, :, :width] = value_states
            return self.keys.index_select(0, slot), self.values.index_select(0, slot)
        # Each row's new key at its own position, as an index_put_: inductor writes it in place, where a scatter_
        # into the cache became a copy of the whole cache and a copy back, every step (docs/TUNING.md).
        rows, positions = self.pointers.rows, self.pointers.positions
        self.keys[rows, :, positions] = key_states[:, :, 0]
        self.values[rows, :, positions] = value_states[:, :, 0]
        return self.keys, self.values

    def get_seq_length(self) -> Any:
        """The query's offset for the mask: 0 while a prompt is admitted (causal from its start), else the last
        position, so that the causal limit lets every position through and each row's mask decides."""
        return 0 if self.pointers.prefill_slot is not None else self.last_position


def slot_cache_problem(model: Any) -> str | None:
    """Why this model cannot decode in slots here, in one sentence, or None."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None) or ()
    if getattr(text, "sliding_window", None) or any("sliding" in str(t) for t in layer_types):
        return ("its layers attend over a sliding window, whose mask transformers cuts from one length shared by the "
                "whole batch; continuous batching here needs full attention in every layer")
    if getattr(text, "num_key_value_heads", None) is None and getattr(text, "num_attention_heads", None) is None:
        return "its config does not say its attention heads"
    return None


def new_slot_cache(loaded: LoadedModel, slots: int, cache_len: int,
                   positions: torch.Tensor) -> tuple[Any, SlotPointers]:
    """transformers' StaticCache for `loaded`'s model with every layer a SlotLayer of `slots` rows."""
    from transformers import StaticCache

    problem = slot_cache_problem(loaded.model)
    require(problem is None, f"{loaded.spec} cannot run under load here: {problem}")
    text = loaded.model.config.get_text_config()
    heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    pointers = SlotPointers(positions)
    cache = StaticCache(config=loaded.model.config, max_cache_len=cache_len)
    layers = []
    for _ in cache.layers:
        layer = SlotLayer(cache_len, pointers)
        layer.allocate(slots, heads // max(1, loaded.tp), head_dim, head_dim, loaded.dtype, loaded.device)
        layers.append(layer)
    cache.layers = layers
    return cache, pointers


@dataclass
class SlotState:
    """The device buffers of B slots (module doc)."""

    tokens: torch.Tensor     # [B] the token each row feeds into the next step
    positions: torch.Tensor  # [B] where each row writes its next key (and the position id it feeds)
    budget: torch.Tensor     # [B] how many tokens each row may still produce
    live: torch.Tensor       # [B] bool: the row is generating
    mask: torch.Tensor       # [B, cache length] which positions hold the row's request
    record: torch.Tensor     # [ring, 4 B]: per step, fed tokens, new tokens, live before, finished after
    ring_index: torch.Tensor  # [1] the record row the next step writes

    @classmethod
    def allocate(cls, slots: int, cache_len: int, ring: int, device: torch.device) -> SlotState:
        def zeros(*shape: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        return cls(tokens=zeros(slots), positions=zeros(slots), budget=zeros(slots),
                   live=zeros(slots, dtype=torch.bool), mask=zeros(slots, cache_len),
                   record=zeros(ring, RECORD_FIELDS * slots), ring_index=zeros(1))

    def reset(self) -> None:
        """Empty slots, in place: a captured step graph keeps pointing at these buffers."""
        for tensor in (self.tokens, self.positions, self.budget, self.live, self.mask, self.record, self.ring_index):
            tensor.zero_()


class Slots:
    """B slots of one static cache and the batched decode step (module doc). Built once per (B, cache length,
    compile mode) and reused across runs: its compile and capture happen in its first run."""

    def __init__(self, loaded: LoadedModel, slots: int, cache_len: int, ring: int, options: GenerationOptions):
        require(not options.do_sample, "under load the loops decode greedily (--sample is for single runs): each "
                                       "request's tokens are checked against its own solo decode")
        self.loaded, self.count, self.cache_len, self.ring = loaded, slots, cache_len, ring
        self.options = options
        self.reusables: dict[Any, Any] = {}  # pinned rows and clocks, made once and reused across runs
        self.device = loaded.device
        self.state = SlotState.allocate(slots, cache_len, ring, self.device)
        self.cache, self.pointers = new_slot_cache(loaded, slots, cache_len, self.state.positions)
        self.forward = decode_forward(loaded, options.compile)
        self.step_graph = StepGraph() if options.compile == STEP_GRAPH else None
        # ATen's argmax over a large vocabulary runs one block a row; the step-graph's compiled one spreads the rows
        self.argmax = compiled_argmax() if self.step_graph is not None else None
        self._pad_id = loaded.tokenizer.pad_token_id or 0
        self.pad = torch.tensor(self._pad_id, dtype=torch.long, device=self.device)
        self.eos_list = [-1]
        self.eos_ids = torch.tensor(self.eos_list, dtype=torch.long, device=self.device)
        self.check_eos = True
        self.graph_key: tuple = ()
        self.steps_run = 0  # decode steps since this was built
        self.ready = False  # its set-up has run (compile, capture)
        self.positions_range = torch.arange(cache_len, device=self.device)
        # admissions as graphs (module doc) in the modes whose decode step is one: on CUDA only
        self.graph_prefill = options.compile in CUDA_GRAPH_COMPILE_MODES and self.device.type == "cuda"
        self.prefill_graphs: dict[int, StepGraph] = {}
        self.admission_rows: dict[int, torch.Tensor] = {}  # per padded width: slot, width, budget, the prompt
        self.cuda = self.device.type == "cuda"
        self._admission_events: list[tuple[Any, Any]] = []
        self.admissions = 0  # this run's, so far

    def begin(self, eos_ids: list[int], ignore_eos: bool) -> None:
        """Every slot empty, for a new run that stops at `eos_ids` (none with `ignore_eos`)."""
        ids = eos_ids or [-1]
        if ids != self.eos_list:
            self.eos_ids = torch.tensor(ids, dtype=torch.long, device=self.device)  # before any capture reads it
            self.eos_list = ids
        self.check_eos = not ignore_eos
        self.state.reset()
        self.graph_key = (*step_graph_key(self.options, ids, self.state), self.check_eos)
        self.admissions = 0

    def admission_device_ms(self, after: Any) -> float:
        """The device's time in this run's admissions (CUDA events) recorded after the event `after`: work between
        decode steps that is not idle. 0 on the CPU."""
        if not self.cuda:
            return 0.0
        spans = self._admission_events[: self.admissions]
        return sum(start.elapsed_time(end) for start, end in spans if after.elapsed_time(start) >= 0)

    def set_up(self) -> float:
        """Before the first run: SETUP_STEPS decode steps over empty slots, so that compilation and CUDA-graph capture
        (whose warm runs move the buffers on) stay out of every run; then every slot is emptied again. Returns its
        milliseconds."""
        began = time.perf_counter()
        with torch.inference_mode():
            for _ in range(SETUP_STEPS):
                self.decode()
            synchronize(self.device)
        self.state.reset()
        self.ready = True
        return (time.perf_counter() - began) * 1000

    # ---------------------------------------------------------------------------------------------- admission

    def admit(self, slot: int, prompt_ids: list[int], budget: int) -> None:
        """A prefill of one request into `slot` (its prompt's keys at positions 0..P-1 of its row), its first token
        chosen, and the row set to go on: the other rows keep their state, and nothing is read from the device. The
        prompt travels by a non_blocking copy from pinned memory on CUDA; in CUDA-graph modes the admission is one
        graph per padded width (`admit_as_graph`)."""
        width = len(prompt_ids)
        require(width + budget <= self.cache_len, f"a request of {width} prompt tokens and {budget} new ones does not "
                                                  f"fit the cache's {self.cache_len} positions")
        events = self._admission_span() if self.cuda else None
        if events is not None:
            events[0].record()
        if self.graph_prefill:
            self.admit_as_graph(slot, prompt_ids, budget)
        else:
            self._admit_eagerly(slot, prompt_ids, budget)
        if events is not None:
            events[1].record()

    def _admission_span(self) -> tuple[Any, Any]:
        """Two timing events for the next admission of this run, made once and reused."""
        if self.admissions == len(self._admission_events):
            self._admission_events.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
        self.admissions += 1
        return self._admission_events[self.admissions - 1]

    def admit_as_graph(self, slot: int, prompt_ids: list[int], budget: int) -> None:
        """The admission with its prompt padded on the right to a multiple of PREFILL_BUCKET and every value it needs
        (the slot, the prompt's width, the budget, the tokens) in one device row, so that one graph serves every
        admission of that width: replayed in step-graph mode, the compiled forward's own CUDA graph in the others.
        The padding's keys land past the prompt, where the row's mask leaves them out until decode steps overwrite
        them; the causal mask keeps the prompt's queries off them."""
        width = len(prompt_ids)
        bucket = min(-(-width // PREFILL_BUCKET) * PREFILL_BUCKET, self.cache_len)
        row = self.admission_rows.get(bucket)
        if row is None:
            row = self.admission_rows[bucket] = torch.zeros(3 + bucket, dtype=torch.long, device=self.device)
        staged = torch.tensor([slot, width, budget, *prompt_ids, *[self._pad_id] * (bucket - width)])
        row.copy_(staged.pin_memory() if self.device.type == "cuda" else staged, non_blocking=True)
        if self.step_graph is not None:
            graph = self.prefill_graphs.setdefault(bucket, StepGraph())
            graph.replay(lambda: self._prefill_body(row, bucket), self.graph_key)
        else:
            self._prefill_body(row, bucket)

    def _prefill_body(self, row: torch.Tensor, bucket: int) -> None:
        state = self.state
        slot, width, budget = row[0:1], row[1:2], row[2:3]
        self.pointers.prefill_slot = slot
        try:
            logits = self.forward(input_ids=row[3:][None], position_ids=self.positions_range[None, :bucket],
                                  cache=self.cache, use_cache=True, logits_to_keep=width - 1).logits[:, -1]
        finally:
            self.pointers.prefill_slot = None
        first = self.argmax(logits) if self.argmax is not None else logits.argmax(dim=-1)
        goes_on = budget > 1
        if self.check_eos:
            goes_on &= ~(first[:, None] == self.eos_ids).any(dim=1)
        state.tokens.index_copy_(0, slot, first)
        state.positions.index_copy_(0, slot, width)
        state.budget.index_copy_(0, slot, budget - 1)
        state.live.index_copy_(0, slot, goes_on)
        state.mask.index_copy_(0, slot, (self.positions_range < width).long()[None])

    def _admit_eagerly(self, slot: int, prompt_ids: list[int], budget: int) -> None:
        state, width = self.state, len(prompt_ids)
        ids = _on_device(prompt_ids, self.device)[None]
        self.pointers.prefill_slot = slot
        try:
            # No padding mask: the causal one keeps each query to the prompt's own keys (the row's later positions
            # hold its earlier holder's), and given a padding mask transformers reads it on the host to see if it may
            # skip it.
            logits = self.loaded.model(input_ids=ids, position_ids=self.positions_range[None, :width],
                                       cache=self.cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        finally:
            self.pointers.prefill_slot = None
        first = logits.argmax(dim=-1)
        goes_on = budget > 1
        if self.check_eos:
            goes_on = ~(first[:, None] == self.eos_ids).any(dim=1) & goes_on
        else:
            goes_on = torch.full_like(first, goes_on, dtype=torch.bool)
        row = slice(slot, slot + 1)
        state.tokens[row] = first
        state.positions[row] = width
        state.budget[row] = budget - 1
        state.live[row] = goes_on
        state.mask[slot] = (self.positions_range < width).long()

    # ---------------------------------------------------------------------------------------------- the step

    def decode(self) -> None:
        """One decode step of every row (dead rows too: their output is padding), written to the record ring; one
        graph replay in step-graph mode."""
        if self.step_graph is not None:
            self.step_graph.replay(self._step_body, self.graph_key)
        else:
            self._step_body()
        self.steps_run += 1

    def _step_body(self) -> None:
        state = self.state
        live_before = state.live.clone()
        state.mask.scatter_(1, state.positions[:, None], 1)  # each row sees the key it writes now
        logits = self.forward(input_ids=state.tokens[:, None], attention_mask=state.mask,
                              position_ids=state.positions[:, None], cache=self.cache, use_cache=True,
                              logits_to_keep=1).logits[:, -1]
        best = self.argmax(logits) if self.argmax is not None else logits.argmax(dim=-1)
        chosen = torch.where(live_before, best, self.pad)
        state.budget.sub_(live_before.long())
        finished = state.budget <= 0
        if self.check_eos:
            # Not torch.isin: from about 17 ids on it sorts and calls unique(), a host sync that also breaks capture.
            finished |= (chosen[:, None] == self.eos_ids).any(dim=1)
        state.live &= ~finished
        row = torch.cat((state.tokens, chosen, live_before.long(), (~state.live).long()))
        state.record.index_copy_(0, state.ring_index, row[None])
        state.tokens.copy_(torch.where(live_before, chosen, state.tokens))
        state.positions.add_(live_before.long()).clamp_(max=self.cache_len - 1)
        state.ring_index.add_(1).remainder_(self.ring)


def _on_device(ids: list[int], device: torch.device) -> torch.Tensor:
    """Token ids on `device` without the host waiting: on CUDA a non_blocking copy from pinned memory (PyTorch's
    caching host allocator keeps the pinned block until the copy has run)."""
    host = torch.tensor(ids, dtype=torch.long)
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def unpack_record(row: list[int], slots: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """A record row as (fed tokens, chosen tokens, live before, finished after), each one value per slot."""
    return (row[:slots], row[slots: 2 * slots], row[2 * slots: 3 * slots], row[3 * slots:])
