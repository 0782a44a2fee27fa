"""Model loading: the offline default model, any HF id or path, synthetic shapes, and tiny random models.

Every loader returns a `LoadedModel`: the HF causal LM, its tokenizer, the device and dtype it runs in, and what
`prepare_for_decode` did to it (and why it left anything out).

The spec's weights come from core.models.sources (checked there first, by `check_spec`), random ones from
core.models.random_weights.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from core.models.memory import admit
from core.models.random_weights import random_model, tiny_family_model
from core.models.sources import check_spec, default_tokenizer, load_default, load_pretrained, sharded
from core.models.specs import (
    DEFAULT_MODEL,
    SYNTHETIC_CONFIG_CLASSES,
    SYNTHETIC_PREFIX,
    SYNTHETIC_SHAPES,
    TINY_FAMILY_PREFIX,
    TINY_RANDOM,
    TINY_SHAPE,
)
from core.parallel.tensor_parallel import FUSED, ONE_SHOT
from core.request.options import (
    CUDA_GRAPH_COMPILE_MODES,
    DECODE_LAYERS_TRANSFORM,
    FUSED_ALL_REDUCE,
    ONE_SHOT_ALL_REDUCE,
)
from core.tuning import Tuning

_load_lock = threading.Lock()


@dataclass
class LoadedModel:
    """A causal LM ready to generate: the model, its tokenizer, where it runs, and per-shape decode setups."""

    spec: str
    model: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    tp: int = 1  # tensor-parallel degree: this process holds 1/tp of the weights
    # How tensor-parallel all-reduces run (core.parallel.tensor_parallel): "gloo", "nccl", "one-shot" (symmetric memory
    # in step-graph mode, NCCL in the others) or "fused" (one-shot, and the decoder layers' all-reduces fused with their
    # residual add and RMSNorm, core.kernels.tp_fusion); "" without TP. The note says why not fused or why NCCL, where
    # it matters.
    all_reduce: str = ""
    all_reduce_note: str = ""
    # What prepare_for_decode did: the projections core.kernels.fusion stacked ("qkv", "gate_up"), the compiled decode
    # attention kernel (core.kernels.attention: "reduce", "split", "sdpa" or "triton"; None when not used), and why it
    # left anything out, one sentence each.
    fused_projections: tuple[str, ...] = ()
    decode_attention: str | None = None
    not_prepared: tuple[str, ...] = ()
    # Whether the decoder layers are core.kernels.decode_layer's (their step-graph decode step in six kernels a layer)
    decode_layers: bool = False
    hf_modules: bool = False  # load_model(hf_modules=True): transformers' modules as they are, not prepared
    # The tuning switches it was prepared with, and its steps are compiled with (core.tuning)
    tuning: Tuning = field(default_factory=Tuning)
    setups: dict = field(default_factory=dict, repr=False)
    compiled_forwards: dict = field(default_factory=dict, repr=False)

    @property
    def transforms(self) -> tuple[str, ...]:
        """What prepare_for_decode changed, then why it left anything out, as sentences for the report's model line
        (and the report's `environment.model_transforms`)."""
        done = [f"fused {name}" for name in self.fused_projections]
        if self.decode_attention:
            done.append(f"compiled decode attention: {self.decode_attention}")
        if self.decode_layers:
            done.append(DECODE_LAYERS_TRANSFORM)
        return (*done, *self.not_prepared)

    @property
    def all_reduce_text(self) -> str:
        """How tensor-parallel all-reduces run, in words ("" without TP)."""
        if self.all_reduce == FUSED:
            return f"{FUSED_ALL_REDUCE} ({self.all_reduce_note})" if self.all_reduce_note else FUSED_ALL_REDUCE
        if self.all_reduce == ONE_SHOT:
            return f"{ONE_SHOT_ALL_REDUCE} ({self.all_reduce_note})" if self.all_reduce_note else ONE_SHOT_ALL_REDUCE
        return f"{self.all_reduce} ({self.all_reduce_note})" if self.all_reduce_note else self.all_reduce

    @property
    def context_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 0) or 1 << 30)

    @property
    def num_parameters(self) -> int:
        return sum(count for count, _ in _parameter_sizes(self.model))

    @property
    def weight_bytes(self) -> int:
        """All ranks' weights together (a DTensor's numel is the whole tensor's)."""
        return sum(count * size for count, size in _parameter_sizes(self.model))


def _parameter_sizes(model: Any) -> list[tuple[int, int]]:
    """(elements over all ranks, bytes per element) per parameter, tied ones once; a fused projection
    (core.kernels.fusion) holds one rank's rows."""
    sizes, seen = [], set()
    for module in model.modules():
        ranks = getattr(module, "ranks", 1)
        for param in module.parameters(recurse=False):
            if id(param) not in seen:
                seen.add(id(param))
                sizes.append((param.numel() * ranks, param.element_size()))
    return sizes


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for, but this machine has no CUDA GPU (use 'cpu')")
    return resolved


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if dtype is None or dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
             "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}
    if dtype not in names:
        raise ValueError(f"unknown dtype {dtype!r}; use one of: auto, {', '.join(names)}")
    return names[dtype]


def load_model(
    spec: str = DEFAULT_MODEL,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    *,
    tp: int = 1,
    trust_remote_code: bool = False,
    hf_modules: bool = False,
    admitted: bool = False,
    tuning: Tuning | None = None,
) -> LoadedModel:
    """Load a model by spec: the offline default, `synthetic:<shape>`, `tiny-random`, an HF id or a local path.

    With tp > 1 this process must be one rank of a process group of that size (core.parallel.tensor_parallel): it gets
    its shard of the weights, on its own GPU (cuda:LOCAL_RANK), or on the CPU with gloo. Unless `hf_modules`, the model
    is prepared for batch-1 decoding (`prepare_for_decode`): the same weights and math, fewer and larger kernels.
    `tuning`: the switches it is prepared and its steps compiled with (a process reads them once, at its start; None:
    from this process's environment now). A model that cannot fit where it would run is a ValueError in one line before
    anything is allocated (core.models.memory.admit); `admitted`: the caller has asked it already (the engine, counting
    the model it replaces)."""
    tuning = Tuning.from_environment() if tuning is None else tuning
    spec = check_spec(spec)
    _quiet_transformers()
    if tp > 1:
        from core.parallel.tensor_parallel import tp_device

        target = tp_device(device)
    else:
        target = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, target)
    if not admitted:
        admit(spec, target, torch_dtype.itemsize, tp)
    with _load_lock:
        model, tokenizer = _load_weights(spec, torch_dtype, trust_remote_code, target, tp)
    model.to(target).eval()
    model.requires_grad_(False)
    _ensure_pad_token(model, tokenizer)
    prepared = Preparation() if hf_modules else prepare_for_decode(model, tuning)
    all_reduce, all_reduce_note = "", ""
    if tp > 1:
        from core.kernels.tp_fusion import fuse_decoder_all_reduces
        from core.parallel.tensor_parallel import use_one_shot_all_reduce

        all_reduce, all_reduce_note = use_one_shot_all_reduce(model, tuning.tp_all_reduce)
        if not hf_modules:
            all_reduce, all_reduce_note = fuse_decoder_all_reduces(model, all_reduce, tuning.tp_all_reduce,
                                                                   tuning.tp_barrier)
    return LoadedModel(spec=spec, model=model, tokenizer=tokenizer, device=target, dtype=torch_dtype, tp=tp,
                       all_reduce=all_reduce, all_reduce_note=all_reduce_note,
                       fused_projections=prepared.fused_projections, decode_attention=prepared.decode_attention,
                       not_prepared=prepared.not_prepared, decode_layers=prepared.decode_layers,
                       hf_modules=hf_modules, tuning=tuning)


@dataclass(frozen=True)
class Preparation:
    """What prepare_for_decode did to a model (the LoadedModel fields of the same names)."""

    fused_projections: tuple[str, ...] = ()
    decode_attention: str | None = None
    not_prepared: tuple[str, ...] = ()
    decode_layers: bool = False


def prepare_for_decode(model: Any, tuning: Tuning | None = None) -> Preparation:
    """Fuse q/k/v and gate/up projections (core.kernels.fusion), read grouped KV heads in place in compiled decode
    steps (core.kernels.attention, with the kernel of the `decode_attention` switch) and, where they qualify, make the
    decoder layers core.kernels.decode_layer's (the `decode_layer` switch); `tuning`: the switches (default: their
    defaults). Returns what was done, and why anything was left out."""
    from core.kernels.attention import use_decode_attention
    from core.kernels.fusion import fuse_projections, unknown_layouts
    from core.kernels.products import route_output_layer

    fused = tuple(fuse_projections(model))
    route_output_layer(model)
    reasons = []
    unknown = unknown_layouts(model)
    if unknown:
        reasons.append(f"not fused: {', '.join(unknown)} (a forward that core.kernels.fusion does not know)")
    elif not fused:
        reasons.append(_why_nothing_to_fuse(model))
    tuning = Tuning() if tuning is None else tuning
    kernel, why_not = use_decode_attention(model, tuning.decode_attention)
    if why_not:
        reasons.append(why_not)
    layers_fused, why_not = _fuse_decode_layers(model, kernel, tuning.decode_layer)
    if why_not:
        reasons.append(f"decoder layers not fused: {why_not}")
    return Preparation(fused_projections=fused, decode_attention=kernel, not_prepared=tuple(reasons),
                       decode_layers=layers_fused)


def _fuse_decode_layers(model: Any, kernel: str | None, switch: str) -> tuple[bool, str | None]:
    """core.kernels.decode_layer's layers on a CUDA model with the triton decode attention, unless the `decode_layer`
    switch is off: whether done, and why not where it could have been (nothing is said for the CPU, tensor
    parallelism or another attention kernel)."""
    from core.kernels.decode_layer import fuse_decode_layers

    if kernel != "triton" or model.device.type != "cuda" or getattr(model, "_device_mesh", None) is not None:
        return False, None
    why_not = fuse_decode_layers(model, switch)
    return why_not is None, why_not


_NATIVELY_FUSED = ("qkv_proj", "query_key_value", "c_attn", "gate_up_proj")


def _why_nothing_to_fuse(model: Any) -> str:
    owners = sorted({type(m).__name__ for m in model.modules()
                     if any(isinstance(getattr(m, name, None), torch.nn.Module | torch.Tensor)
                            for name in _NATIVELY_FUSED)})
    if owners:
        return f"no projections to fuse: {', '.join(owners)} already have them fused"
    return "no projections to fuse: no separate q/k/v or gate/up projections"


def new_static_cache(model: Any, cache_len: int) -> Any:
    """transformers' StaticCache for `model`, where every layer keeps all `cache_len` positions, sliding-window layers
    too; their masks leave out the positions behind the window, so attention computes the same.

    Why: transformers' sliding-window static layer keeps only the window, counts its fill in a Python int, and
    branches on it (filling, then rolling), and the mask's offset moves with it. A compiled step reads those ints,
    so torch.compile specialised on them and compiled again at every decode step (Mistral with a 32-token window
    spent minutes of its warm-up on it, and its step-graph capture failed). Full-length layers have the same shapes
    and code at every step: one graph. The price is memory: a sliding layer holds the whole cache, not the window."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer, StaticSlidingWindowLayer

    cache = StaticCache(config=model.config, max_cache_len=cache_len)
    cache.layers = [StaticLayer(max_cache_len=cache_len) if type(layer) is StaticSlidingWindowLayer else layer
                    for layer in cache.layers]
    return cache


# Compile modes that capture the decode step in CUDA graphs, where nothing may wait for or copy from the host.
_GRAPH_CAPTURE = CUDA_GRAPH_COMPILE_MODES


def support_problem(model: Any, compile_mode: str) -> str | None:
    """Why this model cannot run in `compile_mode`, in one sentence, or None. Known from the model's code, before any
    work (docs/SUPPORT.md lists what was run); a compile that fails anyway is explained by `compile_failure`."""
    config = model.config
    family = getattr(config, "model_type", type(model).__name__)
    experts = getattr(config, "_experts_implementation", None)
    if compile_mode not in _GRAPH_CAPTURE or not _has_experts(model):
        return None
    why = ("asks the device which experts were hit (a host sync)" if experts == "eager" else
           "copies from host memory inside the decode step (measured on an H200 with transformers 5.24: \"Cannot "
           "copy between CPU and CUDA tensors during CUDA graph capture\")")
    return (f"compile={compile_mode} cannot run {family}: its mixture-of-experts routing {why}, which a CUDA graph "
            "capture refuses; use compile=default (no CUDA graphs) or off")


def check_support(loaded: LoadedModel, compile_mode: str) -> None:
    """ValueError with `support_problem`'s sentence when `loaded` cannot run in `compile_mode`."""
    problem = support_problem(loaded.model, compile_mode)
    if problem:
        raise ValueError(problem)


def compile_failure(loaded: LoadedModel, compile_mode: str, error: BaseException) -> ValueError | None:
    """A one-line ValueError for an error raised while torch.compile traced, compiled or captured this model's decode
    step (the compiler's own message is pages long and names its internals), or None for any other error."""
    from torch._dynamo.exc import TorchDynamoException

    capture = isinstance(error, RuntimeError) and ("capturing" in str(error) or "graph capture" in str(error))
    if compile_mode == "off" or not (isinstance(error, TorchDynamoException) or capture):
        return None
    family = getattr(loaded.model.config, "model_type", type(loaded.model).__name__)
    stage = "capturing its decode step in a CUDA graph" if capture else "compiling its decode step"
    return ValueError(f"compile={compile_mode} failed for {loaded.spec} ({family}) while {stage} "
                      f"({type(error).__name__}); it runs with compile=off, or try another compile mode")


def _has_experts(model: Any) -> bool:
    return any(type(m).__name__.endswith("Experts") for m in model.modules())


def _load_weights(spec: str, dtype: torch.dtype, trust_remote_code: bool, device: torch.device,
                  tp: int = 1) -> tuple[Any, Any]:
    if spec == TINY_RANDOM:
        # Drawn whole on the CPU, then sharded: the same weights (and tokens) at every tp degree.
        return sharded(random_model(TINY_SHAPE, dtype, seed=0, device=torch.device("cpu")), tp, device), \
            default_tokenizer()
    if spec.startswith(TINY_FAMILY_PREFIX):
        family = spec[len(TINY_FAMILY_PREFIX):]
        return sharded(tiny_family_model(family, dtype), tp, device), default_tokenizer()
    if spec.startswith(SYNTHETIC_PREFIX):
        shape = spec[len(SYNTHETIC_PREFIX):]
        config_class = SYNTHETIC_CONFIG_CLASSES.get(shape, "LlamaConfig")
        return random_model(SYNTHETIC_SHAPES[shape], dtype, seed=0, device=device, tp=tp,
                             config_class=config_class), default_tokenizer()
    if spec == DEFAULT_MODEL:
        model, tokenizer = load_default(dtype)
    else:
        model, tokenizer = load_pretrained(spec, dtype, trust_remote_code)
    return sharded(model, tp, device), tokenizer


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _ensure_pad_token(model: Any, tokenizer: Any) -> None:
    if tokenizer.pad_token_id is None:
        eos = model.generation_config.eos_token_id
        tokenizer.pad_token_id = eos[0] if isinstance(eos, list) else eos
