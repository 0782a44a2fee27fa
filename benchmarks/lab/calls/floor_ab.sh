#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz and .peers), issue 43: fresh step-graph compiles of
# one shape, one process at a time, each from empty inductor and Triton caches: the default against inductor's
# coordinate-descent tuning off (then a batch-1 matrix product stays a matrix product, chosen among cuBLAS and
# inductor's templates by max-autotune, instead of a Triton reduction tuned by coordinate descent).
# Labels library / inductor pick SYNCSCOPE_O_PROJ; a -cd-all suffix adds coordinate descent checking all directions;
# triton / inductor-products pick SYNCSCOPE_DECODE_PRODUCTS (every batch-1 product by core.kernels.triton_gemv), and
# triton-cd-off adds coordinate-descent tuning off (then no product is left for it, and the norms keep inductor's rule);
# layer-off is SYNCSCOPE_DECODE_LAYER=off (each layer's step in twelve kernels, not core.kernels.decode_layer's six),
# layer-on is SYNCSCOPE_DECODE_LAYER=on (the default since the parts sweep of h200-2026-12-03b; auto, before it, fused
# only models up to hidden size 2048). combine-kernel was SYNCSCOPE_DECODE_COMBINE=kernel (h200-2026-12-03b/call2: the
# fused layer's attention combining its splits in a second kernel against its last program; measured and removed).
# kernel-pdl-wait and kernel-pdl-prefetch are SYNCSCOPE_KERNEL_PDL=wait / prefetch (the project's own Triton kernels
# launched with programmatic dependent launch; core.kernels.pdl). swiglu-gate-up is SYNCSCOPE_DECODE_SWIGLU=gate-up
# (the fused layer's gate/up kernel writes silu(gate) * up). attention-prefetch is SYNCSCOPE_ATTENTION_PREFETCH=on (the
# fused layer's attention asks L2 for the output projection's weight). product-prefetch is
# SYNCSCOPE_PRODUCT_PREFETCH=on (each product asks L2 for the start of the next one's weight). commit-whole is
# SYNCSCOPE_STEP_COMMIT=whole (the greedy step's token choice and bookkeeping in one compile). streams-2 adds
# --streams 2 (the pipelined loop's device-to-host copies on a second stream, off the step's). A label may join several
# with "+".
#   bash benchmarks/lab/calls/floor_ab.sh SHAPE "LABEL LABEL ..." [BUDGET_S]
#   labels: default, cd-off, library, inductor, library-cd-all, inductor-cd-all, triton, triton-cd-off,
#   inductor-products, layer-off, layer-on, kernel-pdl-wait, kernel-pdl-prefetch, swiglu-gate-up, attention-prefetch,
#   product-prefetch, commit-whole, streams-2 (any order, repeats;
#   e.g. kernel-pdl-wait+swiglu-gate-up)
SHAPE=${1:-llama-1b}; LABELS=${2:-"cd-off default"}; export CALL_BUDGET_S=${3:-560}
[ -n "$START" ] || source benchmarks/lab/device_setup.sh
SG="python3 -m core.bench --model synthetic:$SHAPE --cache static --compile step-graph --prompt-tokens 32 \
--max-new-tokens 256 --ignore-eos --trials 5"
n=0
for label in $LABELS; do
    n=$((n + 1)); export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$SHAPE-$label-$n TRITON_CACHE_DIR=/tmp/triton-$SHAPE-$label-$n
    unset SYNCSCOPE_INDUCTOR_OPTIONS SYNCSCOPE_O_PROJ SYNCSCOPE_DECODE_PRODUCTS SYNCSCOPE_DECODE_LAYER \
        SYNCSCOPE_KERNEL_PDL SYNCSCOPE_DECODE_SWIGLU SYNCSCOPE_ATTENTION_PREFETCH \
        SYNCSCOPE_PRODUCT_PREFETCH SYNCSCOPE_STEP_COMMIT
    flags=""
    for part in ${label//+/ }; do case $part in
        cd-off) export SYNCSCOPE_INDUCTOR_OPTIONS='{"coordinate_descent_tuning": false}' ;;
        library|inductor) export SYNCSCOPE_O_PROJ=$part ;;
        triton) export SYNCSCOPE_DECODE_PRODUCTS=triton ;;
        triton-cd-off) export SYNCSCOPE_DECODE_PRODUCTS=triton \
            SYNCSCOPE_INDUCTOR_OPTIONS='{"coordinate_descent_tuning": false}' ;;
        inductor-products) export SYNCSCOPE_DECODE_PRODUCTS=inductor ;;
        layer-off) export SYNCSCOPE_DECODE_LAYER=off ;;
        layer-on) export SYNCSCOPE_DECODE_LAYER=on ;;
        kernel-pdl-wait|kernel-pdl-prefetch) export SYNCSCOPE_KERNEL_PDL=${part#kernel-pdl-} ;;
        swiglu-gate-up) export SYNCSCOPE_DECODE_SWIGLU=gate-up ;;
        attention-prefetch) export SYNCSCOPE_ATTENTION_PREFETCH=on ;;
        product-prefetch) export SYNCSCOPE_PRODUCT_PREFETCH=on ;;
        commit-whole) export SYNCSCOPE_STEP_COMMIT=whole ;;
        streams-2) flags="--streams 2" ;;
        library-cd-all|inductor-cd-all) export SYNCSCOPE_O_PROJ=${part%-cd-all} \
            SYNCSCOPE_INDUCTOR_OPTIONS='{"coordinate_descent_check_all_directions": true}' ;;
        default) ;;
        *) echo "floor_ab.sh: no label $part (in $label); it would have run as the default" >&2; return 2 ;;
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
