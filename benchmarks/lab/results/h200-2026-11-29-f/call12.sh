#!/bin/bash
# Device call 12 (nvidia-h200-x2, the machine of call 11, warm): the two-GPU dashboard and engine tests, with the
# full wheel set (.whl: gradio and what it needs) carried instead of .whlmin.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -d /tmp/site/gradio ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
mkdir -p /tmp/cache && tar xzf .carry/tokenizer.tgz -C /tmp/cache && export SYNCSCOPE_CACHE=/tmp/cache
timeout -k 10 200 python3 -m pytest -q -m cuda tests/test_cuda_engine.py -k "one_engine_per_gpu or killed_engine" -p no:cacheprovider 2>&1 | tail -25 | tee $OUT/two-gpu-tests.log
