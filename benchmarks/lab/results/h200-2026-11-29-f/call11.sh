#!/bin/bash
# Device call 11 (nvidia-h200-x2): PDL with the wait before every kernel's first access (core.pdl "safe", which was the default when this ran: v14 sets nothing; the default is now "off"): the placement test, then Llama-8B safe vs off side by side, then Llama-70B safe.
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
echo "=== pytest tests/test_pdl.py"; timeout -k 10 90 python3 -m pytest -q -m cuda tests/test_pdl.py -p no:cacheprovider 2>&1 | tail -5 | tee $R/pytest-pdl.log
run v14-8b-pdl-safe 190 $B --model synthetic:llama-8b --compile step-graph --trials 5
SYNCSCOPE_PDL=off run v15-8b-pdl-off 170 $B --model synthetic:llama-8b --compile step-graph --trials 5
run v16-70b-pdl-safe $(left) $B --model synthetic:llama-70b --compile step-graph --trials 3
cd $R && tar czf $OUT/res.tgz . ; ls -la $OUT
