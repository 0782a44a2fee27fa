#!/bin/bash
# Device call (nvidia-h200; carry .whlmin and .carry), issues 30 and 31: synthetic:llama-8b eager with a dynamic cache
# through the CLI (both loops, generate() with and without DeferredStopCheck, the sync audit and the kernel trial),
# then the examples audited on the GPU (the Llama-1B shape, reduce-overhead, 256 new tokens), each in a process of
# its own, one at a time. Comes back: eager-8b.{json,log}, audit-<example>.{json,txt}, smi.csv.
source benchmarks/lab/device_setup.sh
EIGHT="python3 -m core.bench --model synthetic:llama-8b --prompt-tokens 32 --max-new-tokens 256 --ignore-eos"
run eager-8b $(left 300) $EIGHT --trials 3 --hf --hf-deferred --audit
grep -A14 "^host reads" $R/eager-8b.log | cut -c1-220
for example in "naive_loop.py" "pipelined_loop.py" "hf_generate.py" "hf_generate.py --deferred"; do
    name=$(echo "$example" | sed 's/\.py//; s/ --/-/')
    echo "=== $name ($(left) s left)"
    timeout -k 10 $(( $(left 575) / 2 > 30 ? $(left 575) / 2 : 30 )) python3 -m core.audit --json $R/audit-$name.json \
        -- examples/$example --shape 1b --compile --new-tokens 256 2>&1 | grep -v "^W1\|^E1\|warn" > $R/audit-$name.txt
    head -8 $R/audit-$name.txt | cut -c1-200
done
cp $R/*.json $R/*.log $R/*.txt $R/smi.csv $OUT/ 2>/dev/null; ls -la $OUT
