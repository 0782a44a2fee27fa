"""What a run measures and how it is read: per-step times on the device's and the host's clocks (step_times), the
waits in a step (waits), the statistics over trials and the verdict (stats), the drift between two processes (drift),
why outputs differ (identity), the kernel measurement (kernel_measurement), kernel profiles (profiling), NVTX ranges
(nvtx), the Perfetto trace (trace) and the NVML sampler (gpu_monitor). The sync audit and what to do about each read
it finds are in core/audit/ (core.audit.sync, core.audit.fixes).

step_times, kernel_measurement, profiling and nvtx import torch. The others (waits, stats, drift, identity, trace,
gpu_monitor) do not: the dashboard's server imports some of them.
"""
