"""Serve the syncscope dashboard: `python app.py` opens http://127.0.0.1:7860 with the offline default model.

    python app.py --model synthetic:llama-1b --compile reduce-overhead --ignore-eos --max-new-tokens 256
    python app.py --model synthetic:llama-8b --tp 2          # tensor parallel over two GPUs
    python app.py --share --auth alice:secret                 # a public link (where the network allows one)

The model runs in an engine process of its own (one per GPU with --tp), started by this one.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from core.documents.files import MAX_REPORT_BYTES, read_report_bytes, report_paths
from core.documents.kinds import LOAD, kind_of
from core.models.specs import BUILTIN_SPECS, DEFAULT_MODEL, cache_dir
from core.request.load_schema import LoadLimits
from core.request.options import HF_MODULES_HELP
from core.request.run_schema import (
    Limits,
    OneLineParser,
    add_run_arguments,
    request_from_values,
    static_cache_for,
    values_from_args,
)
from core.text import command_name
from core.tuning import Tuning
from dashboard.service.limits import (
    EXPOSED_LIMITS,
    EXPOSED_LOAD_LIMITS,
    IDLE_SESSION_S,
    LOCAL_LIMITS,
    LOCAL_LOAD_LIMITS,
    MAX_BODY_BYTES,
    MAX_SESSIONS,
    SESSIONS_PER_ADDRESS,
    is_loopback,
)
from dashboard.service.page_record import parse_report

# The reports the page offers ready to open (Replay) and the audits (Your loop): a curated few, copied from the lab's
# results (benchmarks/lab/results, which the page never reads), and installed with the package.
BUNDLED_DIR = Path(__file__).resolve().parent / "dashboard" / "bundled"
BUNDLED_INDEX = "bundled-reports.json"  # in the cache folder: what find_bundled found at the last start
BUNDLED_KINDS = ("report", "audit", None)  # a bundled file's kind in that index (None: neither, or does not load)
MAX_UPLOAD = MAX_REPORT_BYTES  # Replay's limit; the page refuses a larger file in its status line
GRADIO_CACHE_CLEANUP = (3600, 24 * 3600)  # every hour, the files Gradio cached for this page over a day ago go
APP_SCRIPT = "syncscope"  # the installed command (pyproject.toml's [project.scripts])
DTYPES = ("auto", "bf16", "bfloat16", "fp16", "float16", "fp32", "float32")
def build_parser() -> argparse.ArgumentParser:
    name = command_name(__spec__.name if __spec__ else None, APP_SCRIPT)
    p = OneLineParser(prog=name, description=__doc__.split("\n\n")[0].replace("python app.py", name))
    p.add_argument("--model", action="append", default=None, metavar="SPEC",
                   help=f"model to load at start; repeat to offer more (default: {DEFAULT_MODEL})")
    p.add_argument("--device", default=None, help="cuda, cuda:1, cpu (default: CUDA when present, else cpu)")
    p.add_argument("--dtype", default=None, help="bf16, fp16 or fp32 (default: bf16 on CUDA, fp32 on the CPU)")
    p.add_argument("--tp", type=int, default=1, metavar="N",
                   help="tensor parallel degree: the model sharded over N GPUs, one engine process each (default: 1)")
    p.add_argument("--hf-modules", action="store_true", help=HF_MODULES_HELP)
    p.add_argument("--engine-in-process", action="store_true",
                   help="debugging: run the engine on a thread of this server instead of a process of its own (one "
                        "rank; the page and the decode loops then share one interpreter, and a hung step hangs the "
                        "page)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind; anything but loopback exposes the app "
                                                       "(default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=7860, help="port to serve on (default: 7860)")
    p.add_argument("--share", action="store_true", help="ask Gradio for a public share link")
    p.add_argument("--auth", default=None, metavar="USER:PASS", help="require this login")
    p.add_argument("--allow-any-model", action="store_true",
                   help="when shared or exposed, let visitors load any model spec (default: an allow-list)")
    p.add_argument("--max-run-seconds", type=float, default=None, metavar="S",
                   help=f"stop a run after S seconds (default: none locally, {EXPOSED_LIMITS.max_run_s:.0f} when "
                        "shared or exposed, where the form's limits are smaller too)")
    p.add_argument("--max-request-mib", type=float, default=MAX_BODY_BYTES / 2**20, metavar="MIB",
                   help="answer a request body larger than this 413, unread (report uploads have their own limit of "
                        f"{MAX_UPLOAD // 2**20} MiB, streamed to disk) (default: {MAX_BODY_BYTES / 2**20:g})")
    p.add_argument("--max-sessions", type=int, default=MAX_SESSIONS, metavar="N",
                   help=f"browser and API sessions whose state the server keeps, the idle ones without an open page "
                        f"dropped first (default: {MAX_SESSIONS}); an idle session without a page goes after "
                        f"{IDLE_SESSION_S:.0f} s, and when shared or exposed one address keeps at most "
                        f"{SESSIONS_PER_ADDRESS}")
    # On a GPU the form starts where the per-step sync shows (compiled steps, long runs, enough trials and seconds
    # for a verdict and for NVML to sample each contestant);
    # core.request.options.RUN_OPTIONS holds both sets of defaults.
    add_run_arguments(p.add_argument_group("defaults of the run form (default: chosen for a GPU when one is "
                                           "present, else for the CPU)"), form_defaults=True)
    return p


def parse_auth(value: str | None) -> tuple[str, str] | None:
    if value is None:
        return None
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        raise ValueError("--auth must look like user:password")
    return user, password



def is_exposed(args: argparse.Namespace) -> bool:
    return bool(args.share or not is_loopback(args.host))


def exposure_warning(args: argparse.Namespace) -> str | None:
    """A loud warning when the app is reachable by others without a login."""
    if not is_exposed(args) or args.auth:
        return None
    how = "a public share link" if args.share else f"address {args.host}"
    bar = "!" * 78
    return (f"{bar}\n!! WARNING: serving on {how} WITHOUT --auth.\n!! Anyone who can reach it can run models on "
            f"this machine's {'GPU' if gpu_present(args) else 'CPU'}.\n!! Add --auth user:password.\n{bar}")


def allowed_models(args: argparse.Namespace) -> set[str] | None:
    """None (anything) when local or --allow-any-model; else the built-ins and the models named at launch."""
    if args.allow_any_model or not is_exposed(args):
        return None
    return {*BUILTIN_SPECS, *(args.model or [])}


def sessions_per_address(args: argparse.Namespace) -> int | None:
    """How many sessions one client address keeps: bounded when others can reach the page
    (dashboard.edge.session_store)."""
    return SESSIONS_PER_ADDRESS if is_exposed(args) else None


def limits_for(args: argparse.Namespace) -> Limits:
    base = EXPOSED_LIMITS if is_exposed(args) else LOCAL_LIMITS
    return replace(base, max_run_s=args.max_run_seconds) if args.max_run_seconds is not None else base


def load_limits_for(args: argparse.Namespace) -> LoadLimits:
    """What a run under load (the Under load tab) may ask for: smaller when others can reach the page."""
    return EXPOSED_LOAD_LIMITS if is_exposed(args) else LOCAL_LOAD_LIMITS


def gpu_present(args: argparse.Namespace) -> bool:
    """Whether runs will go to an NVIDIA GPU, asked of NVML: this process never initialises CUDA."""
    if str(args.device or "").startswith("cpu"):
        return False
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return False


def check_args(args: argparse.Namespace) -> dict[str, Any]:
    """The run form's defaults by name (with `model`); ValueError (one readable line) for a bad device, dtype,
    port or run option."""
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    device = str(args.device or "auto")
    if device != "auto" and not (device == "cpu" or device == "cuda" or
                                 (device.startswith("cuda:") and device[5:].isdigit())):
        raise ValueError(f"unknown device {args.device!r}: use cpu, cuda or cuda:N")
    if args.dtype is not None and args.dtype not in DTYPES:
        raise ValueError(f"unknown dtype {args.dtype!r}; use one of: {', '.join(DTYPES)}")
    if args.tp < 1:
        raise ValueError(f"--tp must be 1 or more, got {args.tp}")
    if args.engine_in_process and args.tp > 1:
        raise ValueError("--engine-in-process runs one rank: tensor parallel needs an engine process per GPU")
    if args.max_run_seconds is not None and args.max_run_seconds <= 0:
        raise ValueError(f"--max-run-seconds must be > 0, got {args.max_run_seconds:g}")
    if not args.max_request_mib > 0:
        raise ValueError(f"--max-request-mib must be > 0, got {args.max_request_mib:g}")
    if args.max_sessions < 1:
        raise ValueError(f"--max-sessions must be 1 or more, got {args.max_sessions}")
    form = {**values_from_args(args, gpu_present(args)), "model": (args.model or [DEFAULT_MODEL])[0]}
    form["cache"] = static_cache_for(form["compile"], form["cache"])[0]
    request_from_values(form, limits=limits_for(args))
    return form


def check_port_free(host: str, port: int) -> None:
    """ValueError when something already listens there (Gradio would fail later with a long traceback)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As uvicorn binds: a port whose last server just stopped (its connections in TIME_WAIT) is free to serve on;
        # one with a listener is still refused.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ValueError(f"port {port} on {host} is already in use (another server is running there); "
                                 f"choose another with --port") from None
            raise ValueError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None


def find_bundled(folder: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """The benchmark reports (Replay's bundled results) and the audit reports (Your loop's) under `folder`, by path
    relative to it; other JSON files (summaries, traces) and files that do not load are left out. A file is read only
    when the index of the last start (BUNDLED_INDEX in the cache folder) lacks it as it is now (its size and time,
    and the code that checks it): reading every report of the lab's results took seconds of every start."""
    index_path = cache_dir() / BUNDLED_INDEX
    known = _bundled_index(index_path, folder)
    kinds: dict[str, list[Any]] = {}
    for path in report_paths(folder, recursive=True):
        name = path.relative_to(folder).as_posix()
        try:
            facts = os.stat(path)
        except OSError:
            continue
        stamp = [facts.st_size, facts.st_mtime_ns]
        kind = known[name][2] if known.get(name, [])[:2] == stamp else _bundled_kind(path)
        kinds[name] = [*stamp, kind]
    if kinds != known:
        _write_bundled_index(index_path, folder, kinds)
    reports = {name: folder / name for name, (_, _, kind) in kinds.items() if kind == "report"}
    audits = {name: folder / name for name, (_, _, kind) in kinds.items() if kind == "audit"}
    return reports, audits


def _bundled_kind(path: Path) -> str | None:
    """"report" for a benchmark report that loads, "audit" for an audit report, None for anything else."""
    from dashboard.service.audit_digest import is_audit

    try:
        data = read_report_bytes(path)
    except (OSError, ValueError):
        return None
    with contextlib.suppress(ValueError):
        if kind_of(json.loads(data)) == LOAD:
            return "report"  # a load report: Replay opens it too
    try:
        parse_report(data)
        return "report"
    except ValueError:
        with contextlib.suppress(ValueError):
            if is_audit(json.loads(data)):
                return "audit"
    return None


def _checker_version() -> str:
    """What decides a file's kind: this file and the modules that parse reports, by their size and time."""
    from core.documents import schema
    from dashboard.service import audit_digest, page_record

    documents = sorted(Path(schema.__file__).parent.glob("*.py"))  # every kind's, upgrades
    modules = [Path(module.__file__) for module in (sys.modules[__name__], page_record, audit_digest)] + documents
    return ";".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in modules)


def _bundled_index(index_path: Path, folder: Path) -> dict[str, list[Any]]:
    """The kinds the last start found, or nothing where the index is missing, damaged, or of other code."""
    try:
        index = json.loads(index_path.read_text())
        if index["folder"] == str(folder.resolve()) and index["checker"] == _checker_version():
            return {name: list(entry) for name, entry in index["files"].items()
                    if isinstance(entry, list) and len(entry) == 3 and entry[2] in BUNDLED_KINDS}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return {}


def _write_bundled_index(index_path: Path, folder: Path, kinds: dict[str, list[Any]]) -> None:
    """The index, written whole or not at all (a cache folder that cannot be written only costs the next start)."""
    text = json.dumps({"folder": str(folder.resolve()), "checker": _checker_version(), "files": kinds})
    with contextlib.suppress(OSError):
        index_path.parent.mkdir(parents=True, exist_ok=True)
        staging = index_path.with_name(f"{index_path.name}.{os.getpid()}.tmp")
        staging.write_text(text)
        os.replace(staging, index_path)


def find_reports(folder: Path) -> dict[str, Path]:
    """Benchmark reports under `folder` (the Replay tab's bundled results), by path relative to it."""
    return find_bundled(folder)[0]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        auth = parse_auth(args.auth)
        defaults = check_args(args)
        Tuning.from_environment()  # the engine processes inherit the switches; a typo fails here, not at a run
        check_port_free(args.host, args.port)
    except ValueError as exc:
        sys.stderr.write(f"app.py: error: {exc}\n")
        return 2
    warning = exposure_warning(args)
    if warning:
        sys.stderr.write(warning + "\n")

    from dashboard.edge.gradio_files import GradioFiles, server_folder

    # Gradio reads its folder when it makes its components and app: this server's own, removed at exit.
    os.environ["GRADIO_TEMP_DIR"] = str(server_folder())
    signal.signal(signal.SIGTERM, _interrupt)  # so that a SIGTERM, too, stops the engine and removes the folders

    from dashboard.edge.http_guard import forget_files_on_unload, launch_options
    from dashboard.service.fair_share import sharing_for
    from dashboard.service.runner import Runner
    from dashboard.ui import CSS, build_demo  # gradio takes seconds to import: only once the flags are good

    logging.basicConfig(level=logging.INFO, format="syncscope %(asctime)s %(levelname)s: %(message)s",
                        datefmt="%H:%M:%S")
    runner = Runner(defaults["model"], device=args.device, dtype=args.dtype, tp=args.tp, hf_modules=args.hf_modules,
                    allowed_models=allowed_models(args), limits=limits_for(args), load_limits=load_limits_for(args),
                    named_models=args.model or (),
                    in_process_engine=args.engine_in_process, sharing=sharing_for(is_exposed(args)))
    print(f"Starting the engine process and loading {defaults['model']} in the background; the page shows progress.")
    reports, audits = find_bundled(BUNDLED_DIR)
    demo = build_demo(runner, defaults=defaults, replay_files=reports, audit_files=audits)
    demo.queue(default_concurrency_limit=4, max_size=64)
    files = GradioFiles(Path(os.environ["GRADIO_TEMP_DIR"]))
    forget_files_on_unload(demo, files)
    demo.delete_cache = GRADIO_CACHE_CLEANUP  # what no page claimed of Gradio's copies of downloads and uploads
    guard = launch_options(max_body_bytes=int(args.max_request_mib * 2**20), max_sessions=args.max_sessions,
                           files=files, sessions_per_address=sessions_per_address(args))
    try:
        demo.launch(server_name=args.host, server_port=args.port, share=args.share, auth=auth,
                    max_file_size=MAX_UPLOAD, prevent_thread_lock=True, ssr_mode=False, css=CSS,
                    footer_links=["api", "gradio"], inbrowser=False, quiet=True, **guard)
    except OSError as exc:  # the port was taken between the check and the launch
        sys.stderr.write(f"app.py: error: cannot serve on {args.host}:{args.port}: {exc}\n")
        runner.close()
        demo.dashboard.downloads.close()
        return 2
    print(f"Serving on {demo.local_url}" + ("" if args.share else "  (add --share for a public link)"), flush=True)
    if args.share and demo.share_url:
        print(f"Public link: {demo.share_url}", flush=True)
    elif args.share:
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
        demo.dashboard.downloads.close()
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def cli() -> None:
    """The `syncscope` command: the dashboard (needs the `dashboard` extra, from the checkout; syncscope is not on
    PyPI)."""
    try:
        import gradio  # noqa: F401 - only to say what is missing before anything starts
        import plotly  # noqa: F401
    except ImportError:
        sys.stderr.write("syncscope: error: the dashboard needs gradio and plotly, which are not installed: run "
                         "pip install \".[dashboard]\" in the syncscope checkout (or make run there)\n")
        raise SystemExit(2) from None
    raise SystemExit(main())


if __name__ == "__main__":
    raise SystemExit(main())
