#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 58, in one call (about 9.5 minutes): the
# Llama-1B shape under load, 256 requests (prompts of 8-32 tokens, output lengths log-normal around 24, at most 64),
# every contestant (naive, pipelined, the ceiling, transformers' batching sync and async), each mode in one process:
# 1. step-graph: offline, B=16 with the sweep over B (4, 64), the audit and the kernel measurement at B=16;
# 2. reduce-overhead: B=16 offline, then the online rates 200 and 400 requests/s at B=16.
# (A step-graph compile took 52 s a B in the first call's probe: the sweep over B in both modes does not fit one call.)
#   bash benchmarks/lab/calls/load_call3.sh
export CALL_BUDGET_S=580
source benchmarks/lab/device_setup.sh
export PYTHONPATH=/tmp/site:$PWD
stamp() { while IFS= read -r line; do echo "$(( $(date +%s) - START )) $line"; done; }
COMMON="--model synthetic:llama-1b --requests 256 --max-batch 16 --max-new-tokens 64 --output-median 24 --trials 3
    --audit --solo-checks 8 --progress"
load() {  # MODE BUDGET_S FLAGS...: one process of core.bench under load
    local mode=$1 budget=$2; shift 2
    timeout -s INT -k 20 $budget python3 -m core.bench $COMMON --compile $mode "$@" --json $OUT/load-$mode.json \
        --trace $OUT/load-$mode-trace.json 2>&1 \
        | grep --line-buffered -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|out_base" \
        | stamp | tee $OUT/load-$mode.log | tail -32
}
load step-graph $(( $(left) - 200 )) --sweep-batch 4,64
load reduce-overhead $(( $(left) - 15 )) --sweep-rate 200,400
cp $R/smi.csv $OUT/ 2>/dev/null; echo "done after $(( $(date +%s) - START )) s"
