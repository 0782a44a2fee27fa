#!/bin/bash
# Device call (nvidia-h200; carry .whlmin and .carry), issue 34: the CUDA tests of the appending decode attention,
# and step-graph decoding with it on (SYNCSCOPE_APPEND_IN_ATTENTION=on) against eager, in fp32.
source benchmarks/lab/device_setup.sh
timeout -k 5 200 python3 -m pytest -q -p no:cacheprovider -m cuda --tb=short -rf tests/test_cuda.py \
    -k "appending or step_graph_equals or many_eos_ids" 2>&1 | grep -v DEBUG | tail -12 | tee $OUT/append-off-tests.log
SYNCSCOPE_APPEND_IN_ATTENTION=on timeout -k 5 120 python3 -m pytest -q -p no:cacheprovider -m cuda --tb=short -rf \
    tests/test_cuda.py -k "step_graph_equals or many_eos_ids or fp32_loops" 2>&1 | grep -v DEBUG | tail -12 \
    | tee $OUT/append-on-tests.log
