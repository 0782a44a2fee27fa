"""The NVML sampler against a fake pynvml, and its plain no-GPU fallback."""

from __future__ import annotations

import sys
import time
import types

import pytest

from core.gpu_monitor import CpuReader, GpuMonitor, import_pynvml, nvml_index, open_reader


class FakeNvmlError(Exception):
    pass


def fake_nvml(*, fail: tuple[str, ...] = (), count: int = 1, init_error: str | None = None) -> types.ModuleType:
    """A stand-in for pynvml with fixed readings; names in `fail` raise like an unsupported NVML query."""
    nvml = types.ModuleType("pynvml")
    nvml.NVML_CLOCK_SM = 1
    nvml.calls = {"init": 0, "shutdown": 0}

    def maybe_fail(name: str, value: object) -> object:
        if name in fail:
            raise FakeNvmlError(f"{name} not supported")
        return value

    def init() -> None:
        nvml.calls["init"] += 1
        if init_error:
            raise FakeNvmlError(init_error)

    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: nvml.calls.__setitem__("shutdown", nvml.calls["shutdown"] + 1)
    nvml.nvmlDeviceGetCount = lambda: count
    nvml.nvmlDeviceGetHandleByIndex = lambda index: ("handle", index)
    nvml.nvmlDeviceGetName = lambda handle: b"NVIDIA H200"
    nvml.nvmlDeviceGetUtilizationRates = lambda h: maybe_fail("util", types.SimpleNamespace(gpu=42, memory=7))
    nvml.nvmlDeviceGetMemoryInfo = lambda h: maybe_fail("memory", types.SimpleNamespace(used=3 * 2**30,
                                                                                       total=141 * 2**30))
    nvml.nvmlDeviceGetPowerUsage = lambda h: maybe_fail("power", 251_500)
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: maybe_fail("clock", 1980 if kind == 1 else 0)
    return nvml


def wait_for_samples(monitor: GpuMonitor, n: int, timeout: float = 5.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(monitor.samples()) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return monitor.samples()


def test_samples_every_metric_from_nvml():
    with GpuMonitor(interval_s=0.01, nvml=fake_nvml()) as monitor:
        samples = wait_for_samples(monitor, 3)
        assert monitor.available and monitor.kind == "nvml"
        assert "NVIDIA H200 (GPU 0)" in monitor.description
    first = samples[0]
    assert first["util_pct"] == 42
    assert first["mem_used_mb"] == 3 * 1024
    assert first["power_w"] == pytest.approx(251.5)
    assert first["sm_clock_mhz"] == 1980


def test_timestamps_are_perf_counter_and_ordered():
    before = time.perf_counter()
    with GpuMonitor(interval_s=0.01, nvml=fake_nvml()) as monitor:
        samples = wait_for_samples(monitor, 5)
    after = time.perf_counter()
    times = [s["t"] for s in samples]
    assert times == sorted(times)
    assert before <= times[0] and times[-1] <= after


def test_one_failing_metric_does_not_hide_the_others():
    with GpuMonitor(interval_s=0.01, nvml=fake_nvml(fail=("power", "clock"))) as monitor:
        sample = wait_for_samples(monitor, 1)[0]
    assert sample["power_w"] is None and sample["sm_clock_mhz"] is None
    assert sample["util_pct"] == 42 and sample["mem_used_mb"] == 3 * 1024


def test_stop_ends_the_thread_and_shuts_nvml_down():
    nvml = fake_nvml()
    monitor = GpuMonitor(interval_s=0.01, nvml=nvml).start()
    wait_for_samples(monitor, 1)
    monitor.stop()
    assert not monitor.running
    assert nvml.calls["shutdown"] == 1
    count = len(monitor.samples())
    time.sleep(0.05)
    assert len(monitor.samples()) == count


def test_without_a_gpu_it_says_so_and_samples_the_cpu():
    with GpuMonitor(interval_s=0.01, nvml=fake_nvml(init_error="NVML Shared Library Not Found")) as monitor:
        samples = wait_for_samples(monitor, 2)
        assert not monitor.available and monitor.kind == "cpu"
        assert monitor.description.startswith("No NVIDIA GPU found (NVML Shared Library Not Found)")
        assert "CPU utilization" in monitor.description
    assert all(0 <= s["util_pct"] <= 100 for s in samples)
    assert all(s["mem_used_mb"] > 0 and s["power_w"] is None and s["sm_clock_mhz"] is None for s in samples)


def test_missing_gpu_index_falls_back_with_a_reason():
    reader, message = open_reader(index=3, nvml=fake_nvml(count=1))
    assert isinstance(reader, CpuReader)
    assert "there is no GPU 3" in message


def test_missing_binding_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(ImportError, match="nvidia-ml-py"):
        import_pynvml()
    reader, message = open_reader()
    assert isinstance(reader, CpuReader) and "nvidia-ml-py" in message


def test_samples_since_returns_only_newer_ones():
    monitor = GpuMonitor(interval_s=10, nvml=fake_nvml())
    monitor._reader, monitor.description = open_reader(0, monitor._nvml)
    monitor.sample_now()
    middle = time.perf_counter()
    monitor.sample_now()
    monitor.sample_now()
    assert len(monitor.samples()) == 3
    assert len(monitor.samples(since=middle)) == 2


def test_buffer_is_bounded():
    monitor = GpuMonitor(interval_s=10, nvml=fake_nvml(), max_samples=5)
    monitor._reader, _ = open_reader(0, monitor._nvml)
    for _ in range(12):
        monitor.sample_now()
    assert len(monitor.samples()) == 5


def test_nvml_index_follows_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert nvml_index(0) == 2 and nvml_index(1) == 5
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvml_index(1) == 1


def test_bad_interval_is_refused():
    with pytest.raises(ValueError, match="interval_s"):
        GpuMonitor(interval_s=0)
