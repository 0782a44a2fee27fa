#!/bin/bash
# Device call (nvidia-h200; carry .whlmin and .carry/tokenizer.tgz), issue 40: the audit on the loops people write
# (tests/audit_loops/), about 6 minutes.
# 1. tests/test_cuda_audit_loops.py: each loop under PyTorch's sync debug mode and under core.audit, per decode step,
#    line by line (h2d copies included), and against what the loop says it reads; and tests/test_cuda_audit.py (the
#    audit against the debug mode on the repository's loops, h2d copies and a thread's reads).
# 2. each loop under `python -m core.audit --json` (12 new tokens), as a user runs it.
# Comes back: cuda-audit-loops.log and audit-loops.tar.gz (that log, audit-<loop>.json and .txt, smi.csv); the log's
# tail and each audit's first lines are in the output.
export CALL_BUDGET_S=380
source benchmarks/lab/device_setup.sh
timeout -s INT -k 20 $(left 230) python3 -m pytest -q -m cuda -rfEs --durations=10 -p no:cacheprovider \
    tests/test_cuda_audit_loops.py tests/test_cuda_audit.py 2>&1 | grep -v "^DEBUG\|^E1\|^W1" > $R/cuda-audit-loops.log
echo "pytest rc=${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"; tail -40 $R/cuda-audit-loops.log | cut -c1-300
for loop in tests/audit_loops/*.py; do
    name=$(basename "$loop" .py) budget=$(( $(left 370) < 60 ? $(left 370) : 60 ))
    echo "=== audit $name ($(left) s left)"
    [ "$budget" -lt 10 ] && { echo "skipped: no time left"; continue; }
    timeout -k 10 $budget python3 -m core.audit --json $R/audit-$name.json -- "$loop" cuda 12 > $R/audit-$name.txt 2>&1
    echo "rc=$?"; grep -v "^W1\|^E1\|arn\|^  torch._C\|fix:" $R/audit-$name.txt | grep "core.audit\|/step\|not seen" \
        | head -7 | cut -c1-220
done
cp $R/cuda-audit-loops.log $OUT/; tar czf $OUT/audit-loops.tar.gz -C $R . && ls -la $OUT
