#!/bin/bash
# Device call 9 (nvidia-h200-x2): Llama-8B TP=2 step-graph, side by side on one machine: the default ("reduce"
# attention), the same with inductor's programmatic dependent launch (PDL), and the "split" attention; then the
# 70B shape with PDL if it won at 8B.
set -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$(date +%s); left() { echo $(( ${1:-570} - ($(date +%s) - START) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whlmin/*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/cache /tmp/res && tar xzf .carry/tokenizer.tgz -C /tmp/cache && export SYNCSCOPE_CACHE=/tmp/cache
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,clocks.sm,clocks.mem,power.limit,temperature.gpu,pstate --format=csv > /tmp/res/smi.csv; cat /tmp/res/smi.csv
R=/tmp/res
B="python3 -m core.bench --tp 2 --cache static --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --no-check"
run() { local name=$1 budget=$2; shift 2; echo "=== $name ($(left) s left)"; timeout -s INT -k 15 $budget "$@" --json $R/$name.json 2>&1 | grep -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|DEBUG\|USDT\|enable_symm_mem" > $R/$name.log; local rc=$?; grep -i "tok/s\|pipelined\|naive\|no-check\|identical\|error" $R/$name.log | head -12 | cut -c1-200; grep -A12 "^profile of" $R/$name.log; echo "rc=$rc after $(( $(date +%s) - START )) s"; pkill -9 -f "core.bench"; sleep 1; }
rate() { python3 -c "import json,sys; print(json.load(open('$R/$1.json'))['summary']['pipelined']['decode_tokens_per_s'])" 2>/dev/null || echo 0; }
PDL='{"triton.enable_pdl": true}'
run v9-8b-reduce 170 $B --model synthetic:llama-8b --compile step-graph --trials 5
SYNCSCOPE_INDUCTOR_OPTIONS="$PDL" run v10-8b-reduce-pdl 190 $B --model synthetic:llama-8b --compile step-graph --trials 5 --profile $R/v10
SYNCSCOPE_DECODE_ATTENTION=split run v11-8b-split 170 $B --model synthetic:llama-8b --compile step-graph --trials 5
A=$(rate v9-8b-reduce); P=$(rate v10-8b-reduce-pdl); S=$(rate v11-8b-split); echo "reduce $A reduce+pdl $P split $S"
if [ $(left) -gt 200 ] && python3 -c "import sys; sys.exit(0 if $P > $A else 1)"; then
  SYNCSCOPE_INDUCTOR_OPTIONS="$PDL" run v12-70b-reduce-pdl $(left) $B --model synthetic:llama-70b --compile step-graph --trials 3
fi
cd $R && tar czf $OUT/res.tgz --exclude='*trace.json.gz' . ; cp $R/v10/*rank0*trace* $OUT/ 2>/dev/null; ls -la $OUT
