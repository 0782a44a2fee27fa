#!/bin/bash
# Device call (nvidia-h100-x1; carry .whlmin and .carry), issue 68's second Done-when: the loops under load after the
# batched step's cache update became an index_put_ (step_call1.sh): the Llama-1B shape, step-graph, 128 requests of
# 8-32 prompt tokens and log-normal outputs around 24 (at most 64), B=16 with the sweep over B=4 and 64, naive,
# pipelined and the ceiling, 3 trials, the kernel measurement at B=16 (the 2026-12-06 anchors in shared FACTS.md used
# the same workload at 128 requests for B=16 and 64, 64 requests for B=4, 2 trials).
#   bash benchmarks/lab/calls/load_call4.sh
export CALL_BUDGET_S=560
source benchmarks/lab/device_setup.sh
export PYTHONPATH=/tmp/site:$PWD
timeout -s INT -k 20 $(( $(left) - 15 )) python3 -m core.bench --model synthetic:llama-1b --compile step-graph \
    --requests 128 --max-batch 16 --sweep-batch 4,64 --max-new-tokens 64 --output-median 24 --trials 3 \
    --contestants naive,pipelined,no-check --solo-checks 8 --progress --json $OUT/load-step-graph.json 2>&1 \
    | grep --line-buffered -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|out_base\|USDT" \
    | tee $OUT/load_call4.log | tail -45
cp $R/smi.csv $OUT/ 2>/dev/null; echo "done after $(( $(date +%s) - START )) s"
