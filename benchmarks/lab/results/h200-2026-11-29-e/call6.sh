#!/bin/bash
# Device call 6 (nvidia-h200-x2): TP=2 step-graph with the model prepared for decode (fused qkv/gate_up, GQA attention
# reading the cache in place, compiled argmax): Llama-8B with a profile, then Llama-70B.
set -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$(date +%s); left() { echo $(( ${1:-575} - ($(date +%s) - START) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whlmin/*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/cache /tmp/res && tar xzf .carry/tokenizer.tgz -C /tmp/cache && export SYNCSCOPE_CACHE=/tmp/cache
R=/tmp/res
B="python3 -m core.bench --tp 2 --cache static --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --no-check"
run() { local name=$1 budget=$2; shift 2; echo "=== $name ($(left) s left)"; timeout -s INT -k 15 $budget "$@" --json $R/$name.json 2>&1 | grep -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|DEBUG\|USDT\|enable_symm_mem" > $R/$name.log; local rc=$?; tail -32 $R/$name.log; echo "rc=$rc after $(( $(date +%s) - START )) s"; pkill -9 -f "core.bench"; sleep 1; grep -q "^wrote" $R/$name.log; }
run v3-8b-prepared 200 $B --model synthetic:llama-8b --trials 5 --profile $R/v3-8b-prepared || \
  TRANSFORMERS_SDPA_FORCE_GQA=1 run v3b-8b-hf-modules-gqa $(left 330) $B --model synthetic:llama-8b --trials 3 --hf-modules
run v4-70b-prepared $(left) $B --model synthetic:llama-70b --trials 3
cd $R && tar czf $OUT/res.tgz --exclude='*trace.json.gz' . && (ls */*trace.json.gz && tar cf $OUT/traces.tar */*trace.json.gz); ls -la $OUT
