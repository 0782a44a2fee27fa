"""Fused q/k/v and gate/up projections (core.kernels.fusion): the same logits and tokens as the separate Linears, at
tp=1 and over two gloo ranks on the CPU."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import time
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, StaticCache
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP

from core.kernels.fusion import FusedLinear, fuse_projections, fused_attention_class, fused_mlp_class
from core.kernels.products import traced_with
from core.loops.generation import generate
from core.models.loading import load_model
from core.parallel.launch import free_port
from tests.conftest import TINY

PROMPT = "Tell me about pipelines."
IDS = [[1, 504, 3301, 281, 9921, 30, 17]]
DECODE_STEPS = 3
TOLERANCE = 1e-5
FUSED_ATTENTION, FUSED_MLP = fused_attention_class(LlamaAttention), fused_mlp_class(LlamaMLP)  # cached: one class each
SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=128, max_position_embeddings=64, attention_bias=True, mlp_bias=True)


@pytest.fixture(scope="module")
def plain():
    return load_model(TINY, device="cpu", dtype="fp32", hf_modules=True)


@pytest.fixture(scope="module")
def fused():
    loaded = load_model(TINY, device="cpu", dtype="fp32", hf_modules=True)
    assert fuse_projections(loaded.model) == ["qkv", "gate_up"]
    return loaded


def step_logits(model: Any, cache: Any, ids: list[list[int]] = IDS, steps: int = DECODE_STEPS) -> list[torch.Tensor]:
    """Last-position logits of a prefill and of `steps` cached greedy decode steps."""
    tokens = torch.tensor(ids)
    outputs = []
    with torch.inference_mode():
        position = torch.arange(tokens.shape[1])[None]
        for _ in range(steps + 1):
            logits = model(input_ids=tokens, position_ids=position, cache=cache, use_cache=True).logits[:, -1]
            outputs.append(logits)
            tokens, position = logits.argmax(-1, keepdim=True), position[:, -1:] + 1
    return outputs


def new_cache(kind: str, model: Any) -> Any:
    if kind == "static":
        return StaticCache(config=model.config, max_cache_len=32)
    return DynamicCache(config=model.config)


def max_difference(one: list[torch.Tensor], two: list[torch.Tensor]) -> float:
    return max((a - b).abs().max().item() for a, b in zip(one, two, strict=True))


def small_llama(seed: int = 0) -> LlamaForCausalLM:
    """A tiny Llama with attention and MLP biases, every parameter drawn (biases are zero-initialised otherwise)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**SMALL)).eval().requires_grad_(False)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not name.endswith("norm.weight"):
                param.normal_(0.0, 0.2)
    return model


# ------------------------------------------------------------------------------------------------ tp = 1

@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_fused_logits_match_through_prefill_and_cached_decode(plain, fused, cache):
    expected = step_logits(plain.model, new_cache(cache, plain.model))
    got = step_logits(fused.model, new_cache(cache, fused.model))
    assert max_difference(expected, got) <= TOLERANCE


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("loop", ["naive", "pipelined"])
def test_fused_model_generates_the_same_greedy_tokens(plain, fused, loop, cache):
    expected = generate(plain, PROMPT, loop=loop, cache=cache, max_new_tokens=20, ignore_eos=True).token_ids
    got = generate(fused, PROMPT, loop=loop, cache=cache, max_new_tokens=20, ignore_eos=True).token_ids
    assert got == expected
    assert len(got[0]) == 20 and len(set(got[0])) > 1  # a real sequence, not one token repeated


def test_projections_are_replaced_and_the_parameter_count_is_kept(plain, fused):
    assert fused.num_parameters == plain.num_parameters
    assert fused.weight_bytes == plain.weight_bytes
    modules = {name.split(".")[-2] for name, _ in fused.model.named_parameters() if "." in name}
    assert not modules & {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}
    assert {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"} <= modules
    layer = fused.model.model.layers[0]
    assert type(layer.self_attn) is FUSED_ATTENTION and type(layer.mlp) is FUSED_MLP
    config = fused.model.config
    head_dim = config.hidden_size // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    assert layer.self_attn.qkv_proj.split_sizes == (config.hidden_size, kv, kv)
    assert layer.mlp.gate_up_proj.split_sizes == (config.intermediate_size, config.intermediate_size)
    for linear in (layer.self_attn.qkv_proj, layer.mlp.gate_up_proj):
        assert type(linear) is FusedLinear and linear.ranks == 1 and linear.bias is None
        assert linear.weight.dtype == torch.float32 and linear.weight.device.type == "cpu"
        assert not linear.weight.requires_grad
    assert layer.self_attn.o_proj.weight.shape == (config.hidden_size, config.hidden_size)


def test_the_fused_weight_is_the_stacked_weights_and_the_old_ones_are_freed():
    loaded = load_model(TINY, device="cpu", dtype="fp32", hf_modules=True)
    attention, mlp = loaded.model.model.layers[1].self_attn, loaded.model.model.layers[1].mlp
    stacked_qkv = torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]).clone()
    stacked_gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).clone()
    old = [weakref.ref(attention.q_proj.weight), weakref.ref(attention.v_proj), weakref.ref(mlp.up_proj.weight)]
    assert fuse_projections(loaded.model) == ["qkv", "gate_up"]
    gc.collect()
    assert all(ref() is None for ref in old)
    assert torch.equal(attention.qkv_proj.weight, stacked_qkv)
    assert torch.equal(mlp.gate_up_proj.weight, stacked_gate_up)


def test_a_second_call_fuses_nothing_and_changes_nothing(fused):
    before = {name: param for name, param in fused.model.named_parameters()}
    assert fuse_projections(fused.model) == []
    assert {name: param for name, param in fused.model.named_parameters()} == before


def test_biases_are_stacked_too():
    plain, fused = small_llama(), small_llama()
    assert fuse_projections(fused) == ["qkv", "gate_up"]
    attention = fused.model.layers[0].self_attn
    assert attention.qkv_proj.bias.shape == (sum(attention.qkv_proj.split_sizes),)
    assert fused.model.layers[0].mlp.gate_up_proj.bias.shape == (2 * SMALL["intermediate_size"],)
    ids = [[3, 17, 99, 4, 60]]
    for cache in ("dynamic", "static"):
        expected = step_logits(plain, new_cache(cache, plain), ids)
        assert max_difference(expected, step_logits(fused, new_cache(cache, fused), ids)) <= TOLERANCE


@pytest.mark.parametrize(("choice", "library"), [("library", True), ("inductor", False), ("", True)])
def test_a_compiled_step_s_output_projection_is_the_library_s_product(fused, choice, library):
    # The `o_proj` switch, which the step gives the trace (core.kernels.products.traced_with; "": nothing given, as a
    # compile outside the loops): the library's op, opaque to inductor, or inductor's own mm.
    seen: list[str] = []

    def backend(graph: torch.fx.GraphModule, inputs: Any) -> Any:
        seen.extend(str(node.target) for node in graph.graph.nodes)
        return graph.forward

    torch._dynamo.reset()
    cache = new_cache("static", fused.model)
    eager = step_logits(fused.model, new_cache("static", fused.model), steps=0)[0]
    given = traced_with("inductor", choice) if choice else contextlib.nullcontext()
    with torch.inference_mode(), given:
        compiled = torch.compile(fused.model, backend=backend, fullgraph=True)
        logits = compiled(input_ids=torch.tensor(IDS), cache=cache, use_cache=True).logits[:, -1]
    torch._dynamo.reset()
    assert any("library_linear" in target for target in seen) == library
    torch.testing.assert_close(logits, eager, rtol=TOLERANCE, atol=TOLERANCE)


def test_models_without_llama_modules_are_left_alone():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    assert fuse_projections(model) == []
    assert type(model[0]) is nn.Linear


def test_subclasses_and_hooked_projections_are_left_alone():
    class OtherAttention(LlamaAttention):
        pass

    model = small_llama()
    first, second = model.model.layers[0], model.model.layers[1]
    first.self_attn.__class__ = OtherAttention
    second.self_attn.k_proj.register_forward_hook(lambda module, args, output: None)
    assert fuse_projections(model) == ["gate_up"]
    assert hasattr(first.self_attn, "q_proj") and hasattr(second.self_attn, "k_proj")
    assert type(first.mlp) is FUSED_MLP and type(second.mlp) is FUSED_MLP


# ------------------------------------------------------------------------------------------------ tp = 2

def _rank_main(rank: int, port: int, out_dir: str) -> None:
    """One of two gloo ranks: tiny-random sharded with and without fusion, and a biased Llama against one process."""
    import torch.distributed as dist

    from core.parallel.tensor_parallel import init_tensor_parallel, shard

    init_tensor_parallel(rank, 2, f"tcp://127.0.0.1:{port}", "cpu")
    result = {"rank": rank, **_tiny_random_on_two_ranks(), **_biased_on_two_ranks(shard)}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    os._exit(0)  # skip interpreter teardown, where gloo aborts ("terminate called without an active exception")


def _tiny_random_on_two_ranks() -> dict[str, Any]:
    plain = load_model(TINY, device="cpu", dtype="fp32", tp=2, hf_modules=True)
    fused = load_model(TINY, device="cpu", dtype="fp32", tp=2, hf_modules=True)
    result: dict[str, Any] = {"fused": fuse_projections(fused.model), "again": fuse_projections(fused.model)}
    layer = fused.model.model.layers[0]
    result["qkv"] = [list(layer.self_attn.qkv_proj.weight.shape), list(layer.self_attn.qkv_proj.split_sizes),
                     type(layer.self_attn.qkv_proj.weight.data).__name__, layer.self_attn.qkv_proj.ranks]
    result["gate_up"] = [list(layer.mlp.gate_up_proj.weight.shape), list(layer.mlp.gate_up_proj.split_sizes)]
    result["weight_bytes"] = [plain.weight_bytes, fused.weight_bytes]
    result["logit_difference"] = {cache: max_difference(step_logits(plain.model, new_cache(cache, plain.model)),
                                                        step_logits(fused.model, new_cache(cache, fused.model)))
                                  for cache in ("dynamic", "static")}
    for loop in ("naive", "pipelined"):
        for cache in ("dynamic", "static"):
            for name, loaded in (("plain", plain), ("fused", fused)):
                tokens = generate(loaded, PROMPT, loop=loop, cache=cache, max_new_tokens=20, ignore_eos=True)
                result[f"{name}-{loop}-{cache}"] = tokens.token_ids
    return result


def _biased_on_two_ranks(shard: Any) -> dict[str, Any]:
    whole, sharded = small_llama(), small_llama()  # the same seed, so the same weights on both ranks
    shard(sharded, 2, torch.device("cpu"))
    fused = fuse_projections(sharded)
    ids = [[3, 17, 99, 4, 60]]
    difference = max_difference(step_logits(whole, new_cache("dynamic", whole), ids),
                                step_logits(sharded, new_cache("dynamic", sharded), ids))
    return {"biased_fused": fused, "biased_difference_to_one_process": difference}


def _spawn_two_ranks(out_dir: Path, timeout_s: float = 120.0) -> None:
    import torch.multiprocessing as mp

    context = mp.spawn(_rank_main, args=(free_port(), str(out_dir)), nprocs=2, join=False)
    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=1.0):
            assert time.monotonic() < deadline, f"the two ranks did not finish within {timeout_s:.0f} s"
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
                process.join(10)


@pytest.mark.slow
def test_two_ranks_fuse_their_local_shards_and_give_the_same_tokens(tmp_path):
    _spawn_two_ranks(tmp_path)
    for rank in (0, 1):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert result["fused"] == ["qkv", "gate_up"] and result["again"] == []
        assert result["qkv"] == [[64, 64], [32, 16, 16], "Tensor", 2]  # this rank's q, k, v rows, a plain tensor
        assert result["gate_up"] == [[128, 64], [64, 64]]
        assert result["weight_bytes"][0] == result["weight_bytes"][1]  # all ranks' weights, fused or not
        assert max(result["logit_difference"].values()) <= TOLERANCE
        for loop in ("naive", "pipelined"):
            for cache in ("dynamic", "static"):
                assert result[f"fused-{loop}-{cache}"] == result[f"plain-{loop}-{cache}"], (rank, loop, cache)
        assert result["biased_fused"] == ["qkv", "gate_up"]
        assert result["biased_difference_to_one_process"] <= TOLERANCE
