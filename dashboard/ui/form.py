"""The Compare tab's form: the run-option table (core.request.options.RUN_OPTIONS) as the page's controls, and back.

Each option gets a control in its group (`build_form`), two to a row, in the table's order; `to_widget` and
`from_widget` turn an option's value into what its control holds and back, and `page_values` gives the /run
endpoint's parameters for a form. The loop options note (`OptionsNote`) couples compile and StaticCache and says
what a CPU server runs in place of a choice that needs CUDA.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gradio as gr

from core.request.options import (
    CHOICE,
    CLI_ONLY,
    DEFAULT_PROMPT,
    FLAG,
    PAGE_GROUPS,
    RUN_OPTION,
    RUN_OPTIONS,
    WHOLE,
    GenerationOptions,
    RunOption,
    adapt_to_device,
    compile_needs_static_cache,
)
from core.request.run_schema import option_defaults
from dashboard.service.limits import LOCAL_LIMITS
from dashboard.service.runner import Runner
from dashboard.views.report_text import plain

EXAMPLE_PROMPTS = (
    DEFAULT_PROMPT,
    "Explain in three paragraphs how a lighthouse works.",
    "What is the capital of France?",
    "List ten uses for a paperclip, with a sentence on each.",
    "Write a haiku about waiting for a GPU.",
)
PAGE_OPTIONS = tuple(option for option in RUN_OPTIONS if option.group != CLI_ONLY)  # the form's fields, in order
GROUP_ACCORDIONS = {"loop": ("Loop options", True), "sampling": ("Sampling", False)}  # PAGE_GROUPS after "run"


@dataclass(frozen=True)
class Form:
    """The form's components: the run's inputs by name (the model, then PAGE_OPTIONS' controls in the table's
    order), Run and Cancel, and the note beside Run."""

    inputs: dict[str, Any]
    run_btn: Any
    cancel_btn: Any
    run_note: Any

    @property
    def model(self) -> Any:
        return self.inputs["model"]


class OptionsNote:
    """Option coupling, and what this server runs in place of a mode that needs CUDA (the loop options note)."""

    def __init__(self, runner: Runner):
        self.runner = runner

    def on_compile(self, compile_mode: str, static_cache: bool, streams: Any = 1) -> tuple[bool, str]:
        """Compile was chosen: StaticCache turned on where it needs it; the note says so, and what runs here."""
        coupling = ""
        if compile_needs_static_cache(compile_mode, from_widget(RUN_OPTION["cache"], static_cache)):
            static_cache = True
            coupling = "Note: compile needs StaticCache (a growing cache would recompile every step): turned it on."
        return static_cache, self.options_note(coupling, compile_mode, streams)

    def on_static(self, static_cache: bool, compile_mode: str, streams: Any = 1) -> tuple[str, str]:
        """StaticCache was toggled: compile turned off where it cannot work without it; the note says so."""
        coupling = ""
        if compile_needs_static_cache(compile_mode, from_widget(RUN_OPTION["cache"], static_cache)):
            compile_mode, coupling = "off", "Note: without StaticCache compile cannot work: compile turned off."
        return compile_mode, self.options_note(coupling, compile_mode, streams)

    def on_streams(self, streams: Any, compile_mode: str) -> str:
        return self.options_note("", compile_mode, streams)

    def options_note(self, coupling: str, compile_mode: str, streams: Any) -> str:
        """The loop options note: the coupling just made (or none), then what this server runs in place of each
        choice that needs CUDA."""
        lines = [coupling] if coupling else []
        lines += [f"On this CPU server: {plain(notice)}." for notice in self._device_notices(compile_mode, streams)]
        return "  \n".join(lines)

    def _device_notices(self, compile_mode: str, streams: Any) -> list[str]:
        """What a CPU runs in place of these choices (core.request.options.adapt_to_device's notices); none on CUDA."""
        if self.runner.uses_cuda:
            return []
        try:
            asked = GenerationOptions(compile=compile_mode, cache="static", streams=streams)
        except (TypeError, ValueError):  # a value the run's check will refuse, with its reason, at Run
            return []
        return adapt_to_device(asked, "cpu")[1]


def build_form(runner: Runner, d: Mapping[str, Any]) -> Form:
    """The model, the prompt, Run and Cancel, then a control per run option (core.request.options.RUN_OPTIONS) in its
    group, the loop options note wired to compile, StaticCache and streams."""
    model = gr.Dropdown(
        runner.model_choices(), value=d.get("model") or runner.model_spec or runner.model_choices()[0],
        label="Model", allow_custom_value=runner.allow_any_model, elem_id="model",
        info="built-in, HF id or local path" if runner.allow_any_model else "allowed models only")
    controls = {"prompt": gr.Textbox(d["prompt"], label="Prompt", lines=2, max_lines=6, elem_id="prompt")}
    with gr.Row(elem_id="run-row"):
        run_btn = gr.Button("Run", variant="primary", elem_id="run-btn", min_width=80)
        cancel_btn = gr.Button("Cancel", variant="stop", elem_id="cancel-btn", min_width=80)
    run_note = gr.Markdown(elem_id="run-note", label="run note", show_label=False)
    gr.Examples([[p] for p in EXAMPLE_PROMPTS], inputs=[controls["prompt"]], label="Example prompts")
    controls.update(_option_rows("run", d))
    if runner.limits != LOCAL_LIMITS:
        gr.Markdown(f"This server is shared, so a run may ask for {plain(runner.limits.describe())}.",
                    elem_id="limits")
    options_note = OptionsNote(runner)
    for group in PAGE_GROUPS[1:]:  # every group the table may name has a place: no option is left unrendered
        title, open_ = GROUP_ACCORDIONS.get(group, (group.capitalize(), False))
        with gr.Accordion(title, open=open_):
            controls.update(_option_rows(group, d))
            if group == "loop":
                # A CUDA-only default (app.py's flags) is named at once too.
                note = gr.Markdown(options_note.options_note("", d["compile"], d["streams"]), elem_id="options-note")
    _wire_options_note(options_note, controls, note)
    inputs = {"model": model, **{option.name: controls[option.name] for option in PAGE_OPTIONS}}
    return Form(inputs=inputs, run_btn=run_btn, cancel_btn=cancel_btn, run_note=run_note)


def _wire_options_note(options_note: OptionsNote, controls: Mapping[str, Any], note: Any) -> None:
    compile_mode, static, streams = controls["compile"], controls["cache"], controls["streams"]
    compile_mode.input(options_note.on_compile, inputs=[compile_mode, static, streams], outputs=[static, note],
                       api_visibility="private", queue=False)
    static.input(options_note.on_static, inputs=[static, compile_mode, streams], outputs=[compile_mode, note],
                 api_visibility="private", queue=False)
    streams.input(options_note.on_streams, inputs=[streams, compile_mode], outputs=[note], api_visibility="private",
                  queue=False)


def _option_rows(group: str, d: Mapping[str, Any]) -> dict[str, Any]:
    """The controls of one group's options, two to a row, in the table's order."""
    options = [option for option in PAGE_OPTIONS if option.group == group and option.name != "prompt"]
    controls = {}
    for start in range(0, len(options), 2):
        with gr.Row():
            for option in options[start:start + 2]:
                controls[option.name] = _control(option, d[option.name])
    return controls


def typed_whole(component: Any, choices: list[int] | None = None, description: str = "") -> Any:
    """`component` (a number field, a radio of numbers, a run picker) with an API type of integer. `gr.Number
    (precision=0)` would round what it is given (2.5 runs as 2, where the run's check refuses it with a reason), and
    gr.Radio and gr.Dropdown say "string" whatever their values; a subclass would make Gradio write a .pyi stub
    beside this file. The choices go into the description, not a JSON-schema enum: gradio_client writes an enum of
    integers as quoted strings (Literal['1', '2']), which the run then refuses."""
    said = f"one of {', '.join(map(str, choices))}" if choices else description
    info = {"type": "integer", **({"description": said} if said else {})}
    component.api_info = lambda: info  # read per instance when the page's API description is built
    return component


def run_picker(label: str, elem_id: str) -> Any:
    """A picker of one of the visitor's runs, by its number in their history (Diff two runs)."""
    return typed_whole(gr.Dropdown([], value=None, label=label, elem_id=elem_id), None,
                       "a run's number in your history (run 1 is your first)")


def _control(option: RunOption, value: Any) -> Any:
    """The page's control for one run option. No minimum/maximum on number fields: Gradio would refuse an
    out-of-range value with a bare "Error" badge, where the run's check says what is wrong and what is allowed."""
    elem_id = option.name.replace("_", "-")
    shown = to_widget(option, value)
    if option.kind == FLAG or option.name == "cache":
        return gr.Checkbox(shown, label=option.label, elem_id=elem_id)
    if option.kind == CHOICE:
        return gr.Dropdown(list(option.page_choices or option.choices), value=shown, label=option.label,
                           elem_id=elem_id)
    if option.choices:
        radio = gr.Radio([(str(choice), choice) for choice in option.choices], value=shown, label=option.label,
                         elem_id=elem_id)
        return typed_whole(radio, list(option.choices)) if option.kind == WHOLE else radio
    if option.kind == WHOLE:
        return typed_whole(gr.Number(shown, label=option.label, elem_id=elem_id))
    return gr.Number(shown, label=option.label, elem_id=elem_id)


def page_values(form: Mapping[str, Any]) -> dict[str, Any]:
    """The /run endpoint's parameters for `form` (run options by name and `model`; missing ones take their defaults):
    `gradio_client.Client(url).predict(**page_values(form), api_name="/run")`."""
    values = {**option_defaults(), **form}
    return {"model": values.get("model"), **{option.name: to_widget(option, values[option.name])
                                              for option in PAGE_OPTIONS}}


def to_widget(option: RunOption, value: Any) -> Any:
    """A run option's value as its control holds it: the cache as "StaticCache on?"."""
    if option.name == "cache":
        return value == "static"
    return value


def from_widget(option: RunOption, value: Any) -> Any:
    """What a control holds, as the run option's value (numbers stay as the form sent them: the run checks them)."""
    if option.name == "cache":  # an API call may send the words true/false for the checkbox
        word = value.strip().lower() if isinstance(value, str) else None
        return "static" if value is True or word == "true" else "dynamic" if value is False or word == "false" \
            else value
    return value
