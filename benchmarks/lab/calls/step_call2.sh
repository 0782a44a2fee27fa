#!/bin/bash
# Device call (nvidia-h100-x1; carry .whlmin and .carry), issue 68 item 3: the batched step's products. Call 1 found
# the step's norms and products far from the floor at B>1 (at B=64 one RMSNorm reduction took 69 µs a call); in
# step-graph compiles coordinate-descent tuning is off where the batch-1 products are the gemv kernel's, so the batched
# step's own reductions and products go untuned. One process each, one after the other: the default tuning, then
# SYNCSCOPE_DECODE_PRODUCTS=inductor (coordinate descent on), at B=16, 64 and 4 with 256 positions.
#   bash benchmarks/lab/calls/step_call2.sh
export CALL_BUDGET_S=570
source benchmarks/lab/device_setup.sh
export PYTHONPATH=/tmp/site:$PWD
steps() {  # LABEL BUDGET_S: one process of benchmarks/batched_step.py
    local label=$1 budget=$2
    timeout -s INT -k 15 $budget python3 benchmarks/batched_step.py --model synthetic:llama-1b --compile step-graph \
        --shapes 16x256,64x256,4x256 --budget-s $(( budget - 50 )) --shape-s 45 --out $OUT/steps-$label.jsonl 2>&1 \
        | grep --line-buffered -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|out_base\|USDT" \
        | tee $OUT/step_call2-$label.log | grep "^B=\|^skipped"
    echo "$label done after $(( $(date +%s) - START )) s"
}
steps default 230
SYNCSCOPE_DECODE_PRODUCTS=inductor steps inductor $(( $(left) - 10 ))
cp $R/smi.csv $OUT/ 2>/dev/null; echo "done after $(( $(date +%s) - START )) s"
