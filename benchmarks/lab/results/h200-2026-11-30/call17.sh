#!/bin/bash
# Device call 17 (nvidia-h200-x2): Llama-70B TP=2 step-graph with safe PDL, decode attention "triton" then "reduce".
source benchmarks/lab/device_setup.sh
export SYNCSCOPE_PDL=safe
SYNCSCOPE_DECODE_ATTENTION=triton run v22-70b-triton-safe 270 $B --model synthetic:llama-70b --compile step-graph --trials 3
SYNCSCOPE_DECODE_ATTENTION=reduce run v23-70b-reduce-safe $(left 585) $B --model synthetic:llama-70b --compile step-graph --trials 3
cd $R && tar czf $OUT/res.tgz . ; ls -la $OUT
