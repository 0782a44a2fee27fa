"""syncscope core: model loading, the naive and pipelined decode loops, timings and the A/B benchmark."""

from core.generation import GenerationOptions, GenerationResult, TokenEvent, generate
from core.models import BUILTIN_SPECS, DEFAULT_MODEL, LoadedModel, load_model

__all__ = [
    "BUILTIN_SPECS", "DEFAULT_MODEL", "GenerationOptions", "GenerationResult", "LoadedModel", "TokenEvent",
    "generate", "load_model",
]
