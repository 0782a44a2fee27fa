#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43: core.kernels.decode_layer with the norm
# folded into its products' single pass (call 1 found the separate pass over the row before each product cost more at
# Llama-8B than the kernels it saved). Its CUDA tests and the gemv kernel's; then fresh step-graph compiles, one
# process at a time, each from empty caches: Llama-8B fused, unfused (layer-off), fused again; Llama-1B the same.
# Comes back: layer-tests.log and the runs (ab-llama-8b.tgz, ab-llama-1b.tgz).
export CALL_BUDGET_S=560
source benchmarks/lab/device_setup.sh
timeout -k 10 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rfEs tests/test_cuda_layer.py \
    tests/test_cuda_gemv.py 2>&1 | grep -v "^DEBUG\|^W1" | tail -40 > $R/layer-tests.log
tail -6 $R/layer-tests.log; cp $R/layer-tests.log $OUT/; echo "tests done after $(( $(date +%s) - START )) s"
source benchmarks/lab/calls/floor_ab.sh llama-8b "default layer-off default" 560  # sourced: it keeps $R and the budget
source benchmarks/lab/calls/floor_ab.sh llama-1b "default layer-off default" 560
