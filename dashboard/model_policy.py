"""Which models a dashboard may load, and how the banner that every visitor sees may name them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.specs import BUILTIN_SPECS

VISITORS_MODEL = "a model a visitor chose"


class ModelPolicy:
    """The allow-list (None: any spec) and the specs the operator named at startup, which the banner may show."""

    def __init__(self, allowed: set[str] | None = None, named: Iterable[str] = ()):
        self.allowed = allowed
        self.named = {*BUILTIN_SPECS, *named, *(allowed or ())}

    @property
    def allow_any(self) -> bool:
        return self.allowed is None

    def choices(self) -> list[str]:
        """The form's list: the built-ins, then the other allowed specs."""
        extra = sorted(self.allowed - set(BUILTIN_SPECS)) if self.allowed else []
        return [*BUILTIN_SPECS, *extra]

    def check(self, spec: Any) -> str:
        """The stripped spec if it may be loaded; ValueError otherwise."""
        spec = spec.strip() if isinstance(spec, str) else ""
        if not spec:
            raise ValueError("no model chosen; pick one of: " + ", ".join(self.choices()))
        if self.allowed is not None and spec not in self.allowed:
            raise ValueError(f"model {spec!r} is not allowed on this dashboard; choose one of: "
                             + ", ".join(self.choices()))
        return spec

    def public_name(self, spec: str | None) -> str:
        """`spec` as the shared banner may show it: built-ins and the startup specs by name, anything else
        (another visitor's HF id or local path) as a neutral phrase."""
        if spec is None:
            return "no model"
        return spec if spec in self.named else VISITORS_MODEL
