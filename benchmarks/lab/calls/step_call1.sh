#!/bin/bash
# Device call (nvidia-h100-x1; carry .whlmin and .carry), issue 68 items 2-3: the batched decode step alone
# (core.load.slots.Slots, every row live) at the Llama-1B shape, step-graph, one process: today's cache update
# (index_put_) against the one before it (scatter_, which inductor compiled into a copy of the whole cache and a copy
# back), at B=16 and 64 with 256 positions and B=16 with 1,024 (the same live positions), then B=4, 1 and 64/1,024;
# one JSON line per shape in $OUT/steps.jsonl as soon as it is measured.
#   bash benchmarks/lab/calls/step_call1.sh
export CALL_BUDGET_S=570
source benchmarks/lab/device_setup.sh
export PYTHONPATH=/tmp/site:$PWD
SHAPES=16x256:index-put,16x256:scatter,64x256:index-put,64x256:scatter,16x1024:index-put,16x1024:scatter
SHAPES=$SHAPES,4x256:index-put,1x256:index-put,64x1024:index-put,4x256:scatter,1x256:scatter
timeout -s INT -k 15 $(( $(left) - 10 )) python3 benchmarks/batched_step.py --model synthetic:llama-1b \
    --compile step-graph --shapes $SHAPES --budget-s $(( $(left) - 60 )) --shape-s 45 --out $OUT/steps.jsonl 2>&1 \
    | grep --line-buffered -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|out_base\|USDT" \
    | tee $OUT/step_call1.log | tail -40
cp $R/smi.csv $OUT/ 2>/dev/null; echo "done after $(( $(date +%s) - START )) s"
