#!/bin/bash
# Device call (nvidia-h200; carry .carry: site.tar.xz, the dashboard's packages unpacked and xz'd, and tokenizer.tgz),
# issue 39: the page served on one H200 as a user starts it, with its defaults, a default run and an audited one
# through gradio_client (tests/test_dashboard_client.py, its CUDA case), the NVTX CUDA tests, then the drift between
# processes of the page's GPU defaults (benchmarks/process_drift.py). At most ~9.5 minutes.
# Comes back: page-runs.json (what the page showed), page-default-report.json.gz, page-audited-report.json.gz,
# page-tests.log, drift.json, drift.log, smi.csv.
mkdir -p /tmp/site && { [ -d /tmp/site/gradio ] || tar xJf .carry/site.tar.xz -C /tmp/site; } || exit 1
source benchmarks/lab/device_setup.sh
export SYNCSCOPE_PAGE_OUT=$R/page
python3 -c "import gradio, plotly, transformers, gradio_client; print('gradio', gradio.__version__, 'plotly', \
plotly.__version__, 'transformers', transformers.__version__)"
T0=$(date +%s)
timeout -s INT -k 20 $(left 400) python3 -m pytest -v -m cuda -rfEs -p no:cacheprovider --durations=10 \
    tests/test_dashboard_client.py tests/test_cuda_nvtx.py 2>&1 | grep -v "^DEBUG\|^E1\|^W1" > $R/page-tests.log
echo "page and NVTX tests: rc=${PIPESTATUS[0]} in $(( $(date +%s) - T0 )) s"
grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" $R/page-tests.log | tail -12 | cut -c1-200
python3 - <<'PY' 2>/dev/null
import json
runs = json.load(open("/tmp/res/page/page-runs.json"))
for name, run in runs.items():
    print(f"{name}: {run['wall_s']} s, {run['model']} on {run['gpu']}: {run['headline'][:160]}")
    print("   ", run["shows"][:300])
PY
# The drift between processes: the page's GPU defaults on the default model's shape, one process after another.
DRIFT_S=$(left 560)
echo "drift: $DRIFT_S s left"
if [ "$DRIFT_S" -gt 120 ]; then
    timeout -s INT -k 20 $DRIFT_S python3 benchmarks/process_drift.py -n 5 --out $R/drift.json -- \
        --model synthetic:smollm2-135m --cache static --compile reduce-overhead --max-new-tokens 256 --trials 5 \
        --min-seconds 2 --ignore-eos > $R/drift.log 2>&1
    echo "drift rc=$?"; tail -15 $R/drift.log | cut -c1-200
fi
cp $R/page/page-runs.json $R/page/page-default-report.json.gz $R/page/page-audited-report.json.gz \
    $R/page-tests.log $R/smi.csv $OUT/ 2>/dev/null
cp $R/drift.json $R/drift.log $OUT/ 2>/dev/null
ls -la $OUT
