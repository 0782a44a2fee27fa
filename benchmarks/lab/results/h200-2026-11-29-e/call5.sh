#!/bin/bash
# Device call 5 (nvidia-h200-x2): where the TP=2 Llama-8B step-graph step goes (profile), and two inductor/SDPA knobs.
set -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$(date +%s); left() { echo $(( ${1:-570} - ($(date +%s) - START) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whlmin/*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/cache /tmp/res && tar xzf .carry/tokenizer.tgz -C /tmp/cache && export SYNCSCOPE_CACHE=/tmp/cache
R=/tmp/res
B="python3 -m core.bench --model synthetic:llama-8b --tp 2 --cache static --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --trials 3"
run() { local name=$1 budget=$2; shift 2; echo "=== $name ($(left) s left)"; timeout -s INT -k 15 $budget "$@" --json $R/$name.json --profile $R/$name 2>&1 | grep -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|DEBUG\|USDT" > $R/$name.log; local rc=$?; tail -45 $R/$name.log; echo "rc=$rc after $(( $(date +%s) - START )) s"; pkill -9 -f "core.bench"; sleep 1; }
run v0-baseline 185 $B
SYNCSCOPE_INDUCTOR_OPTIONS='{"combo_kernels": true}' run v1-combo $(left 380) $B
TRANSFORMERS_SDPA_FORCE_GQA=1 run v2-force-gqa $(left) $B
nvidia-smi topo -m > $R/topo.txt 2>&1
cd $R && tar czf $OUT/res.tgz --exclude='*trace.json.gz' . && tar cf $OUT/traces.tar $(ls */*trace.json.gz | head -3) ; ls -la $OUT
