#!/bin/bash
# Device call 4 (the machine of call C, still warm): Llama-70B TP=2 in step-graph mode with the one-shot all-reduce.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=/tmp/site SYNCSCOPE_CACHE=/tmp/cache
timeout -s INT -k 10 290 python3 -m core.bench --tp 2 --cache static --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --no-check --model synthetic:llama-70b --compile step-graph --trials 2 --json $OUT/tp2-llama-70b-step-graph-symm.json
