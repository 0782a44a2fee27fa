#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz and .peers), issue 43: the peers on Llama-1B
# (benchmarks/lab/calls/peers_call.sh), then two fresh step-graph compiles, coordinate-descent tuning off and the default
# (benchmarks/lab/calls/floor_ab.sh).
bash benchmarks/lab/calls/peers_call.sh llama-1b ours-step-graph,gpt-fast-greedy,hf-generate,ours-reduce-overhead,gpt-fast-sample 330
mkdir -p /tmp/keep && cp $OUT/* /tmp/keep/
bash benchmarks/lab/calls/floor_ab.sh llama-1b "cd-off default" 220
cp /tmp/keep/* $OUT/; ls -la $OUT
