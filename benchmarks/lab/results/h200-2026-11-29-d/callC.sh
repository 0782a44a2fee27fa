#!/bin/bash
# Device call C (nvidia-h200-x2, fresh): logit traces of repeated runs (why bf16 trials differ), then TP with the
# one-shot symmetric-memory all-reduce: Llama-8B step-graph, Llama-70B reduce-overhead.
set -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$(date +%s); left() { echo $(( ${1:-555} - ($(date +%s) - START) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whlmin/*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/cache && tar xzf .carry/tokenizer.tgz -C /tmp/cache && export SYNCSCOPE_CACHE=/tmp/cache
T="python3 benchmarks/determinism.py trace --model synthetic:smollm2-135m --modes off step-graph --runs 5 --max-new-tokens 300"
(CUDA_VISIBLE_DEVICES=0 timeout -k 5 $(left 175) $T --interleave-hf --variants default --deadline-s 90 --label default-hf-between --out $OUT/trace-default.json 2>&1 | grep -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|DEBUG" > $OUT/trace.log) &
(CUBLAS_WORKSPACE_CONFIG=:4096:8 TORCHINDUCTOR_DETERMINISTIC=1 CUDA_VISIBLE_DEVICES=1 timeout -k 5 $(left 175) $T --variants deterministic --deadline-s 90 --label deterministic-env --out $OUT/trace-det.json 2>&1 | grep -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|DEBUG" > $OUT/trace-det.log) &
wait
cat $OUT/trace.log $OUT/trace-det.log | grep -v "^\s*$" | tail -30
B="python3 -m core.bench --tp 2 --cache static --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --no-check"
run() { local name=$1 budget=$2; shift 2; echo "=== $name ($(left) s left)"; timeout -s INT -k 15 $budget "$@" --json $OUT/$name.json 2>&1 | grep -v -i warn | tee -a $OUT/tp.log; local rc=$?; echo "rc=$rc after $(( $(date +%s) - START )) s" | tee -a $OUT/tp.log; pkill -9 -f "core.bench"; sleep 1; return $rc; }
run tp2-llama-8b-step-graph-symm $(left 330) $B --model synthetic:llama-8b --compile step-graph --trials 5 || export SYNCSCOPE_TP_ALL_REDUCE=nccl
run tp2-llama-70b-reduce-overhead-symm $(left) $B --model synthetic:llama-70b --compile reduce-overhead --trials 3
