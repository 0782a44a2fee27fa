#!/bin/bash
# Device call (nvidia-h200-x2; carry .whlmin and .carry), issue 22, after the fused all-reduce became the TP default:
# the CUDA tests that run tensor parallelism (the fused kernel's test, the engine's two-GPU tests: the CLI at TP=2
# against one GPU, the dashboard's TP=2 engine in step-graph mode with a rank killed), then Llama-8B step-graph on
# one GPU alone and at TP=2 through benchmarks/headline.py, so the ratio is of one machine and one call.
# (The one-GPU CUDA tests ran whole in an earlier call; no one-GPU code changed since.)
# Comes back: tp-call.tgz (test log, headline reports, logs, profiles, tables.md) and tp-call.log.
source benchmarks/lab/device_setup.sh
H=/tmp/headline; rm -rf $H; mkdir -p $H && cp $R/smi.csv $H/smi.csv
exec > >(tee $R/tp-call.log) 2>&1
(while sleep 20; do tar czf $OUT/tp-call.tgz -C $R . -C $H . 2>/dev/null; done) &
timeout -s INT -k 20 $(left 200) python3 -m pytest -v -p no:cacheprovider -rfEs --durations=10 \
    tests/test_cuda_tp_fusion.py tests/test_cuda_engine.py -k "fused_kernel or two_gpus or one_engine_per_gpu" \
    -m "cuda and not cuda_long" 2>&1 | grep -v "^DEBUG\|^E1\|^W1" | tail -25 | cut -c1-300 | tee $R/tp-tests.log
echo "tp tests rc=${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"; pkill -9 -f "multiprocessing|core.bench"; sleep 1
timeout -k 20 $(left 585) python3 benchmarks/headline.py --part one-gpu --gpus 0 --only llama-8b-step-graph --out $H \
    --deadline-s $(left 560) 2>&1 | tail -20
timeout -k 20 $(left 585) python3 benchmarks/headline.py --part two-gpu --only llama-8b-tp2-step-graph --out $H \
    --deadline-s $(left 570) 2>&1 | tail -40
rm -f $H/profile-*/*trace.json.gz
kill %1 2>/dev/null; tar czf $OUT/tp-call.tgz -C $R . -C $H . && ls -la $OUT
