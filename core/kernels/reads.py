"""When the project's decode kernels read what they use after their arithmetic (the `kernel_reads` switch,
core.tuning): "first", everything before any arithmetic, so a program waits for memory once (attention its keys,
values and mask together; the products their residual and bias, the q/k/v kernel its rotary and the cache's length,
before their sums); "late", each where it is used, as before 8725825. The same arithmetic in the same order either
way: the same bits in Triton's interpreter; compiled for an H100 some fp32 cases differ in their last bits (the two
are scheduled apart), within rounding (tests/test_triton_attention.py, tests/test_cuda_layer.py). A compile traces
with one (core.kernels.products.traced_with); the launchers read it while they are traced and give it to the kernels
as the constant READS_FIRST. docs/TUNING.md has the A/B."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

FIRST, LATE = "first", "late"
ORDERS = (FIRST, LATE)
_order = FIRST  # read while a compile traces the kernels' launches: a plain string, so a guard compares values


@contextmanager
def reading(order: str) -> Iterator[None]:
    """Inside it, the project's kernels are launched (and so traced) with reads `order`: "first" or "late"."""
    global _order
    if order not in ORDERS:
        raise ValueError(f"the kernels' reads are {' or '.join(ORDERS)}, got {order!r}")
    previous, _order = _order, order
    try:
        yield
    finally:
        _order = previous


def reads_first() -> bool:
    """Whether the kernels launched now read everything before their arithmetic (READS_FIRST)."""
    return _order == FIRST
