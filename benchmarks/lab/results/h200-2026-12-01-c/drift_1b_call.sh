# Device call 3 of issue 39's session (nvidia-h200, warm; carry .whlmin and .carry/tokenizer.tgz): the drift between
# processes of the page's GPU defaults on the Llama-1B shape. As typed, one line.
source benchmarks/lab/device_setup.sh; timeout -s INT -k 20 400 python3 benchmarks/process_drift.py -n 4 --out $OUT/drift-1b.json -- --model synthetic:llama-1b --cache static --compile reduce-overhead --max-new-tokens 256 --trials 5 --min-seconds 2 --ignore-eos > $OUT/drift-1b.log 2>&1; echo rc=$?; tail -12 $OUT/drift-1b.log | cut -c1-220
