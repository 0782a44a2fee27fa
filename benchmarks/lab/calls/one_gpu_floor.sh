#!/bin/bash
# Device call (nvidia-h200; carry .whlmin and .carry), issue 34: the appending decode attention (rotary, cache write,
# attention and the split combine in one kernel a layer) against transformers' steps, one process at a time, each
# from empty inductor and Triton caches; then the 8B run again on its own caches (the second warm-up).
# First the CUDA tests of the kernel and of step-graph decoding.
source benchmarks/lab/device_setup.sh
SG="python3 -m core.bench --cache static --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos \
--no-check --trials 3"
timeout -k 10 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_triton_attention.py tests/test_cuda.py \
    -k "append or step_graph or fp32 or decode_attention" 2>&1 | tail -25 | tee $R/cuda-tests.log
fresh() { export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$1 TRITON_CACHE_DIR=/tmp/triton-$1; }
for model in 1b; do
    fresh 1b-on; SYNCSCOPE_APPEND_IN_ATTENTION=on run sg-$model-on 120 $SG --model synthetic:llama-$model
    fresh 1b-off; SYNCSCOPE_APPEND_IN_ATTENTION=off run sg-$model-off 120 $SG --model synthetic:llama-$model
done
fresh 8b-on; SYNCSCOPE_APPEND_IN_ATTENTION=on run sg-8b-on 200 $SG --model synthetic:llama-8b --profile $R/profile-8b-on
fresh 8b-off; SYNCSCOPE_APPEND_IN_ATTENTION=off run sg-8b-off $(left 520) $SG --model synthetic:llama-8b
fresh 8b-on; SYNCSCOPE_APPEND_IN_ATTENTION=on run sg-8b-on-second $(left 575) $SG --model synthetic:llama-8b
grep -h "compile:" $R/*.log
cp -r $R/. $OUT/ && gzip -f $OUT/*.json && ls -la $OUT
