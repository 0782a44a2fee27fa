#!/bin/bash
# Device call 7 (nvidia-h200-x2): TP=2 with blockwise argmax; decode attention as SDPA (default) or as reductions;
# the faster one then for Llama-8B reduce-overhead and Llama-70B step-graph.
set -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$(date +%s); left() { echo $(( ${1:-580} - ($(date +%s) - START) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/cache /tmp/res && tar xzf .carry/tokenizer.tgz -C /tmp/cache && export SYNCSCOPE_CACHE=/tmp/cache
R=/tmp/res
B="python3 -m core.bench --tp 2 --cache static --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --no-check"
run() { local name=$1 budget=$2; shift 2; echo "=== $name ($(left) s left)"; timeout -s INT -k 15 $budget "$@" --json $R/$name.json 2>&1 | grep -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|DEBUG\|USDT\|enable_symm_mem" > $R/$name.log; local rc=$?; head -6 $R/$name.log | cut -c1-200; grep -A12 "^profile of" $R/$name.log; echo "rc=$rc after $(( $(date +%s) - START )) s"; pkill -9 -f "core.bench"; sleep 1; }
rate() { python3 -c "import json,sys; print(json.load(open('$R/$1.json'))['summary']['pipelined']['decode_tokens_per_s'])" 2>/dev/null || echo 0; }
run v5-8b-sg-sdpa 150 $B --model synthetic:llama-8b --compile step-graph --trials 5
SYNCSCOPE_DECODE_ATTENTION=reduce run v6-8b-sg-reduce 160 $B --model synthetic:llama-8b --compile step-graph --trials 5 --profile $R/v6
A=$(rate v5-8b-sg-sdpa); Bq=$(rate v6-8b-sg-reduce); echo "sdpa $A reduce $Bq"
if python3 -c "import sys; sys.exit(0 if $Bq > $A else 1)"; then export SYNCSCOPE_DECODE_ATTENTION=reduce; fi
echo "decode attention for the rest: ${SYNCSCOPE_DECODE_ATTENTION:-sdpa}"
run v7-8b-ro $(left 330) $B --model synthetic:llama-8b --compile reduce-overhead --trials 5
run v8-70b-sg $(left) $B --model synthetic:llama-70b --compile step-graph --trials 3
cd $R && tar czf $OUT/res.tgz --exclude='*trace.json.gz' . ; ls -la $OUT
