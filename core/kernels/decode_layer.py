"""A decoder layer's batch-1 decode step in six kernels, in step-graph compiles on one GPU (the `decode_layer` switch,
core.tuning).

Why: with every product by core.kernels.triton_gemv's kernel, a Llama layer's step still ran twelve kernels, six
of them tiny ones around the products: two residual add + RMSNorm reductions, the rotary embedding of the query and
of the key (with the mask computed again inside them), the value's write into the cache and the cache's length
moved on. On the H200 those and the gaps between them were a third of the Llama-1B step (docs/NUMBERS.md). Here
they are done inside the products:
- the q/k/v product normalises its input (the layer's input RMSNorm), turns the queries and keys by the rotary
  embedding and writes the key and value straight into the static cache at its length
  (`triton_gemv_kernel.qkv_gemv`);
- attention reads the cache as before (core.kernels.triton_attention);
- the output projection adds the residual, and moves the cache's length on;
- the gate/up product normalises its input (the post-attention RMSNorm);
- the down projection computes silu(gate) * up on the fly, as before, and adds the residual.
The math is transformers' up to rounding: each product rounded to the model's type where the Linear returns it, the
rotary in fp32 rounded once (as inductor fuses it). The norm is folded into the product that follows it: the row times
the norm's weight in fp32, the sum of squares taken in the same pass, the inverse RMS applied to each output once the
row is summed, so a program reads the row once and starts on the weight at once. transformers rounds the normalised
row to the model's type before its product; this does not, so bf16 results may differ in the last bits from the
unfused step (fp32 ones agree to rounding); both repeat bitwise.

Which layers: those whose forward is, token for token, Llama's decoder layer (Llama, Mistral, Qwen2 share it) with
LlamaRMSNorm norms, core.kernels.fusion's fused attention in Llama's layout (no q/k norm, no soft-capping, Llama's
rotary) and its fused gate/up MLP with SiLU, plain output and down projections, on one GPU (not under tensor
parallelism, which core.kernels.tp_fusion rewires instead), fused when the model is prepared unless the switch is
off. A step takes the fused path inside a step-graph compile on CUDA with the gemv kernel's products, one token of
batch 1, the "triton" decode attention and a full-length, initialised static cache layer; anything else (prefill, the
CPU, other compile modes, a dynamic cache) runs transformers' forward unchanged.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm
from transformers.utils.deprecation import deprecate_kwarg

from core.kernels import products, triton_ops_at_import
from core.kernels.attention import IMPLEMENTATIONS
from core.kernels.fusion import FusedAttention, FusedMLP, forward_fingerprint
from core.kernels.reads import reads_first
from core.kernels.triton_attention import head_size_fits
from core.kernels.triton_gemv import Around, GemvConfig, config_for, launch_gemv, takes
from core.tuning import SWITCH

_LAYER_FORWARD = forward_fingerprint(LlamaDecoderLayer)
_NORM_FORWARD = forward_fingerprint(LlamaRMSNorm)
# Attention arguments that change what attention computes (core.kernels.attention takes the model's own then)
_NOT_IN_PLACE = ("position_bias", "s_aux", "output_attentions")


class DecodeLayer(LlamaDecoderLayer):
    """Llama's decoder layer, whose batch-1 compiled decode step is six kernels (module doc)."""

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = False,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        layer = self._fused_cache_layer(hidden_states, attention_mask, cache, position_embeddings, kwargs)
        if layer is None:
            return super().forward(
                hidden_states,
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                use_cache=use_cache,
                position_embeddings=position_embeddings,
                **kwargs,
            )
        return fused_step(self, hidden_states, attention_mask, layer, position_embeddings, torch.ops.syncscope)

    def _fused_cache_layer(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        cache: Cache | None,
        position_embeddings: Any,
        kwargs: dict[str, Any],
    ) -> Any:
        """The static cache layer this step writes when the fused path applies here (a compiled batch-1 decode step
        of a step-graph compile on CUDA, see the module), else None."""
        if not (
            torch.compiler.is_compiling()
            and hidden_states.is_cuda
            and attention_mask is not None
            and position_embeddings is not None
            and hidden_states.numel() == hidden_states.shape[-1]
        ):
            return None
        if not hasattr(torch.ops.syncscope, "qkv_gemv") or any(kwargs.get(n) for n in _NOT_IN_PLACE):
            return None
        mlp = self.mlp
        if not (
            products.gemv_takes(self.self_attn.qkv_proj, hidden_states, act_mul=False)  # the step-graph's
            and products.gemv_takes(mlp.gate_up_proj, hidden_states, act_mul=False)
        ):
            return None
        attention = self.self_attn
        if attention.config._attn_implementation != IMPLEMENTATIONS["triton"]:
            return None
        layer = _static_layer(cache, attention.layer_idx)
        cos = position_embeddings[0]
        if layer is None or cos.numel() != attention.head_dim or position_embeddings[1].stride() != cos.stride():
            return None
        if not self._products_take(hidden_states, layer):
            return None
        return layer

    def _products_take(self, x: torch.Tensor, layer: Any) -> bool:
        """Whether the kernels take this step's shapes and types: one row of the model's type everywhere."""
        attention, mlp = self.self_attn, self.mlp
        weights = (
            attention.qkv_proj.weight,
            attention.o_proj.weight,
            mlp.gate_up_proj.weight,
            mlp.down_proj.weight,
            self.input_layernorm.weight,
            self.post_attention_layernorm.weight,
        )
        o_weight, down_weight = attention.o_proj.weight, mlp.down_proj.weight
        return (
            all(w.dtype == x.dtype and w.is_cuda for w in weights)
            and layer.keys.dtype == x.dtype
            and o_weight.shape[0] == x.shape[-1]
            and o_weight.stride(1) == 1
            and down_weight.shape[0] == x.shape[-1]
            and down_weight.stride(1) == 1
            and 2 * down_weight.shape[1] == mlp.gate_up_proj.weight.shape[0]
            and layer.keys.shape[0] == 1
            and layer.keys.stride(-1) == 1
            and layer.values.stride() == layer.keys.stride()
        )


def fused_step(
    layer: DecodeLayer,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor,
    cache_layer: Any,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    ops: Any,
) -> torch.Tensor:
    """The layer's decode step of one token in six kernels, by `ops` (torch.ops.syncscope, or what a test gives)."""
    attention, mlp = layer.self_attn, layer.mlp
    cos, sin = position_embeddings
    keys, values, length = cache_layer.keys, cache_layer.values, cache_layer.cumulative_length
    norm = layer.input_layernorm
    query = ops.qkv_gemv(
        hidden_states,
        norm.weight,
        norm.variance_epsilon,
        attention.qkv_proj.weight,
        attention.qkv_proj.bias,
        cos,
        sin,
        keys,
        values,
        length,
        attention.config.num_attention_heads,
    )
    attended = ops.triton_decode_attention(query, keys, values, attention_mask, float(attention.scaling))
    attended = attended.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1)
    hidden_states = ops.gemv_add_advance(
        attended, attention.o_proj.weight, attention.o_proj.bias, hidden_states, length
    )
    norm = layer.post_attention_layernorm
    gate_up = ops.gemv_norm(
        hidden_states, norm.weight, norm.variance_epsilon, mlp.gate_up_proj.weight, mlp.gate_up_proj.bias
    )
    return ops.gemv_add(gate_up, mlp.down_proj.weight, mlp.down_proj.bias, True, hidden_states)


def _static_layer(cache: Cache | None, index: int) -> Any:
    from transformers.cache_utils import StaticLayer

    layers = getattr(cache, "layers", ())
    layer = layers[index] if index < len(layers) else None
    return layer if type(layer) is StaticLayer and layer.is_initialized else None


def fuse_decode_layers(model: nn.Module, switch: str = SWITCH["decode_layer"].default) -> str | None:
    """Make every decoder layer of `model` a DecodeLayer, in place, when all of them qualify (module doc) and the
    `decode_layer` switch (`switch`) is not "off"; returns None when done, else why not (one sentence)."""
    problem = why_not_fusable(model, switch)
    if problem:
        return problem
    for layer in model.model.layers:
        layer.__class__ = DecodeLayer
    return None


def why_not_fusable(model: nn.Module, switch: str = SWITCH["decode_layer"].default) -> str | None:
    """Why `fuse_decode_layers` would leave `model` as it is, or None."""
    if switch == "off":
        return f"{SWITCH['decode_layer'].variable}=off"
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed"
    if getattr(model, "_device_mesh", None) is not None:
        return "tensor-parallel (core.kernels.tp_fusion rewires its layers)"
    layers = list(getattr(getattr(model, "model", None), "layers", None) or [])
    if not layers:
        return "no decoder layers under model.model"
    if any(isinstance(layer, DecodeLayer) for layer in layers):
        return "already fused"
    for layer in layers:
        problem = _why_not_layer(layer)
        if problem:
            return problem
    return None


def _why_not_layer(layer: nn.Module) -> str | None:
    name = type(layer).__name__
    if forward_fingerprint(type(layer)) != _LAYER_FORWARD:
        return f"{name}'s forward is not Llama's decoder layer"
    norms = (getattr(layer, "input_layernorm", None), getattr(layer, "post_attention_layernorm", None))
    if any(forward_fingerprint(type(norm)) != _NORM_FORWARD for norm in norms):
        return f"{name}'s norms are not LlamaRMSNorm"
    attention, mlp = layer.self_attn, layer.mlp
    if not (
        isinstance(attention, FusedAttention)
        and attention.layout.qk_norm is None
        and not attention.layout.softcap
        and type(attention).llama_rotary
    ):
        return f"{name}'s attention is not a fused one in Llama's layout (core.kernels.fusion)"
    if not head_size_fits(attention.head_dim):
        return f"head size {attention.head_dim} is not a power of 2 of at least 16"
    if not (isinstance(mlp, FusedMLP) and products.silu(mlp.act_fn)):
        return f"{name}'s MLP is not a fused gate/up MLP with SiLU (core.kernels.fusion)"
    if not all(products.plain(p) for p in (attention.o_proj, mlp.down_proj)):
        return f"{name}'s output or down projection is not a plain Linear"
    return None


def launch_qkv(
    x: torch.Tensor,
    norm: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    length: torch.Tensor,
    heads: int,
    launch: Any,
    config: GemvConfig | None = None,
) -> torch.Tensor:
    """The layer's normalised q/k/v product of one row `x`, turned by the rotary embedding (cos, sin: the token's,
    one row of the head size), the key and value written into the caches (1, KV, L, D) at `length`. Returns the
    query, (1, heads, 1, D). `config` (the table's for the "qkv" part by default): a program takes its `block_n`
    rows as pairs, at least one pair and at most half a head of them."""
    kv_heads, head_dim = key_cache.shape[1], key_cache.shape[3]
    n, k = weight.shape
    if n != (heads + 2 * kv_heads) * head_dim or not takes(x, weight) or not head_size_fits(head_dim):
        raise ValueError(
            f"the q/k/v kernel takes one row and a stacked weight of (heads + 2 x KV heads) x head size "
            f"rows; got input {tuple(x.shape)}, weight {tuple(weight.shape)}, {heads} heads, cache "
            f"{tuple(key_cache.shape)}"
        )
    if config is None:
        config = config_for(n, k, False, torch.cuda.get_device_name(x.device) if x.is_cuda else "cpu", "qkv")
    block_p = min(max(1, config.block_n // 2), head_dim // 2)
    query = torch.empty((1, heads, 1, head_dim), device=x.device, dtype=x.dtype)
    cos, sin = cos.reshape(-1), sin.reshape(-1)
    launch(_kernels()[1])[((heads + 2 * kv_heads) * (head_dim // 2 // block_p),)](
        x.contiguous(),
        norm.contiguous(),
        weight,
        bias if bias is not None else weight,
        cos,
        sin,
        query,
        key_cache,
        value_cache,
        length,
        weight.stride(0),
        cos.stride(0),
        key_cache.stride(1),
        key_cache.stride(2),
        float(eps),
        k,
        HEADS=heads,
        KV_HEADS=kv_heads,
        HEAD_DIM=head_dim,
        HAS_BIAS=bias is not None,
        EVEN_K=k % config.block_k == 0,
        BLOCK_P=block_p,
        BLOCK_K=config.block_k,
        READS_FIRST=reads_first(),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return query


def _kernels() -> tuple[Any, Any]:
    from core.kernels.triton_gemv_kernel import gemv, qkv_gemv

    return gemv, qkv_gemv


def register_decode_layer_ops() -> None:
    """Register the layer's kernels as operators `syncscope::qkv_gemv`, `gemv_norm`, `gemv_add` and
    `gemv_add_advance` (once; when this module is imported where core.kernels.triton_ops_at_import says: compiled code
    cannot create an operator)."""
    if hasattr(torch.ops.syncscope, "qkv_gemv"):
        return
    from torch.library import triton_op, wrap_triton

    @triton_op("syncscope::gemv_norm", mutates_args=())
    def gemv_norm(
        x: torch.Tensor, norm: torch.Tensor, eps: float, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        return launch_gemv(x, weight, bias, False, wrap_triton, around=Around(norm=norm, eps=eps))

    @triton_op("syncscope::gemv_add", mutates_args=())
    def gemv_add(
        x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, act_mul: bool, residual: torch.Tensor
    ) -> torch.Tensor:
        return launch_gemv(x, weight, bias, act_mul, wrap_triton, around=Around(residual=residual))

    @triton_op("syncscope::gemv_add_advance", mutates_args=("length",))
    def gemv_add_advance(
        x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor, length: torch.Tensor
    ) -> torch.Tensor:
        return launch_gemv(x, weight, bias, False, wrap_triton, around=Around(residual=residual, length=length))

    @triton_op("syncscope::qkv_gemv", mutates_args=("key_cache", "value_cache"))
    def qkv_gemv(
        x: torch.Tensor,
        norm: torch.Tensor,
        eps: float,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        length: torch.Tensor,
        heads: int,
    ) -> torch.Tensor:
        return launch_qkv(x, norm, eps, weight, bias, cos, sin, key_cache, value_cache, length, heads, wrap_triton)


if triton_ops_at_import():
    register_decode_layer_ops()
