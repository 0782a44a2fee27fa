#!/bin/bash
# Device call right after the headline calls (same warm machine): Llama-8B step-graph on one GPU again, profiled
# (the headline's 178 tok/s is below the reduce-overhead row), then the CUDA suite (benchmarks/lab/calls/cuda_suite.sh).
source benchmarks/lab/device_setup.sh
run one-gpu-8b 200 python3 -m core.bench --model synthetic:llama-8b --cache static --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --trials 3 --profile $R/profile-one-gpu-8b
rm -f $R/profile-*/*trace.json.gz; mkdir -p $OUT; tar czf $OUT/one-gpu-8b.tgz -C $R .
CALL_BUDGET_S=$(( 585 - ($(date +%s) - START) )) bash benchmarks/lab/calls/cuda_suite.sh
