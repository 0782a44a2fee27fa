#!/bin/bash
# Device call 14 (nvidia-h200-x2; next session): the Triton decode attention's CUDA tests, then Llama-8B TP=2
# step-graph: attention "reduce" and "triton", each with PDL off and safe, side by side (4 runs).
source benchmarks/lab/device_setup.sh
echo "=== CUDA tests"; timeout -k 10 150 python3 -m pytest -q -m cuda tests/test_triton_attention.py tests/test_pdl.py tests/test_cuda.py -k "triton or pdl or decode_attention" -p no:cacheprovider 2>&1 | tail -15 | tee $R/pytest.log
timeout -s INT -k 15 $(left 560) python3 benchmarks/decode_attention.py --kernels reduce triton --pdl off safe --timeout-s 150 --out $R/v18-8b-attention.json -- $BENCH_ARGS --model synthetic:llama-8b --compile step-graph --trials 5 2>&1 | tail -12 | tee $R/v18-8b-attention.log
pkill -9 -f core.bench
cd $R && tar czf $OUT/res.tgz . ; ls -la $OUT
