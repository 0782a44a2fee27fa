"""The Gradio page: controls, two streaming panes, live charts, summary, history, Explain, and Replay.

Everything the page shows comes from `dashboard.runner` (one queue, one device user at a time) and
`dashboard.charts` (figures from plain data). `build_demo(runner)` builds the page without launching it, so tests
can serve it in-process.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from core.generation import COMPILE_MODES
from dashboard import charts
from dashboard.runner import (
    DEFAULT_PROMPT,
    LOADING,
    SUMMARY_HEADERS,
    Job,
    Runner,
    RunSettings,
    cli_command,
    describe_failure,
    headline,
    parse_report,
    public_report,
    summary_rows,
    timeline_from_report,
)

EXAMPLE_PROMPTS = (
    DEFAULT_PROMPT,
    "What is the capital of France?",
    "Explain in three sentences why the sky is blue.",
    "List five uses for a paperclip.",
    "Write a haiku about waiting for a GPU.",
)
UI_COMPILE_MODES = tuple(m for m in COMPILE_MODES if m != "max-autotune-no-cudagraphs")
GREEDY, SAMPLED = "greedy", "seeded sampling"
SUMMARY_WIDTHS = ["13%", "9%", "9%", "9%", "10%", "10%", "9%", "10%", "10%", "11%"]
HISTORY_COLUMNS = ("run", "status", "model", "batch", "cache", "compile", "lag", "naive_tok_s", "pipelined_tok_s",
                   "hf_tok_s", "speedup", "identical", "clock")
CSS = """
.pane textarea { font-family: ui-monospace, monospace; font-size: 13px; }
#status { min-height: 2.2em; }
.rate { font-size: 15px; }
"""

EXPLAIN = """
### What is the sync?
Every decode step, the **naive** loop asks the device whether all sequences have finished (`.item()` on a flag that
lives on the GPU). To answer, the host must wait until the GPU has finished that step, so it cannot queue the next
step meanwhile: the GPU idles while Python prepares the next launch, step after step (the saw-blade).
The **pipelined** loop copies the flag and the new tokens asynchronously into pinned host memory and reads them
*lag* steps later. The host keeps the GPU's queue full; it may compute up to *lag* steps past the end, which are
discarded and never shown. Everything else (prefill, the decode step, cache, compile, sampling, stop rules) is
shared code, so under greedy decoding both loops produce the same tokens and any speed difference is the sync.

### What each control does
- **Model**: a built-in spec (`synthetic:*` are real architectures with random weights), an HF id or a local path.
- **Max new tokens / batch size / ignore EOS**: how long a run is; ignore EOS makes it run the full length so the
  charts have something to show.
- **Greedy or seeded sampling**: sampling uses temperature, top-k and top-p with a fixed seed, so both loops draw
  the same tokens.
- **StaticCache**: a preallocated KV cache of fixed shape. `torch.compile` needs it (a growing cache would
  recompile every step), so choosing a compile mode turns it on.
- **Compile**: `torch.compile` mode. `reduce-overhead` and `max-autotune` capture CUDA graphs (NVIDIA GPU only; on
  the CPU they fall back to `default`, with a notice). Compilation happens in the untimed warm-up and is reported
  as *compile ms*. `step-graph` captures the whole decode step (inductor kernels) in one CUDA graph.
- **Pipeline lag**: how many steps after queueing a step the pipelined loop reads its stop flag.
- **Streams**: 2 puts the device-to-host copies on a second CUDA stream, out of the compute stream's way.
- **Trials**: timed repetitions after a warm-up, in alternating order; the table shows medians.
- **Include HF generate**: transformers' own `generate()` with the same cache and compile settings (host-timed).
  On CUDA it also runs `generate()` with its `DeferredStopCheck` forced on (transformers enables it only on Apple's
  mps): its speed, and whether its tokens match ours, show in the summary.
- **Include no-check baseline**: a loop that never asks whether generation is over (it runs all max-new-tokens
  steps and looks at the tokens at the end): the upper bound of what removing the sync can give.

### Why NVML utilization is coarse
`nvidia-smi`-style utilization is the share of a sample period (1/6 s to 1 s, by product) in which *any* kernel
ran. It reads 100% even if one small kernel kept a single SM busy, and it cannot resolve gaps of tens of
microseconds between steps. The exact picture comes from CUDA events recorded around every step: the **idle gap**
chart shows how long the GPU waited for the host before each step. On a machine without an NVIDIA GPU there are no
CUDA events; step times are then measured on the host clock, and the charts say so.

### Reproduce any number
A run here is `core.bench.compare`, the same code as the command line; the command under the summary repeats the
run headless (add `--json results.json` and open the file in the **Replay** tab).
"""


@dataclass
class PageConfig:
    defaults: RunSettings
    replay_files: dict[str, Path]
    live_interval_s: float = 0.25
    chart_interval_s: float = 1.0
    download_dir: Path | None = None


class Dashboard:
    """Event handlers; holds the runner and the page's configuration."""

    def __init__(self, runner: Runner, config: PageConfig):
        self.runner = runner
        self.config = config
        self.download_dir = config.download_dir or Path(tempfile.mkdtemp(prefix="syncscope-downloads-"))
        self.notes: list[str] = []  # server-level notices for the banner (e.g. a share link that failed)
        self.c: dict[str, Any] = {}  # Compare tab components, by name
        self.r: dict[str, Any] = {}  # Replay tab components

    # ---- banner

    def banner(self) -> str:
        runner = self.runner
        monitor = runner.monitor
        lines = [f"**Note:** {note}" for note in self.notes]
        if runner.model_spec:
            lines.append(f"**Model:** `{runner.model_spec}` on {runner.device_label()}.")
        loading = [j for j in runner.pending() if j.kind == "load" or j.state == LOADING]
        if loading:
            lines.append(f"**Loading model** `{loading[0].model}` (the first load of the default model converts its "
                         "GGUF, ~20 s; later loads take about a second)…")
        elif runner.last_load_error:
            lines.append(f"**Model load failed:** {runner.last_load_error}")
        if monitor is not None and not monitor.available:
            description = monitor.description.replace("No NVIDIA GPU found", "**No NVIDIA GPU found**", 1)
            lines.append(f"{description} Step times are measured on the host clock; there are no CUDA events, "
                         "GPU busy % or idle gaps to show.")
        elif monitor is not None:
            lines.append(f"**GPU:** {monitor.description}.")
        return "  \n".join(lines)

    def banner_tick(self) -> tuple[str, gr.Timer]:
        still_loading = any(j.kind == "load" for j in self.runner.pending())
        return self.banner(), gr.Timer(active=still_loading)

    # ---- run

    def run(self, model: str, prompt: str, max_new_tokens: Any, batch: Any, trials: Any, ignore_eos: bool,
            static_cache: bool, compile_mode: str, lag: Any, streams: Any, include_hf: bool,
            include_no_check: bool, sampling: str, seed: Any, temperature: Any, top_k: Any, top_p: Any,
            request: gr.Request) -> Iterator[dict]:
        """Queue a comparison and stream its progress until it finishes."""
        owner = _owner(request)
        settings = RunSettings(prompt=prompt, model=model, max_new_tokens=max_new_tokens, batch=batch,
                               trials=trials, ignore_eos=ignore_eos, static_cache=static_cache,
                               compile=compile_mode, lag=lag, streams=_streams(streams), include_hf=include_hf,
                               include_no_check=include_no_check,
                               sample=sampling == SAMPLED, seed=seed, temperature=temperature, top_k=top_k,
                               top_p=top_p)
        try:
            job = self.runner.submit(settings, owner=owner)
        except ValueError as exc:
            yield {self.c["status"]: f"**Not started:** {exc}"}
            return
        try:
            yield from self._follow(job, settings, owner)
        except Exception as exc:  # a bug in drawing must not take the page down; the run itself is unaffected
            yield {self.c["status"]: f"**The page could not show this run:** {describe_failure(exc)}"}

    def _follow(self, job: Job, settings: RunSettings, owner: str) -> Iterator[dict]:
        c = self.c
        last_chart = 0.0
        try:
            while not job.wait(self.config.live_interval_s):
                snap = self.runner.snapshot(job)
                update = self._live_update(snap)
                if time.monotonic() - last_chart >= self.config.chart_interval_s:
                    last_chart = time.monotonic()
                    update[c["tokens_plot"]] = charts.tokens_per_s_figure(snap)
                    update[c["device_plot"]] = charts.device_figure(snap)
                yield update
        finally:
            if not job.done:  # the page went away: free the device for the next user
                self.runner.cancel(job.id)
        yield self._final_update(job, settings, owner)

    def _live_update(self, snap: dict[str, Any]) -> dict:
        c = self.c
        update = {c["status"]: _status_md(snap)}
        for name in ("naive", "pipelined"):
            pane = snap.get("panes", {}).get(name)
            if pane:
                update[c[f"{name}_text"]] = pane["text"]
                update[c[f"{name}_rate"]] = _rate_md(name, pane)
        return update

    def _final_update(self, job: Job, settings: RunSettings, owner: str) -> dict:
        c = self.c
        snap = self.runner.snapshot(job)
        update = self._live_update(snap)
        report = job.report
        figures = charts.all_figures(snap, report)
        update.update(zip((c["tokens_plot"], c["device_plot"], c["steps_plot"], c["gap_plot"]), figures))
        update[c["headline"]] = headline_md(report) if report else ""
        update[c["summary"]] = _table(report) if report else []
        update[c["command"]] = self._command(settings, job) if report else ""
        update[c["history"]] = self._history_table(owner)
        update[c["banner"]] = self.banner()
        csv_path, json_path = self._write_history(owner)
        update[c["csv"]] = csv_path
        update[c["json"]] = json_path
        update[c["report_file"]] = self._write_report(owner, report) if report else None
        return update

    def _command(self, settings: RunSettings, job: Job) -> str:
        spec = (job.report or {}).get("model", {}).get("spec") or job.model or self.runner.model_spec or "?"
        return (cli_command(settings, spec, self.runner.device, self.runner.dtype, self.runner.uses_cuda)
                + " --json results.json")

    def cancel(self, request: gr.Request) -> str:
        owner = _owner(request)
        jobs = [j for j in self.runner.pending() if j.owner == owner and j.kind == "run"]
        if not jobs:
            return "Nothing to cancel."
        for job in jobs:
            self.runner.cancel(job.id, owner=owner)
        return "Cancelling… (a run stops within one decode step; a warm-up or HF generate finishes its pass first)"

    # ---- history and downloads

    def _history_table(self, owner: str) -> list[list[Any]]:
        return [[_cell(row.get(k)) for k in HISTORY_COLUMNS] for row in self.runner.history(owner)]

    def _owner_dir(self, owner: str) -> Path:
        # Session ids come from the client: hash them rather than use them in a path.
        folder = self.download_dir / hashlib.sha256(owner.encode()).hexdigest()[:16]
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _write_history(self, owner: str) -> tuple[str, str]:
        folder = self._owner_dir(owner)
        csv_path, json_path = folder / "syncscope-history.csv", folder / "syncscope-history.json"
        csv_path.write_text(self.runner.history_csv(owner), encoding="utf-8")
        json_path.write_text(self.runner.history_json(owner), encoding="utf-8")
        return str(csv_path), str(json_path)

    def _write_report(self, owner: str, report: dict[str, Any]) -> str:
        path = self._owner_dir(owner) / "syncscope-report.json"
        path.write_text(json.dumps(public_report(report), indent=1), encoding="utf-8")
        return str(path)

    # ---- option coupling

    @staticmethod
    def on_compile(compile_mode: str, static_cache: bool) -> tuple[bool, str]:
        if compile_mode != "off" and not static_cache:
            return True, "Note: compile needs StaticCache (a growing cache would recompile every step): turned it on."
        return static_cache, ""

    @staticmethod
    def on_static(static_cache: bool, compile_mode: str) -> tuple[str, str]:
        if not static_cache and compile_mode != "off":
            return "off", "Note: without StaticCache compile cannot work: compile turned off."
        return compile_mode, ""

    # ---- replay

    def replay_upload(self, data: bytes | None) -> dict:
        if not data:
            return {self.r["status"]: "Choose a JSON file written by `python -m core.bench --json`."}
        try:
            report = parse_report(data)
        except ValueError as exc:
            return {self.r["status"]: f"**Cannot open this file:** {exc}"}
        return self._replay(report, "the uploaded file")

    def replay_bundled(self, name: str | None) -> dict:
        path = self.config.replay_files.get(name or "")
        if path is None:
            return {self.r["status"]: "Choose one of the bundled results."}
        try:
            report = parse_report(path.read_bytes())
        except (OSError, ValueError) as exc:
            return {self.r["status"]: f"**Cannot open {name}:** {exc}"}
        return self._replay(report, name)

    def _replay(self, report: dict[str, Any], source: str) -> dict:
        r = self.r
        timeline = timeline_from_report(report)
        figures = charts.all_figures(timeline, report)
        env, model = report.get("environment", {}), report.get("model", {})
        where = env.get("gpu") or env.get("device") or "unknown device"
        status = (f"Showing {source}: `{model.get('spec', '?')}` on {where} ({env.get('dtype', '?')}), "
                  f"{report.get('request', {}).get('trials', '?')} trial(s), created {report.get('created', '?')}.")
        update = {r["status"]: status, r["headline"]: headline_md(report), r["summary"]: _table(report)}
        update.update(zip((r["tokens_plot"], r["device_plot"], r["steps_plot"], r["gap_plot"]), figures))
        return update

    c: dict[str, Any]
    r: dict[str, Any]


def headline_md(report: dict[str, Any]) -> str:
    facts = headline(report)
    speedup = facts["speedup"]
    ratio = f"**pipelined / naive = {speedup:.3f}×**" if speedup else "pipelined / naive: –"
    identical = "**outputs identical: yes**" if facts["identical"] else "**outputs identical: NO**"
    clock = "GPU clock (CUDA events)" if facts["clock"] == "cuda-events" else "host clock (no CUDA events)"
    notices = list(report.get("dashboard", {}).get("notices") or [])
    if not all(report.get("self_consistent", {}).get(n, True) for n in report.get("summary", {})):
        notices.append("NO*: that contestant's own trials differ from each other (run-to-run numerics at near-ties "
                       "of the logits), so a mismatch there is not the loop's doing")
    notes = "".join(f"  \nNote: {n}" for n in notices)
    return f"{ratio} · {identical} · steps timed on the {clock}{notes}"


def _table(report: dict[str, Any]) -> list[list[Any]]:
    return [[_cell(v) for v in row] for row in summary_rows(report)]


def _cell(value: Any) -> Any:
    return "–" if value is None else value


def _status_md(snap: dict[str, Any]) -> str:
    notices = "".join(f"  \nNote: {n}" for n in snap.get("notices") or [])
    return f"**{snap.get('status', '')}**{notices}"


def _rate_md(name: str, pane: dict[str, Any]) -> str:
    rate = pane.get("tokens_per_s")
    number = f"{rate:,.1f} tok/s" if rate else "– tok/s"
    live = " (live)" if pane.get("live") else ""
    return f"**{name}** · {number}{live}"


def _owner(request: gr.Request | None) -> str:
    return (getattr(request, "session_hash", None) or "anonymous") if request is not None else "anonymous"


def _streams(value: Any) -> Any:
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


# ------------------------------------------------------------------------------------------------- layout

def build_demo(runner: Runner, *, defaults: RunSettings | None = None, replay_files: Mapping[str, Path] | None = None,
               live_interval_s: float = 0.25, chart_interval_s: float = 1.0, title: str = "syncscope") -> gr.Blocks:
    """The page for `runner`; launch it with `demo.queue(...)` and `demo.launch(...)` (see app.py)."""
    config = PageConfig(defaults=defaults or RunSettings(), replay_files=dict(replay_files or {}),
                        live_interval_s=live_interval_s, chart_interval_s=chart_interval_s)
    app = Dashboard(runner, config)
    charts.warm_up()
    with gr.Blocks(title=title, analytics_enabled=False) as demo:
        gr.Markdown("# syncscope: where does the GPU wait for the host?\nThe naive decode loop (one host sync per "
                    "step) and the pipelined loop (stop flag read a few steps late), side by side, timed fairly.")
        banner = gr.Markdown(app.banner(), elem_id="banner")
        timer = gr.Timer(1.0)
        timer.tick(app.banner_tick, outputs=[banner, timer], api_visibility="private", show_progress="hidden")
        demo.load(app.banner, outputs=[banner], api_visibility="private", show_progress="hidden")
        with gr.Tabs():
            with gr.Tab("Compare", id="compare"):
                app.c = _compare_tab(app, runner, config.defaults, banner)
            with gr.Tab("Replay", id="replay", elem_id="replay-tab"):
                app.r = _replay_tab(app, config)
        with gr.Accordion("Explain: the sync, the toggles, and why NVML utilization is coarse", open=False):
            gr.Markdown(EXPLAIN, elem_id="explain")
    demo.dashboard = app  # type: ignore[attr-defined]
    return demo


def _compare_tab(app: Dashboard, runner: Runner, d: RunSettings, banner: gr.Markdown) -> dict[str, Any]:
    c: dict[str, Any] = {"banner": banner}
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            inputs = _controls(app, runner, d)
            with gr.Row():
                c["run_btn"] = gr.Button("Run", variant="primary", elem_id="run-btn")
                c["cancel_btn"] = gr.Button("Cancel", variant="stop", elem_id="cancel-btn")
        with gr.Column(scale=2):
            c["status"] = gr.Markdown("Press **Run** to compare the two loops.", elem_id="status")
            with gr.Row():
                for name in ("naive", "pipelined"):
                    with gr.Column():
                        c[f"{name}_rate"] = gr.Markdown(f"**{name}** · – tok/s", elem_id=f"{name}-rate",
                                                        elem_classes=["rate"])
                        c[f"{name}_text"] = gr.Textbox(label=f"{name} loop output", lines=9, max_lines=9,
                                                       interactive=False, elem_id=f"{name}-text",
                                                       elem_classes=["pane"])
            c["headline"] = gr.Markdown(elem_id="headline")
            c["summary"] = gr.Dataframe(headers=list(SUMMARY_HEADERS), value=[], interactive=False, wrap=True,
                                        elem_id="summary", label="Summary (medians over trials)",
                                        column_widths=SUMMARY_WIDTHS)
            c["command"] = gr.Textbox(label="Reproduce from the command line", interactive=False,
                                      elem_id="command", buttons=["copy"])
    with gr.Row():
        c["tokens_plot"] = gr.Plot(charts.tokens_per_s_figure({}), elem_id="plot-tokens", show_label=False)
        c["device_plot"] = gr.Plot(charts.device_figure({"monitor": _idle_monitor(runner)}), elem_id="plot-device",
                                   show_label=False)
    with gr.Row():
        c["steps_plot"] = gr.Plot(charts.step_latency_figure({}), elem_id="plot-steps", show_label=False)
        c["gap_plot"] = gr.Plot(charts.gap_figure({}), elem_id="plot-gap", show_label=False)
    with gr.Accordion("Run history (this session)", open=True):
        c["history"] = gr.Dataframe(headers=list(HISTORY_COLUMNS), value=[], interactive=False, elem_id="history")
        with gr.Row():
            c["csv"] = gr.DownloadButton("History as CSV", value=None, elem_id="download-csv", size="sm")
            c["json"] = gr.DownloadButton("History as JSON", value=None, elem_id="download-json", size="sm")
            c["report_file"] = gr.DownloadButton("Last run's report (JSON, opens in Replay)", value=None,
                                                 elem_id="download-report", size="sm")
    outputs = [c[k] for k in ("status", "naive_rate", "naive_text", "pipelined_rate", "pipelined_text", "headline",
                              "summary", "command", "tokens_plot", "device_plot", "steps_plot", "gap_plot",
                              "history", "csv", "json", "report_file", "banner")]
    c["run_btn"].click(app.run, inputs=inputs, outputs=outputs, api_name="run", concurrency_limit=runner.max_queue,
                       concurrency_id="run", show_progress="minimal")
    c["cancel_btn"].click(app.cancel, outputs=[c["status"]], api_name="cancel", queue=False)
    return c


def _controls(app: Dashboard, runner: Runner, d: RunSettings) -> list[Any]:
    model = gr.Dropdown(runner.model_choices(), value=d.model or runner.model_spec or runner.model_choices()[0],
                        label="Model", allow_custom_value=runner.allow_any_model, elem_id="model",
                        info="built-in, HF id or local path" if runner.allow_any_model else "allowed models only")
    prompt = gr.Textbox(d.prompt, label="Prompt", lines=3, elem_id="prompt")
    gr.Examples([[p] for p in EXAMPLE_PROMPTS], inputs=[prompt], label="Example prompts")
    with gr.Row():
        max_new = gr.Number(d.max_new_tokens, label="Max new tokens", elem_id="max-new-tokens")
        batch = gr.Number(d.batch, label="Batch size", elem_id="batch")
    with gr.Row():
        trials = gr.Number(d.trials, label="Trials", elem_id="trials")
        ignore_eos = gr.Checkbox(d.ignore_eos, label="Ignore EOS (always run to max)", elem_id="ignore-eos")
    with gr.Accordion("Loop options", open=True):
        with gr.Row():
            static = gr.Checkbox(d.static_cache, label="StaticCache", elem_id="static-cache")
            compile_mode = gr.Dropdown(list(UI_COMPILE_MODES), value=d.compile, label="Compile", elem_id="compile")
        with gr.Row():
            lag = gr.Number(d.lag, label="Pipeline lag (steps)", elem_id="lag")
            streams = gr.Radio(["1", "2"], value=str(d.streams), label="Streams", elem_id="streams")
        with gr.Row():
            include_hf = gr.Checkbox(d.include_hf, elem_id="include-hf",
                                     label="Include HF generate() (on CUDA also with its DeferredStopCheck on)")
            no_check = gr.Checkbox(d.include_no_check, label="Include no-check baseline", elem_id="include-no-check")
        note = gr.Markdown(elem_id="options-note")
    with gr.Accordion("Sampling", open=False):
        sampling = gr.Radio([GREEDY, SAMPLED], value=SAMPLED if d.sample else GREEDY, label="Decoding",
                            elem_id="sampling")
        with gr.Row():
            seed = gr.Number(d.seed, label="Seed", elem_id="seed")
            temperature = gr.Number(d.temperature, label="Temperature", elem_id="temperature")
        with gr.Row():
            top_k = gr.Number(d.top_k, label="Top-k (0: off)", elem_id="top-k")
            top_p = gr.Number(d.top_p, label="Top-p", elem_id="top-p")
    compile_mode.input(app.on_compile, inputs=[compile_mode, static], outputs=[static, note],
                       api_visibility="private", queue=False)
    static.input(app.on_static, inputs=[static, compile_mode], outputs=[compile_mode, note],
                 api_visibility="private", queue=False)
    return [model, prompt, max_new, batch, trials, ignore_eos, static, compile_mode, lag, streams, include_hf,
            no_check, sampling, seed, temperature, top_k, top_p]


def _replay_tab(app: Dashboard, config: PageConfig) -> dict[str, Any]:
    r: dict[str, Any] = {}
    gr.Markdown("Open a report written by `python -m core.bench ... --json results.json` (for instance on a "
                "headless GPU server), or one downloaded from this page. The file is only parsed as JSON.")
    with gr.Row():
        upload = gr.File(label="Report JSON", file_types=[".json"], type="binary", elem_id="replay-upload")
        if config.replay_files:
            with gr.Column():
                bundled = gr.Dropdown(sorted(config.replay_files), label="Bundled results", elem_id="replay-bundled")
                open_btn = gr.Button("Open", elem_id="replay-open")
    r["status"] = gr.Markdown(elem_id="replay-status")
    r["headline"] = gr.Markdown(elem_id="replay-headline")
    r["summary"] = gr.Dataframe(headers=list(SUMMARY_HEADERS), value=[], interactive=False, wrap=True,
                                elem_id="replay-summary", label="Summary (medians over trials)",
                                column_widths=SUMMARY_WIDTHS)
    with gr.Row():
        r["tokens_plot"] = gr.Plot(elem_id="replay-plot-tokens", show_label=False)
        r["device_plot"] = gr.Plot(elem_id="replay-plot-device", show_label=False)
    with gr.Row():
        r["steps_plot"] = gr.Plot(elem_id="replay-plot-steps", show_label=False)
        r["gap_plot"] = gr.Plot(elem_id="replay-plot-gap", show_label=False)
    outputs = [r[k] for k in ("status", "headline", "summary", "tokens_plot", "device_plot", "steps_plot",
                              "gap_plot")]
    upload.upload(app.replay_upload, inputs=[upload], outputs=outputs, api_name="replay")
    if config.replay_files:
        open_btn.click(app.replay_bundled, inputs=[bundled], outputs=outputs, api_name="replay_bundled")
    return r


def _idle_monitor(runner: Runner) -> dict[str, Any]:
    monitor = runner.monitor
    if monitor is None:
        return {"kind": "none", "description": "Utilization monitoring is off.", "samples": []}
    return {"kind": monitor.kind, "description": f"{monitor.description} The chart fills during a run.",
            "samples": []}
