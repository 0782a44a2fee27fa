#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43: each product's device time in a step-graph
# decode step, by its place in the layer (benchmarks/product_times.py), Llama-8B and -1B, fused layers (the default)
# and unfused (SYNCSCOPE_DECODE_LAYER=off), one process at a time from empty caches.
# Comes back: products-*.json and products.log.
export CALL_BUDGET_S=420
source benchmarks/lab/device_setup.sh
for shape in llama-8b llama-1b; do
    for layer in on off; do
        export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-p-$shape-$layer TRITON_CACHE_DIR=/tmp/triton-p-$shape-$layer
        echo "=== $shape SYNCSCOPE_DECODE_LAYER=$layer ($(left) s left)" | tee -a $OUT/products.log
        [ "$(left)" -gt 40 ] && SYNCSCOPE_DECODE_LAYER=$layer timeout -k 10 $(left) python3 benchmarks/product_times.py \
            --model synthetic:$shape --out $OUT/products-$shape-$layer.json 2>&1 | grep -v "^W1\|warn" | tail -14 \
            | tee -a $OUT/products.log
    done
done
