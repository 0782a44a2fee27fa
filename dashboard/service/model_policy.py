"""Which models a dashboard may load, and how the banner that every visitor sees may name them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from core.models.specs import BUILTIN_SPECS, check_spec_length, quote_spec

VISITORS_MODEL = "a model a visitor chose"

FitProblem = Callable[[str], str | None]  # why a spec cannot fit this machine (one line), or None


class ModelPolicy:
    """The allow-list (None: any spec), the specs the operator named at startup, which the banner may show, and the
    models taken out while the server runs (`retire`: a model that kept killing its engine).

    With an allow-list (an exposed server), `leave_out_unfit` takes out the allowed specs that cannot fit this
    machine: they are neither offered nor accepted."""

    def __init__(self, allowed: set[str] | None = None, named: Iterable[str] = ()):
        self.allowed = allowed
        self.named = {*BUILTIN_SPECS, *named, *(allowed or ())}
        self.too_big: dict[str, str] = {}
        self.retired: dict[str, str] = {}

    def leave_out_unfit(self, unfit: FitProblem) -> None:
        """Ask `unfit` of each allowed spec (with an allow-list only), and take out those with a problem."""
        if self.allowed is None:
            return
        self.too_big = {spec: problem for spec in sorted(self.allowed) if (problem := unfit(spec))}
        self.allowed = self.allowed - set(self.too_big)

    @property
    def allow_any(self) -> bool:
        return self.allowed is None

    def choices(self) -> list[str]:
        """The form's list: the built-ins, then the other allowed specs; none that is too big or retired."""
        extra = sorted(self.allowed - set(BUILTIN_SPECS)) if self.allowed else []
        offered = [*BUILTIN_SPECS, *extra]
        return [spec for spec in offered if spec not in self.too_big and spec not in self.retired]

    def check(self, spec: Any) -> str:
        """The stripped spec if it may be loaded; ValueError (one line) otherwise."""
        spec = spec.strip() if isinstance(spec, str) else ""
        if not spec:
            raise ValueError("no model chosen; pick one of: " + ", ".join(self.choices()))
        check_spec_length(spec)
        if spec in self.retired:
            raise ValueError(f"model {quote_spec(spec)} is not offered any more: {self.retired[spec]}")
        if spec in self.too_big:
            raise ValueError(self.too_big[spec])
        if self.allowed is not None and spec not in self.allowed:
            raise ValueError(f"model {quote_spec(spec)} is not allowed on this dashboard; choose one of: "
                             + ", ".join(self.choices()))
        return spec

    def retire(self, spec: str, why: str) -> None:
        """Refuse `spec` from now on (until the server restarts), saying `why`."""
        self.retired[spec] = why

    def public_name(self, spec: str | None) -> str:
        """`spec` as the shared banner may show it: built-ins and the startup specs by name, anything else
        (another visitor's HF id or local path) as a neutral phrase."""
        if spec is None:
            return "no model"
        return spec if spec in self.named else VISITORS_MODEL
