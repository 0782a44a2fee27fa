# Sourced by the device-call scripts (benchmarks/lab/results/*/call*.sh from call 14 on) on the nvidia-h200 machines:
# the environment, the carried wheels and tokenizer, and helpers that time one core.bench run each.
#   WHEELS=.whl (gradio and all) or .whlmin (transformers + gguf; the default); CALL_BUDGET_S (default 570).
set -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # NVLink multicast off
START=$(date +%s)
left() { echo $(( ${1:-${CALL_BUDGET_S:-570}} - ($(date +%s) - START) )); }  # seconds left of the call's budget
[ -d /tmp/site/transformers ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site "${WHEELS:-.whlmin}"/*.whl || exit 1
export PYTHONPATH=/tmp/site
R=/tmp/res
rm -rf $R; mkdir -p /tmp/cache $R && tar xzf .carry/tokenizer.tgz -C /tmp/cache && export SYNCSCOPE_CACHE=/tmp/cache
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu,pstate --format=csv > $R/smi.csv
# The setting (TP=2, batch 1, 32-token prompt, 256 new tokens): BENCH_ARGS for scripts that call core.bench.
BENCH_ARGS="--tp 2 --cache static --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --no-check"
B="python3 -m core.bench $BENCH_ARGS"
# run NAME SECONDS COMMAND...: one timed run, its report in $R/NAME.json and filtered log in $R/NAME.log.
run() {
    local name=$1 budget=$2; shift 2; echo "=== $name ($(left) s left)"
    timeout -s INT -k 15 "$budget" "$@" --json $R/$name.json 2>&1 \
        | grep -v -i "warn\|autotune\|triton_mm\|strides\|dtypes\|choices\|^  mm\|DEBUG\|USDT\|enable_symm_mem" \
        > $R/$name.log
    local rc=$?
    grep -i "tok/s\|pipelined\|naive\|no-check\|identical\|error" $R/$name.log | head -12 | cut -c1-200
    grep -A12 "^profile of" $R/$name.log
    echo "rc=$rc after $(( $(date +%s) - START )) s"; pkill -9 -f "core.bench"; sleep 1
}
rate() {  # the pipelined decode rate of run NAME, 0 when it has no report (floor_ab.sh gzips them when it ends)
    python3 -c "import gzip, json, os; p = '$R/$1.json'; f = open(p) if os.path.exists(p) else gzip.open(p + '.gz')
print(json.load(f)['summary']['pipelined']['decode_tokens_per_s'])" 2>/dev/null || echo 0
}
