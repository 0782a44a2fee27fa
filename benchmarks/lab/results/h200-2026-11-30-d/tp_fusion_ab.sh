#!/bin/bash
# Device call (nvidia-h200-x2; carry .whlmin and .carry), issue 22: the fused all-reduce + residual add + RMSNorm
# kernel (core.tp_fusion). First its two-GPU test for each barrier (a hung barrier only costs that test's timeout),
# then Llama-8B TP=2 step-graph with the fused kernel (the default) and with SYNCSCOPE_TP_ALL_REDUCE=one-shot (the
# previous default), both profiled, on this one machine; then Llama-70B TP=2 fused, if the call has time left.
# Comes back: tp-fusion.tgz (reports, logs, profiles) and tp-fusion.log.
source benchmarks/lab/device_setup.sh
exec > >(tee $R/tp-fusion.log) 2>&1
T=tests/test_cuda_tp_fusion.py::test_the_fused_kernel_sums_adds_and_normalises_like_pytorch_eagerly_and_in_graph_replays
for barrier in asm atomic; do
    timeout -k 5 90 python3 -m pytest -q -p no:cacheprovider -rfE "$T[$barrier]" 2>&1 | tail -6 | cut -c1-400
    echo "kernel test $barrier rc=${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"; pkill -9 -f "multiprocessing" ; sleep 1
done
B8="$B --model synthetic:llama-8b --compile step-graph --trials 3"
run fused-8b $(left 330) $B8 --profile $R/profile-fused-8b
SYNCSCOPE_TP_ALL_REDUCE=one-shot run one-shot-8b $(left 480) $B8 --profile $R/profile-one-shot-8b
echo "8B pipelined tok/s: fused $(rate fused-8b), one-shot $(rate one-shot-8b)"
if [ $(left) -gt 230 ]; then
    run fused-70b $(left 585) $B --model synthetic:llama-70b --compile step-graph --trials 3
    echo "70B pipelined tok/s: fused $(rate fused-70b)"
fi
cp $R/tp-fusion.log $OUT/; tar czf $OUT/tp-fusion.tgz -C $R . && ls -la $OUT
