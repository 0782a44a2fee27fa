#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43, the first of three (about 9.5 minutes):
# every candidate for the Llama-1B step's fixed cost, each against the default in fresh step-graph compiles, one
# process at a time from empty caches. It replaces the PDL and SwiGLU call written before it, which never ran (no
# device was lent in its session).
# 1. Llama-1B: default (with the kernels' reads moved first, 8725825: compare its kernels' times with
#    h200-2026-12-04's), kernel-pdl-wait, kernel-pdl-prefetch (PDL with the alignment fix, 95dbbde), swiglu-gate-up,
#    attention-prefetch, product-prefetch, commit-whole (floor_ab.sh starts no run with under 60 s left);
# 2. with what time is left, the CUDA tests of what is new: the fused layer (its tokens, with the reads moved),
#    PDL's tokens equal off's, swiglu-gate-up's fp32 tokens equal eager's and bf16 repeats, the prefetches change no
#    bit, the whole commit gives eager's tokens and stops at EOS, the attention kernel against SDPA. Last, so that a
#    slow test cannot take the A/B's time; a run whose tokens were wrong shows in its report as well.
# Then floor_combined_call.sh joins the winners (and times the gemv table's swiglu entries if swiglu-gate-up is one),
# and peers_both_call.sh measures the new default beside the peers.
#   bash benchmarks/lab/calls/floor_candidates_call.sh
export CALL_BUDGET_S=575
source benchmarks/lab/device_setup.sh
source benchmarks/lab/calls/floor_ab.sh llama-1b "default kernel-pdl-wait kernel-pdl-prefetch swiglu-gate-up \
attention-prefetch product-prefetch commit-whole" 575  # sourced: keeps $R
for f in $R/sg-*.json.gz; do echo "$(basename $f .json.gz) $(rate $(basename $f .json.gz))"; done | tee $OUT/rates.txt
[ "$(left)" -gt 40 ] && timeout -k 10 $(( $(left) - 10 )) python3 -m pytest -q -p no:cacheprovider -m cuda -rfEs tests/test_cuda_layer.py \
    tests/test_cuda_kernel_pdl.py tests/test_cuda.py tests/test_triton_attention.py \
    -k "layer or pdl or whole_commit or compiled_op_matches" 2>&1 | grep -v "^DEBUG\|^W1" | tail -15 > $R/tests.log
tail -4 $R/tests.log; cp $R/tests.log $OUT/; echo "tests done after $(( $(date +%s) - START )) s"
