#!/bin/bash
# Device call 10 (nvidia-h200-x2, right after 9): Llama-70B TP=2 step-graph, default vs PDL, side by side.
set -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$(date +%s); left() { echo $(( ${1:-570} - ($(date +%s) - START) )); }
[ -d /tmp/site/transformers ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whlmin/*.whl || exit 1
export PYTHONPATH=/tmp/site
rm -rf /tmp/res; mkdir -p /tmp/cache /tmp/res && tar xzf .carry/tokenizer.tgz -C /tmp/cache && export SYNCSCOPE_CACHE=/tmp/cache
[ -d /tmp/site ] || true; nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,clocks.sm,clocks.mem,power.limit,temperature.gpu,pstate --format=csv > /tmp/res/smi.csv; cat /tmp/res/smi.csv
R=/tmp/res
B="python3 -m core.bench --tp 2 --cache static --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --no-check"
run() { local name=$1 budget=$2; shift 2; echo "=== $name ($(left) s left)"; timeout -s INT -k 15 $budget "$@" --json $R/$name.json 2>&1 | grep -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|DEBUG\|USDT\|enable_symm_mem" > $R/$name.log; local rc=$?; grep -i "tok/s\|pipelined\|naive\|no-check\|identical\|error" $R/$name.log | head -12 | cut -c1-200; grep -A12 "^profile of" $R/$name.log; echo "rc=$rc after $(( $(date +%s) - START )) s"; pkill -9 -f "core.bench"; sleep 1; }
rate() { python3 -c "import json,sys; print(json.load(open('$R/$1.json'))['summary']['pipelined']['decode_tokens_per_s'])" 2>/dev/null || echo 0; }
PDL='{"triton.enable_pdl": true}'
run v12-70b-reduce 250 $B --model synthetic:llama-70b --compile step-graph --trials 3
SYNCSCOPE_INDUCTOR_OPTIONS="$PDL" run v13-70b-reduce-pdl $(left) $B --model synthetic:llama-70b --compile step-graph --trials 3
cd $R && tar czf $OUT/res.tgz . ; ls -la $OUT
