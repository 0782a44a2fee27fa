#!/bin/bash
# Device call (nvidia-h200-x2; carry .whlmin and .carry), issue 22: the push (Lamport-style) fused all-reduce kernel
# against the flag kernel of the previous session. First microseconds per call of every all-reduce kind in a CUDA
# graph (benchmarks/tp_all_reduce_latency.py; a hung kernel costs only its timeout), then the fused kernel's two-GPU
# test for push and asm, then Llama-8B TP=2 step-graph with each (3 trials each, push profiled), on this one machine.
# Comes back: tp-push.tgz (reports, logs, profile, latency.json) and tp-push.log.
source benchmarks/lab/device_setup.sh
exec > >(tee $R/tp-push.log) 2>&1
timeout -k 5 100 python3 benchmarks/tp_all_reduce_latency.py --json $R/latency.json 2>&1 | grep -v "^DEBUG\|^W1\|^E1" | tail -12
echo "latency rc=${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"; pkill -9 -f "multiprocessing"; sleep 1
T=tests/test_cuda_tp_fusion.py::test_the_fused_kernel_sums_adds_and_normalises_like_pytorch_eagerly_and_in_graph_replays
timeout -k 5 120 python3 -m pytest -q -p no:cacheprovider -rfE "$T[push]" "$T[asm]" 2>&1 | tail -6 | cut -c1-400
echo "kernel tests rc=${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"; pkill -9 -f "multiprocessing"; sleep 1
B8="$B --model synthetic:llama-8b --compile step-graph --trials 3"
run push-8b $(left 300) $B8 --profile $R/profile-push-8b
SYNCSCOPE_TP_BARRIER=asm run asm-8b $(left 560) $B8
echo "8B pipelined tok/s: push $(rate push-8b), asm $(rate asm-8b)"
rm -f $R/profile-*/*trace.json.gz
cp $R/tp-push.log $OUT/; tar czf $OUT/tp-push.tgz -C $R . && ls -la $OUT
