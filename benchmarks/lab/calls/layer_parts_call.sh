#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43: configurations of the fused layer's own
# products, then the fused layer at Llama-8B again. benchmarks/gemv_sweep.py --parts norm qkv times gate/up with the
# norm before it and the q/k/v kernel for Llama-8B and -1B and writes their best into core/kernels/gemv_configs.json
# (as 28672x4096-norm, 6144x4096-qkv, ...); then fresh step-graph compiles, one process at a time, from empty caches:
# Llama-8B fused (layer-on), as auto leaves it (default: unfused), fused again; Llama-1B as auto leaves it (fused).
# Comes back: parts_sweep.json, gemv_configs.json (commit it if the fused step gains) and the runs (ab-llama-*.tgz).
export CALL_BUDGET_S=585
source benchmarks/lab/device_setup.sh
python3 benchmarks/gemv_sweep.py --parts norm qkv --shapes llama-8b llama-1b --out $R/parts_sweep.json \
    --table core/kernels/gemv_configs.json --budget-s 150 2>&1 | grep -v "^W1" | tee $R/parts-sweep.log
cp core/kernels/gemv_configs.json $R/parts_sweep.json $OUT/
echo "sweep done after $(( $(date +%s) - START )) s"
source benchmarks/lab/calls/floor_ab.sh llama-8b "layer-on default layer-on" 585  # sourced: it keeps $R and the budget
source benchmarks/lab/calls/floor_ab.sh llama-1b "default" 585
