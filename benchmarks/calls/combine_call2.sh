#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43: fresh Llama-8B step-graph compiles, one
# process at a time from empty caches: the default (fused layers, attention's splits combined by its last program)
# twice, against combine-kernel (a second kernel combines); then Llama-1B's default again (a second fresh compile).
# Comes back: the runs (ab-llama-8b.tgz, ab-llama-1b.tgz).
source benchmarks/calls/floor_ab.sh llama-8b "default combine-kernel default" 585  # sourced: it keeps $R and the budget
source benchmarks/calls/floor_ab.sh llama-1b "default" 585
