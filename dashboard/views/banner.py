"""The page's banner: this server's state (model, loads, engine, GPU), the same for every visitor, so it never holds
one user's errors; on Replay, what the replayed report's device leads one to expect in place of this server's."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from core.documents.upgrades import upgrade_report
from core.report.explain import report_device_type
from core.request.options import DECODE_LAYERS_TRANSFORM, STEP_GRAPH
from dashboard.service.jobs import LOAD, LOADING
from dashboard.service.runner import Runner
from dashboard.views.report_text import plain

REPORT_ON_CPU = ("**The report shown in Replay was measured on the CPU** ({where}), where host and device are one "
                 "processor: the sync the pipelined loop removes costs nothing there, and no difference between the "
                 "loops is expected. The lines above describe this server.")
REPORT_ON_GPU = ("**The report shown in Replay was measured on {where}**: there the host and the GPU are separate, so "
                 "a per-step sync can leave the GPU waiting; its verdict says whether removing it helped. The lines "
                 "above describe this server.")
REPORT_NOWHERE = ("**The report shown in Replay does not say where it was measured.** The lines above describe this "
                  "server, not that machine.")
ONE_PROCESSOR = ("**On the CPU, host and device are one processor:** there is no separate device to wait for, so the "
                 "sync the pipelined loop removes costs nothing here and no difference between the loops is "
                 "expected. A GPU server shows the effect.")
_COMPILED_ATTENTION = re.compile(r"compiled decode attention: ([\w-]+)")
# How each decode attention kernel (core.kernels.attention, SYNCSCOPE_DECODE_ATTENTION) reads the KV cache, in words.
ATTENTION_WORDS = {
    "reduce": "as products and sums that torch.compile turns into reduction kernels",
    "split": "in chunks of 64 keys, as products and sums that torch.compile turns into reduction kernels",
    "sdpa": "with PyTorch's fused attention kernel",
    "triton": "with one hand-written Triton kernel per layer",
}


class ServerBanner:
    """The banner's text for `runner`'s server, with its server-level notes (e.g. a share link that failed)."""

    def __init__(self, runner: Runner):
        self.runner = runner
        self.notes: list[str] = []

    def for_view(self, view: Any = None) -> str:
        """The banner for what this page shows (`view`, its view_state): on Replay, the replayed report's device
        replaces what this server's device leads one to expect."""
        shown = view.get("replay") if isinstance(view, dict) and view.get("tab") == "replay" else None
        return self.text(shown if isinstance(shown, dict) else None)

    def text(self, replayed: dict[str, Any] | None = None) -> str:
        """The server's state; with `replayed` (report_device of a report shown in Replay), what that report's
        device leads one to expect in place of this server's."""
        runner, monitor = self.runner, self.runner.monitor
        lines = [f"**Note:** {plain(note)}" for note in self.notes]
        if runner.model_spec:
            lines.append(f"**Model:** {plain(runner.public_name(runner.model_spec))} on "
                         f"{plain(model_line(runner.device_label()))}")
        loading = [j for j in runner.pending() if j.work == LOAD or j.state == LOADING]
        if loading:
            lines.append(f"**Loading model {plain(runner.public_name(loading[0].model))}…**")
        elif not runner.engine_client.hello_event.is_set() and not runner.engine_trouble:
            lines.append("**Starting the engine process** (it imports torch, a few seconds)…")
        if runner.last_load_error and not loading:
            lines.append(f"**{plain(runner.last_load_error)}**" + ("" if runner.model_spec else
                                                                    " Choose a model and press Run to load one."))
        if runner.engine_trouble:
            lines.append(f"**Engine:** {plain(runner.engine_trouble)}")
        if monitor is not None and not monitor.available:
            lines.append(f"{plain(monitor.description)} Step times are measured on the host clock; there are no "
                         "CUDA events, GPU busy % or idle gaps to show.")
        elif monitor is not None:
            lines.append(f"**GPU:** {plain(monitor.description)}.")
        if replayed is not None:
            lines.append(replayed_line(replayed))
        elif not runner.uses_cuda:
            lines.append(ONE_PROCESSOR)
        return "  \n".join(lines)

    def on_tab(self, tab: str, view: Any) -> tuple[dict[str, Any], str]:
        """A tab was chosen: remember it in this page's view_state and redraw the banner for it."""
        view = {**(view if isinstance(view, dict) else {}), "tab": tab}
        return view, self.for_view(view)


def model_line(label: str) -> str:
    """The banner's model line from Runner.device_label: the compiled decode attention and the fused decoder layers
    run only inside compiled steps, so they are named as what those runs use, not among what every run runs."""
    notes = []
    match = _COMPILED_ATTENTION.search(label)
    if match is not None:
        label = _without(label, match.start(), match.end())
        notes.append(attention_note(match[1]))
    at = label.find(DECODE_LAYERS_TRANSFORM)
    if at >= 0:
        label = _without(label, at, at + len(DECODE_LAYERS_TRANSFORM))
        notes.append(f"With {STEP_GRAPH}, each decoder layer's decode step runs in six kernels.")
    return " ".join([f"{label}.", *notes])


def attention_note(kernel: str) -> str:
    """The compiled decode attention in words: each step reads the KV cache where it lies, rather than transformers'
    copy of it per query head, and how."""
    how = ATTENTION_WORDS.get(kernel, f"with the {kernel} kernel (SYNCSCOPE_DECODE_ATTENTION)")
    return f"With Compile on, decode attention reads the KV cache in place, without copying it per query head, {how}."


def _without(label: str, start: int, end: int) -> str:
    """The label's list of transforms without the one at [start, end)."""
    before, after = label[:start], label[end:]
    if before.endswith(", "):
        before = before[:-2]
    elif before.endswith("; "):
        before, after = (before, after[2:]) if after.startswith(", ") else (before[:-2], after)
    return before + after


def report_device(report: dict[str, Any]) -> dict[str, str]:
    """Where a report was measured: {"type": "cuda" or "cpu", "where": the GPU's name or the device}."""
    env = upgrade_report(report)["environment"]
    where = env.get("gpu") or env.get("device") or "unknown device"
    return {"type": report_device_type(report) or "unknown", "where": str(where)[:80]}


def replayed_line(device: Mapping[str, Any]) -> str:
    template = {"cuda": REPORT_ON_GPU, "cpu": REPORT_ON_CPU}.get(str(device.get("type")), REPORT_NOWHERE)
    return template.format(where=plain(device.get("where", "unknown device")))
