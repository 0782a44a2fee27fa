"""syncscope core: model loading, the naive and pipelined decode loops, what they measure, and the A/B comparison.

The names below load lazily, so that importing a torch-free part of the package (`core.options`, `core.specs`,
`core.measure.gpu_monitor`) does not import torch: the dashboard's server process never does.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GenerationOptions": "core.options", "BUILTIN_SPECS": "core.specs", "DEFAULT_MODEL": "core.specs",
    "GenerationResult": "core.loops.generation", "TokenEvent": "core.loops.generation",
    "generate": "core.loops.generation", "LoadedModel": "core.models", "load_model": "core.models",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'core' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
