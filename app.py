"""Serve the syncscope dashboard: `python app.py` opens http://127.0.0.1:7860 with the offline default model.

    python app.py --model synthetic:llama-1b --compile reduce-overhead --ignore-eos --max-new-tokens 256
    python app.py --share --auth alice:secret      # a public link (where the network allows one)
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from core.bench import DEFAULT_PROMPT
from core.generation import COMPILE_MODES
from core.models import BUILTIN_SPECS, DEFAULT_MODEL, resolve_device, resolve_dtype
from dashboard.runner import Runner, RunSettings, parse_report

RESULTS_DIR = Path(__file__).resolve().parent / "benchmarks" / "results"
MAX_UPLOAD = "20mb"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python app.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", action="append", default=None,
                   help=f"model to load at start (repeat to offer more; default {DEFAULT_MODEL})")
    p.add_argument("--device", default=None, help="cuda, cuda:1, cpu (default: CUDA when present)")
    p.add_argument("--dtype", default=None, help="bf16, fp16, fp32 (default: bf16 on CUDA, fp32 on CPU)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind; anything but loopback exposes the app")
    p.add_argument("--port", type=int, default=7860)
    p.add_argument("--share", action="store_true", help="ask Gradio for a public share link")
    p.add_argument("--auth", default=None, metavar="USER:PASS", help="require this login")
    p.add_argument("--allow-any-model", action="store_true",
                   help="when shared or exposed, let visitors load any model spec (default: an allow-list)")
    run = p.add_argument_group("defaults of the run form")
    run.add_argument("--prompt", default=DEFAULT_PROMPT)
    run.add_argument("--max-new-tokens", type=int, default=128)
    run.add_argument("--batch", type=int, default=1)
    run.add_argument("--trials", type=int, default=1)
    run.add_argument("--ignore-eos", action="store_true")
    run.add_argument("--static-cache", action="store_true")
    run.add_argument("--compile", choices=COMPILE_MODES, default="off")
    run.add_argument("--lag", type=int, default=1)
    run.add_argument("--streams", type=int, choices=(1, 2), default=1)
    run.add_argument("--hf", action="store_true", help="include transformers' generate() by default")
    return p


def parse_auth(value: str | None) -> tuple[str, str] | None:
    if value is None:
        return None
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        raise ValueError("--auth must look like user:password")
    return user, password


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(args: argparse.Namespace) -> str | None:
    """A loud warning when the app is reachable by others without a login."""
    exposed = args.share or not is_loopback(args.host)
    if not exposed or args.auth:
        return None
    how = "a public share link" if args.share else f"address {args.host}"
    bar = "!" * 78
    return (f"{bar}\n!! WARNING: serving on {how} WITHOUT --auth.\n!! Anyone who can reach it can run models on "
            f"this machine's {'GPU' if _has_cuda() else 'CPU'}.\n!! Add --auth user:password.\n{bar}")


def allowed_models(args: argparse.Namespace) -> set[str] | None:
    """None (anything) when local or --allow-any-model; else the built-ins and the models named at launch."""
    exposed = args.share or not is_loopback(args.host)
    if args.allow_any_model or not exposed:
        return None
    return {*BUILTIN_SPECS, *(args.model or [])}


def check_args(args: argparse.Namespace) -> RunSettings:
    """The run form's defaults; ValueError (one readable line) for a bad device, dtype, port or run option."""
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    try:
        device = resolve_device(args.device)
    except RuntimeError as exc:  # torch.device() on a string it does not know
        raise ValueError(f"unknown device {args.device!r}: use cpu, cuda or cuda:N ({exc})") from None
    resolve_dtype(args.dtype, device)
    model = (args.model or [DEFAULT_MODEL])[0]
    settings = run_defaults(args, model)
    settings.to_request()
    return settings


def run_defaults(args: argparse.Namespace, model: str) -> RunSettings:
    return RunSettings(prompt=args.prompt, model=model, max_new_tokens=args.max_new_tokens, batch=args.batch,
                       trials=args.trials, ignore_eos=args.ignore_eos,
                       static_cache=args.static_cache or args.compile != "off", compile=args.compile, lag=args.lag,
                       streams=args.streams, include_hf=args.hf)


def find_reports(folder: Path) -> dict[str, Path]:
    """Benchmark reports under `folder` (the Replay tab's bundled results), by path relative to it."""
    found = {}
    for path in sorted(folder.rglob("*.json")):
        try:
            parse_report(path.read_bytes())
        except (OSError, ValueError):
            continue  # summaries and other JSON files
        found[path.relative_to(folder).as_posix()] = path
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        auth = parse_auth(args.auth)
        defaults = check_args(args)
    except ValueError as exc:
        sys.stderr.write(f"app.py: error: {exc}\n")
        return 2
    warning = exposure_warning(args)
    if warning:
        sys.stderr.write(warning + "\n")

    from dashboard.ui import CSS, build_demo  # gradio takes seconds to import: only once the flags are good

    model = defaults.model
    runner = Runner(model, device=args.device, dtype=args.dtype, allowed_models=allowed_models(args))
    print(f"Loading {model} in the background; the page shows its progress.")
    demo = build_demo(runner, defaults=defaults, replay_files=find_reports(RESULTS_DIR))
    demo.queue(default_concurrency_limit=4, max_size=64)
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, auth=auth,
                max_file_size=MAX_UPLOAD, prevent_thread_lock=True, ssr_mode=False, css=CSS,
                footer_links=["api", "gradio"], inbrowser=False)
    if args.share and not demo.share_url:
        why = ("no share link could be made (Gradio's tunnel needs outbound internet access, which this machine "
               "does not seem to have)")
        demo.dashboard.notes.append(f"Sharing was asked for, but {why}. This page is served locally only.")
        sys.stderr.write(f"app.py: {why}; still serving locally at {demo.local_url}\n")
    try:
        demo.block_thread()
    except KeyboardInterrupt:
        pass
    finally:
        runner.close()
    return 0


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
