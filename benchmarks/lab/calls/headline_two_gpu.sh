#!/bin/bash
# Device call (nvidia-h200-x2; carry .whlmin and .carry), issue 22: the README's two-GPU table (--tp 2, Llama-8B and
# Llama-70B shapes, step-graph) with today's code and defaults, through the CLI (benchmarks/headline.py --part
# two-gpu): about 7 minutes by earlier calls (70B: ~25 s to draw its shards, 130-160 s of compile, 3 trials).
# Right after headline_one_gpu.sh on the same warm machine, /tmp/headline still holds the one-GPU reports and the
# tables come out whole, with the TP=2 / one-GPU ratio of one machine; on a fresh machine they hold this part alone.
# Comes back: headline-two-gpu.tgz (this folder, both parts when warm) and headline-two-gpu.log.
# Locally: tar xzf headline-two-gpu.tgz -C benchmarks/lab/results/headline-DATE, then
#   python benchmarks/headline.py --tables-from benchmarks/lab/results/headline-DATE --update-docs
source benchmarks/lab/device_setup.sh
H=/tmp/headline; mkdir -p $H && cp $R/smi.csv $H/two-gpu-smi.csv
ls $H/manifest-one-gpu.json >/dev/null 2>&1 || echo "note: no one-GPU part in $H (a fresh machine): this part alone"
timeout -k 20 $(left 585) python3 benchmarks/headline.py --part two-gpu --out $H --deadline-s $(left 565) \
    2>&1 | tee $H/two-gpu.log
echo "headline.py rc=${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"
cp $H/two-gpu.log $OUT/headline-two-gpu.log; tar czf $OUT/headline-two-gpu.tgz -C $H . && ls -la $OUT
