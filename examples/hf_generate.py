"""transformers' own `model.generate()`: its StopCheck reads the stop flag every step; `--deferred` turns on its
DeferredStopCheck (which transformers 5.24 enables on mps only), which reads it one step late (on the CPU, which has
no events, with a stand-in that has always completed).

    python -m core.audit -- examples/hf_generate.py
    python -m core.audit -- examples/hf_generate.py --deferred --shape 1b --compile --new-tokens 256   # on a GPU
"""

from __future__ import annotations

import sys
import time

import torch
from common import EOS, arguments, model_and_prompt
from transformers.generation import utils as generation_utils


class HostEvent:
    """A stand-in for torch.Event on the CPU, which has none: CPU work runs as it is queued, so an event there has
    always completed."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def record(self, *args, **kwargs) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


def force_deferred_stop_check(device: str) -> None:
    """DeferredStopCheck on this device (transformers 5.24 enables it on mps only)."""
    check = generation_utils.DeferredStopCheck
    check.is_supported = staticmethod(lambda device, cache, cache_is_returned, is_assistant: not is_assistant)
    if not device.startswith("cuda"):
        generation_utils.torch.Event = HostEvent


def main() -> None:
    deferred = "--deferred" in sys.argv
    if deferred:
        sys.argv.remove("--deferred")
    args = arguments(__doc__.split("\n\n")[0])
    if deferred:
        force_deferred_stop_check(args.device)
    model, prompt = model_and_prompt(args.shape, args.device)
    options = dict(max_new_tokens=args.new_tokens, do_sample=False, eos_token_id=EOS, pad_token_id=EOS,
                   cache_implementation="static", disable_compile=not args.compile)
    with torch.inference_mode():
        if args.compile:
            model.generate(prompt, **options)  # warm-up: compile and capture
        started = time.perf_counter()
        out = model.generate(prompt, **options)
    new = out.shape[1] - prompt.shape[1]
    print(f"generate(){' with DeferredStopCheck' if deferred else ''}: {new} tokens at "
          f"{new / (time.perf_counter() - started):.1f} tok/s")


if __name__ == "__main__":
    main()
