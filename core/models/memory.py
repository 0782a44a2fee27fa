"""Memory admission: whether a model fits where it would run, known before anything is allocated. No torch here
(what needs it is imported only where it is asked for, by the processes that load models).

A model's need is its weights (parameters x bytes per element, 1/tp of them per rank under tensor parallel: the
embedding and the head are split too) plus a margin for activations, the KV cache of a run and the decode setups:
MARGIN_FRACTION of the weights and MARGIN_BYTES more. The parameters come from the spec's shape (core.models.specs) or,
for an HF id or a path, from the sizes in its config.json; where it leaves them out, from the defaults its config
class fills in (core.models.size: in the processes that load, the CLI's and the engine's; the page's server, which
never imports torch, lets such a config through for the engine to check). The room is free host memory (the lower of
/proc/meminfo's MemAvailable and the cgroup's limit minus its use) or free device memory, plus what the model that a
load replaces holds. `admit` is the one check of the CLI (core.models.loading.load_model) and the engine.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.documents.files import read_bounded
from core.models.size import MAX_CONFIG_BYTES, defaulted_parameter_count, parameter_count, text_shape
from core.models.specs import (
    DEFAULT_MODEL,
    SYNTHETIC_PREFIX,
    SYNTHETIC_SHAPES,
    TINY_FAMILIES,
    TINY_FAMILY_PREFIX,
    TINY_RANDOM,
    TINY_SHAPE,
    quote_spec,
)

GIB = 2**30
MARGIN_FRACTION = 0.25
MARGIN_BYTES = GIB
DTYPE_BYTES = {"bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp32": 4, "float32": 4}
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_NO_LIMIT = 1 << 60  # cgroup v1 writes its "no limit" as a number near 2**63


@dataclass(frozen=True)
class MemoryNeed:
    """What loading one model takes, per rank."""

    spec: str
    parameters: int
    bytes_per_element: int
    tp: int = 1

    @property
    def weight_bytes(self) -> int:
        return self.parameters * self.bytes_per_element // self.tp

    @property
    def needed_bytes(self) -> int:
        return int(self.weight_bytes * (1 + MARGIN_FRACTION)) + MARGIN_BYTES

    def describe(self) -> str:
        per_rank = f" per rank over {self.tp}" if self.tp > 1 else ""
        count = f"{self.parameters / 1e9:.2f}B" if self.parameters >= 1e9 else f"{self.parameters / 1e6:.1f}M"
        return (f"about {gib(self.needed_bytes)}{per_rank} ({count} parameters x "
                f"{self.bytes_per_element} bytes = {gib(self.weight_bytes)} of weights{per_rank}, "
                f"+{MARGIN_FRACTION:.0%} and {gib(MARGIN_BYTES)} for activations and the KV cache)")


def gib(count: int) -> str:
    return f"{count / GIB:.1f} GiB"


def bytes_per_element(dtype: str | None, cuda: bool) -> int:
    """A load's bytes per weight element: the dtype asked for, else bf16 on CUDA and fp32 on the CPU."""
    if dtype in DTYPE_BYTES:
        return DTYPE_BYTES[dtype]
    return 2 if cuda else 4


# ------------------------------------------------------------------------------------------- model sizes

def spec_shape(spec: str) -> dict[str, Any] | None:
    """The sizes of the model `spec` names: a built-in's shape, or an HF id's or a path's config.json (read, never
    downloaded); None when unknown."""
    if spec == DEFAULT_MODEL:
        return SYNTHETIC_SHAPES["smollm2-135m"]  # the same architecture, at the real parameter count
    if spec == TINY_RANDOM:
        return TINY_SHAPE
    if spec.startswith(TINY_FAMILY_PREFIX):
        family = TINY_FAMILIES.get(spec[len(TINY_FAMILY_PREFIX):])
        return family[1] if family else None
    if spec.startswith(SYNTHETIC_PREFIX):
        return SYNTHETIC_SHAPES.get(spec[len(SYNTHETIC_PREFIX):])
    config = config_file(spec)
    if config is None:
        return None
    try:
        data = json.loads(read_bounded(config, MAX_CONFIG_BYTES, "a config.json"))
    except (OSError, ValueError):
        return None
    return text_shape(data) if isinstance(data, dict) else None


def config_file(spec: str) -> Path | None:
    """A local directory's config.json, or an HF id's from the local cache; None when neither is here."""
    try:
        path = Path(spec).expanduser() / "config.json"
        if path.is_file():
            return path
    except OSError:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(spec, "config.json")
    except Exception:  # not a valid id, or no huggingface_hub: the size is unknown
        return None
    return Path(cached) if isinstance(cached, str) else None


def memory_need(spec: str, element_bytes: int, tp: int = 1, *, config_defaults: bool = False) -> MemoryNeed | None:
    """What loading `spec` takes per rank, or None when its size cannot be known without loading it. With
    `config_defaults` (it imports torch and transformers), a config.json without sizes is sized by its config class's
    defaults, as transformers would load it (core.models.size)."""
    shape = spec_shape(spec)
    parameters = parameter_count(shape) if shape is not None else None
    if parameters is None and config_defaults and (config := config_file(spec)) is not None:
        parameters = defaulted_parameter_count(config)
    if parameters is None:
        return None
    return MemoryNeed(spec=spec, parameters=parameters, bytes_per_element=element_bytes, tp=max(1, tp))


def admission_problem(need: MemoryNeed | None, room_bytes: int | None, where: str) -> str | None:
    """Why the model cannot be loaded into `room_bytes` of `where` ("host memory", "cuda:0 memory"), in one line;
    None when it fits, or when its size or the room is unknown."""
    if need is None or room_bytes is None or need.needed_bytes <= room_bytes:
        return None
    return (f"model {quote_spec(need.spec)} does not fit: it needs {need.describe()}, and {gib(room_bytes)} of "
            f"{where} is free for it")


UNSIZED_NOTE = "; its size is unknown before loading, so it was not checked against free memory"


@dataclass(frozen=True)
class Admission:
    """A load that may go ahead: the note for its progress line ("" when it was checked) and whether it fits beside
    the model it replaces, so that one may stay loaded until the new one is."""

    note: str
    beside: bool


def admit(spec: str, device: Any, element_bytes: int, tp: int = 1, held_bytes: int = 0) -> Admission:
    """The admission of a load of `spec` on `device` (a torch.device), 1/tp of it on this rank, in place of a model
    that holds `held_bytes` here; ValueError in one line, before anything is allocated or unloaded, when it cannot
    fit. The CLI's load (core.models.loading.load_model) and the engine's both ask it."""
    need = memory_need(spec, element_bytes, tp, config_defaults=True)
    if need is None:
        return Admission(UNSIZED_NOTE, beside=False)
    room, where = room_for_a_model(device, held_bytes)
    problem = admission_problem(need, room, where)
    if problem:
        raise ValueError(problem)
    return Admission("", beside=room is not None and admission_problem(need, room - held_bytes, where) is None)


def room_for_a_model(device: Any, held_bytes: int) -> tuple[int | None, str]:
    """Memory a model loaded on `device` may take (None: unknown), and what memory that is. On CUDA: free device
    memory and all that this process's allocator keeps (a loaded model's weights are in it); on the CPU: free host
    memory and `held_bytes`, which the loaded model gives back before the load."""
    if device.type == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device), f"{device} memory"
    free = free_host_bytes()
    return (None if free is None else free + held_bytes), "host memory"


def fits(spec: str, room_bytes: int | None, element_bytes: int, tp: int = 1) -> bool:
    """Whether `spec` fits `room_bytes` (True when either size is unknown: the engine checks again at load)."""
    return admission_problem(memory_need(spec, element_bytes, tp), room_bytes, "memory") is None


# ------------------------------------------------------------------------------------------- free memory

def free_host_bytes() -> int | None:
    """Host memory a new allocation can take: MemAvailable, or the cgroup's limit minus its use where lower."""
    candidates = [value for value in (_mem_available(), cgroup_room()) if value is not None]
    return min(candidates) if candidates else None


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_room(root: Path = _CGROUP_ROOT) -> int | None:
    """The cgroup's memory limit minus its current use (v2: memory.max / memory.current; v1: limit_in_bytes /
    usage_in_bytes); None without a limit or where unreadable."""
    for directory, limit_name, usage_name in _memory_cgroups(root):
        limit, usage = _read_number(directory / limit_name), _read_number(directory / usage_name)
        if limit is not None and usage is not None and limit < _NO_LIMIT:
            return max(0, limit - usage)
    return None


def oom_kill_count(root: Path = _CGROUP_ROOT) -> int | None:
    """How many processes of this cgroup an OOM killer has ended so far (v2 memory.events, v1 memory.oom_control);
    None where neither is readable."""
    for directory, _, _ in _memory_cgroups(root):
        for name in ("memory.events", "memory.oom_control"):
            with _quiet():
                for line in (directory / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
    return None


def _memory_cgroups(root: Path) -> list[tuple[Path, str, str]]:
    """This process's memory cgroup directories, most specific first, with their limit and usage file names."""
    v2, v1 = "", ""
    with _quiet():
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                v2 = path
            elif "memory" in controllers.split(","):
                v1 = path
    found = []
    for base, path, limit, usage in ((root, v2, "memory.max", "memory.current"),
                                     (root / "memory", v1, "memory.limit_in_bytes", "memory.usage_in_bytes")):
        for directory in (base / path.lstrip("/"), base):  # a namespaced cgroup is mounted as the root
            if (directory / limit).is_file() and (directory, limit, usage) not in found:
                found.append((directory, limit, usage))
    return found


def _read_number(path: Path) -> int | None:
    with _quiet():
        text = path.read_text().strip()
        return None if text == "max" else int(text)
    return None


def _quiet() -> contextlib.suppress:
    """What reading a /proc or /sys file can raise (absent, unreadable, unexpected content), suppressed."""
    return contextlib.suppress(OSError, ValueError)


def free_gpu_bytes(nvml_indices: list[int]) -> int | None:
    """The least free device memory of these GPUs, read through NVML (this process never initialises CUDA)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return min(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).free
                       for i in nvml_indices)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None

