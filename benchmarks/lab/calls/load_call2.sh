#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 58: the Llama-1B shape under load in one
# process, every contestant (naive, pipelined, the ceiling, transformers' batching sync and async): offline, 256
# requests, the main point B=16 with the sweep over B, then the online rates at B=16; the audit and the kernel
# measurement at the main point. With TESTS=1 the CUDA tests under load run first.
#   bash benchmarks/lab/calls/load_call2.sh MODE SWEEP_B SWEEP_RATES [TRIALS] [MAX_NEW] [MEDIAN]
#   bash benchmarks/lab/calls/load_call2.sh step-graph 4,64 200,400 3 64 24
export CALL_BUDGET_S=${CALL_BUDGET_S:-580}
source benchmarks/lab/device_setup.sh
export PYTHONPATH=/tmp/site:$PWD
MODE=${1:-step-graph}; SWEEP_B=${2:-4,64}; SWEEP_R=${3:-200,400}
TRIALS=${4:-3}; MAX_NEW=${5:-64}; MEDIAN=${6:-24}
stamp() { while IFS= read -r line; do echo "$(( $(date +%s) - START )) $line"; done; }
if [ "${TESTS:-0}" = 1 ]; then
    timeout -k 10 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rfEs tests/test_cuda_load.py 2>&1 \
        | grep --line-buffered -v "^DEBUG\|^W1\|warn" | tail -12 | tee $OUT/cuda-tests-$MODE.log
fi
timeout -s INT -k 20 $(( $(left) - 20 )) python3 -m core.bench --model synthetic:llama-1b --requests 256 \
    --max-batch 16 --sweep-batch $SWEEP_B --sweep-rate $SWEEP_R --max-new-tokens $MAX_NEW --output-median $MEDIAN \
    --compile $MODE --trials $TRIALS --audit --solo-checks 8 --progress --json $OUT/load-$MODE.json \
    --trace $OUT/load-$MODE-trace.json 2>&1 \
    | grep --line-buffered -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|out_base" \
    | stamp | tee $OUT/load-$MODE.log | tail -40
cp $R/smi.csv $OUT/ 2>/dev/null; echo "done after $(( $(date +%s) - START )) s"
