#!/bin/bash
# Device call 15 (nvidia-h200-x2): why the Triton decode attention failed in call 14 (plain launch, eager op,
# compiled op, each traceback), then Llama-8B TP=2 reduce-overhead with the prepared model (the ratio target).
source benchmarks/lab/device_setup.sh
echo "=== diag"; timeout -k 10 120 python3 .carry/diag_triton.py 2>&1 | grep -v "^DEBUG\|^W1\|Warning" | tail -90 | tee $R/diag.log
run v19-8b-ro $(left 560) $B --model synthetic:llama-8b --compile reduce-overhead --trials 3
cd $R && tar czf $OUT/res.tgz . ; ls -la $OUT
