#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43, the second of three (about 9 minutes):
# the winners of floor_candidates_call.sh joined (LABEL: floor_ab.sh's labels joined with "+"), against the default,
# at both shapes, fresh step-graph compiles one process at a time from empty caches; at Llama-1B also with the
# pipelined loop's copies on a second stream on top (streams-2). Llama-8B's joined choice twice, for the two
# fresh compiles within 2%. With swiglu-gate-up in LABEL, the gemv table's swiglu and down entries are timed first as
# the step runs them (commit gemv_configs.json if it is kept).
#   bash benchmarks/lab/calls/floor_combined_call.sh LABEL      e.g. kernel-pdl-wait+swiglu-gate-up+attention-prefetch
LABEL=${1:?the joined label}
export CALL_BUDGET_S=575
source benchmarks/lab/device_setup.sh
if [[ $LABEL == *swiglu-gate-up* ]]; then
    python3 benchmarks/gemv_sweep.py --timing graph --parts swiglu down --shapes llama-1b llama-8b \
        --out $R/swiglu-sweep.json --table core/kernels/gemv_configs.json --budget-s 70 2>&1 | grep -v "^W1" \
        | tee $R/swiglu-sweep.log | cut -c1-160
    cp core/kernels/gemv_configs.json $R/swiglu-sweep.json $OUT/
fi
source benchmarks/lab/calls/floor_ab.sh llama-1b "default $LABEL $LABEL+streams-2" 575
mkdir -p /tmp/keep && cp $OUT/* /tmp/keep/
source benchmarks/lab/calls/floor_ab.sh llama-8b "default $LABEL $LABEL" 575
cp /tmp/keep/* $OUT/
for f in $R/sg-*.json.gz; do echo "$(basename $f .json.gz) $(rate $(basename $f .json.gz))"; done | tee $OUT/rates.txt
