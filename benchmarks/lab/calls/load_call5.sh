#!/bin/bash
# Device call (nvidia-h100-x1; carry .whlmin and .carry), after issue 65's merge: the CUDA tests under load (the load
# request carried whole, the kernel measurement's kinds per decode step), then the CLI as typed under load at the
# Llama-1B shape, step-graph, B=16, naive and pipelined, with the kernel measurement (its breakdown by kind per decode
# step in the report).
#   bash benchmarks/lab/calls/load_call5.sh
export CALL_BUDGET_S=440
source benchmarks/lab/device_setup.sh
export PYTHONPATH=/tmp/site:$PWD
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_load.py 2>&1 | tail -3 | tee $OUT/cuda_load_tests.log
timeout -s INT -k 20 $(( $(left) - 15 )) python3 -m core.bench --model synthetic:llama-1b --compile step-graph \
    --requests 128 --max-batch 16 --max-new-tokens 64 --output-median 24 --trials 3 --contestants naive,pipelined \
    --solo-checks 4 --json $OUT/load-b16.json 2>&1 \
    | grep --line-buffered -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|out_base\|USDT" \
    | tee $OUT/load_call5.log | tail -20
python3 - <<'PY'
import json, os
r = json.load(open(os.environ["OUT"] + "/load-b16.json"))
for name, entry in r["load"]["points"][0]["contestants"].items():
    km = entry.get("kernel_measurement") or {}
    kinds = {k["kind"]: round(k["ms_per_step"] * 1000) for k in km.get("kinds", [])}
    print(name, "kinds µs a decode step:", kinds)
PY
echo "done after $(( $(date +%s) - START )) s"
