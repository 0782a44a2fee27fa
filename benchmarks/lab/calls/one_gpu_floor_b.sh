#!/bin/bash
# Device call (nvidia-h200; carry .whlmin and .carry), issue 34, second call: (1) two fresh compiles of Llama-8B
# step-graph (default settings, the appending kernel off), one process at a time, then a third run on the first
# one's caches (the second warm-up); (2) the appending kernel again, its split combine now one round of loads for all
# the KV head's query heads and its cos/sin passed whole, against off, for 1B and 8B, each from empty caches.
source benchmarks/lab/device_setup.sh
SG="python3 -m core.bench --cache static --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos \
--no-check --trials 3"
timeout -k 5 100 python3 -m pytest -q -p no:cacheprovider -m cuda --tb=line -rf -x tests/test_triton_attention.py \
    tests/test_cuda.py -k "appending or step_graph_equals or compiled_op" 2>&1 | tail -15 | tee $R/cuda-tests.log
fresh() { export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$1 TRITON_CACHE_DIR=/tmp/triton-$1; }
export SYNCSCOPE_APPEND_IN_ATTENTION=off
fresh 8b-a; run sg-8b-a 150 $SG --model synthetic:llama-8b
fresh 8b-b; run sg-8b-b 150 $SG --model synthetic:llama-8b
fresh 8b-a; run sg-8b-a-second 100 $SG --model synthetic:llama-8b
fresh 1b-off; run sg-1b-off 80 $SG --model synthetic:llama-1b
export SYNCSCOPE_APPEND_IN_ATTENTION=on
fresh 1b-on; run sg-1b-on 90 $SG --model synthetic:llama-1b --profile $R/profile-1b-on
fresh 8b-on; run sg-8b-on $(left 570) $SG --model synthetic:llama-8b --profile $R/profile-8b-on
grep -h "compile:" $R/*.log
cat $R/profile-*/profile-rank0.txt > $R/profiles.txt 2>/dev/null; rm -rf $R/profile-*
cat $R/*.log > $OUT/logs.txt; gzip -f $R/*.json; cp $R/*.json.gz $R/profiles.txt $R/smi.csv $OUT/; ls $OUT
