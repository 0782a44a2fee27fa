#!/bin/bash
# Device call (nvidia-h200; carry .whlmin and .carry/tokenizer.tgz): programmatic dependent launch for the project's
# own Triton kernels (SYNCSCOPE_KERNEL_PDL, core.kernels.pdl). First its CUDA tests, then fresh step-graph compiles,
# one process at a time, each from empty inductor and Triton caches: Llama-1B off, wait and prefetch; then Llama-8B
# off and whichever of wait and prefetch decoded faster at 1B, as far as the budget goes (with room for one 8B run
# only, the PDL choice, against the earlier 8B numbers of docs/NUMBERS.md).
# Comes back: pdl-tests.log, ab-llama-1b.tgz, ab-llama-8b.tgz and their logs.
#   bash benchmarks/lab/calls/pdl_call.sh
export CALL_BUDGET_S=560
source benchmarks/lab/device_setup.sh
timeout -k 10 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rfEs tests/test_cuda_kernel_pdl.py 2>&1 \
    | grep -v "^DEBUG\|^W1" > $R/pdl-tests.log; tail -6 $R/pdl-tests.log; gzip -c $R/pdl-tests.log > $OUT/pdl-tests.log.gz
echo "tests done after $(( $(date +%s) - START )) s"
source benchmarks/lab/calls/floor_ab.sh llama-1b "default kernel-pdl-wait kernel-pdl-prefetch" 560  # sourced: keeps $R
best=$(python3 -c "print('kernel-pdl-prefetch' if $(rate sg-llama-1b-kernel-pdl-prefetch-3) > \
$(rate sg-llama-1b-kernel-pdl-wait-2) else 'kernel-pdl-wait')")
echo "1B done after $(( $(date +%s) - START )) s; 8B's PDL choice: $best"
if [ "$(left)" -gt 265 ]; then
    source benchmarks/lab/calls/floor_ab.sh llama-8b "default $best" 560
elif [ "$(left)" -gt 135 ]; then
    source benchmarks/lab/calls/floor_ab.sh llama-8b "$best" 560
fi
