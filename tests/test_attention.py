"""core.kernels.attention: compiled decode steps read grouped KV heads in place, with the same result as
transformers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from core.kernels.attention import (
    IMPLEMENTATIONS,
    _reads_cache_in_place,
    decode_sdpa,
    grouped_decode_attention,
    resolve_decode_attention,
    split_decode_attention,
)
from core.loops.step import blockwise_argmax
from core.models.loading import load_model
from core.tuning import Tuning


class _Attention(torch.nn.Module):
    num_key_value_groups = 2


def _inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 4, 1, 8, generator=generator)
    key, value = (torch.randn(2, 2, 16, 8, generator=generator) for _ in range(2))
    mask = torch.ones(2, 1, 1, 16, dtype=torch.bool)
    mask[0, ..., 10:] = False  # a shorter first sequence: the mask matters
    return query, key, value, mask


@pytest.mark.parametrize("kernel", ["reduce", "split", "sdpa", "triton"])
def test_compiled_decode_attention_matches_transformers_sdpa(kernel):
    module = _Attention().eval()
    query, key, value, mask = _inputs()
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.5)
    compiled = torch.compile(lambda q, k, v, m: decode_sdpa(module, q, k, v, m, scaling=0.5, kernel=kernel)[0],
                             backend="eager")
    assert torch.allclose(compiled(query, key, value, mask), expected, atol=1e-6)


def test_the_in_place_path_is_for_compiled_single_token_steps_only():
    module = _Attention().eval()
    query, key, _, _ = _inputs()
    assert not _reads_cache_in_place(module, query, {})  # eager: transformers already packs the heads
    seen = []
    torch.compile(lambda q: seen.append(_reads_cache_in_place(module, q, {})) or q, backend="eager")(query)
    assert seen == [True]
    seen.clear()
    torch.compile(lambda q: seen.append(_reads_cache_in_place(module, q, {})) or q, backend="eager")(key)
    assert seen == [False]  # 16 query positions: a prefill


def test_models_load_prepared_for_decode_unless_asked_not_to():
    prepared = load_model("tiny-random", device="cpu", dtype="fp32")
    plain = load_model("tiny-random", device="cpu", dtype="fp32", hf_modules=True)
    assert prepared.transforms == ("fused qkv", "fused gate_up", "compiled decode attention: reduce")
    assert prepared.model.config._attn_implementation == IMPLEMENTATIONS["reduce"]
    assert plain.transforms == () and plain.model.config._attn_implementation == "sdpa"
    assert prepared.weight_bytes == plain.weight_bytes and prepared.num_parameters == plain.num_parameters


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_reduction_form_of_decode_attention_matches_sdpa(dtype):
    query, key, value, mask = (t.to(dtype) if t.is_floating_point() else t for t in _inputs())
    expected = F.scaled_dot_product_attention(query.float(), key.float(), value.float(), attn_mask=mask,
                                              enable_gqa=True)
    got = grouped_decode_attention(query, key, value, mask, None)
    assert got.dtype == dtype
    assert torch.allclose(got.float(), expected, atol=1e-6 if dtype == torch.float32 else 1e-2)


def test_the_decode_attention_kernel_is_chosen_by_the_tuning_when_the_model_loads(monkeypatch):
    loaded = load_model("tiny-random", device="cpu", dtype="fp32", tuning=Tuning(decode_attention="sdpa"))
    assert loaded.transforms[-1] == "compiled decode attention: sdpa" and loaded.tuning.decode_attention == "sdpa"
    assert loaded.model.config._attn_implementation == IMPLEMENTATIONS["sdpa"]
    monkeypatch.setenv("SYNCSCOPE_DECODE_ATTENTION", "reduce")  # the environment, without a tuning: read at the load
    assert load_model("tiny-random", device="cpu", dtype="fp32").decode_attention == "reduce"
    assert loaded.model.config._attn_implementation == IMPLEMENTATIONS["sdpa"]  # the loaded model is left as it was
    monkeypatch.setenv("SYNCSCOPE_DECODE_ATTENTION", "flash")
    with pytest.raises(ValueError, match="SYNCSCOPE_DECODE_ATTENTION must be one of auto, reduce, split, sdpa, triton"):
        load_model("tiny-random", device="cpu", dtype="fp32")


def _model_on(device: str, head_dim: int) -> SimpleNamespace:
    config = SimpleNamespace(head_dim=head_dim, hidden_size=head_dim * 8, num_attention_heads=8)
    return SimpleNamespace(config=config, device=torch.device(device))


@pytest.mark.parametrize(("device", "head_dim", "triton_installed", "expected"), [
    ("cuda", 128, True, "triton"),
    ("cuda", 64, True, "triton"),
    ("cuda", 80, True, "reduce"),  # a head size the Triton kernels do not take
    ("cuda", 128, False, "reduce"),
    ("cpu", 128, True, "reduce"),
])
def test_auto_takes_the_triton_kernel_on_cuda_where_it_can(monkeypatch, device, head_dim, triton_installed,
                                                          expected):
    import core.kernels.attention as attention

    real_find_spec = attention.importlib.util.find_spec
    monkeypatch.setattr(attention.importlib.util, "find_spec",
                        lambda name: (real_find_spec("torch") if triton_installed else None) if name == "triton"
                        else real_find_spec(name))
    assert resolve_decode_attention(_model_on(device, head_dim), "auto") == expected
    if device == "cuda" and not triton_installed:
        with pytest.raises(ValueError, match="needs the triton package"):
            resolve_decode_attention(_model_on(device, head_dim), "triton")
    else:  # asked for by name, where it cannot run: the reductions, and the report says so
        assert resolve_decode_attention(_model_on(device, head_dim), "triton") == expected
    assert resolve_decode_attention(_model_on(device, head_dim), "sdpa") == "sdpa"  # other choices stay


@pytest.mark.parametrize("vocab", [128256, 49152, 1000, 7])
def test_blockwise_argmax_is_argmax_ties_and_all(vocab):
    logits = torch.randn(3, vocab, generator=torch.Generator().manual_seed(vocab)).to(torch.bfloat16)
    logits[1, vocab // 3] = logits[1, vocab - 1] = logits[1].max() + 1  # a tie across blocks: the first wins
    logits[2] = float("-inf")
    assert torch.equal(blockwise_argmax(logits), logits.argmax(-1))


@pytest.mark.parametrize("valid", [1, 100, 300, 512])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_decode_attention_matches_sdpa_with_fully_masked_chunks_too(dtype, valid):
    generator = torch.Generator().manual_seed(valid)
    query = torch.randn(2, 8, 1, 16, generator=generator).to(dtype)
    key, value = (3 * torch.randn(2, 2, 512, 16, generator=generator).to(dtype) for _ in range(2))
    mask = torch.zeros(2, 1, 1, 512, dtype=torch.bool)
    mask[0, ..., :valid] = True
    mask[1, ..., : max(1, valid // 2)] = True  # chunks past a row's last key are all masked
    expected = F.scaled_dot_product_attention(query.float(), key.float(), value.float(), attn_mask=mask,
                                              enable_gqa=True)
    got = split_decode_attention(query, key, value, mask, None)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2  # bf16: the output's own rounding
    assert torch.allclose(got.float(), expected, atol=tolerance, rtol=tolerance)
    assert torch.equal(split_decode_attention(query, key[:, :, :100], value[:, :, :100], mask[..., :100], None),
                       grouped_decode_attention(query, key[:, :, :100], value[:, :, :100], mask[..., :100], None))
