"""The support matrix: every family of core.models.specs.TINY_FAMILIES (tiny random models from transformers' config
classes, nothing downloaded), prepared for decoding as the CLI loads it, in each mode, gives transformers' own
generate()'s tokens on the unprepared model, with a prompt longer than the sliding window.

Compiling on the CPU takes 10-40 s per family, so the fast tier compiles one representative (Mistral with a sliding
window: the fused attention, the in-place decode attention under a windowed mask, the full-length static cache),
and runs the dynamic cache for the families where it differs (the sliding ones, and Llama); the whole matrix is in
the slow tier. docs/SUPPORT.md is the table this file checks."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator

import pytest
import torch
from torch._dynamo.utils import counters

from core.bench import main
from core.loops.generation import generate
from core.loops.hf_generate import hf_generate
from core.models.loading import LoadedModel, compile_failure, load_model, new_static_cache, support_problem
from core.models.sources import check_spec
from core.models.specs import SYNTHETIC_CONFIG_CLASSES, SYNTHETIC_SHAPES, TINY_FAMILIES, TINY_FAMILY_PREFIX, TINY_WINDOW
from core.request.options import LOOPS, GenerationOptions

FAMILIES = tuple(TINY_FAMILIES)
PROMPT = torch.randint(100, 10_000, (TINY_WINDOW + 8,), generator=torch.Generator().manual_seed(0)).tolist()
NEW_TOKENS = 6
MODES = {"eager": ("dynamic", "off"), "static": ("static", "off"), "compiled": ("static", "default")}
FAST_COMPILED: tuple[str, ...] = ()  # a cold compile of one tiny family takes 20+ s on 2 cores: slow tier
# A dynamic cache differs between families only where it slides (its own layer class); the rest are in the slow tier.
FAST_DYNAMIC = ("llama", "mistral-sliding", "gemma2", "gemma3")
# With a static cache the fast tier keeps one family per kind of difference (a window, soft-capping, Gemma-3's mixed
# layers, experts, natively fused projections, GPT-2's layout); the slow tier, which CI runs, has them all.
FAST_STATIC = ("llama", "mistral-sliding", "gemma2", "gemma3", "mixtral", "phi3", "gpt2")
LLAMA_LAYOUT = ("llama", "qwen2", "qwen3", "mistral", "mistral-sliding", "gemma", "gemma2", "gemma3", "olmo2",
                "granite")


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models gain nothing from a second thread; on a busy 2-core machine it made every step 2-4x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def tiny(family: str, hf_modules: bool = False) -> LoadedModel:
    return load_model(TINY_FAMILY_PREFIX + family, device="cpu", hf_modules=hf_modules)


@functools.cache
def transformers_tokens(family: str, cache: str) -> list[list[int]]:
    """transformers' generate() on the unprepared model: its own cache classes (sliding layers and all), eager."""
    tokens, _ = hf_generate(tiny(family, hf_modules=True), PROMPT,
                            GenerationOptions(max_new_tokens=NEW_TOKENS, cache=cache, ignore_eos=True))
    return tokens


def _matrix() -> list:
    fast = {"eager": FAST_DYNAMIC, "static": FAST_STATIC, "compiled": FAST_COMPILED}
    return [pytest.param(family, mode, marks=[] if family in fast[mode] else [pytest.mark.slow])
            for family in FAMILIES for mode in MODES]


@pytest.mark.parametrize(("family", "mode"), _matrix())
def test_both_loops_give_transformers_tokens(family: str, mode: str) -> None:
    """Greedy: naive and pipelined, on the prepared model (and the unprepared one, uncompiled), give generate()'s
    tokens; seeded sampling: naive and pipelined give the same. Compiled, only the first run compiles: transformers'
    sliding-window static layer made torch.compile compile again at every decode step
    (core.models.loading.new_static_cache)."""
    cache, compile_mode = MODES[mode]
    expected = transformers_tokens(family, cache)
    assert len(set(expected[0])) > 1, "a degenerate model (one token repeated) would prove nothing"
    runs = [(tiny(family), loop) for loop in LOOPS]
    if compile_mode == "off":  # the unprepared model through our loops too (compiled, that would compile twice)
        runs += [(tiny(family, hf_modules=True), loop) for loop in LOOPS]
    graphs = None
    for loaded, loop in runs:
        got = generate(loaded, PROMPT, loop=loop, max_new_tokens=NEW_TOKENS, cache=cache, compile=compile_mode,
                       ignore_eos=True)
        assert got.token_ids == expected, f"{loop}, {'prepared' if loaded.transforms else 'unprepared'}"
        graphs = counters["stats"]["unique_graphs"] if graphs is None else graphs
    sampled = [generate(tiny(family), PROMPT, loop=loop, max_new_tokens=2 * NEW_TOKENS, cache=cache,
                        compile=compile_mode, ignore_eos=True, do_sample=True, temperature=0.8, seed=11).token_ids
               for loop in LOOPS]
    assert sampled[0] == sampled[1]
    assert counters["stats"]["unique_graphs"] == graphs, "a later run compiled again"


def test_static_caches_keep_every_position_in_sliding_layers() -> None:
    from transformers.cache_utils import StaticLayer

    for family in ("mistral-sliding", "gemma2", "gemma3"):
        cache = new_static_cache(tiny(family).model, 64)
        assert [type(layer) for layer in cache.layers] == [StaticLayer] * 2 and not any(cache.is_sliding)


@pytest.mark.parametrize("family", FAMILIES)
def test_what_was_prepared_and_why_not(family: str) -> None:
    loaded = tiny(family)
    layout = ("qkv", "gate_up") if family in LLAMA_LAYOUT else ()
    fused = {"mixtral": ("qkv",), "qwen3-moe": ("qkv",)}.get(family, layout)  # their experts come fused
    assert loaded.fused_projections == fused
    in_place = family not in ("gpt2", "gpt-neox", "falcon")
    assert loaded.decode_attention == ("reduce" if in_place else None)
    why = " ".join(loaded.not_prepared)
    if family in ("phi3", "gpt2", "gpt-neox", "falcon"):
        assert "already have them fused" in why
    if family in ("gpt2", "falcon"):
        assert "chooses its attention code by the implementation's name" in why
    if family == "gpt-neox":
        assert "every query head has its own KV head" in why
    if family in (*LLAMA_LAYOUT, "mixtral", "qwen3-moe"):
        assert loaded.not_prepared == ()
    assert loaded.transforms[:len(fused)] == tuple(f"fused {name}" for name in fused)
    plain = tiny(family, hf_modules=True)
    assert plain.transforms == () and plain.decode_attention is None


def test_gemma2_keeps_eager_attention_and_soft_caps_in_the_decode_kernels() -> None:
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    from core.kernels.attention import EAGER_IMPLEMENTATIONS, decode_sdpa

    loaded = tiny("gemma2")
    assert loaded.model.config._attn_implementation == EAGER_IMPLEMENTATIONS["reduce"]
    module = loaded.model.model.layers[0].self_attn
    generator = torch.Generator().manual_seed(3)
    query = torch.randn(1, 4, 1, 16, generator=generator) * 4  # large scores, so the cap matters
    key, value = torch.randn(1, 2, 24, 16, generator=generator) * 4, torch.randn(1, 2, 24, 16, generator=generator)
    mask = torch.zeros(1, 1, 1, 24)
    mask[..., 20:] = torch.finfo(torch.float32).min
    expected, _ = eager_attention_forward(module, query, key, value, mask, scaling=0.25, softcap=5.0)
    for kernel in ("reduce", "split", "triton", "sdpa"):
        compiled = torch.compile(lambda q, k, v, m, kernel=kernel: decode_sdpa(
            module, q, k, v, m, scaling=0.25, softcap=5.0, kernel=kernel, eager=True)[0], backend="eager")
        assert torch.allclose(compiled(query, key, value, mask), expected, atol=1e-5), kernel
    uncapped, _ = eager_attention_forward(module, query, key, value, mask, scaling=0.25)
    assert not torch.allclose(uncapped, expected, atol=1e-3)


@pytest.mark.parametrize(("device", "softcap", "kernel", "expected", "reason"), [
    ("cuda", None, "auto", "triton", None),
    ("cuda", 50.0, "auto", "reduce", "does not soft-cap"),
    ("cuda", 50.0, "triton", "reduce", "does not soft-cap"),
    ("cuda", 50.0, "sdpa", "reduce", "SDPA cannot soft-cap"),
    ("cuda", 50.0, "split", "split", None),
    ("cpu", 50.0, "auto", "reduce", None),
])
def test_the_triton_kernel_is_not_chosen_for_a_soft_capping_family(monkeypatch, device, softcap, kernel, expected,
                                                                   reason) -> None:
    from types import SimpleNamespace

    import core.kernels.attention as attention

    real_find_spec = attention.importlib.util.find_spec
    monkeypatch.setattr(attention.importlib.util, "find_spec",
                        lambda name: real_find_spec("torch") if name == "triton" else real_find_spec(name))
    config = SimpleNamespace(head_dim=128, hidden_size=1024, num_attention_heads=8, attn_logit_softcapping=softcap)
    chosen, why = attention.choose_decode_attention(SimpleNamespace(config=config, device=torch.device(device)),
                                                    kernel)
    assert chosen == expected
    assert (why is None) if reason is None else (reason in why)


def test_a_family_that_cannot_run_a_mode_is_refused_in_one_line() -> None:
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(**TINY_FAMILIES["mixtral"][1])
    config._experts_implementation = "eager"
    model = MixtralForCausalLM(config)
    problem = support_problem(model, "step-graph")
    assert problem and "\n" not in problem and "host sync" in problem
    assert support_problem(model, "default") is None and support_problem(model, "off") is None
    for family in ("mixtral", "qwen3-moe"):  # transformers' default experts: refused too (measured on the H200)
        problem = support_problem(tiny(family).model, "reduce-overhead")
        assert problem and "\n" not in problem and "host memory" in problem
    assert support_problem(tiny("qwen2").model, "step-graph") is None


def test_a_compile_that_fails_reaches_the_user_as_one_line(monkeypatch, capsys) -> None:
    from torch._dynamo.exc import TorchRuntimeError

    import core.loops.generation as generation

    def failing_set_up(*args, **kwargs):
        raise TorchRuntimeError("RuntimeError when making fake tensor call\n" + "internal frames\n" * 50)

    monkeypatch.setattr(generation, "_set_up", failing_set_up)
    loaded = tiny("gemma2")
    monkeypatch.setattr(loaded, "setups", {})  # an earlier test's setup of this shape would skip the setup run
    assert compile_failure(loaded, "off", TorchRuntimeError("x")) is None
    assert compile_failure(loaded, "default", KeyError("x")) is None
    with pytest.raises(ValueError, match=r"^compile=default failed for tiny-random:gemma2 \(gemma2\) while compiling"):
        generate(loaded, PROMPT, max_new_tokens=2, cache="static", compile="default")
    code = main(["--model", "tiny-random:gemma2", "--device", "cpu", "--cache", "static", "--compile", "default",
                 "--prompt-tokens", "8", "--max-new-tokens", "2", "--trials", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "fake tensor" not in err and "compile=default failed" in err


def test_the_cli_runs_a_tiny_family_and_names_what_was_prepared(capsys, tmp_path) -> None:
    import json

    path = tmp_path / "report.json"
    code = main(["--model", "tiny-random:phi3", "--device", "cpu", "--prompt-tokens", "8", "--max-new-tokens", "3",
                 "--trials", "1", "--json", str(path)])
    out = capsys.readouterr().out
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("tiny-random:phi3 on cpu")
    assert "compiled decode attention" not in first, "with --compile off no step runs it (the report still says it)"
    assert "Phi3Attention, Phi3MLP already have them fused" in first
    report = json.loads(path.read_text())
    environment = report["environment"]
    assert environment["decode_attention"] == "reduce" and environment["fused_projections"] == []
    assert environment["model_transforms"] == list(tiny("phi3").transforms)
    assert report["warmup"]["naive"]["graphs_compiled"] == 0 and "compiling_ms" in report["runs"][0]
    assert {"compiling_ms", "autotuning_ms", "capturing_ms"} <= set(report["warmup"]["naive"])


def test_unknown_tiny_family_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown tiny family 'bert'; known: tiny-random:llama"):
        check_spec("tiny-random:bert")


@pytest.mark.parametrize(("shape", "billions"), [("qwen2.5-7b", 7.616), ("mistral-7b", 7.242)])
def test_synthetic_family_shapes_match_the_real_sizes(shape: str, billions: float) -> None:
    import transformers

    config = getattr(transformers, SYNTHETIC_CONFIG_CLASSES[shape])(**SYNTHETIC_SHAPES[shape])
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert abs(sum(p.numel() for p in model.parameters()) / 1e9 - billions) < 0.01


def test_the_fused_forwards_are_those_of_the_installed_transformers() -> None:
    """Each fingerprint in core.kernels.fusion is the forward of a class in this transformers: a new version that
    changes one shows up here (and its modules are then left unfused, with the reason in the report)."""
    import importlib

    from core.kernels.fusion import ATTENTION_LAYOUTS, MLP_FORWARDS, forward_fingerprint

    found = {}
    for module_name in ("llama", "gemma", "granite", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma3",
                        "gemma2", "olmo2"):
        module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and name.endswith(("Attention", "MLP")):
                found.setdefault(forward_fingerprint(cls), []).append(name)
    assert set(ATTENTION_LAYOUTS) <= set(found)
    assert set(found) >= MLP_FORWARDS


def test_the_compile_line_counts_recompiles_in_warm_ups_and_trials() -> None:
    from core.report.build import compile_note

    assert compile_note({"warmup": {"naive": {"graphs_compiled": 0}}, "runs": []}) is None
    report = {"warmup": {"naive": {"graphs_compiled": 2, "compiling_ms": 30_000.0},
                         "pipelined": {"graphs_compiled": 0, "compiling_ms": 0.0}},
              "runs": [{"graphs_compiled": 0}, {"graphs_compiled": 3}]}
    assert compile_note(report) == ("compile: the warm-ups compiled 2 graph(s) in 30.0 s; timed trials compiled 3 more "
                                    "(recompiles), and their times include it")
    report["warmup"]["naive"].update(autotuning_ms=12_340.0, capturing_ms=210.0)
    assert compile_note(report).startswith("compile: the warm-ups compiled 2 graph(s) in 30.0 s, tuned Triton kernels "
                                           "at their first run in 12.3 s and captured step graphs in 0.2 s;")


def _gpu_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "families_gpu.py"
    spec = importlib.util.spec_from_file_location("families_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_script_writes_a_refusal_as_one_row_of_one_line() -> None:
    script = _gpu_script()
    refused = script.failure_row("tiny-random:mixtral", "step-graph", ValueError("compile=step-graph cannot run\nmore"))
    failed = script.failure_row("tiny-random:falcon", "step-graph", RuntimeError("CUDA error\nframes"))
    assert refused["status"] == "refused" and refused["error"] == "compile=step-graph cannot run"
    assert failed["status"] == "failed" and failed["error"] == "RuntimeError: CUDA error"
    table = script.markdown([refused, failed, script.skipped_row("synthetic:mistral-7b", "step-graph")],
                            {"device": "NVIDIA H200", "wall_s": 1.0, "smoke": False})
    assert table.count("\n| ") == 4 and "past --deadline-s" in table


@pytest.mark.slow
def test_the_gpu_script_runs_on_the_cpu_with_smoke(tmp_path) -> None:
    import json

    assert _gpu_script().main([str(tmp_path), "--smoke"]) == 0
    rows = json.loads((tmp_path / "families.json").read_text())["rows"]
    assert len(rows) == 12 and all(row["status"] == "ok" and row["loops_identical"] for row in rows)
    assert all(row["same_as_eager"] for row in rows if row["mode"] != "off")
    assert "| tiny-random:mistral-sliding | reduce-overhead (ran default) | ok | yes |" in (
        tmp_path / "families.md").read_text()
