"""The Python entry points of host reads, wrapped for the sync audit's duration (Tensor methods and torch
functions): what each wrapper treats as a read of a device value, or as a copy between host and device."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from core.audit.dispatch import HOST_MEMORY, asks_non_blocking, host_memory, storage_pointer
from core.audit.sites import Marker, names_the_cpu


class TensorMethodWrappers:
    """The wrappers of core.audit.sync.SyncAudit (mixed into it): each records a read through the audit's
    `_bracket` when it is the audit's (`counts_reads_here`) and of a device value."""

    def _device_value(self, tensor: Any) -> bool:
        if not isinstance(tensor, torch.Tensor):
            return False
        if self.cuda:
            return tensor.is_cuda
        if tensor.device.type == "meta":
            return False
        pointer = storage_pointer(tensor)
        return pointer is None or pointer not in HOST_MEMORY  # no plain storage (a subclass): a device value

    def _host(self, tensor: torch.Tensor) -> bool:
        """Host memory, from which a copy to the device waits (CUDA: any CPU tensor; CPU: what is marked so)."""
        if self.cuda:
            return tensor.device.type == "cpu"
        return storage_pointer(tensor) in HOST_MEMORY

    def _wrappers(self) -> list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]]:
        reads_self = {"item": "item", "__bool__": "bool", "__float__": "item", "__int__": "item",
                      "__index__": "item", "tolist": "tolist", "numpy": "copy", "__repr__": "print",
                      "__format__": "print", "nonzero": "nonzero", "masked_select": "masked-index"}
        wrappers: list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = [
            (torch.Tensor, name, functools.partial(self._reading_self, kind)) for name, kind in reads_self.items()]
        wrappers += [(torch, name, functools.partial(self._reading_arg, kind))
                     for name, kind in (("nonzero", "nonzero"), ("argwhere", "nonzero"), ("equal", "equal"),
                                        ("masked_select", "masked-index"))]
        wrappers += [(torch, name, functools.partial(self._from_data, name == "tensor"))
                     for name in ("tensor", "as_tensor")]
        wrappers += [(torch, "asarray", functools.partial(self._from_data, True)),
                     (torch.Tensor, "new_tensor", self._new_tensor)]
        wrappers += [(torch.Tensor, "cpu", self._cpu), (torch.Tensor, "to", self._to),
                     (torch.Tensor, "copy_", self._copy)]
        if self.cuda:
            wrappers += [(torch.Tensor, "cuda", self._cuda),
                         (torch.cuda, "synchronize", functools.partial(self._waiting, "synchronize")),
                         (torch.cuda.Stream, "synchronize", functools.partial(self._waiting, "stream-synchronize")),
                         (torch.cuda.Event, "synchronize", self._event_wait),
                         (torch.cuda.Event, "record", self._event_record),
                         (torch.cuda.CUDAGraph, "replay", self._replay)]
        return wrappers

    def _patch(self, owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        had_own = name in vars(owner)
        original = getattr(owner, name)
        setattr(owner, name, functools.wraps(original)(make(original)))

        def restore() -> None:
            if had_own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)

        self._restore.append(restore)

    def _reading_self(self, kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.counts_reads_here():
                return original(tensor, *args, **kwargs)
            with self._bracket(kind if self._device_value(tensor) else None):
                return original(tensor, *args, **kwargs)
        return wrapper

    def _reading_arg(self, kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.counts_reads_here():
                return original(*args, **kwargs)
            reads = any(self._device_value(a) for a in (*args, *kwargs.values()))
            with self._bracket(kind if reads else None):
                return original(*args, **kwargs)
        return wrapper

    def _cpu(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """`.cpu()` of a device value: one read, and (on the CPU) a host copy, as a GPU's would be."""
        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.counts_reads_here() or not self._device_value(tensor):
                return original(tensor, *args, **kwargs)
            with self._bracket("copy"):
                return self._host_copy(tensor, original(tensor, *args, **kwargs))
        return wrapper

    def _host_copy(self, source: torch.Tensor, result: Any) -> Any:
        """On the CPU, what a copy to the host returns: host memory of its own (`.cpu()` of a CPU tensor is the
        tensor itself, so it is cloned: on a GPU it would be a copy too)."""
        if self.cuda or not isinstance(result, torch.Tensor):
            return result
        if storage_pointer(result) == storage_pointer(source):
            result = result.clone()
        return host_memory(result)

    def _device_copy(self, source: torch.Tensor, result: Any) -> Any:
        """On the CPU, what a copy from host memory to the device returns: memory of its own, not host memory."""
        if self.cuda or not isinstance(result, torch.Tensor):
            return result
        return result.clone() if storage_pointer(result) in HOST_MEMORY else result

    def _to(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            target = _target_device(args, kwargs) if self.counts_reads_here() else None
            if target is None:
                return original(tensor, *args, **kwargs)
            non_blocking = asks_non_blocking(args, kwargs)
            direction = self._direction(tensor, target)
            if direction == "d2h":
                with self._bracket("pageable-copy" if non_blocking else "copy"):
                    return self._host_copy(tensor, original(tensor, *args, **kwargs))
            if direction == "h2d":
                with self._bracket(None if non_blocking else "h2d-copy", "to-device"):
                    return self._device_copy(tensor, original(tensor, *args, **kwargs))
            return original(tensor, *args, **kwargs)
        return wrapper

    def _direction(self, tensor: torch.Tensor, target: torch.device) -> str | None:
        """"d2h", "h2d" or None (a copy within one side) for `tensor.to(target)`. On the CPU both sides are the CPU:
        a line that names "cpu" copies to the host, any other `.to(device)` of host memory to the device."""
        if self.cuda:
            if tensor.is_cuda and target.type == "cpu":
                return "d2h"
            return "h2d" if tensor.device.type == "cpu" and target.type == "cuda" and tensor.numel() else None
        if target.type != "cpu" or not tensor.numel():
            return None
        host = self._host(tensor)
        names_cpu = names_the_cpu(self._where()[0].code)
        if not host and names_cpu:
            return "d2h"
        return "h2d" if host and not names_cpu else None

    def _cuda(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.counts_reads_here() or tensor.is_cuda or asks_non_blocking(args, kwargs) or not tensor.numel():
                return original(tensor, *args, **kwargs)
            with self._bracket("h2d-copy", "to-device"):
                return original(tensor, *args, **kwargs)
        return wrapper

    def _copy(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(target: Any, source: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.counts_reads_here() or not isinstance(source, torch.Tensor):
                return original(target, source, *args, **kwargs)
            kind = self._copy_kind(target, source, asks_non_blocking(args, kwargs))
            if kind is None:
                return original(target, source, *args, **kwargs)
            with self._bracket(kind, "to-device" if kind == "h2d-copy" else None):
                return original(target, source, *args, **kwargs)
        return wrapper

    def _copy_kind(self, target: torch.Tensor, source: torch.Tensor, non_blocking: bool) -> str | None:
        """target.copy_(source): "copy" (to the host), "pageable-copy", "h2d-copy" (from host memory) or None."""
        if self.cuda:
            if not (target.is_cuda or source.is_cuda):
                return None
            to_host, from_host = not target.is_cuda, not source.is_cuda
        else:
            to_host, from_host = self._host(target), self._host(source)
            if non_blocking and not from_host:
                # On the CPU a non_blocking copy from the device fills the program's host mirror (on a GPU, pinned
                # memory)
                host_memory(target)
                return None
        if to_host and not from_host:
            if not non_blocking:
                return "copy"
            return "pageable-copy" if self.cuda and not target.is_pinned() else None
        return "h2d-copy" if from_host and not to_host and not non_blocking and source.numel() else None

    def _from_data(self, copies: bool, original: Callable[..., Any]) -> Callable[..., Any]:
        """torch.tensor / torch.as_tensor (`copies`: torch.tensor): from device scalars, a read of each; from host
        data onto the device, an h2d-copy."""
        def wrapper(data: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.counts_reads_here():
                return original(data, *args, **kwargs)
            if isinstance(data, list | tuple) and any(self._device_value(x) for x in _flat(data)):
                with self._bracket("scalar"):
                    return original(data, *args, **kwargs)
            if not self._builds_on_device(data, args if not copies else (), kwargs):
                if self.cuda:
                    return original(data, *args, **kwargs)
                with self._bracket(None):  # so that the dispatch mode does not take it for a list PyTorch converts
                    return original(data, *args, **kwargs)
            with self._bracket("h2d-copy", "built"):
                return self._device_copy(data, original(data, *args, **kwargs))
        return wrapper

    def _new_tensor(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """`t.new_tensor(data)`: from host data onto t's device (or the one named), an h2d-copy."""
        def wrapper(tensor: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.counts_reads_here():
                return original(tensor, data, *args, **kwargs)
            if kwargs.get("device") is not None:
                onto_device = self._builds_on_device(data, (), kwargs)
            else:  # onto t's own device
                onto_device = self._device_value(tensor) and not _empty(data) and \
                    not (isinstance(data, torch.Tensor) and self._device_value(data))
            with self._bracket("h2d-copy" if onto_device else None, "built"):
                made = original(tensor, data, *args, **kwargs)
                return made if onto_device or self.cuda else host_memory(made)
        return wrapper

    def _builds_on_device(self, data: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether torch.tensor / as_tensor copies host data to the device (`args`: as_tensor's dtype, device)."""
        device = kwargs.get("device", args[1] if len(args) > 1 else None)
        if _empty(data) or (isinstance(data, torch.Tensor) and self._device_value(data)):
            return False  # nothing to copy, or nothing on the host
        if self.cuda:
            target = torch.device(device) if device is not None else torch.get_default_device()
            return target.type == "cuda"
        # On the CPU: a device named, and not as "cpu" in the line's text (a program's host tensor)
        return device is not None and torch.device(device).type == "cpu" and not names_the_cpu(self._where()[0].code)

    def _waiting(self, kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.counts_reads_here():
                return original(*args, **kwargs)
            with self._bracket(kind):
                return original(*args, **kwargs)
        return wrapper

    def _event_record(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(event: Any, *args: Any, **kwargs: Any) -> Any:
            with self._marks:
                self._launches += 1
                self._event_order[id(event)] = self._launches
            return original(event, *args, **kwargs)
        return wrapper

    def _event_wait(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(event: Any) -> Any:
            if not self.counts_reads_here():
                return original(event)
            behind = self._launches > self._event_order.get(id(event), self._launches)
            if behind:  # more work is queued after this event: the device keeps working while the host waits
                with self._marks:
                    self.lagged_waits += 1
                return original(event)
            with self._bracket("event-synchronize"):
                return original(event)
        return wrapper

    def _replay(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
            if self.counts_reads_here():
                with self._marks:
                    self._launches += 1
                    self._markers.append(Marker("replay", self.now_ms(), self._position[0], self._record_event()))
            return original(graph, *args, **kwargs)
        return wrapper


def _target_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device | None:
    """The device Tensor.to's arguments name (None: a dtype only)."""
    value = kwargs.get("device")
    if value is None:
        for arg in args:
            if isinstance(arg, torch.Tensor):
                return arg.device
            if isinstance(arg, str | torch.device) or type(arg) is int:
                value = arg
                break
    if value is None:
        return None
    try:
        return torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        return None


def _empty(data: Any) -> bool:
    """Data with no element (torch.tensor([]), say): PyTorch copies nothing."""
    if isinstance(data, list | tuple):
        return not any(True for _ in _flat(data))
    size = data.numel() if isinstance(data, torch.Tensor) else getattr(data, "size", None)
    return size == 0


def _flat(data: Any) -> Iterator[Any]:
    for item in data:
        if isinstance(item, list | tuple):
            yield from _flat(item)
        else:
            yield item
