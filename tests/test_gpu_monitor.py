"""The NVML sampler against a fake pynvml, and its plain no-GPU fallback."""

from __future__ import annotations

import collections
import itertools
import subprocess
import sys
import time
import types
from collections.abc import Callable

import pytest

from core.measure.gpu_monitor import CpuReader, GpuMonitor, gpu_facts, import_pynvml, nvml_index, open_reader

NOT_SUPPORTED, NOT_FOUND = 3, 6
POWER, UTIL, CLOCK = 0, 1, 5  # NVML_*_SAMPLES
DOUBLE, UNSIGNED_INT = 0, 1  # NVML_VALUE_TYPE_*
MEMBERS = {DOUBLE: "dVal", UNSIGNED_INT: "uiVal"}


class FakeNvmlError(Exception):
    def __init__(self, message: str, value: int | None = None):
        super().__init__(message)
        self.value = value


def fake_nvml(*, fail: tuple[str, ...] = (), count: int = 1, init_error: str | None = None, buffers: bool = False,
              unsupported: tuple[int, ...] = ()) -> types.ModuleType:
    """A stand-in for pynvml with fixed instant readings (utilization 42 + the GPU's index); names in `fail` raise
    like an unsupported NVML query. With `buffers`, nvmlDeviceGetSamples serves what a test puts in
    `nvml.driver[(gpu, sampling type)]` as (timestamp µs, value); without, or for a type in `unsupported`, it
    raises NotSupported."""
    nvml = types.ModuleType("pynvml")
    nvml.NVML_CLOCK_SM = 1
    nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_NOT_FOUND = NOT_SUPPORTED, NOT_FOUND
    nvml.NVML_TOTAL_POWER_SAMPLES, nvml.NVML_PROCESSOR_CLK_SAMPLES = POWER, CLOCK
    nvml.NVML_GPU_UTILIZATION_SAMPLES = UTIL
    nvml.NVML_VALUE_TYPE_DOUBLE, nvml.NVML_VALUE_TYPE_UNSIGNED_INT = DOUBLE, UNSIGNED_INT
    nvml.calls = collections.Counter()
    nvml.driver = collections.defaultdict(list)
    nvml.value_types = {}  # sampling type -> value type; unsigned int unless set
    nvml.asked = []  # (gpu, sampling type, last seen timestamp) of each nvmlDeviceGetSamples call
    nvml.next_error = None

    def maybe_fail(name: str, value: object) -> object:
        if name in fail:
            raise FakeNvmlError(f"{name} not supported")
        return value

    def init() -> None:
        nvml.calls["init"] += 1
        if init_error:
            raise FakeNvmlError(init_error)

    def get_samples(handle: tuple[str, int], kind: int, last_seen: int) -> tuple[int, list]:
        nvml.calls["samples"] += 1
        if not buffers or kind in unsupported:
            raise FakeNvmlError("Not Supported", NOT_SUPPORTED)
        if nvml.next_error is not None:
            error, nvml.next_error = nvml.next_error, None
            raise error
        nvml.asked.append((handle[1], kind, last_seen))
        # `>=`, not `>`, on purpose: the reader must not rely on the driver to leave out the last seen sample.
        rows = [(ts, value) for ts, value in nvml.driver[(handle[1], kind)] if ts >= last_seen]
        if not rows:
            raise FakeNvmlError("Not Found", NOT_FOUND)
        value_type = nvml.value_types.get(kind, UNSIGNED_INT)
        return value_type, [driver_sample(ts, value, value_type) for ts, value in rows]

    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: nvml.calls.update(["shutdown"])
    nvml.nvmlDeviceGetCount = lambda: count
    nvml.nvmlDeviceGetHandleByIndex = lambda index: ("handle", index)
    nvml.nvmlDeviceGetName = lambda handle: b"NVIDIA H200"
    nvml.nvmlDeviceGetUtilizationRates = lambda h: maybe_fail("util", types.SimpleNamespace(gpu=42 + h[1], memory=7))
    nvml.nvmlDeviceGetMemoryInfo = lambda h: maybe_fail("memory", types.SimpleNamespace(used=3 * 2**30,
                                                                                       total=141 * 2**30))
    nvml.nvmlDeviceGetPowerUsage = lambda h: maybe_fail("power", 251_500)
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: maybe_fail("clock", 1980 if kind == 1 else 0)
    nvml.nvmlDeviceGetSamples = get_samples
    return nvml


def driver_sample(timestamp: int, value: float, value_type: int) -> types.SimpleNamespace:
    """An nvmlSample_t: the union holds the value in the member for `value_type`, garbage in the others."""
    union = types.SimpleNamespace(**{member: 7777 for member in MEMBERS.values()})
    setattr(union, MEMBERS[value_type], value)
    return types.SimpleNamespace(timeStamp=timestamp, sampleValue=union)


def fill(nvml: types.ModuleType, kinds: tuple[int, ...] = (UTIL, POWER, CLOCK), gpus: tuple[int, ...] = (0,),
         period_s: dict[int, float] | None = None) -> None:
    """Samples the driver kept before the monitor opened, six a buffer; a buffer empty then is never asked again."""
    start = epoch_us(-5.0)
    for gpu, kind in itertools.product(gpus, kinds):
        step = int((period_s or {}).get(kind, 0.1) * 1e6)
        nvml.driver[(gpu, kind)] += [(start + i * step, 0) for i in range(6)]


def epoch_us(offset_s: float = 0.0) -> int:
    return int((time.time() + offset_s) * 1e6)


def boot_us(offset_s: float = 0.0) -> int:
    return int((time.clock_gettime(time.CLOCK_BOOTTIME) + offset_s) * 1e6)


def wait_for_samples(monitor: GpuMonitor, n: int, timeout: float = 5.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(monitor.samples()) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return monitor.samples()


def only(samples: list[dict], key: str) -> list[dict]:
    """The samples that carry `key` alone: those from a driver buffer."""
    metrics = ("util_pct", "mem_used_mb", "power_w", "sm_clock_mhz")
    return [s for s in samples if s[key] is not None and all(s[m] is None for m in metrics if m != key)]


# ---- instant readings (no driver buffers), as on GPUs that keep none


def test_samples_every_metric_from_nvml():
    with GpuMonitor(interval_s=0.01, nvml=fake_nvml()) as monitor:
        samples = wait_for_samples(monitor, 3)
        assert monitor.available and monitor.source == "nvml" and monitor.gpus == [0]
        assert monitor.description.startswith("NVIDIA H200 (GPU 0) via NVML: utilization read at each poll")
    first = samples[0]
    assert first["gpu"] == 0
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
    monitor.stop()
    assert not monitor.running
    assert nvml.calls["init"] == 1 and nvml.calls["shutdown"] == 1
    count = len(monitor.samples())
    time.sleep(0.05)
    assert len(monitor.samples()) == count
    assert monitor.available and "GPU 0" in monitor.description


# ---- the driver's sample buffers


NO_BOOT_CLOCK = pytest.mark.skipif(not hasattr(time, "CLOCK_BOOTTIME"), reason="CLOCK_BOOTTIME is Linux-only")


@pytest.mark.parametrize("clock", [epoch_us, pytest.param(boot_us, marks=NO_BOOT_CLOCK)], ids=["epoch", "since-boot"])
def test_buffered_util_samples_keep_the_drivers_timestamps(clock: Callable[[float], int]):
    nvml = fake_nvml(buffers=True)
    history = clock(-30.0)
    nvml.driver[(0, UTIL)].append((history, 99))  # from before the monitor: not returned
    monitor = GpuMonitor(interval_s=10, nvml=nvml)
    monitor.sample_now()
    [first] = monitor.samples()
    assert first["util_pct"] == 42  # the buffer's newest sample is 30 s old: run dry, so read at poll time

    now = time.perf_counter()
    stamps = [clock(offset) for offset in (-0.3, -0.2, -0.1)]
    nvml.driver[(0, UTIL)] += zip(stamps, (10, 20, 30))
    monitor.sample_now()
    last = clock(0.0)
    nvml.driver[(0, UTIL)].append((last, 40))
    monitor.sample_now()
    monitor.sample_now()  # nothing new, and the last sample is recent: no reading at poll time

    samples = monitor.samples()
    buffered = only(samples, "util_pct")
    assert [s["util_pct"] for s in buffered] == [10, 20, 30, 40]
    assert [s["t"] for s in buffered[:3]] == pytest.approx([now - 0.3, now - 0.2, now - 0.1], abs=0.02)
    assert all(s["gpu"] == 0 for s in samples)
    assert [s["t"] for s in samples] == sorted(s["t"] for s in samples)
    assert [s["util_pct"] for s in samples if s["mem_used_mb"] is not None] == [42, None, None, None]
    assert [seen for gpu, kind, seen in nvml.asked if kind == UTIL] == [0, history, history, stamps[-1], last]
    assert monitor.source == "nvml"


def test_power_value_comes_from_the_union_member_its_type_names_and_one_time_is_one_sample():
    nvml = fake_nvml(buffers=True)
    nvml.value_types[POWER] = DOUBLE
    fill(nvml)
    monitor = GpuMonitor(interval_s=10, nvml=nvml)
    monitor.sample_now()
    stamp = epoch_us(-0.05)
    nvml.driver[(0, POWER)].append((stamp, 251_500.0))
    nvml.driver[(0, UTIL)].append((stamp, 77))
    monitor.sample_now()
    [driver] = [s for s in monitor.samples() if s["mem_used_mb"] is None]
    assert driver["power_w"] == pytest.approx(251.5) and driver["util_pct"] == 77


def test_unsupported_buffers_fall_back_to_instant_readings_and_are_not_asked_again():
    nvml = fake_nvml(buffers=True, unsupported=(UTIL, POWER, CLOCK))
    monitor = GpuMonitor(interval_s=10, nvml=nvml)
    for _ in range(3):
        monitor.sample_now()
    samples = monitor.samples()
    assert len(samples) == 3
    assert all(s["util_pct"] == 42 and s["power_w"] == pytest.approx(251.5) and s["sm_clock_mhz"] == 1980
               for s in samples)
    assert nvml.calls["samples"] == 3  # once per buffer, when the reader opened
    assert "utilization read at each poll, power and SM clock read at each poll" in monitor.description


def test_one_unsupported_buffer_leaves_the_others_buffered():
    nvml = fake_nvml(buffers=True, unsupported=(POWER,))
    fill(nvml)
    monitor = GpuMonitor(interval_s=10, nvml=nvml)
    monitor.sample_now()
    nvml.driver[(0, CLOCK)].append((epoch_us(-0.05), 1755))
    monitor.sample_now()
    assert [s["sm_clock_mhz"] for s in only(monitor.samples(), "sm_clock_mhz")] == [1755]
    assert all(s["power_w"] == pytest.approx(251.5) for s in monitor.samples() if s["mem_used_mb"] is not None)
    assert "power read at each poll, SM clock from its sample buffer (every ~100 ms)" in monitor.description


def test_a_passing_error_reads_at_poll_time_once_and_keeps_the_buffer():
    nvml = fake_nvml(buffers=True)
    fill(nvml, (UTIL,))
    monitor = GpuMonitor(interval_s=10, nvml=nvml)
    monitor.sample_now()
    nvml.driver[(0, UTIL)].append((epoch_us(-0.05), 12))
    nvml.next_error = FakeNvmlError("Unknown Error", 999)
    monitor.sample_now()
    monitor.sample_now()
    assert [s["util_pct"] for s in only(monitor.samples(), "util_pct")] == [12]


def test_samples_on_an_unknown_clock_are_dropped_and_the_metric_read_at_poll_time():
    nvml = fake_nvml(buffers=True)
    fill(nvml, (UTIL,))
    monitor = GpuMonitor(interval_s=10, nvml=nvml)
    monitor.sample_now()
    nvml.driver[(0, UTIL)].append((epoch_us(3600.0), 55))
    monitor.sample_now()
    assert only(monitor.samples(), "util_pct") == []
    assert [s["util_pct"] for s in monitor.samples()] == [42, 42]
    assert "utilization read at each poll" in monitor.description


def test_description_gives_the_drivers_sample_periods():
    nvml = fake_nvml(buffers=True)
    fill(nvml, period_s={UTIL: 1 / 6, POWER: 0.02, CLOCK: 0.1})
    monitor = GpuMonitor(interval_s=10, nvml=nvml)
    monitor.sample_now()
    assert monitor.description == ("NVIDIA H200 (GPU 0) via NVML: utilization from the driver's own samples "
                                   "(every ~167 ms), power and SM clock from its sample buffers (every ~20 ms and "
                                   "~100 ms)")


def test_a_buffer_empty_when_the_reader_opens_is_read_at_poll_time_and_not_asked_again():
    nvml = fake_nvml(buffers=True)
    fill(nvml, (UTIL, POWER), period_s={UTIL: 0.2, POWER: 0.02})  # as an H200 on driver 580: no SM clock samples
    monitor = GpuMonitor(interval_s=10, nvml=nvml)
    for _ in range(3):
        monitor.sample_now()
    assert [seen for gpu, kind, seen in nvml.asked if kind == CLOCK] == [0]
    assert [s["sm_clock_mhz"] for s in monitor.samples()] == [1980, 1980, 1980]
    assert monitor.description.endswith("utilization from the driver's own samples (every ~200 ms), power from its "
                                        "sample buffer (every ~20 ms), SM clock read at each poll")


# ---- several GPUs


def test_two_gpus_give_samples_tagged_with_their_index():
    nvml = fake_nvml(count=2, buffers=True)
    fill(nvml, (UTIL,), gpus=(0, 1))
    monitor = GpuMonitor(interval_s=10, device_indices=(0, 1), nvml=nvml)
    monitor.sample_now()
    for gpu, value in ((0, 60), (1, 61)):
        nvml.driver[(gpu, UTIL)].append((epoch_us(-0.05 * (gpu + 1)), value))
    monitor.sample_now()
    samples = monitor.samples()
    assert monitor.gpus == [0, 1]
    assert monitor.description.startswith("NVIDIA H200 (GPU 0), NVIDIA H200 (GPU 1) via NVML: ")
    polled = [(s["gpu"], s["util_pct"]) for s in samples if s["mem_used_mb"] is not None]
    assert polled == [(0, 42), (1, 43), (0, None), (1, None)]
    assert [(s["gpu"], s["util_pct"]) for s in only(samples, "util_pct")] == [(1, 61), (0, 60)]


def test_a_missing_gpu_among_others_is_left_out_with_a_note():
    with GpuMonitor(interval_s=0.01, device_indices=(0, 3), nvml=fake_nvml(count=1)) as monitor:
        samples = wait_for_samples(monitor, 2)
        assert monitor.available and monitor.gpus == [0]
        assert "(NVML sees 1 GPU(s); there is no GPU 3: left out)" in monitor.description
    assert {s["gpu"] for s in samples} == {0}


# ---- no GPU


def test_without_a_gpu_it_says_so_and_samples_the_cpu():
    with GpuMonitor(interval_s=0.01, nvml=fake_nvml(init_error="NVML Shared Library Not Found")) as monitor:
        samples = wait_for_samples(monitor, 2)
        assert not monitor.available and monitor.source == "cpu" and monitor.gpus == []
        assert monitor.description.startswith("No NVIDIA GPU found (NVML Shared Library Not Found)")
        assert "CPU utilization" in monitor.description
    assert all(0 <= s["util_pct"] <= 100 for s in samples)
    assert all(s["mem_used_mb"] > 0 and s["power_w"] is None and s["sm_clock_mhz"] is None for s in samples)
    assert all(s["gpu"] is None for s in samples)


def test_missing_gpu_index_falls_back_with_a_reason():
    reader = open_reader([3], nvml=fake_nvml(count=1))
    assert isinstance(reader, CpuReader)
    assert "there is no GPU 3" in reader.describe()


def test_missing_binding_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(ImportError, match="nvidia-ml-py"):
        import_pynvml()
    reader = open_reader()
    assert isinstance(reader, CpuReader) and "nvidia-ml-py" in reader.describe()


# ---- the buffer, the cost, the arguments


def test_samples_since_returns_only_newer_ones():
    monitor = GpuMonitor(interval_s=10, nvml=fake_nvml())
    monitor.sample_now()
    middle = time.perf_counter()
    monitor.sample_now()
    monitor.sample_now()
    assert len(monitor.samples()) == 3
    assert len(monitor.samples(since=middle)) == 2


def test_buffer_is_bounded():
    monitor = GpuMonitor(interval_s=10, nvml=fake_nvml(), max_samples=5)
    for _ in range(12):
        monitor.sample_now()
    assert len(monitor.samples()) == 5


def test_poll_cost_is_a_small_positive_number_after_polls():
    """The median poll's wall time: positive, and no more than the polls took in all (bounded by what this test
    measured around them, not by a constant a busy machine could exceed)."""
    monitor = GpuMonitor(interval_s=10, device_indices=(0, 1), nvml=fake_nvml(count=2, buffers=True))
    assert monitor.poll_cost_ms() is None
    started = time.perf_counter()
    for _ in range(5):
        monitor.sample_now()
    polled_ms = (time.perf_counter() - started) * 1000
    assert 0 < monitor.poll_cost_ms() <= polled_ms / 2, (monitor.poll_cost_ms(), polled_ms)


def test_nvml_index_follows_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert nvml_index(0) == 2 and nvml_index(1) == 5
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvml_index(1) == 1


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="interval_s"):
        GpuMonitor(interval_s=0)
    with pytest.raises(ValueError, match="device_indices"):
        GpuMonitor(device_indices=())


def test_importing_the_monitor_does_not_import_torch():
    code = "import sys, core.measure.gpu_monitor; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_gpu_facts_say_what_a_result_depends_on_and_none_for_what_nvml_cannot_tell():
    nvml = fake_nvml(count=2)
    nvml.NVML_CLOCK_MEM, nvml.NVML_TEMPERATURE_GPU = 2, 0
    nvml.nvmlSystemGetDriverVersion = lambda: b"580.95.05"
    nvml.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980 if kind == nvml.NVML_CLOCK_SM else 3201
    nvml.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000
    nvml.nvmlDeviceGetTemperature = lambda h, kind: 41 + h[1]

    def no_ecc_query(handle):
        raise FakeNvmlError("Not Supported", NOT_SUPPORTED)

    nvml.nvmlDeviceGetEccMode = no_ecc_query
    nvml.nvmlDeviceGetUUID = lambda h: f"GPU-5e1f-{h[1]}".encode()
    facts = gpu_facts([0, 1], nvml=nvml)
    assert facts[1] == {"index": 1, "name": "NVIDIA H200", "driver": "580.95.05", "max_sm_clock_mhz": 1980.0,
                        "max_memory_clock_mhz": 3201.0, "power_limit_w": 700.0, "temperature_c": 42.0, "ecc": None,
                        "uuid": "GPU-5e1f-1"}
    assert nvml.calls["shutdown"] == 1
    assert gpu_facts([0], nvml=fake_nvml(init_error="NVML Shared Library Not Found")) == []


def test_without_a_gpu_it_samples_the_processes_it_is_given_not_its_own():
    import psutil

    child = subprocess.Popen([sys.executable, "-c", "x = bytearray(300 * 2**20); import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 30  # a busy machine can take seconds to start the child and fill its memory
        while psutil.Process(child.pid).memory_info().rss < 300 * 2**20 and time.monotonic() < deadline:
            time.sleep(0.1)
        monitor = GpuMonitor(interval_s=60, nvml=fake_nvml(init_error="no NVML"), host_pids=lambda: [child.pid])
        monitor.sample_now()
        time.sleep(0.2)
        monitor.sample_now()
        sample = monitor.samples()[-1]
        child_mb = psutil.Process(child.pid).memory_info().rss / 2**20
        assert child_mb > 300 and sample["mem_used_mb"] == pytest.approx(child_mb, rel=0.05)
        assert 0 <= sample["util_pct"] <= 100
        assert "engine processes" in monitor.description
    finally:
        child.kill()
        child.wait()
