"""This project's pipelined loop beside its peers on one shape, batch 1, each in a process of its own, in turn.

    python benchmarks/peers.py --model synthetic:llama-8b --gpt-fast PATH --out DIR [--trials 5]

Contestants (`--contestants` picks some):
- `ours-step-graph`, `ours-reduce-overhead`: `python -m core.bench` as a user types it (static cache, that compile
  mode, `--ignore-eos`); its report's pipelined loop is "ours" (and its naive loop is shown beside it);
- `hf-generate`: transformers' `generate()` on transformers' own modules (`hf_modules=True`) with
  `cache_implementation="static"`, which makes generate() compile the forward itself (its `CompileConfig` default:
  reduce-overhead), as transformers' docs describe;
- `gpt-fast-greedy`, `gpt-fast-sample`: gpt-fast's own `generate()` (pytorch-labs/gpt-fast, BSD-3, a checkout given by
  `--gpt-fast`, never committed) with its `decode_one_token` compiled as its `main()` does (reduce-overhead,
  fullgraph) and its own inductor settings (set when its generate.py is imported); greedy is its temperature 0 (it
  divides by 1e-5) without top-k, sample its defaults (temperature 0.8, top-k 200). Random weights of the same shape;
  its tokenizer is not used (the prompt is token ids), so its tokenizer's imports are stubbed.

Every contestant decodes `--max-new-tokens` tokens after a `--prompt-tokens` prompt of fixed pseudo-random ids,
greedy unless said, never stopping at EOS. Rates, per timed run, the same way for all: end-to-end is new tokens over
the call's wall time (prefill included); decode is the tokens after the first over the time from when the first token
is known on the host to the end (core.bench's own definition; for the peers one device synchronisation after the
prefill marks it, which costs their decode nothing, since it comes before the decode loop). Warm-up runs (the
compile) are reported apart, never timed. The table's ratio is each contestant's decode rate over ours (the
`ours-step-graph` pipelined loop), so below 1 means slower than ours.

Writes `DIR/peers-<shape>.json` (the table, each contestant's trials and command) and each child's own report beside
it; prints the table. A contestant that fails or runs out of `--timeout` is listed with its error; the others go on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OURS = ("ours-step-graph", "ours-reduce-overhead")
CONTESTANTS = (*OURS, "hf-generate", "gpt-fast-greedy", "gpt-fast-sample")
REFERENCE = "ours-step-graph"
# gpt-fast's own config names for our synthetic shapes; llama-1b is not among its configs, so it is added with
# Llama-3.2-1B's shape (our synthetic shape has no rope scaling, so neither has this one).
GPT_FAST_CONFIGS = {"llama-8b": "llama-3.1-8b", "llama-1b": "llama-3.2-1b"}
GPT_FAST_LLAMA_1B = dict(block_size=131072, n_layer=16, n_head=32, n_local_heads=8, dim=2048, intermediate_size=8192,
                         vocab_size=128256, rope_base=500000)
GPT_FAST_SAMPLING = {"gpt-fast-greedy": dict(temperature=0.0, top_k=None),
                     "gpt-fast-sample": dict(temperature=0.8, top_k=200)}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for name in args.contestants:  # the table is rewritten after each, so a call cut short keeps what ran
        rows.append(run_contestant(name, args, out))
        table = peers_table(rows)
        document = {"model": args.model, "settings": settings(args), "contestants": rows, "table": table}
        (out / f"peers-{args.model.split(':')[-1]}.json").write_text(json.dumps(document, indent=1),
                                                                       encoding="utf-8")
    print(format_table(peers_table(rows), args.model))
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="synthetic:llama-8b")
    parser.add_argument("--gpt-fast", default="", help="a checkout of pytorch-labs/gpt-fast (for the gpt-fast rows)")
    parser.add_argument("--out", default="results/peers")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--contestants", default=",".join(CONTESTANTS),
                        type=lambda text: [name for name in text.split(",") if name])
    parser.add_argument("--timeout", type=float, default=300, help="seconds per contestant's process")
    parser.add_argument("--bench-args", default="", help="more core.bench arguments for our rows, one string")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--json", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = [name for name in args.contestants if name not in CONTESTANTS]
    if unknown:
        parser.error(f"unknown contestant {', '.join(unknown)}; choose from {', '.join(CONTESTANTS)}")
    if any(name.startswith("gpt-fast") for name in args.contestants) and not args.gpt_fast:
        parser.error("the gpt-fast rows need --gpt-fast PATH (a checkout of pytorch-labs/gpt-fast)")
    return args


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"batch": 1, "prompt_tokens": args.prompt_tokens, "max_new_tokens": args.max_new_tokens,
            "trials": args.trials, "device": args.device, "bench_args": args.bench_args}


# --- the parent: one process per contestant -------------------------------------------------------------------------

def command_for(name: str, args: argparse.Namespace, report: Path) -> list[str]:
    """The command line that runs contestant `name` and writes its report to `report`."""
    if name in OURS:
        mode = name.removeprefix("ours-")
        return [sys.executable, "-m", "core.bench", "--model", args.model, "--device", args.device, "--cache",
                "static", "--compile", mode, "--prompt-tokens", str(args.prompt_tokens), "--max-new-tokens",
                str(args.max_new_tokens), "--ignore-eos", "--trials", str(args.trials), "--json", str(report),
                *args.bench_args.split()]
    return [sys.executable, str(Path(__file__).resolve()), "--child", name, "--model", args.model, "--device",
            args.device, "--gpt-fast", args.gpt_fast, "--trials", str(args.trials), "--prompt-tokens",
            str(args.prompt_tokens), "--max-new-tokens", str(args.max_new_tokens), "--json", str(report)]


def run_contestant(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    report = out / f"{name}-{args.model.split(':')[-1]}.json"
    command = command_for(name, args, report)
    began = time.perf_counter()
    print(f"=== {name}: {' '.join(command)}", flush=True)
    try:
        done = subprocess.run(command, cwd=ROOT, timeout=args.timeout, capture_output=True, text=True,
                              env=fresh_caches(report.stem))
        failure = "" if done.returncode == 0 else f"exit {done.returncode}: {last_line(done.stderr)}"
        log = done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        failure, log = f"ran past {args.timeout:.0f} s", str(expired.stdout or "") + str(expired.stderr or "")
    (out / f"{report.stem}.log").write_text(log, encoding="utf-8")
    row: dict[str, Any] = {"name": name, "command": command, "wall_s": round(time.perf_counter() - began, 1)}
    if not failure and report.exists():
        row.update(read_rates(name, json.loads(report.read_text(encoding="utf-8"))))
    else:
        row["error"] = failure or "wrote no report"
    print(f"    {row.get('decode_tokens_per_s') or row.get('error')}", flush=True)
    return row


def fresh_caches(name: str) -> dict[str, str]:
    """The environment with new, empty inductor and Triton caches: each contestant compiles from nothing."""
    folder = Path(tempfile.mkdtemp(prefix=f"peers-{name}-"))
    return {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
            "TRITON_CACHE_DIR": str(folder / "triton")}


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def read_rates(name: str, report: dict[str, Any]) -> dict[str, Any]:
    """The rates of a contestant's report: core.bench's for ours (pipelined, naive beside it), the child's for peers."""
    if name not in OURS:
        return {key: report[key] for key in ("decode_tokens_per_s", "decode_tokens_per_s_all", "tokens_per_s",
                                              "tokens_per_s_all", "warm_up_s", "new_tokens", "note")}
    summary = report["summary"]
    pipelined, naive = summary["pipelined"], summary.get("naive") or {}
    return {"decode_tokens_per_s": pipelined["decode_tokens_per_s"],
            "decode_tokens_per_s_all": pipelined["decode_tokens_per_s_all"],
            "tokens_per_s": pipelined["tokens_per_s"], "tokens_per_s_all": pipelined["tokens_per_s_all"],
            "naive_decode_tokens_per_s": naive.get("decode_tokens_per_s"),
            "kernel_ms_per_step": pipelined.get("kernel_ms_per_step"),
            "warm_up_s": round(sum(run["wall_ms"] for run in report["warmup"].values()) / 1000, 2),
            "note": "core.bench's pipelined loop"}


def peers_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per contestant: its median decode and end-to-end rates and its decode rate over ours."""
    reference = next((row.get("decode_tokens_per_s") for row in rows if row["name"] == REFERENCE), None)
    table = []
    for row in rows:
        decode = row.get("decode_tokens_per_s")
        table.append({"contestant": row["name"], "decode_tokens_per_s": decode,
                      "tokens_per_s": row.get("tokens_per_s"),
                      "of_ours": decode / reference if decode and reference else None,
                      "error": row.get("error")})
        if row.get("naive_decode_tokens_per_s"):
            naive = row["naive_decode_tokens_per_s"]
            table.append({"contestant": f"{row['name']} (naive loop)", "decode_tokens_per_s": naive,
                          "tokens_per_s": None, "of_ours": naive / reference if reference else None, "error": None})
    return table


def format_table(table: list[dict[str, Any]], model: str) -> str:
    lines = [f"{model}, batch 1: decode tok/s (median of the timed runs), end-to-end tok/s, and decode over ours",
             f"{'contestant':<36} {'decode':>9} {'e2e':>9} {'of ours':>8}"]
    for row in table:
        if row["error"]:
            lines.append(f"{row['contestant']:<36} failed: {row['error']}")
            continue
        lines.append(f"{row['contestant']:<36} {fmt(row['decode_tokens_per_s'], '.1f'):>9} "
                     f"{fmt(row['tokens_per_s'], '.1f'):>9} {fmt(row['of_ours'], '.3f'):>8}")
    return "\n".join(lines)


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


# --- the children: one peer, timed the same way --------------------------------------------------------------------

def run_child(args: argparse.Namespace) -> int:
    import torch

    device = torch.device(args.device)
    if args.child == "hf-generate":
        generate, note = hf_generate_peer(args, device)
    else:
        generate, note = gpt_fast_peer(args, device)
    runs = [timed(generate, device) for _ in range(1 + args.trials)]
    warm_up, trials = runs[0], runs[1:]
    report = {"contestant": args.child, "note": note, "warm_up_s": round(warm_up["total_s"], 2),
              "new_tokens": trials[0]["new_tokens"], "trials": trials,
              **rates_of(trials)}
    Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(json.dumps({key: report[key] for key in ("decode_tokens_per_s", "tokens_per_s", "warm_up_s")}))
    return 0


def rates_of(trials: list[dict[str, Any]]) -> dict[str, Any]:
    decode = [(t["new_tokens"] - 1) / t["decode_s"] for t in trials]
    e2e = [t["new_tokens"] / t["total_s"] for t in trials]
    return {"decode_tokens_per_s": statistics.median(decode), "decode_tokens_per_s_all": decode,
            "tokens_per_s": statistics.median(e2e), "tokens_per_s_all": e2e}


class FirstToken:
    """When the first new token is known on the host: one device synchronisation, at the first mark of a run."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.at: float | None = None

    def mark(self) -> None:
        if self.at is None:
            synchronize(self.device)
            self.at = time.perf_counter()


def timed(generate: Callable[[FirstToken], int], device: Any) -> dict[str, Any]:
    """One run of `generate` (which calls the clock's mark after its first token and returns the new tokens)."""
    clock = FirstToken(device)
    synchronize(device)
    began = time.perf_counter()
    new_tokens = generate(clock)
    synchronize(device)
    ended = time.perf_counter()
    first = clock.at if clock.at is not None else ended
    return {"new_tokens": new_tokens, "total_s": ended - began, "prefill_s": first - began, "decode_s": ended - first}


def synchronize(device: Any) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def prompt_ids(args: argparse.Namespace, device: Any) -> Any:
    import torch

    generator = torch.Generator().manual_seed(1234)
    return torch.randint(0, 1024, (1, args.prompt_tokens), generator=generator).to(device)


def hf_generate_peer(args: argparse.Namespace, device: Any) -> tuple[Callable[[FirstToken], int], str]:
    import torch
    from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

    sys.path.insert(0, str(ROOT))
    from core.models.loading import load_model

    loaded = load_model(args.model, device=device, hf_modules=True)
    ids = prompt_ids(args, device)
    mask = torch.ones_like(ids)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, do_sample=False, cache_implementation="static",
                              eos_token_id=None, pad_token_id=loaded.tokenizer.pad_token_id)

    class Mark(StoppingCriteria):
        def __init__(self, clock: FirstToken) -> None:
            self.clock = clock
            self.never: Any = None

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            self.clock.mark()
            if self.never is None:
                self.never = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
            return self.never

    def generate(clock: FirstToken) -> int:
        with torch.inference_mode():
            out = loaded.model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                        stopping_criteria=StoppingCriteriaList([Mark(clock)]))
        return int(out.shape[1] - ids.shape[1])

    return generate, "transformers generate(), cache_implementation=static (its own compile), transformers' modules"


def gpt_fast_peer(args: argparse.Namespace, device: Any) -> tuple[Callable[[FirstToken], int], str]:
    import torch

    gf_generate, gf_model = import_gpt_fast(Path(args.gpt_fast))
    shape = args.model.split(":")[-1]
    name = GPT_FAST_CONFIGS.get(shape)
    if name is None:
        raise SystemExit(f"peers: no gpt-fast config for {shape}; known: {', '.join(GPT_FAST_CONFIGS)}")
    gf_model.transformer_configs.setdefault("llama-3.2-1b", GPT_FAST_LLAMA_1B)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = gf_model.Transformer.from_name(name)
    torch.set_default_dtype(torch.float32)
    model = model.to(device=device, dtype=torch.bfloat16).eval().requires_grad_(False)
    if torch.device(device).type == "cuda":  # as gpt-fast's main() compiles it
        gf_generate.decode_one_token = torch.compile(gf_generate.decode_one_token, mode="reduce-overhead",
                                                     fullgraph=True)
    prompt = prompt_ids(args, device).view(-1)
    sampling = GPT_FAST_SAMPLING[args.child]
    original_decode = gf_generate.decode_n_tokens

    def generate(clock: FirstToken) -> int:
        def decode_n_tokens(*positional: Any, **keywords: Any) -> Any:
            clock.mark()
            return original_decode(*positional, **keywords)

        gf_generate.decode_n_tokens = decode_n_tokens
        try:
            torch.manual_seed(1234)
            seq, _ = gf_generate.generate(model, prompt, args.max_new_tokens, batch_size=1, interactive=False,
                                          draft_model=None, **sampling)
        finally:
            gf_generate.decode_n_tokens = original_decode
        return int(seq.shape[-1] - prompt.shape[-1])

    return generate, f"gpt-fast generate(), config {name}, {sampling}, decode_one_token reduce-overhead fullgraph"


def import_gpt_fast(path: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """gpt-fast's generate and model modules from a checkout; its tokenizer's packages are stubbed (unused here)."""
    if not (path / "generate.py").is_file() or not (path / "model.py").is_file():
        raise SystemExit(f"peers: {path} is not a gpt-fast checkout (no generate.py and model.py)")
    for missing in ("sentencepiece", "tiktoken", "tiktoken.load"):
        try:
            __import__(missing)
        except ImportError:
            stub = types.ModuleType(missing)
            stub.load_tiktoken_bpe = None  # type: ignore[attr-defined]
            sys.modules[missing] = stub
    sys.path.insert(0, str(path))
    import generate as gf_generate  # gpt-fast's own module names
    import model as gf_model

    return gf_generate, gf_model


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
