#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43: the fused layer's attention combining its
# splits in its last program (SYNCSCOPE_DECODE_COMBINE, default last-program) and the fused layer at every width with
# the parts' configurations (SYNCSCOPE_DECODE_LAYER default on). First the CUDA suite (no dashboard client: gradio does
# not travel; the appending kernel's smollm2 case left out for time), then fresh Llama-1B step-graph compiles, one
# process at a time from empty caches: the default against combine-kernel.
# Comes back: cuda-suite.log, smi.csv and the runs (ab-llama-1b.tgz).
rm tests/test_dashboard_client.py
EXCLUDE="(appending_attention_kernel_gives and smollm2)" CALL_BUDGET_S=400 source benchmarks/lab/calls/cuda_suite.sh
source benchmarks/lab/calls/floor_ab.sh llama-1b "default combine-kernel" 585  # sourced: it keeps $R and the budget
