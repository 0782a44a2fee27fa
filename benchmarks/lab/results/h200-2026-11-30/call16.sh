#!/bin/bash
# Device call 16 (nvidia-h200-x2): the Triton decode attention's CUDA tests after the fp64-scale fix, then Llama-8B
# TP=2 step-graph with attention "reduce" and "triton" side by side, then "triton" with safe PDL.
source benchmarks/lab/device_setup.sh
echo "=== CUDA tests"; timeout -k 10 150 python3 -m pytest -q -rf --tb=line -m cuda tests/test_triton_attention.py tests/test_cuda.py -k "triton or decode_attention" -p no:cacheprovider 2>&1 | grep -v "^DEBUG\|^E1\|^W1" | tail -25 | tee $R/pytest.log
timeout -s INT -k 15 $(left 400) python3 benchmarks/decode_attention.py --kernels reduce triton --timeout-s 170 --out $R/v20-8b-attention.json -- $BENCH_ARGS --model synthetic:llama-8b --compile step-graph --trials 5 2>&1 | tail -6 | tee $R/v20-8b-attention.log
pkill -9 -f core.bench
SYNCSCOPE_DECODE_ATTENTION=triton SYNCSCOPE_PDL=safe run v21-8b-triton-safe $(left) $B --model synthetic:llama-8b --compile step-graph --trials 5
cd $R && tar czf $OUT/res.tgz . ; ls -la $OUT
