#!/bin/bash
# Device call (nvidia-h200; carry .whlmin and .carry), issue 31: the examples on the GPU (the Llama-1B shape,
# reduce-overhead, 256 new tokens), each in a process of its own, one at a time: the two loops as they are (their rate
# without the audit) and each example under core.audit (sites, costs, kernel-busy, and the rate under the audit).
# Comes back: plain-<example>.txt, audit-<example>.{json,txt}, smi.csv.
source benchmarks/lab/device_setup.sh
ARGS="--shape 1b --compile --new-tokens 256"
for example in naive_loop pipelined_loop; do
    echo "=== plain $example ($(left) s left)"
    timeout -k 10 90 python3 examples/$example.py $ARGS 2>&1 | grep -v "^W1\|^E1\|arn" | tail -2 | tee $R/plain-$example.txt
done
for example in "naive_loop.py" "pipelined_loop.py" "hf_generate.py" "hf_generate.py --deferred"; do
    name=$(echo "$example" | sed 's/\.py//; s/ --/-/')
    echo "=== audit $name ($(left) s left)"
    timeout -k 10 $(( $(left 580) < 110 ? $(left 580) : 110 )) python3 -m core.audit --json $R/audit-$name.json \
        -- examples/$example $ARGS 2>&1 | grep -v "^W1\|^E1\|arn\|^  torch._C" > $R/audit-$name.txt
    head -7 $R/audit-$name.txt | cut -c1-220
done
cp $R/*.json $R/*.txt $R/smi.csv $OUT/ 2>/dev/null; ls -la $OUT
