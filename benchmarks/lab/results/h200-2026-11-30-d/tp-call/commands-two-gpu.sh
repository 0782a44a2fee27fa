#!/bin/bash
# Written by benchmarks/headline.py: every run as started, from the repository root.
# 2026-11-30T11:23:49+00:00: python benchmarks/headline.py --part two-gpu --only llama-8b-tp2-step-graph
python -m core.bench --model synthetic:llama-8b --cache static --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --trials 5 --dtype bf16 --tp 2 --profile /tmp/headline/profile-llama-8b-tp2-step-graph --json /tmp/headline/llama-8b-tp2-step-graph.json
