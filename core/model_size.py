"""The size of a model whose config.json leaves its sizes out: transformers' own config class fills in the defaults
it would load with (a Llama config without sizes is a 6.7B Llama), and where the formula of core.memory cannot read
the filled config either, the model is built on the meta device (no memory, no weights) and its parameters counted.
Needs torch and transformers: core.memory imports it only where they are loaded anyway (the CLI, the engine)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any


def defaulted_parameter_count(config_file: Path) -> int | None:
    """Parameters of the causal LM that `config_file` describes, with its config class's defaults for what it leaves
    out; None when transformers cannot make a config (an unknown or missing model_type) or a model of it."""
    try:
        stat = config_file.stat()
    except OSError:
        return None
    return _counted(str(config_file), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _counted(path: str, mtime_ns: int, size: int) -> int | None:
    from core.memory import parameter_count, text_shape

    config = _filled_config(Path(path))
    if config is None:
        return None
    return parameter_count(text_shape(config.to_dict())) or _meta_parameter_count(config)


def _filled_config(path: Path) -> Any:
    """The config class's instance for this config.json (its defaults filled in), never running the model's code."""
    from transformers import AutoConfig

    from core.memory import MAX_CONFIG_BYTES
    from core.report_files import read_bounded

    try:
        data = json.loads(read_bounded(path, MAX_CONFIG_BYTES, "a config.json"))
        model_type = data.pop("model_type")
        return AutoConfig.for_model(model_type, **data)
    except Exception:  # not a dict, no or an unknown model_type, values its class refuses: the size stays unknown
        return None


def _meta_parameter_count(config: Any) -> int | None:
    """Parameters of the model built from `config` on the meta device, tied ones once."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:  # an architecture without a causal LM, say
        return None
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()) or None
