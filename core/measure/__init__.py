"""What a run measures and how it is read: per-step times on the device's and the host's clocks (step_times), the
waits in a step (waits), the statistics over trials and the verdict (stats), the drift between two processes (drift),
why outputs differ (identity), the sync audit (sync_audit, with its parts sync_wrappers, sync_dispatch, sync_sites and
sync_report) and what to do about each read it finds (sync_fixes), the kernel measurement (kernel_measurement),
kernel profiles (profiling), NVTX ranges (nvtx), the Perfetto trace (trace) and the NVML sampler (gpu_monitor).

step_times, the sync audit's five modules, kernel_measurement, profiling and nvtx import torch. The others (waits,
stats, drift, identity, sync_fixes, trace, gpu_monitor) do not: the dashboard's server imports some of them.
"""
