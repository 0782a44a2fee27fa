#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43: core.kernels.decode_layer on the H200.
# Its CUDA tests and the gemv kernel's; then fresh step-graph compiles, one process at a time, each from empty caches:
# Llama-1B with the layers unfused (layer-off) and fused (the default), then Llama-8B fused and unfused as time allows.
# Comes back: layer-tests.log and the runs (ab-llama-1b.tgz, ab-llama-8b.tgz).
export CALL_BUDGET_S=575
source benchmarks/lab/device_setup.sh
timeout -k 10 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rfEs tests/test_cuda_layer.py \
    tests/test_cuda_gemv.py 2>&1 | grep -v "^DEBUG\|^W1" | tail -40 > $R/layer-tests.log
tail -12 $R/layer-tests.log; cp $R/layer-tests.log $OUT/; echo "tests done after $(( $(date +%s) - START )) s"
source benchmarks/lab/calls/floor_ab.sh llama-1b "layer-off default" 575  # sourced: it keeps $R and the budget
source benchmarks/lab/calls/floor_ab.sh llama-8b "default layer-off" 575
