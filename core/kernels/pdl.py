"""Programmatic dependent launch (PDL) for the kernels of a step-graph decode step: an option, off by default.

A batch-1 decode step is ~450 short kernels (Llama-8B shape, TP=2), each of which normally waits for the one before
to finish before the GPU schedules its blocks. With PDL (Hopper and newer) a kernel is launched while its
predecessor still runs and waits inside, at `gdc_wait`, for what it needs; inductor generates that code when
`triton.enable_pdl` is set. SYNCSCOPE_PDL chooses:
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

SYNCSCOPE_KERNEL_PDL does the same for the project's own Triton kernels (core.kernels.triton_gemv's products, the
fused layer's q/k/v kernel, the decode attention's two), which inductor launches as user-defined kernels and so
never gives PDL. Each kernel takes a constexpr `PDL` (`kernel_pdl_level`): 0 compiles today's kernel; 1 ("wait") waits
at the start of every program, before any load or store, and then lets the next kernel launch; 2 ("prefetch") first
asks L2 for the start of the program's weight rows, which no kernel of a decode step writes, then waits. Since every
program waits before touching memory that another kernel writes, a kernel finishes only after its predecessor has,
as without PDL: what overlaps is the launch, the blocks' scheduling and, with "prefetch", the first weight reads.
The kernels wait only where this has effect: a Hopper or newer GPU, and never in Triton's interpreter, which runs no
inline assembly.

The launch itself needs Triton's `launch_pdl` option. A kernel Triton launches (outside a compile) gets it as a
keyword; inside a compile, inductor's code for a user-defined kernel takes its compile options from the `triton_meta`
it writes into the generated source, which has no such entry and no way in from the launch's keywords, so
`install_user_kernel_pdl` adds it there for every kernel launched with PDL > 0.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

from core.options import KERNEL_PDL_CHOICES, KERNEL_PDL_ENV, PDL_CHOICES, PDL_ENV, STEP_GRAPH, env_choice

__all__ = [
    "KERNEL_PDL_CHOICES",
    "KERNEL_PDL_ENV",
    "PDL_CHOICES",
    "PDL_ENV",
    "hopper_or_newer",
    "install_user_kernel_pdl",
    "kernel_pdl_arguments",
    "kernel_pdl_choice",
    "kernel_pdl_in_effect",
    "kernel_pdl_launch_options",
    "kernel_pdl_level",
    "pdl_choice",
    "pdl_in_effect",
    "pdl_inductor_options",
    "supports_pdl",
    "with_launch_pdl",
]

PDL_CONSTEXPR = "PDL"  # the name of the kernels' constexpr: 0 off, 1 wait, 2 prefetch (KERNEL_PDL_CHOICES' order)


def pdl_choice() -> str:
    """The PDL placement SYNCSCOPE_PDL asks for: "off" (the default), "safe" or "inductor"."""
    return env_choice(PDL_ENV, PDL_CHOICES)


def hopper_or_newer(device: torch.device | str) -> bool:
    """Whether `device` is an NVIDIA GPU of compute capability 9.0 (Hopper) or newer."""
    device = torch.device(device)
    return (device.type == "cuda" and torch.version.hip is None and torch.cuda.is_available()
            and torch.cuda.get_device_capability(device)[0] >= 9)


def supports_pdl(device: torch.device | str) -> bool:
    """PDL needs an NVIDIA GPU of compute capability 9.0 (Hopper) or newer."""
    return hopper_or_newer(device)


def pdl_inductor_options(device: torch.device | str, choice: str | None = None) -> dict[str, Any]:
    """Inductor options that turn PDL on for a compile on `device` (empty when off or unsupported). The safe
    placement also installs its code generator and adds a no-op graph pass whose id keeps its compiled graphs apart
    from inductor-placed ones in inductor's on-disk cache."""
    choice = choice or pdl_choice()
    if choice == "off" or not supports_pdl(device):
        return {}
    if choice == "inductor":
        return {"triton.enable_pdl": True}
    install_safe_pdl_placement()
    return {"triton.enable_pdl": True, "post_grad_custom_post_pass": _safe_pdl_cache_key()()}


def pdl_in_effect(device: torch.device | str, compile_mode: str, overrides: dict[str, Any]) -> str:
    """What a compile in `compile_mode` on `device` gets, for reports: "safe", "inductor", "off" or "unsupported"
    (PDL is used in step-graph mode only; SYNCSCOPE_INDUCTOR_OPTIONS may still set triton.enable_pdl itself)."""
    asked = overrides.get("triton.enable_pdl")
    if asked is False:
        return "off"
    if compile_mode != STEP_GRAPH:
        return "inductor" if asked else "off"
    choice = pdl_choice()
    if choice == "off":
        return "inductor" if asked else "off"
    return choice if supports_pdl(device) else "unsupported"


def install_safe_pdl_placement() -> None:
    """Make inductor's Triton kernels wait for their predecessor before their first memory access (idempotent). It
    replaces a private method of inductor's code generator, the one that places the waits."""
    from torch._inductor.codegen.triton import TritonKernel

    if not hasattr(TritonKernel, "_handle_pdl_before_access"):
        raise ValueError(f"{PDL_ENV}=safe needs a PyTorch whose inductor generates PDL code (torch "
                         f"{torch.__version__} does not); use {PDL_ENV}=off")
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


def kernel_pdl_choice() -> str:
    """What SYNCSCOPE_KERNEL_PDL asks of the project's Triton kernels: "off" (the default), "wait" or "prefetch"."""
    return env_choice(KERNEL_PDL_ENV, KERNEL_PDL_CHOICES)


def kernel_pdl_level(device: torch.device | str) -> int:
    """The `PDL` constexpr of a kernel launched on `device`: the choice's place in KERNEL_PDL_CHOICES, 0 where PDL
    cannot work (below Hopper, not CUDA) and under Triton's interpreter."""
    choice = kernel_pdl_choice()
    if choice == "off" or os.environ.get("TRITON_INTERPRET") == "1" or not supports_pdl(device):
        return 0
    return KERNEL_PDL_CHOICES.index(choice)


def kernel_pdl_arguments(device: torch.device | str, traced: bool) -> dict[str, Any]:
    """What a launch of one of the project's kernels on `device` adds to its keywords: the `PDL` constexpr and
    Triton's launch option (`traced`: launched through a compile's `wrap_triton`, not by Triton itself)."""
    level = kernel_pdl_level(device)
    return {PDL_CONSTEXPR: level, **kernel_pdl_launch_options(level, traced)}


def kernel_pdl_launch_options(level: int, traced: bool) -> dict[str, Any]:
    """Triton's launch keywords for a kernel of `level`: `launch_pdl` where Triton launches it itself; inside a
    compile's trace (`traced`) none, since inductor drops them, and its generated code gets the option instead."""
    if not level:
        return {}
    if traced:
        install_user_kernel_pdl()
        return {}
    return {"launch_pdl": True}


def kernel_pdl_in_effect(device: torch.device | str, compile_mode: str) -> str:
    """What the project's kernels ran with, for reports: "off", "wait", "prefetch" or "unsupported" (they run only in
    compiled CUDA steps, so "off" where nothing is compiled)."""
    choice = kernel_pdl_choice()
    if choice == "off" or compile_mode == "off":
        return "off"
    return choice if supports_pdl(device) else "unsupported"


_META = "triton_meta={"


def with_launch_pdl(source: str) -> str:
    """A user-defined kernel's generated source (inductor's `async_compile.triton(...)` call) with `launch_pdl` in
    the `triton_meta` inductor compiles and launches it with."""
    if _META not in source:
        raise RuntimeError(f"{KERNEL_PDL_ENV}: inductor's code for a user-defined Triton kernel has no {_META!r} "
                           f"(torch {torch.__version__}); use {KERNEL_PDL_ENV}=off")
    return source.replace(_META, _META + "'launch_pdl': True, ", 1)


def install_user_kernel_pdl() -> None:
    """Make inductor launch with PDL each user-defined kernel whose `PDL` constexpr is set (idempotent). It wraps a
    private method of inductor's wrapper code generator, the one that writes a user-defined kernel's source."""
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    original = PythonWrapperCodegen.define_user_defined_triton_kernel
    if getattr(original, "_syncscope_pdl", False):
        return

    @functools.wraps(original)
    def define_user_defined_triton_kernel(self: Any, kernel: Any, configs: Any, kwargs: dict[str, Any], *args: Any,
                                          **kw: Any) -> Any:
        if not kwargs.get(PDL_CONSTEXPR):
            return original(self, kernel, configs, kwargs, *args, **kw)
        define_kernel = self.define_kernel
        self.define_kernel = lambda name, body, *a, **k: define_kernel(name, with_launch_pdl(body), *a, **k)
        try:
            return original(self, kernel, configs, kwargs, *args, **kw)
        finally:
            del self.define_kernel

    define_user_defined_triton_kernel._syncscope_pdl = True  # type: ignore[attr-defined]
    PythonWrapperCodegen.define_user_defined_triton_kernel = define_user_defined_triton_kernel


def __getattr__(name: str) -> Any:
    if name == "SafePdlCacheKey":
        return _safe_pdl_cache_key()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
