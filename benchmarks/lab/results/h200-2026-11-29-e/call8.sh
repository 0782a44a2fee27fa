#!/bin/bash
# Device call 8 (nvidia-h200-x2, right after 7): the CUDA tests, the two-GPU dashboard and engine tests included.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/cache && tar xzf .carry/tokenizer.tgz -C /tmp/cache && export SYNCSCOPE_CACHE=/tmp/cache
timeout -k 10 540 python3 -m pytest -q -m cuda tests/test_cuda.py tests/test_cuda_engine.py tests/test_gpu_monitor.py -p no:cacheprovider 2>&1 | tee $OUT/cuda-tests.log | tail -40
