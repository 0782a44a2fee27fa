#!/bin/bash
# Device call 18 (nvidia-h200-x2): issue 21's timeline on the GPU (clock alignment; traces of Llama-1B in
# reduce-overhead and eager, and at TP=2) and issue 20's first-token fix (TTFT), with the new CUDA tests.
source benchmarks/lab/device_setup.sh
L="--model synthetic:llama-1b --prompt-tokens 32 --ignore-eos"
step() { local name=$1 budget=$2; shift 2; echo "=== $name ($(left) s left)"
    timeout -s INT -k 10 "$budget" "$@" > $R/$name.log 2>&1; echo "rc=$?"
    grep -v -i "warn\|autotune\|DEBUG" $R/$name.log | tail -${TAILN:-14} | cut -c1-220; }
TAILN=24 step clock 90 python3 benchmarks/clock_alignment.py --seconds 10 --out $R/clock_alignment.json
step ro-1b 200 python3 -m core.bench $L --cache static --compile reduce-overhead --max-new-tokens 256 --trials 5 \
    --no-check --json $R/ro-1b.json --trace $R/ro-1b.trace.json
step eager-1b 90 python3 -m core.bench $L --max-new-tokens 64 --trials 5 --json $R/eager-1b.json \
    --trace $R/eager-1b.trace.json
step tp2-1b 150 python3 -m core.bench $L --tp 2 --cache static --compile reduce-overhead --max-new-tokens 128 \
    --trials 3 --json $R/tp2-1b.json --trace $R/tp2-1b.trace.json
pkill -9 -f core.bench
step pytest $(left 560) python3 -m pytest -q -rf --tb=short -m cuda tests/test_trace.py tests/test_cuda.py \
    -k "trace or first_token or device_span or waits" -p no:cacheprovider
cd $R && tar czf $OUT/res.tgz . ; ls -la $OUT
