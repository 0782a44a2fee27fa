#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz and .peers), issue 43: benchmarks/peers.py greedy at
# both shapes in one call (benchmarks/lab/calls/peers_call.sh): ours step-graph, gpt-fast greedy, transformers generate(),
# each in a process of its own from empty caches; Llama-1B, then Llama-8B.
#   bash benchmarks/lab/calls/peers_both_call.sh
bash benchmarks/lab/calls/peers_call.sh llama-1b ours-step-graph,gpt-fast-greedy,hf-generate 230
mkdir -p /tmp/keep && cp $OUT/* /tmp/keep/
bash benchmarks/lab/calls/peers_call.sh llama-8b ours-step-graph,gpt-fast-greedy,hf-generate 340
cp /tmp/keep/* $OUT/; ls -la $OUT
