#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz and .peers), issue 43: fresh step-graph compiles of
# one shape, one process at a time, each from empty inductor and Triton caches: the default against inductor's
# coordinate-descent tuning off (then a batch-1 matrix product stays a matrix product, chosen among cuBLAS and
# inductor's templates by max-autotune, instead of a Triton reduction tuned by coordinate descent).
# Labels: `python3 -m core.tuning --labels` lists them, each with the assignment it stands for: one per value of a
# tuning switch that is not its default (o-proj-inductor is SYNCSCOPE_O_PROJ=inductor, decode-layer-off
# SYNCSCOPE_DECODE_LAYER=off, step-commit-whole SYNCSCOPE_STEP_COMMIT=whole, ...), and default. This script adds
# cd-off (inductor's coordinate-descent tuning off, SYNCSCOPE_INDUCTOR_OPTIONS; then a batch-1 matrix product stays a
# matrix product), cd-all (coordinate descent checking all directions) and streams-2 (--streams 2: the pipelined
# loop's device-to-host copies on a second stream, off the step's). The labels of before that name a kept switch
# still work (OLD_LABELS: library, inductor, triton, triton-cd-off, inductor-products, layer-on, layer-off,
# commit-whole, library-cd-all, inductor-cd-all); those of the switches that lost their A/B (kernel-pdl-wait,
# kernel-pdl-prefetch, swiglu-gate-up, attention-prefetch, product-prefetch, and combine-kernel before them) are
# refused, as any label it does not know: docs/TUNING.md, "Tried and removed". A label may join several with "+".
#   bash benchmarks/lab/calls/floor_ab.sh SHAPE "LABEL LABEL ..." [BUDGET_S]
#   (any order, repeats; e.g. o-proj-inductor+streams-2)
SHAPE=${1:-llama-1b}; LABELS=${2:-"cd-off default"}; export CALL_BUDGET_S=${3:-560}
[ -n "$START" ] || source benchmarks/lab/device_setup.sh
TUNING_LABELS=$(python3 -m core.tuning --labels) || return 2
SWITCH_VARIABLES=$(awk 'NF == 2 {split($2, assigned, "="); print assigned[1]}' <<< "$TUNING_LABELS" | sort -u)
# The labels of before, as today's joined with "+" (library and layer-on set their switch's default)
declare -A OLD_LABELS=([library]=default [layer-on]=default [inductor]=o-proj-inductor
    [triton]=decode-products-triton [inductor-products]=decode-products-inductor [layer-off]=decode-layer-off
    [commit-whole]=step-commit-whole [triton-cd-off]=decode-products-triton+cd-off [library-cd-all]=cd-all
    [inductor-cd-all]=o-proj-inductor+cd-all)
SG="python3 -m core.bench --model synthetic:$SHAPE --cache static --compile step-graph --prompt-tokens 32 \
--max-new-tokens 256 --ignore-eos --trials 5"
n=0
for label in $LABELS; do
    n=$((n + 1)); export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$SHAPE-$label-$n TRITON_CACHE_DIR=/tmp/triton-$SHAPE-$label-$n
    unset SYNCSCOPE_INDUCTOR_OPTIONS $SWITCH_VARIABLES
    flags="" parts=""
    for part in ${label//+/ }; do parts+=" ${OLD_LABELS[$part]:-$part}"; done
    for part in ${parts//+/ }; do case $part in
        default) ;;
        cd-off) export SYNCSCOPE_INDUCTOR_OPTIONS='{"coordinate_descent_tuning": false}' ;;
        cd-all) export SYNCSCOPE_INDUCTOR_OPTIONS='{"coordinate_descent_check_all_directions": true}' ;;
        streams-2) flags="--streams 2" ;;
        *) assignment=$(awk -v label="$part" '$1 == label && NF == 2 {print $2; found = 1} END {exit !found}' \
               <<< "$TUNING_LABELS") \
               || { echo "floor_ab.sh: no label $part (in $label); it would have run as the default" >&2; return 2; }
           export "$assignment" ;;
    esac; done
    [ "$(left)" -gt 60 ] && run sg-$SHAPE-$label-$n $(left) $SG $flags
    grep -h "step on the device\|compile:" $R/sg-$SHAPE-$label-$n.log | cut -c1-300
done
for f in $R/sg-*.json; do python3 -c "
import json; r=json.load(open('$f')); k=r['kernel_measurement']['pipelined']
print('$f'.split('/')[-1], round(r['summary']['pipelined']['decode_tokens_per_s'], 1), 'top kernels:')
[print('   ', round(t['ms_per_step']*1000, 1), 'us', t['calls_per_step'], t['name'][:110]) for t in k.get('top_kernels', [])[:8]]
"; done
cat $R/*.log > $OUT/ab-$SHAPE-logs.txt; gzip -f $R/*.json; tar czf $OUT/ab-$SHAPE.tgz -C $R .; ls -la $OUT
