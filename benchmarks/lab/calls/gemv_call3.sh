#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43, after gemv_call2.sh: the product kernel's
# CUDA tests in full (the bf16 compile case included), then Llama-1B fresh step-graph compiles, one process at a time:
# triton-cd-off, the default, triton-cd-off.
export CALL_BUDGET_S=540
source benchmarks/lab/device_setup.sh
timeout -k 10 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rfEs tests/test_cuda_gemv.py 2>&1 \
    | grep -v "^DEBUG\|^W1" | tail -25 > $R/gemv-tests.log
tail -8 $R/gemv-tests.log
source benchmarks/lab/calls/floor_ab.sh llama-1b "triton-cd-off default triton-cd-off" 540
