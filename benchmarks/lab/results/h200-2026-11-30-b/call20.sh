#!/bin/bash
# Device call 20 (nvidia-h200-x2): the CUDA tests of the loops, graph mode, streams, the timeline, PDL and the Triton
# attention after this session's changes to the loops (timestamps, the first token, the two references).
source benchmarks/lab/device_setup.sh
timeout -k 10 $(left 560) python3 -m pytest -q -rf --tb=short -m cuda tests/test_cuda.py tests/test_trace.py \
    tests/test_pdl.py tests/test_triton_attention.py -p no:cacheprovider --durations=8 2>&1 \
    | grep -v "^DEBUG\|^E1\|^W1" | tee $R/pytest.log | tail -40
cp $R/pytest.log $OUT/call20-pytest.log
