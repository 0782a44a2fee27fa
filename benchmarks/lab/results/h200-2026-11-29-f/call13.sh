#!/bin/bash
# Device call 13 (nvidia-h200-x2, the machine of calls 11-12, warm): Llama-8B with inductor's own PDL placement,
# to compare with call 11's safe placement and no PDL on the same machine.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=/tmp/site SYNCSCOPE_CACHE=/tmp/cache SYNCSCOPE_PDL=inductor
timeout -s INT -k 10 185 python3 -m core.bench --tp 2 --cache static --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --no-check --model synthetic:llama-8b --compile step-graph --trials 5 --json $OUT/v17-8b-pdl-inductor.json 2>&1 | grep -v -i "warn\|autotune\|DEBUG\|USDT\|enable_symm_mem" | tail -12 | tee $OUT/v17-8b-pdl-inductor.log; pkill -9 -f core.bench
