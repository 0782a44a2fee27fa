#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43, after gemv_call1.sh: does the product
# kernel with coordinate-descent tuning off make two fresh Llama-8B compiles agree? (With every product by the kernel,
# coordinate descent only tunes the small norm and rotary kernels, and in gemv_call1.sh it mis-tuned them in one
# compile.) Three fresh step-graph compiles, one process at a time: triton-cd-off, the default, triton-cd-off.
#   bash benchmarks/lab/calls/gemv_call2.sh [SHAPE] [LABELS]
export CALL_BUDGET_S=540
source benchmarks/lab/device_setup.sh
source benchmarks/lab/calls/floor_ab.sh "${1:-llama-8b}" "${2:-triton-cd-off default triton-cd-off}" 540
