#!/bin/bash
# Device call (nvidia-h200; carry .whlmin, .carry/tokenizer.tgz), issue 43: fresh step-graph compiles, one process at a
# time, each from empty caches: the output projection by cuBLAS (the default) against inductor's fused reduction with
# coordinate descent checking all directions (a wider search, so that it cannot settle on the 6x slower configuration).
#   bash benchmarks/lab/calls/o_proj_stability.sh SHAPE "LABEL ..."   (labels as in floor_ab.sh)
bash benchmarks/lab/calls/floor_ab.sh "$1" "$2" 565
