"""Programmatic dependent launch (PDL) for the kernels of a step-graph decode step: an option, off by default.

A batch-1 decode step is ~450 short kernels (Llama-8B shape, TP=2), each of which normally waits for the one before
to finish before the GPU schedules its blocks. With PDL (Hopper and newer) a kernel is launched while its
predecessor still runs and waits inside, at `gdc_wait`, for what it needs; inductor generates that code when
`triton.enable_pdl` is set. The `pdl` switch (core.tuning) chooses:
- "off" (the default);
- "inductor": inductor's placement, which waits only before an access that depends on the kernel just before, so
  a kernel can start reading weights while its predecessor finishes. A kernel that reads what an earlier kernel
  wrote then relies on every kernel in between having waited, and a kernel without loads (a fill) never does;
- "safe": a wait before each kernel's first memory access, whatever it reads, so a kernel starts only once its
  predecessor (and by induction every kernel before it) has finished, as without PDL; only launch and block
  scheduling overlap.

What it gives depends on the machine (docs/TUNING.md has the rates). On one, "inductor" made Llama-8B faster, but
its Llama-70B bf16 trials stopped repeating token for token where the same run without PDL repeated bitwise: the
hazard above, seen. On another, both placements were slower than no PDL. So PDL stays off unless asked for; the
report's `environment.pdl` says which ran.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from core.request.options import STEP_GRAPH
from core.tuning import SWITCH

__all__ = [
    "install_safe_pdl_placement",
    "pdl_in_effect",
    "pdl_inductor_options",
    "supports_pdl",
]


def supports_pdl(device: torch.device | str) -> bool:
    """PDL needs an NVIDIA GPU of compute capability 9.0 (Hopper) or newer."""
    device = torch.device(device)
    return (device.type == "cuda" and torch.version.hip is None and torch.cuda.is_available()
            and torch.cuda.get_device_capability(device)[0] >= 9)


def pdl_inductor_options(device: torch.device | str, choice: str) -> dict[str, Any]:
    """Inductor options that turn PDL on for a compile on `device` with the `pdl` switch's `choice` (empty when off
    or unsupported). The safe placement also installs its code generator and adds a no-op graph pass whose id keeps
    its compiled graphs apart from inductor-placed ones in inductor's on-disk cache."""
    if choice == "off" or not supports_pdl(device):
        return {}
    if choice == "inductor":
        return {"triton.enable_pdl": True}
    install_safe_pdl_placement()
    return {"triton.enable_pdl": True, "post_grad_custom_post_pass": _safe_pdl_cache_key()()}


def pdl_in_effect(device: torch.device | str, compile_mode: str, choice: str, overrides: dict[str, Any]) -> str:
    """What a compile in `compile_mode` on `device` gets with the `pdl` switch's `choice`, for reports: "safe",
    "inductor", "off" or "unsupported" (PDL is used in step-graph mode only; the `inductor_options` switch, given as
    `overrides`, may still set triton.enable_pdl itself)."""
    asked = overrides.get("triton.enable_pdl")
    if asked is False:
        return "off"
    if compile_mode != STEP_GRAPH:
        return "inductor" if asked else "off"
    if choice == "off":
        return "inductor" if asked else "off"
    return choice if supports_pdl(device) else "unsupported"


def install_safe_pdl_placement() -> None:
    """Make inductor's Triton kernels wait for their predecessor before their first memory access (idempotent). It
    replaces a private method of inductor's code generator, the one that places the waits."""
    from torch._inductor.codegen.triton import TritonKernel

    if not hasattr(TritonKernel, "_handle_pdl_before_access"):
        variable = SWITCH["pdl"].variable
        raise ValueError(f"{variable}=safe needs a PyTorch whose inductor generates PDL code (torch "
                         f"{torch.__version__} does not); use {variable}=off")
    if getattr(TritonKernel._handle_pdl_before_access, "_syncscope_safe", False):
        return
    TritonKernel._handle_pdl_before_access = _wait_before_any_access


def _wait_before_any_access(self: Any, wait_buffer: Any, *dependencies: Any, consider_reads: bool = False) -> None:
    """Inductor's `_handle_pdl_before_access` without the test for a dependency on the kernel just before: every
    access gets a wait, and inductor's `_filter_pdl` keeps only the first, hoisted above any loop like inductor's."""
    if not self._enable_pdl_codegen():
        return
    if self.inside_reduction and self.range_trees[-1].is_loop:
        wait_buffer = self.body
    wait_buffer.writeline(self.GDC_WAIT)


_wait_before_any_access._syncscope_safe = True  # type: ignore[attr-defined]


@functools.cache
def _safe_pdl_cache_key() -> type:
    """The class SafePdlCacheKey, made at its first use: its base is inductor's, and importing torch._inductor (and
    dynamo with it) at this module's import was 1.8 s of CPU in every process that imports core.loops.step, most of
    which never compile with the safe placement. Named and placed as a class of this module (`__getattr__` below
    finds it), so it pickles as one."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class SafePdlCacheKey(CustomGraphPass):
        """A graph pass that changes nothing; its uuid enters inductor's cache key, so a graph compiled with the safe
        placement is never served to a compile with inductor's own, or the other way round."""

        def __call__(self, graph: torch.fx.graph.Graph) -> None:
            return None

        def uuid(self) -> str:
            return "syncscope-safe-pdl-1"

    SafePdlCacheKey.__qualname__ = SafePdlCacheKey.__name__
    SafePdlCacheKey.__module__ = __name__
    return SafePdlCacheKey


def __getattr__(name: str) -> Any:
    if name == "SafePdlCacheKey":
        return _safe_pdl_cache_key()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
