#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 58, the first of three (about 6 minutes):
# 1. the CUDA tests under load (tests/test_cuda_load.py: every compile mode's slots, transformers' batching sync and
#    async, the audit on CUDA, bf16 repeatability);
# 2. a probe at the Llama-1B shape, step-graph, B=16, 64 requests, one trial of every contestant: what a B's compile
#    and transformers' warm-up cost, to size the sweeps of load_call2.sh (step-graph) and load_call3.sh (reduce-overhead).
#   bash benchmarks/lab/calls/load_call1.sh
export CALL_BUDGET_S=560
source benchmarks/lab/device_setup.sh
export PYTHONPATH=/tmp/site:$PWD
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())"
timeout -k 10 300 python3 -m pytest -q -p no:cacheprovider -m cuda -rfEs -x tests/test_cuda_load.py 2>&1 \
    | grep -v "^DEBUG\|^W1" | tail -30 | tee $OUT/cuda-tests.log
echo "tests done after $(( $(date +%s) - START )) s"
[ "$(left)" -gt 60 ] && timeout -s INT -k 15 $(( $(left) - 15 )) python3 -m core.bench --model synthetic:llama-1b \
    --requests 64 --max-batch 16 --max-new-tokens 64 --output-median 24 --compile step-graph --trials 1 --progress \
    --json $OUT/probe-sg-b16.json 2>&1 | grep -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm" \
    | while IFS= read -r line; do echo "$(( $(date +%s) - START )) $line"; done | tail -40 | tee $OUT/probe.log
cp $R/smi.csv $OUT/ 2>/dev/null; echo "done after $(( $(date +%s) - START )) s"
