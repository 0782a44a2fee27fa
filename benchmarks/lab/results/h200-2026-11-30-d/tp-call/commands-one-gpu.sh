#!/bin/bash
# Written by benchmarks/headline.py: every run as started, from the repository root.
# 2026-11-30T11:21:52+00:00: python benchmarks/headline.py --part one-gpu --only llama-8b-step-graph --gpus 0
CUDA_VISIBLE_DEVICES=0 python -m core.bench --model synthetic:llama-8b --cache static --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --trials 5 --dtype bf16 --json /tmp/headline/llama-8b-step-graph.json
