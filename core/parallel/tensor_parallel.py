"""Tensor parallelism: one process per GPU (or CPU rank), the model sharded with transformers' own TP plan.

A Llama decoder is sharded the Megatron way by transformers' plan for it (`base_model_tp_plan`): q/k/v and the
MLP's gate/up projections split by output columns, o_proj and down_proj by input rows (each followed by one
all-reduce), the embedding and the LM head split over the vocabulary (the head's shards gathered, so every rank
holds the full logits). No collective is written here: `apply_tensor_parallelism` installs them, and
torch.distributed runs them (NCCL on GPUs, gloo on the CPU).

Both decode loops run unchanged on every rank. Greedy decoding on replicated logits picks the same token
everywhere, and seeded sampling draws the same token from the same generator state, so every rank stops at the
same step with no extra host sync: nothing but the model's own collectives crosses between ranks.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from core.tuning import SWITCH


def init_tensor_parallel(rank: int, world_size: int, rendezvous: str | None, device: str | None) -> torch.device:
    """Join the process group (NCCL on CUDA, gloo on the CPU) and pick this rank's device."""
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    use_cuda = not str(device or "").startswith("cpu") and torch.cuda.is_available()
    target = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            raise ValueError(f"--tp {world_size} needs {world_size} GPUs; this machine has "
                             f"{torch.cuda.device_count()}")
        torch.cuda.set_device(target)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", init_method=rendezvous or "env://",
                                rank=rank, world_size=world_size, device_id=target if use_cuda else None)
    return target


def world() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) without a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def tp_device(device: str | torch.device | None) -> torch.device:
    """This rank's device: cuda:LOCAL_RANK on GPUs, the CPU otherwise."""
    if str(device or "").startswith("cpu") or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", world()[0])))


def check_shardable(config: Any, tp: int) -> None:
    """ValueError when the model's heads or widths do not split evenly over `tp` ranks."""
    for name in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        value = getattr(config, name, None)
        if value is not None and value % tp:
            raise ValueError(f"--tp {tp} does not divide the model's {name} ({value}); use a divisor of it")


def shard(model: Any, tp: int, device: torch.device) -> Any:
    """Apply the model's tensor-parallel plan over a 1-D mesh of `tp` ranks (parameters become DTensor shards)."""
    from torch.distributed.device_mesh import init_device_mesh
    from transformers.distributed import DistributedConfig
    from transformers.distributed.tensor_parallel import apply_tensor_parallelism

    check_shardable(model.config, tp)
    _, size = world()
    if size != tp:
        raise ValueError(f"--tp {tp} was asked for, but this process group has {size} ranks")
    mesh = init_device_mesh(device.type, (tp,))
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    tied = head is not None and head.weight is embedding.weight
    if tied:  # the plan shards both by name: untie for the sharding, tie the two shards again after
        head.weight = torch.nn.Parameter(head.weight.detach().clone(), requires_grad=False)
    plan, _, _ = model._resolve_parallel_plans(DistributedConfig(tp_size=tp))
    apply_tensor_parallelism(model, mesh, plan)
    if tied:
        head.weight = embedding.weight
    model._device_mesh = mesh
    model._tp_size = tp
    return model


ONE_SHOT = "one-shot"  # the kind of all-reduce use_one_shot_all_reduce enabled (step-graph mode)
FUSED = "fused"  # ONE_SHOT, and the decoder layers' all-reduces fused with their add and norm (core.kernels.tp_fusion)
SYMMETRIC = (ONE_SHOT, FUSED)  # the kinds with symmetric memory enabled for the group


def use_one_shot_all_reduce(model: Any, all_reduce: str = SWITCH["tp_all_reduce"].default) -> tuple[str, str]:
    """Let step-graph mode do its small all-reduces with PyTorch's one-shot symmetric-memory all-reduce.

    At batch 1 an all-reduce moves a few KB, so its cost is latency (NCCL's and the one-shot's inside a CUDA graph:
    docs/TUNING.md, "Several GPUs"), and a 32-layer model does 65 of them per step. Inductor has its own lowering for
    this (`_collective.auto_select`): an all-reduce of up to 128 KB becomes `symm_mem.one_shot_all_reduce`, where
    each GPU reads the others' buffers directly over NVLink. Here symmetric memory is enabled for the group;
    `core.loops.step.decode_forward` turns the lowering on for the step-graph compile only, because CUDA-graph trees
    (reduce-overhead) refuse the symmetric-memory buffers it allocates ("tensors in the cudagraph pool not tracked
    as outputs"). The `tp_all_reduce` switch (`all_reduce`) at "nccl" keeps NCCL everywhere. Returns the kind the
    model's all-reduces will use ("gloo", "nccl" or ONE_SHOT) and, for "nccl" where one-shot was wanted, why.
    (core.kernels.tp_fusion goes one step further where it can: each decoder layer's all-reduce fused with its add
    and norm.)"""
    mesh = getattr(model, "_device_mesh", None)
    if mesh is None or mesh.device_type != "cuda":
        return "gloo", ""
    if all_reduce == "nccl":
        return "nccl", ""
    try:
        from torch.distributed._symmetric_memory import enable_symm_mem_for_group

        for group in {dist.group.WORLD, mesh.get_group()}:
            enable_symm_mem_for_group(group.group_name)
    except Exception as exc:  # an older PyTorch, or no peer access between the GPUs: NCCL still works
        return "nccl", f"symmetric memory unavailable: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    return ONE_SHOT, ""


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a parameter (the tensor itself when it is not distributed)."""
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def gather_objects(value: Any) -> list[Any]:
    """`value` from every rank, in rank order ([value] without a process group); a collective: every rank calls it."""
    _, size = world()
    if size == 1:
        return [value]
    gathered: list[Any] = [None] * size
    dist.all_gather_object(gathered, value)
    return gathered


def gather_device_spans(start_s: float, device_start_ms: list[float],
                        device_end_ms: list[float]) -> list[dict[str, Any]]:
    """Every rank's device spans of one run on rank 0's time base; [] without a process group.

    Each rank's spans count from its own run start (`start_s`, perf_counter). perf_counter is CLOCK_MONOTONIC, one
    clock for every process of a machine, so the difference of two ranks' starts moves one base onto the other.
    Called after the run, outside the timed region; every rank must call it for every run (it is a collective)."""
    _, size = world()
    if size == 1:
        return []
    gathered: list[Any] = [None] * size
    dist.all_gather_object(gathered, (start_s, device_start_ms, device_end_ms))
    origin = gathered[0][0]
    spans = []
    for rank, (rank_start_s, starts, ends) in enumerate(gathered):
        shift_ms = (rank_start_s - origin) * 1000
        spans.append({"rank": rank, "device_start_ms": [t + shift_ms for t in starts],
                      "device_end_ms": [t + shift_ms for t in ends]})
    return spans
