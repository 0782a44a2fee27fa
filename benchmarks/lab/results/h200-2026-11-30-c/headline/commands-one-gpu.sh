#!/bin/bash
# Written by benchmarks/headline.py: every run as started, from the repository root.
# 2026-11-30T09:16:42+00:00: python benchmarks/headline.py --part one-gpu --gpus 0,1
CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 python -m core.bench --model synthetic:llama-8b --cache static --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --trials 5 --dtype bf16 --json /tmp/headline/llama-8b-step-graph.json
CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 python -m core.bench --model synthetic:llama-1b --cache static --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --trials 5 --dtype bf16 --json /tmp/headline/llama-1b-step-graph.json
CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 python -m core.bench --model synthetic:smollm2-135m --cache static --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --trials 5 --dtype bf16 --json /tmp/headline/smollm2-135m-step-graph.json
CUDA_VISIBLE_DEVICES=1 taskset -c 16-31 python -m core.bench --model synthetic:llama-8b --cache static --compile reduce-overhead --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --trials 5 --dtype bf16 --hf --hf-deferred --json /tmp/headline/llama-8b-reduce-overhead.json
CUDA_VISIBLE_DEVICES=1 taskset -c 16-31 python -m core.bench --model synthetic:llama-1b --cache static --compile reduce-overhead --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --trials 5 --dtype bf16 --hf --hf-deferred --json /tmp/headline/llama-1b-reduce-overhead.json
CUDA_VISIBLE_DEVICES=1 taskset -c 16-31 python -m core.bench --model synthetic:smollm2-135m --cache static --compile reduce-overhead --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --trials 5 --dtype bf16 --hf --hf-deferred --json /tmp/headline/smollm2-135m-reduce-overhead.json
