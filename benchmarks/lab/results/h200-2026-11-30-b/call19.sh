#!/bin/bash
# Device call 19 (nvidia-h200-x2): the clock alignment after the two-reference drift correction, the README's
# Llama-1B reduce-overhead timeline (10 trials, so TTFT has a distribution), issue 20's 20 A/A comparisons at the
# dashboard's GPU defaults (the default model's shape), and the CUDA tests of the timeline, TTFT and the engine.
source benchmarks/lab/device_setup.sh
L="--model synthetic:llama-1b --prompt-tokens 32 --ignore-eos"
step() { local name=$1 budget=$2; shift 2; echo "=== $name ($(left) s left)"
    timeout -s INT -k 10 "$budget" "$@" > $R/$name.log 2>&1; echo "rc=$?"
    grep -v -i "warn\|autotune\|DEBUG" $R/$name.log | tail -${TAILN:-14} | cut -c1-220; }
TAILN=10 step clock 90 python3 benchmarks/clock_alignment.py --seconds 10 --out $R/clock_alignment.json
step ro-1b 150 python3 -m core.bench $L --cache static --compile reduce-overhead --max-new-tokens 256 --trials 10 \
    --no-check --json $R/ro-1b.json --trace $R/ro-1b.trace.json
TAILN=16 step aa-gpu 270 python3 benchmarks/aa_false_positive.py --model synthetic:smollm2-135m --comparisons 20 \
    --out $R/aa-gpu.json
pkill -9 -f core.bench
TAILN=6 step pytest $(left 540) python3 -m pytest -q -rf --tb=short -m cuda tests/test_trace.py tests/test_cuda.py \
    tests/test_cuda_engine.py -k "trace or first_token or device_span or waits or engine" -p no:cacheprovider
cd $R && tar czf $OUT/res.tgz . ; ls -la $OUT
