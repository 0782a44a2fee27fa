#!/bin/bash
# Device call (nvidia-h200; carry .whlmin and .carry/tokenizer.tgz): SYNCSCOPE_KERNEL_PDL at Llama-1B only, for a call
# with little device time left: its CUDA tests, then fresh step-graph compiles, one process at a time from empty
# caches, wait, prefetch and the default (off), as far as BUDGET_S goes.
#   bash benchmarks/lab/calls/pdl_call_1b.sh [BUDGET_S]
export CALL_BUDGET_S=${1:-300}
source benchmarks/lab/device_setup.sh
timeout -k 10 60 python3 -m pytest -q -p no:cacheprovider -m cuda -rfEs tests/test_cuda_kernel_pdl.py 2>&1 \
    | grep -v "^DEBUG\|^W1" | tail -20 > $R/pdl-tests.log; tail -4 $R/pdl-tests.log; cp $R/pdl-tests.log $OUT/
source benchmarks/lab/calls/floor_ab.sh llama-1b "kernel-pdl-wait kernel-pdl-prefetch default" $CALL_BUDGET_S
