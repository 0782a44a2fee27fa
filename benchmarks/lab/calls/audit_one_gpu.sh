#!/bin/bash
# Device call (nvidia-h200; carry .whlmin and .carry), issue 30: the sync audit and the kernel trial on CUDA.
# 1. The CUDA tests of the audit (tests/test_cuda_audit.py) and of the loops' tokens and syncs (tests/test_cuda.py,
#    the cases the decode mask touches), with their durations.
# 2. synthetic:llama-1b through the CLI, eager with a dynamic cache and reduce-overhead with a static one, both loops,
#    generate() with and without DeferredStopCheck, the sync audit and the kernel trial: the README's eager rows and
#    the audit's sites on a GPU.
# Comes back: cuda-audit.log, eager-1b.{json,log}, ro-1b.{json,log}, smi.csv.
source benchmarks/lab/device_setup.sh
timeout -s INT -k 20 $(left 300) python3 -m pytest -q -m cuda -rfEs --durations=15 -p no:cacheprovider \
    tests/test_cuda_audit.py "tests/test_cuda.py::test_pipelined_loop_does_not_sync_per_step" \
    "tests/test_cuda.py::test_loops_equal_hf_generate_on_cuda" 2>&1 | grep -v "^DEBUG\|^E1\|^W1" > $R/cuda-audit.log
echo "pytest rc=${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"; tail -45 $R/cuda-audit.log | cut -c1-240
ONE="python3 -m core.bench --model synthetic:llama-1b --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --trials 3"
ONE="$ONE --hf --hf-deferred --audit"
run eager-1b $(left 420) $ONE
run ro-1b $(left 575) $ONE --cache static --compile reduce-overhead
for name in eager-1b ro-1b; do grep -A14 "^host reads" $R/$name.log | cut -c1-220; done
cp $R/cuda-audit.log $R/*.json $R/*.log $R/smi.csv $OUT/ 2>/dev/null; ls -la $OUT
