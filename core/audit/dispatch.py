"""Host memory on the CPU, and the dispatch mode through which the sync audit (core.audit.sync) sees the
reads that have no Python entry point there: masked indexing, and reads that PyTorch's C++ makes on its own."""

from __future__ import annotations

import weakref
from typing import Any, Protocol

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode


class DispatchedReads(Protocol):
    """What the dispatch mode asks of the audit it reports to (core.audit.sync.SyncAudit)."""

    active: bool

    def counts_reads_here(self) -> bool: ...

    def record_dispatched(self, kind: str | None, args: tuple[Any, ...], what: str | None = None) -> None: ...


HOST_MEMORY: set[int] = set()  # data_ptr of each storage marked as host memory, while the storage lives


def host_memory(tensor: torch.Tensor) -> torch.Tensor:
    """Mark `tensor`'s storage as host memory, for as long as the storage lives: reading it (or a view of it) reads
    no device value (on the CPU, where everything is host memory, the audit cannot tell otherwise). Returns the
    tensor."""
    _mark(tensor, HOST_MEMORY)
    return tensor


def storage_pointer(tensor: torch.Tensor) -> int | None:
    if isinstance(tensor, FakeTensor):  # torch.compile tracing: it has no memory (and asking warns, later raises)
        return None
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


def _is_mask(index: Any) -> bool:
    return isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)


_DISPATCHED_READS = {"aten._local_scalar_dense": "item", "aten.is_nonzero": "bool", "aten.nonzero": "nonzero",
                     "aten.masked_select": "masked-index", "aten.equal": "equal"}
_INDEX_OPS = frozenset({"aten.index", "aten.index_put", "aten.index_put_"})
_LIFTS = frozenset({"aten.lift_fresh", "aten.lift_fresh_copy"})  # a tensor PyTorch's C++ made from Python data
_OP_NAMES: dict[Any, str] = {}
_FROM_PYTHON: set[int] = set()  # storages of the tensors PyTorch made of a Python list (an index, a value), alive


class CpuReads(TorchDispatchMode):
    """The reads the CPU's Python entry points do not show: masked indexing (aten.index / index_put_ with a boolean
    index), and scalar reads, truth tests and data-dependent shapes that PyTorch's C++ makes on its own. It also
    carries host memory: what an op computes from host memory alone is host memory (a clone of a pinned copy, say).
    One per watched thread (PyTorch's dispatch modes are per thread)."""

    def __init__(self, audit: DispatchedReads):
        super().__init__()
        self.audit = audit

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        audit = self.audit
        if not audit.active:  # a thread that outlived the audit
            return func(*args, **kwargs)
        name = _OP_NAMES.get(func)
        if name is None:
            name = _OP_NAMES[func] = func.overloadpacket._qualified_op_name.replace("::", ".")
        kind, what = _DISPATCHED_READS.get(name), None
        if name in _INDEX_OPS and len(args) > 1:
            if any(_is_mask(i) for i in args[1] or ()) and not _fills_a_mask(name, args):
                kind = "masked-index"
            elif (what := _host_indices(args)) is not None:
                kind = "h2d-copy"
        elif name == "aten.copy_" and len(args) > 1 and not asks_non_blocking(args[2:], kwargs):
            what = _from_host(args[1])
            kind = "h2d-copy" if what else None
        audit.record_dispatched(kind, args[:1], what)
        out = func(*args, **kwargs)
        if name in _LIFTS:
            # not inside torch.tensor and its kin: a list PyTorch turns into an index or a value
            if audit.counts_reads_here():
                _mark(out, _FROM_PYTHON)
                host_memory(out)
        elif HOST_MEMORY and args and audit.counts_reads_here():
            _carry_host_memory(args, kwargs, out)
        return out


def _from_host(tensor: Any) -> str | None:
    """What a copy from `tensor` to the device copies, where `tensor` is host memory: "built" (a Python list made a
    tensor) or "to-device"; None where it is not host memory."""
    if not isinstance(tensor, torch.Tensor) or not tensor.numel():
        return None
    pointer = storage_pointer(tensor)
    if pointer not in HOST_MEMORY:
        return None
    return "built" if pointer in _FROM_PYTHON else "to-device"


def _host_indices(args: tuple[Any, ...]) -> str | None:
    """aten.index / index_put_ with an index in host memory (a Python list, a host tensor) or, for index_put_, a
    value there: on a GPU it is copied to the device first, and the host waits."""
    for index in args[1] or ():
        if isinstance(index, torch.Tensor) and index.dim() > 0 and storage_pointer(index) in HOST_MEMORY:
            return "list-index" if storage_pointer(index) in _FROM_PYTHON else "host-index"
    value = args[2] if len(args) > 2 else None
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return _from_host(value)
    return None


def _mark(tensor: Any, registry: set[int]) -> None:
    """Put `tensor`'s storage in `registry` for as long as the storage lives."""
    if not isinstance(tensor, torch.Tensor):
        return
    pointer = storage_pointer(tensor)
    if pointer and pointer not in registry:  # 0: an empty storage, which every empty tensor shares
        registry.add(pointer)
        weakref.finalize(tensor.untyped_storage(), registry.discard, pointer)


def _carry_host_memory(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """Mark what an op made from host memory alone as host memory (checked on its first argument first: cheap)."""
    first = args[0][0] if isinstance(args[0], list | tuple) and args[0] else args[0]
    if not isinstance(first, torch.Tensor) or storage_pointer(first) not in HOST_MEMORY:
        return
    inputs = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    if all(storage_pointer(t) in HOST_MEMORY for t in inputs):
        for made in pytree.tree_leaves(out):
            if isinstance(made, torch.Tensor):
                host_memory(made)


def _fills_a_mask(name: str, args: tuple[Any, ...]) -> bool:
    """`t[mask] = scalar`: PyTorch runs it as masked_fill_ (canDispatchToMaskedFill: one mask, a one-element value on
    the CPU), which needs no count of the mask, so it reads nothing."""
    if not name.startswith("aten.index_put") or len(args) < 3:
        return False
    value = args[2]
    masks = [i for i in args[1] if i is not None]
    return isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type == "cpu" and len(masks) == 1


def asks_non_blocking(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return bool(kwargs.get("non_blocking")) or any(a is True for a in args)
