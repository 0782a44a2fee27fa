"""Background sampler of one GPU's utilization, memory, power and SM clock through NVML, with a CPU fallback.

NVML's utilization is the share of its last sample period (1/6 s to 1 s, depending on the product) in which any
kernel ran: coarse, and 100% even when a single SM is busy. The per-step CUDA events of core.timeline give the
exact idle gap; this sampler gives the device-wide picture over time, other processes included.

Timestamps come from time.perf_counter, the clock of TokenEvent.host_time_s, so both series share one time axis.
Without an NVIDIA GPU (or without NVML) the monitor says so plainly and samples CPU utilization and the process's
resident memory instead.
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import time
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any, Protocol

NVML = "nvml"
CPU = "cpu"


@dataclass(frozen=True)
class Sample:
    """One reading; None where the metric could not be read. `mem_used_mb` is device memory, or host RSS on CPU."""

    t: float
    util_pct: float | None
    mem_used_mb: float | None
    power_w: float | None
    sm_clock_mhz: float | None

    def to_dict(self) -> dict[str, float | None]:
        return asdict(self)


class Reader(Protocol):
    kind: str
    name: str

    def read(self) -> Sample: ...

    def close(self) -> None: ...


def import_pynvml() -> ModuleType:
    """The NVML binding, imported only when a monitor starts."""
    try:
        import pynvml
    except ImportError as exc:
        raise ImportError("GPU monitoring needs NVIDIA's NVML binding: pip install nvidia-ml-py "
                          "(it provides the module pynvml)") from exc
    return pynvml


class NvmlReader:
    """Reads one GPU; every metric in its own try, so one unsupported query does not hide the others."""

    kind = NVML

    def __init__(self, nvml: ModuleType, index: int):
        self.nvml = nvml
        nvml.nvmlInit()
        try:
            count = nvml.nvmlDeviceGetCount()
            if not 0 <= index < count:
                raise RuntimeError(f"NVML sees {count} GPU(s); there is no GPU {index}")
            self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
            self.name = f"{_text(_safe(lambda: nvml.nvmlDeviceGetName(self.handle)) or 'NVIDIA GPU')} (GPU {index})"
        except Exception:
            _safe(nvml.nvmlShutdown)
            raise

    def read(self) -> Sample:
        nvml, handle = self.nvml, self.handle
        util = _safe(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        memory = _safe(lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20)
        power = _safe(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000)  # milliwatts
        clock = _safe(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        return Sample(t=time.perf_counter(), util_pct=_num(util), mem_used_mb=_num(memory), power_w=_num(power),
                      sm_clock_mhz=_num(clock))

    def close(self) -> None:
        _safe(self.nvml.nvmlShutdown)


class CpuReader:
    """System-wide CPU utilization and this process's resident memory."""

    kind = CPU
    name = "CPU"

    def __init__(self) -> None:
        import psutil

        self.psutil = psutil
        self.process = psutil.Process()
        psutil.cpu_percent(interval=None)  # the first call only starts the measurement window

    def read(self) -> Sample:
        util = _safe(lambda: self.psutil.cpu_percent(interval=None))
        rss = _safe(lambda: self.process.memory_info().rss / 2**20)
        return Sample(t=time.perf_counter(), util_pct=_num(util), mem_used_mb=_num(rss), power_w=None,
                      sm_clock_mhz=None)

    def close(self) -> None:
        pass


def open_reader(index: int = 0, nvml: ModuleType | None = None) -> tuple[Reader, str]:
    """An NVML reader for GPU `index`, else a CPU reader; the message says which, and why."""
    try:
        reader: Reader = NvmlReader(nvml or import_pynvml(), index)
        return reader, f"{reader.name} via NVML"
    except Exception as exc:
        reason = str(exc).strip() or type(exc).__name__
        return CpuReader(), f"No NVIDIA GPU found ({reason}). Showing CPU utilization and host memory instead."


def nvml_index(cuda_index: int) -> int:
    """NVML numbers GPUs physically; CUDA_VISIBLE_DEVICES renumbers what torch sees."""
    visible = [part.strip() for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if part.strip()]
    if cuda_index < len(visible) and visible[cuda_index].isdigit():
        return int(visible[cuda_index])
    return cuda_index


class GpuMonitor:
    """Samples in a daemon thread every `interval_s` into a bounded buffer; `samples()` reads it from any thread."""

    def __init__(self, interval_s: float = 0.25, device_index: int = 0, *, max_samples: int = 20_000,
                 nvml: ModuleType | None = None):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.interval_s = interval_s
        self.device_index = device_index
        self._nvml = nvml
        self._buffer: collections.deque[Sample] = collections.deque(maxlen=max_samples)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader: Reader | None = None
        self.description = "not started"

    @property
    def kind(self) -> str:
        """'nvml' when an NVIDIA GPU is sampled, 'cpu' for the fallback."""
        return self._reader.kind if self._reader else CPU

    @property
    def available(self) -> bool:
        """True when an NVIDIA GPU is being sampled."""
        return self.kind == NVML

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> GpuMonitor:
        if self.running:
            return self
        self._reader, self.description = open_reader(self.device_index, self._nvml)
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="gpu-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval_s + 1)
            self._thread = None
        if self._reader is not None:
            self._reader.close()

    def samples(self, since: float | None = None) -> list[dict[str, float | None]]:
        """Samples taken at or after `since` (a time.perf_counter value), oldest first."""
        with self._lock:
            if since is None:
                recent = list(self._buffer)
            else:
                recent = list(itertools.takewhile(lambda s: s.t >= since, reversed(self._buffer)))[::-1]
        return [s.to_dict() for s in recent]

    def sample_now(self) -> None:
        """Take one sample immediately (tests, and the edges of a run)."""
        self._record()

    def _loop(self) -> None:
        self._record()
        while not self._stop.wait(self.interval_s):
            self._record()

    def _record(self) -> None:
        if self._reader is None:
            return
        sample = self._reader.read()
        with self._lock:
            self._buffer.append(sample)

    def __enter__(self) -> GpuMonitor:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _safe(read: Any) -> Any:
    try:
        return read()
    except Exception:
        return None


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
