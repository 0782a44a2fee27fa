#!/bin/bash
# Device call (nvidia-h200-x2; carry .whlmin and .carry), issue 22: is the headline's one-GPU Llama-8B step-graph rate
# (178 tok/s, 15 o_proj kernels at 87 us) what max-autotune picks every time? Two fresh processes at once, one per GPU,
# each with an empty inductor cache and half the cores (as headline.py's lanes), profiled; then Llama-8B TP=2 on this
# machine (a second same-machine ratio); the fused kernel's test (its norm tolerance now two bf16 steps); the generated
# sources of the o_proj kernels of every run. Comes back: spread.tgz and spread.log.
# NOT MEASURED: as first written, this call hung until its 460 s limit and used the session's last device time. It
# ended the lanes with a bare `wait`, and bash (5.1 on) also waits for the `exec > >(tee ...)` process substitution,
# which only ends when the script does. The `wait` below names the lanes' processes; this version has not run yet.
source benchmarks/lab/device_setup.sh
exec > >(tee $R/spread.log) 2>&1
S="python3 -m core.bench --model synthetic:llama-8b --cache static --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --trials 3"
lanes=()
for g in 0 1; do
    ( export CUDA_VISIBLE_DEVICES=$g TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$g; cores=$(( g * 16 ))-$(( g * 16 + 15 ))
      taskset -c $cores timeout -s INT -k 15 200 $S --profile $R/profile-one-gpu-$g --json $R/one-gpu-$g.json \
        2>&1 | grep -v -i "warn\|autotune\|DEBUG" > $R/one-gpu-$g.log ) &
    lanes+=($!)
done
wait "${lanes[@]}"; echo "one-GPU runs done after $(( $(date +%s) - START )) s"
for g in 0 1; do grep -A4 "^contestant" $R/one-gpu-$g.log; sed -n 3,20p $R/profile-one-gpu-$g/profile-rank0.txt | cut -c1-160; done
TORCHINDUCTOR_CACHE_DIR=/tmp/ind-tp run tp2-8b $(left 420) $B --model synthetic:llama-8b --compile step-graph --trials 3
echo "rates: one-GPU $(rate one-gpu-0) $(rate one-gpu-1), TP=2 $(rate tp2-8b)"
T=tests/test_cuda_tp_fusion.py::test_the_fused_kernel_sums_adds_and_normalises_like_pytorch_eagerly_and_in_graph_replays
timeout -k 5 $(left 590) python3 -m pytest -q -p no:cacheprovider -rfE "$T[push]" 2>&1 | tail -4 | cut -c1-300
mkdir -p $R/kernels; for d in /tmp/ind-0 /tmp/ind-1; do
    grep -rl "def triton_red_fused.*mm_t_transpose_view" $d --include=*.py 2>/dev/null | head -12 \
        | while read f; do cp $f $R/kernels/$(basename $d)-$(basename $f); done; done
rm -f $R/profile-*/*trace.json.gz; ls $R/kernels | head; tar czf $OUT/spread.tgz -C $R . && ls -la $OUT
