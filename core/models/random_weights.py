"""Models with random weights: the synthetic shapes (any size, drawn where they run, and under tensor parallelism
sharded while still empty) and the tiny families (each initialised as transformers initialises it)."""

from __future__ import annotations

from typing import Any

import torch

from core.models.sources import sharded
from core.models.specs import TINY_FAMILIES


def random_model(shape: dict[str, Any], dtype: torch.dtype, seed: int, device: torch.device, tp: int = 1,
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
        model = sharded(model, tp, device)
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
