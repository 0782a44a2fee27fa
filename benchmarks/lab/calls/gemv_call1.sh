#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43: core.kernels.triton_gemv on the H200.
# Its CUDA tests; the configuration sweep of every batch-1 product of Llama-8B and -1B (benchmarks/gemv_sweep.py),
# which writes core/kernels/gemv_configs.json; then fresh Llama-8B step-graph compiles, one process at a time: every
# product by the kernel (floor_ab.sh's label triton), the default, the kernel again.
# Comes back: gemv-tests.log, gemv_sweep.json, gemv_configs.json and the runs (ab-llama-8b.tgz).
export CALL_BUDGET_S=545
source benchmarks/lab/device_setup.sh
timeout -k 10 60 python3 -m pytest -q -p no:cacheprovider -m cuda -rfEs tests/test_cuda_gemv.py -k "not bf16]" 2>&1 \
    | grep -v "^DEBUG\|^W1" | tail -25 > $R/gemv-tests.log
tail -8 $R/gemv-tests.log; echo "tests done after $(( $(date +%s) - START )) s"
python3 benchmarks/gemv_sweep.py --shapes llama-8b llama-1b --out $R/gemv_sweep.json \
    --table core/kernels/gemv_configs.json --budget-s 80 2>&1 | grep -v "^W1" | tee $R/gemv-sweep.log
cp core/kernels/gemv_configs.json $R/
echo "sweep done after $(( $(date +%s) - START )) s"
source benchmarks/lab/calls/floor_ab.sh llama-8b "triton default triton" 545  # sourced: it keeps $R and the budget
