"""What a run measures and how it is read: per-step times on the device's and the host's clocks (step_times), the
statistics over trials and the verdict (stats), why outputs differ (identity), kernel profiles (profiling), the
Perfetto trace (trace) and the NVML sampler (gpu_monitor).

Only step_times and profiling import torch: the dashboard's server imports the others.
"""
