#!/bin/bash
# Device call (nvidia-h200-x2; carry .whlmin and .carry), issues 23 and 22: every family of the CPU support matrix
# on GPU 0 (benchmarks/families_gpu.py, fp32 correctness, then the two 7B shapes' speed; deadline 270 s), then the
# README's one-GPU headline tables (benchmarks/headline.py --part one-gpu, two at a time on both GPUs) in what is left.
# Comes back: families.json/.md, families.log, headline-one-gpu.tgz and headline-one-gpu.log.
source benchmarks/lab/device_setup.sh
F=/tmp/families; mkdir -p $F
CUDA_VISIBLE_DEVICES=0 timeout -k 20 300 python3 benchmarks/families_gpu.py $F --deadline-s 270 2>&1 \
    | grep -v -i "warn" > $F/families.log
echo "families_gpu rc=${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"; tail -5 $F/families.log
cat $F/families.md 2>/dev/null | head -60
cp $F/families.json $F/families.md $F/families.log $OUT/ 2>/dev/null
H=/tmp/headline; mkdir -p $H && cp $R/smi.csv $H/one-gpu-smi.csv
timeout -k 20 $(left 585) python3 benchmarks/headline.py --part one-gpu --gpus 0,1 --out $H --deadline-s $(left 565) \
    2>&1 | tee $H/one-gpu.log | tail -30
echo "headline.py rc=${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"
cp $H/one-gpu.log $OUT/headline-one-gpu.log; tar czf $OUT/headline-one-gpu.tgz -C $H . && ls -la $OUT
