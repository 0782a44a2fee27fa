#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz and .peers), issue 43: benchmarks/peers.py on one
# shape, every contestant in a process of its own, one after another, each from empty inductor and Triton caches.
#   bash benchmarks/lab/calls/peers_call.sh SHAPE [CONTESTANTS] [BUDGET_S]
# .peers/gpt-fast is a checkout of pytorch-labs/gpt-fast (ignored, never committed).
SHAPE=${1:-llama-8b}; CONTESTANTS=${2:-ours-step-graph,gpt-fast-greedy,hf-generate,ours-reduce-overhead,gpt-fast-sample}
export CALL_BUDGET_S=${3:-560}
source benchmarks/lab/device_setup.sh
timeout -k 10 $(left) python3 benchmarks/peers.py --model synthetic:$SHAPE --gpt-fast .peers/gpt-fast --out $R \
    --trials 5 --contestants $CONTESTANTS --timeout 220 2>&1 | tee $R/peers-$SHAPE.txt
grep -h "step on the device\|compile:" $R/*.log | cut -c1-400
rm -rf $R/caches
cp $R/peers-$SHAPE.json $R/peers-$SHAPE.txt $R/smi.csv $OUT/
gzip -f $R/*-$SHAPE.json; tar czf $OUT/reports-$SHAPE.tgz -C $R .
ls -la $OUT
