"""syncscope core: model loading, the naive and pipelined decode loops, what they measure, and the A/B comparison.

The names below load lazily, so that importing a torch-free part of the package (`core.request.options`,
`core.models.specs`, `core.measure.gpu_monitor`) does not import torch: the dashboard's server process never does.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {  # relative to this package, which is `core` in the checkout and `syncscope.core` when installed
    "GenerationOptions": ".request.options", "BUILTIN_SPECS": ".models.specs", "DEFAULT_MODEL": ".models.specs",
    "GenerationResult": ".loops.generation", "TokenEvent": ".loops.generation",
    "generate": ".loops.generation", "LoadedModel": ".models.loading", "load_model": ".models.loading",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
