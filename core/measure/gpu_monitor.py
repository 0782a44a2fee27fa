"""Background sampler of GPU utilization, memory, power and SM clock through NVML, with a CPU fallback.

NVML's utilization is the share of one driver sample period (1/6 s to 1 s, depending on the product) in which any
kernel ran: coarse, and 100% even when a single SM is busy. The per-step CUDA events of
core.measure.step_times give the exact idle gap; this sampler gives the device-wide picture over time, other processes
included.

The driver keeps its own buffers of utilization, power and clock samples, each stamped in microseconds at the end
of its period. The reader drains them with nvmlDeviceGetSamples, asking each time only for samples newer than the
last one seen, so a rare poll loses nothing and every sample keeps the driver's own time. The buffers are short
(power's, sampled most often, the shortest; docs/MEASUREMENT.md, "NVML samples", has what an H200 keeps), so keep
`interval_s` under ~2 s. Where a GPU keeps no such buffer (NotSupported, or empty when the reader opens, as the SM
clock's on some GPUs), the metric is read at each poll instead; where a buffer runs dry (NotFound for a second or
more: some GPUs stop sampling while idle), it is read at poll time until samples come again, so the series never
goes dark.
Device memory has no buffer and is always read at poll time.

Cost: nvmlDeviceGetSamples costs far more than an instant reading, however many samples it returns, and a poll's
time is nearly all inside the driver, where ctypes has released the GIL (docs/MEASUREMENT.md, "NVML samples", has
the times); `poll_cost_ms()` reports it as measured in this process.

Timestamps are on time.perf_counter, the clock of TokenEvent.host_time_s, so both series share one time axis.
NVML stamps in microseconds since the epoch or, on some drivers, since boot; the magnitude tells which. Without an
NVIDIA GPU (or without NVML) the monitor says so plainly and samples CPU utilization and resident memory instead (of
the processes `host_pids` names, the engine's, when given). An index NVML does not have is left out with a note in
`description` when another GPU can be read, and gives the CPU fallback, with the reason, when none can.

This module must not import torch: it runs in the dashboard's server process.
"""

from __future__ import annotations

import collections
import itertools
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple, Protocol

NVML = "nvml"
CPU = "cpu"

UTIL, MEMORY, POWER, CLOCK = "util_pct", "mem_used_mb", "power_w", "sm_clock_mhz"

# Microsecond timestamps above this are since the epoch (after 2001); below it, since boot.
_EPOCH_US = 10**15
_COST_WINDOW = 100

# An unseen driver sample stamped this long before the previous read, or after now, is on a clock not known here.
_CLOCK_SLACK_S = 5.0
# NVML errors that mean a sample buffer is missing for good. Any other (NOT_FOUND: nothing new) only for this poll.
_UNSUPPORTED = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT",
                "NVML_ERROR_NO_PERMISSION")

# nvmlValueType_t -> the member of the nvmlValue_t union that holds the value.
_VALUE_MEMBERS = {"NVML_VALUE_TYPE_DOUBLE": "dVal", "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
                  "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal", "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
                  "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal", "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
                  "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal"}


class Sample(NamedTuple):
    """One reading; None where the metric was not read. `mem_used_mb` is device memory, or host RSS on CPU."""

    t: float
    gpu: int | None = None
    util_pct: float | None = None
    mem_used_mb: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class Reader(Protocol):
    source: str
    gpus: list[int]

    def read(self) -> list[Sample]: ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


def import_pynvml() -> ModuleType:
    """The NVML binding, imported only when a monitor starts."""
    try:
        import pynvml
    except ImportError as exc:
        raise ImportError("GPU monitoring needs NVIDIA's NVML binding: pip install nvidia-ml-py "
                          "(it provides the module pynvml)") from exc
    return pynvml


@dataclass(frozen=True)
class Metric:
    """A metric the driver buffers, and how to read it at poll time where it does not."""

    field: str
    sampling_type: str  # the pynvml constant naming the buffer
    scale: float  # from NVML's unit to the sample's
    instant: Callable[[ModuleType, Any], Any]


BUFFERED = (
    Metric(UTIL, "NVML_GPU_UTILIZATION_SAMPLES", 1.0, lambda nvml, h: nvml.nvmlDeviceGetUtilizationRates(h).gpu),
    Metric(POWER, "NVML_TOTAL_POWER_SAMPLES", 1e-3, lambda nvml, h: nvml.nvmlDeviceGetPowerUsage(h)),  # milliwatts
    Metric(CLOCK, "NVML_PROCESSOR_CLK_SAMPLES", 1.0,
           lambda nvml, h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
)


@dataclass
class SampleBuffer:
    """Where the reader stands in one driver buffer of one GPU."""

    metric: Metric
    supported: bool = True
    last_seen_us: int = 0
    last_read_t: float | None = None  # perf_counter time of the previous read; None until primed
    last_sample_t: float | None = None  # perf_counter time of the newest sample seen
    period_s: float | None = None  # the driver's sampling period, from consecutive timestamps


@dataclass
class Gpu:
    index: int
    handle: Any
    name: str
    buffers: list[SampleBuffer] = field(default_factory=list)


class NvmlReader:
    """Reads the GPUs it can open among `indices`; every NVML call in its own try, so one unsupported query does
    not hide the others."""

    source = NVML

    def __init__(self, nvml: ModuleType, indices: Sequence[int]):
        self.nvml = nvml
        self._members = {getattr(nvml, name): member for name, member in _VALUE_MEMBERS.items() if hasattr(nvml, name)}
        self._closed = False
        nvml.nvmlInit()
        try:
            self._gpus, self.notes = self._open(list(dict.fromkeys(indices)))
        except Exception:
            _safe(nvml.nvmlShutdown)
            raise
        self._prime()

    @property
    def gpus(self) -> list[int]:
        return [gpu.index for gpu in self._gpus]

    def _open(self, indices: list[int]) -> tuple[list[Gpu], list[str]]:
        count = self.nvml.nvmlDeviceGetCount()
        gpus, notes = [], []
        for index in indices:
            try:
                gpus.append(self._open_gpu(index, count))
            except Exception as exc:
                notes.append(_reason(exc))
        if not gpus:
            raise RuntimeError("; ".join(notes))
        return gpus, notes

    def _open_gpu(self, index: int, count: int) -> Gpu:
        nvml = self.nvml
        if not 0 <= index < count:
            raise RuntimeError(f"NVML sees {count} GPU(s); there is no GPU {index}")
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(_safe(lambda: nvml.nvmlDeviceGetName(handle)) or "NVIDIA GPU")
        buffers = [SampleBuffer(metric, supported=hasattr(nvml, metric.sampling_type)) for metric in BUFFERED]
        return Gpu(index, handle, f"{name} (GPU {index})", buffers)

    def _prime(self) -> None:
        """Skip what the driver buffered before the reader opened; learn which buffers exist, and their period.
        A buffer with nothing in it is read at poll time from then on: on some GPUs the SM clock buffer answers
        NotFound even from timestamp 0, and each such call costs far more than a reading (docs/MEASUREMENT.md,
        "NVML samples")."""
        offsets = _clock_offsets()
        for gpu in self._gpus:
            for buffer in gpu.buffers:
                self._drain(gpu, buffer, offsets)
                buffer.supported = buffer.supported and buffer.last_seen_us > 0

    def read(self) -> list[Sample]:
        if self._closed:
            return []
        offsets = _clock_offsets()
        samples = [sample for gpu in self._gpus for sample in self._read_gpu(gpu, offsets)]
        samples.sort(key=_time)
        return samples

    def _read_gpu(self, gpu: Gpu, offsets: tuple[float, float]) -> list[Sample]:
        nvml, handle = self.nvml, gpu.handle
        now = time.perf_counter()
        polled = {MEMORY: _num(_safe(lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20))}
        buffered: dict[float, dict[str, float]] = collections.defaultdict(dict)
        for buffer in gpu.buffers:
            metric = buffer.metric
            fresh = self._drain(gpu, buffer, offsets)
            for t, value in fresh:
                buffered[t][metric.field] = value
            if not fresh and (not buffer.supported or _stale(buffer, now)):
                polled[metric.field] = _num(_safe(lambda m=metric: m.instant(nvml, handle) * m.scale))
        return [Sample(now, gpu.index, **polled)] + [Sample(t, gpu.index, **fields) for t, fields in buffered.items()]

    def _drain(self, gpu: Gpu, buffer: SampleBuffer, offsets: tuple[float, float]) -> list[tuple[float, float]]:
        """The buffer's samples newer than the last seen, as (perf_counter time, value), oldest first."""
        fresh, value_type = self._fetch(gpu, buffer)
        previous, buffer.last_read_t = buffer.last_read_t, time.perf_counter()
        if not fresh:
            return []
        buffer.last_seen_us = fresh[-1].timeStamp
        buffer.period_s = _period_s(fresh) or buffer.period_s
        offset = offsets[0] if fresh[-1].timeStamp > _EPOCH_US else offsets[1]
        times = [s.timeStamp / 1e6 - offset for s in fresh]
        # Unseen samples cannot predate the previous read by much, nor lie ahead of now.
        if previous is not None and not previous - _CLOCK_SLACK_S <= times[-1] <= buffer.last_read_t + _CLOCK_SLACK_S:
            buffer.supported = False
            return []
        buffer.last_sample_t = times[-1]
        member = self._members.get(value_type, "uiVal")  # NVML returns these three as unsigned int
        scale = buffer.metric.scale
        return [(t, float(getattr(s.sampleValue, member)) * scale) for t, s in zip(times, fresh)]

    def _fetch(self, gpu: Gpu, buffer: SampleBuffer) -> tuple[list[Any], int | None]:
        """Raw samples newer than the last seen, by timestamp, and their value type; none where there are none."""
        if not buffer.supported:
            return [], None
        nvml = self.nvml
        try:
            value_type, raw = nvml.nvmlDeviceGetSamples(gpu.handle, getattr(nvml, buffer.metric.sampling_type),
                                                        buffer.last_seen_us)
        except Exception as exc:
            buffer.supported = not (isinstance(exc, AttributeError) or _error_in(nvml, exc, _UNSUPPORTED))
            return [], None
        # NVML documents "newer than last_seen" but not the order: filter and sort rather than trust it.
        return sorted((s for s in raw if s.timeStamp > buffer.last_seen_us), key=lambda s: s.timeStamp), value_type

    def describe(self) -> str:
        names = ", ".join(gpu.name for gpu in self._gpus)
        left_out = f" ({'; '.join(self.notes)}: left out)" if self.notes else ""
        return f"{names} via NVML: {self._util_source()}, {self._power_clock_source()}{left_out}"

    def _buffers(self, metric_field: str) -> list[SampleBuffer]:
        return [b for gpu in self._gpus for b in gpu.buffers if b.metric.field == metric_field]

    def _util_source(self) -> str:
        buffers = self._buffers(UTIL)
        return "utilization " + _source_phrase(buffers, f"from the driver's own samples{_every(buffers)}")

    def _power_clock_source(self) -> str:
        power, clock = self._buffers(POWER), self._buffers(CLOCK)
        if _kept(power) == _kept(clock) == "all":
            return f"power and SM clock from its sample buffers{_every(power, clock)}"
        if _kept(power) == _kept(clock) == "none":
            return "power and SM clock read at each poll"
        return (f"power {_source_phrase(power, 'from its sample buffer' + _every(power))}, "
                f"SM clock {_source_phrase(clock, 'from its sample buffer' + _every(clock))}")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _safe(self.nvml.nvmlShutdown)


class CpuReader:
    """CPU use and resident memory: of the processes `pids()` names (the engine's ranks, where the model lives and
    runs), summed; without `pids`, machine-wide CPU and this process's memory. CPU % is of all cores (0-100)."""

    source = CPU

    def __init__(self, reason: str = "no NVML", pids: Callable[[], list[int]] | None = None) -> None:
        import psutil

        self.reason = reason
        self.psutil = psutil
        self.pids = pids
        self.process = psutil.Process()
        self.cores = psutil.cpu_count() or 1
        self._watched: dict[int, Any] = {}
        psutil.cpu_percent(interval=None)  # the first call only starts the measurement window

    @property
    def gpus(self) -> list[int]:
        return []

    def read(self) -> list[Sample]:
        if self.pids is None:
            util = _safe(lambda: self.psutil.cpu_percent(interval=None))
            rss = _safe(lambda: self.process.memory_info().rss / 2**20)
            return [Sample(t=time.perf_counter(), util_pct=_num(util), mem_used_mb=_num(rss))]
        processes = self._processes(self.pids())
        util = [_safe(p.cpu_percent) for p in processes]
        rss = [_safe(lambda p=p: p.memory_info().rss / 2**20) for p in processes]
        util_known, rss_known = [u for u in util if u is not None], [r for r in rss if r is not None]
        return [Sample(t=time.perf_counter(), util_pct=sum(util_known) / self.cores if util_known else None,
                       mem_used_mb=sum(rss_known) if rss_known else None)]

    def _processes(self, pids: list[int]) -> list[Any]:
        """psutil handles of `pids`, kept between reads (a process's CPU % is measured since the previous read)."""
        self._watched = {pid: self._watched.get(pid) or _safe(lambda pid=pid: self.psutil.Process(pid))
                         for pid in pids}
        return [p for p in self._watched.values() if p is not None]

    def describe(self) -> str:
        what = ("the engine processes' CPU use (% of all cores) and resident memory (all ranks)" if self.pids
                else "CPU utilization and host memory")
        return f"No NVIDIA GPU found ({self.reason}). Showing {what} instead."

    def close(self) -> None:
        pass


def open_reader(indices: Sequence[int] = (0,), nvml: ModuleType | None = None,
                host_pids: Callable[[], list[int]] | None = None) -> Reader:
    """An NVML reader for the GPUs `indices` (NVML numbering), else a CPU reader (of `host_pids`) that says why."""
    try:
        return NvmlReader(nvml or import_pynvml(), indices)
    except Exception as exc:
        return CpuReader(_reason(exc), host_pids)


def gpu_facts(indices: Sequence[int], nvml: ModuleType | None = None) -> list[dict[str, Any]]:
    """What a result depends on beyond the GPU's name, for each GPU `indices` (NVML numbering): driver, clock
    limits, power limit, temperature and ECC mode, and its UUID (which tells machines apart where host names do
    not); a fact NVML cannot give is None; [] without NVML."""
    try:
        nvml = nvml or import_pynvml()
        nvml.nvmlInit()
    except Exception:
        return []
    try:
        driver = _safe(lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        return [_facts_of(nvml, index, driver) for index in indices]
    finally:
        _safe(nvml.nvmlShutdown)


def _facts_of(nvml: ModuleType, index: int, driver: str | None) -> dict[str, Any]:
    handle = _safe(lambda: nvml.nvmlDeviceGetHandleByIndex(index))
    if handle is None:
        return {"index": index, "error": "NVML has no GPU with this index"}

    def clock(query: str, kind: str) -> float | None:
        return _num(_safe(lambda: getattr(nvml, query)(handle, getattr(nvml, kind))))

    power_mw = _num(_safe(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle)))
    ecc = _safe(lambda: nvml.nvmlDeviceGetEccMode(handle))
    return {
        "index": index, "name": _safe(lambda: _text(nvml.nvmlDeviceGetName(handle))), "driver": driver,
        "max_sm_clock_mhz": clock("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM"),
        "max_memory_clock_mhz": clock("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_MEM"),
        "power_limit_w": None if power_mw is None else power_mw / 1000,
        "temperature_c": _num(_safe(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))),
        "ecc": None if ecc is None else bool(ecc[0]),
        "uuid": _safe(lambda: _text(nvml.nvmlDeviceGetUUID(handle))),
    }


def nvml_index(cuda_index: int) -> int:
    """NVML numbers GPUs physically; CUDA_VISIBLE_DEVICES renumbers what torch sees."""
    visible = [part.strip() for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if part.strip()]
    if cuda_index < len(visible) and visible[cuda_index].isdigit():
        return int(visible[cuda_index])
    return cuda_index


class GpuMonitor:
    """Polls in a daemon thread every `interval_s` into a bounded, time-ordered buffer; `samples()` reads it from
    any thread. The driver buffers its own samples, so a rare poll loses nothing (up to ~2 s, see the module's
    docstring): `interval_s` sets how fresh the data is, and how often memory is read. Power, sampled most often,
    sets how long the default `max_samples` lasts (docs/MEASUREMENT.md, "NVML samples", has it for the H200)."""

    def __init__(self, interval_s: float = 0.5, device_indices: Sequence[int] = (0,), *, max_samples: int = 50_000,
                 nvml: ModuleType | None = None, host_pids: Callable[[], list[int]] | None = None):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        if not device_indices:
            raise ValueError("device_indices must name at least one GPU")
        self.interval_s = interval_s
        self.device_indices = list(device_indices)
        self._nvml = nvml
        self._host_pids = host_pids  # where the work runs, for the CPU fallback (the engine's processes)
        self._buffer: collections.deque[Sample] = collections.deque(maxlen=max_samples)
        self._costs: collections.deque[float] = collections.deque(maxlen=_COST_WINDOW)
        self._lock = threading.Lock()  # the buffer
        self._poll_lock = threading.Lock()  # the reader: one poll at a time, and none while it closes
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader: Reader | None = None
        self._open = False

    @property
    def source(self) -> str:
        """Where the samples come from: 'nvml' when at least one NVIDIA GPU is read, 'cpu' for the fallback."""
        return self._reader.source if self._reader else CPU

    @property
    def available(self) -> bool:
        """True when an NVIDIA GPU is being read."""
        return self.source == NVML

    @property
    def description(self) -> str:
        """One plain sentence: which GPUs, and where each metric comes from; or why the CPU is shown instead."""
        return self._reader.describe() if self._reader else "not started"

    @property
    def gpus(self) -> list[int]:
        """The NVML indices read; empty on the CPU fallback."""
        return list(self._reader.gpus) if self._reader else []

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> GpuMonitor:
        if self.running:
            return self
        self._ensure_open()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="gpu-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the thread and shut NVML down; the samples stay readable."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval_s + 1)
            self._thread = None
        with self._poll_lock:
            if self._open and self._reader is not None:
                self._reader.close()
            self._open = False

    def samples(self, since: float | None = None) -> list[dict[str, Any]]:
        """Samples taken at or after `since` (a time.perf_counter value), oldest first."""
        with self._lock:
            if since is None:
                recent = list(self._buffer)
            else:
                recent = list(itertools.takewhile(lambda s: s.t >= since, reversed(self._buffer)))[::-1]
        return [s.to_dict() for s in recent]

    def sample_now(self) -> None:
        """Poll once, now (tests, and the edges of a run); opens NVML if the monitor is not started."""
        self._ensure_open()
        self._record()

    def poll_cost_ms(self) -> float | None:
        """Median wall time of one poll in this process, over the last ~100 polls: what the sampler costs."""
        costs = list(self._costs)
        return statistics.median(costs) * 1000 if costs else None

    def _ensure_open(self) -> None:
        with self._poll_lock:
            if not self._open:
                self._reader = open_reader(self.device_indices, self._nvml, self._host_pids)
                self._open = True

    def _loop(self) -> None:
        self._record()
        while not self._stop.wait(self.interval_s):
            self._record()

    def _record(self) -> None:
        with self._poll_lock:
            if not self._open or self._reader is None:
                return
            start = time.perf_counter()
            fresh = self._reader.read()
            self._insert(fresh)
            self._costs.append(time.perf_counter() - start)

    def _insert(self, fresh: list[Sample]) -> None:
        """Add time-ordered samples, keeping the buffer ordered: a driver sample can be older than the last poll."""
        if not fresh:
            return
        with self._lock:
            tail = []
            while self._buffer and self._buffer[-1].t > fresh[0].t:
                tail.append(self._buffer.pop())
            self._buffer.extend(sorted(tail + fresh, key=_time) if tail else fresh)

    def __enter__(self) -> GpuMonitor:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _clock_offsets() -> tuple[float, float]:
    """Seconds to subtract from an NVML timestamp to put it on perf_counter: (since the epoch, since boot)."""
    before = time.perf_counter()
    wall = time.time()
    boot = time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()
    middle = (before + time.perf_counter()) / 2
    return wall - middle, boot - middle


def _stale(buffer: SampleBuffer, now: float) -> bool:
    """Whether the buffer has run dry (some GPUs stop sampling while idle): nothing for several periods, or a second.
    Until then a poll that finds nothing new adds no reading: an instant one would repeat the last sample, later."""
    t = buffer.last_sample_t
    return t is None or not now - max(1.0, 3 * (buffer.period_s or 0.0)) <= t <= now + _CLOCK_SLACK_S


def _period_s(samples: list[Any]) -> float | None:
    """The driver's sampling period: the median step between consecutive timestamps (microseconds)."""
    steps = [b.timeStamp - a.timeStamp for a, b in itertools.pairwise(samples)]
    return statistics.median(steps) / 1e6 if steps else None


def _kept(buffers: list[SampleBuffer]) -> str:
    """Whether the driver keeps these buffers: 'all', 'none' or 'some' (GPUs differ)."""
    kept = [b.supported for b in buffers]
    return "all" if all(kept) else "none" if not any(kept) else "some"


def _source_phrase(buffers: list[SampleBuffer], buffered: str) -> str:
    kept = _kept(buffers)
    if kept == "some":
        return f"{buffered} where kept, else read at each poll"
    return buffered if kept == "all" else "read at each poll"


def _every(*groups: list[SampleBuffer]) -> str:
    """' (every ~200 ms and ~20 ms)': the driver's sampling period of each group of buffers, where known."""
    known = [[b.period_s for b in group if b.supported and b.period_s] for group in groups]
    periods = [f"~{statistics.median(p) * 1000:.0f} ms" for p in known if p]
    return f" (every {' and '.join(periods)})" if periods else ""


def _error_in(nvml: ModuleType, exc: Exception, names: tuple[str, ...]) -> bool:
    code = getattr(exc, "value", None)
    return code is not None and any(code == getattr(nvml, name, None) for name in names)


def _reason(exc: Exception) -> str:
    return str(exc).strip() or type(exc).__name__


def _time(sample: Sample) -> float:
    return sample.t


def _safe(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:
        return None


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
