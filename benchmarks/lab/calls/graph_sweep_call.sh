#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43, for the next session: the gemv table
# measured as a decode step runs its products (benchmarks/gemv_sweep.py --timing graph: launches back to back in a
# CUDA graph over weight copies that overflow L2), every product and both parts of the fused layer, Llama-8B and -1B;
# it rewrites core/kernels/gemv_configs.json there. Then fresh step-graph compiles, one process at a time from empty
# caches, with that table: Llama-8B and Llama-1B as the default runs them.
# Comes back: graph-tests.log, graph_sweep.json, gemv_configs.json (commit it if the steps gain) and the runs.
export CALL_BUDGET_S=585
source benchmarks/lab/device_setup.sh
timeout -k 10 90 python3 -m pytest -q -p no:cacheprovider -m cuda -rfEs tests/test_gemv_sweep.py 2>&1 \
    | grep -v "^DEBUG\|^W1" | tail -15 > $R/graph-tests.log; tail -4 $R/graph-tests.log
python3 benchmarks/gemv_sweep.py --timing graph --parts norm qkv plain --shapes llama-8b llama-1b \
    --out $R/graph_sweep.json --table core/kernels/gemv_configs.json --budget-s 240 2>&1 | grep -v "^W1" \
    | tee $R/graph-sweep.log | cut -c1-160
cp core/kernels/gemv_configs.json $R/graph_sweep.json $R/graph-tests.log $OUT/
echo "sweep done after $(( $(date +%s) - START )) s"
source benchmarks/lab/calls/floor_ab.sh llama-8b "default" 585  # sourced: it keeps $R and the budget
source benchmarks/lab/calls/floor_ab.sh llama-1b "default" 585
