#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43, for the next session (about 9 minutes):
# programmatic dependent launch again, now that the wait keeps the pointers' alignment (95dbbde: before it every input,
# cache and partial-result load of a waiting kernel was a 2-byte one, which PTX for sm_90 shows), and the fused
# layer's silu(gate) * up computed once by the gate/up kernel (SYNCSCOPE_DECODE_SWIGLU=gate-up).
# 1. their CUDA tests (tokens: PDL's equal off's, gate-up's fp32 equal eager's, bf16 repeats);
# 2. the gemv table's new entries timed as the step runs them (gemv_sweep.py --timing graph --parts swiglu down:
#    gate/up writing the activation, and the down projection without it), written into core/kernels/gemv_configs.json;
# 3. fresh Llama-1B step-graph compiles, one process at a time from empty caches: off, wait, prefetch, then the faster
#    PDL level with swiglu-gate-up; then Llama-8B off and the fastest 1B choice, as far as the budget goes.
# Comes back: tests.log, swiglu-sweep.json and gemv_configs.json (commit it with the choice), the runs' reports.
#   bash benchmarks/calls/pdl_swiglu_call.sh
export CALL_BUDGET_S=575
source benchmarks/device_setup.sh
timeout -k 10 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rfEs tests/test_cuda_kernel_pdl.py \
    tests/test_cuda_layer.py 2>&1 | grep -v "^DEBUG\|^W1" | tail -15 > $R/tests.log; tail -4 $R/tests.log
echo "tests done after $(( $(date +%s) - START )) s"
python3 benchmarks/gemv_sweep.py --timing graph --parts swiglu down --shapes llama-1b llama-8b \
    --out $R/swiglu-sweep.json --table core/kernels/gemv_configs.json --budget-s 100 2>&1 | grep -v "^W1" \
    | tee $R/swiglu-sweep.log | cut -c1-160
cp core/kernels/gemv_configs.json $R/swiglu-sweep.json $R/tests.log $OUT/
echo "sweep done after $(( $(date +%s) - START )) s"
source benchmarks/calls/floor_ab.sh llama-1b "default kernel-pdl-wait kernel-pdl-prefetch" 575  # sourced: keeps $R
pdl=$(python3 -c "print('kernel-pdl-prefetch' if $(rate sg-llama-1b-kernel-pdl-prefetch-3) > \
$(rate sg-llama-1b-kernel-pdl-wait-2) else 'kernel-pdl-wait')")
source benchmarks/calls/floor_ab.sh llama-1b "$pdl+swiglu-gate-up" 575
best=$(python3 -c "
rates = {'default': $(rate sg-llama-1b-default-1), '$pdl': max($(rate sg-llama-1b-kernel-pdl-wait-2), \
$(rate sg-llama-1b-kernel-pdl-prefetch-3)), '$pdl+swiglu-gate-up': $(rate "sg-llama-1b-$pdl+swiglu-gate-up-1")}
print(max(rates, key=rates.get))")
echo "1B done after $(( $(date +%s) - START )) s; the fastest: $best"
if [ "$(left)" -gt 250 ] && [ "$best" != default ]; then
    source benchmarks/calls/floor_ab.sh llama-8b "default $best" 575
elif [ "$(left)" -gt 125 ]; then
    source benchmarks/calls/floor_ab.sh llama-8b "$best" 575
fi
