"""Microseconds per call of each TP all-reduce this project can run at batch 1, on two GPUs, inside a CUDA graph.

    python benchmarks/tp_all_reduce_latency.py [--json OUT.json]       # needs two CUDA GPUs with peer access

What a decode step pays per all-reduce (Llama-8B: 64 a step, Llama-70B: 160), each kind replayed from one CUDA
graph of 64 calls (as a step's graph holds them, consecutive calls on different slots), 20 replays after 3 warm-ups,
the median replay divided by 64, at the widths of Llama-8B (4096) and Llama-70B (8192), bf16, one row:
- `nccl`: `dist.all_reduce` alone (SYNCSCOPE_TP_ALL_REDUCE=nccl);
- `one-shot`: PyTorch's `symm_mem.one_shot_all_reduce` alone (SYNCSCOPE_TP_ALL_REDUCE=one-shot);
- `fused-asm`, `fused-push`: core.kernels.tp_fusion's kernel, which also adds the residual and normalises (the default;
  SYNCSCOPE_TP_BARRIER picks how it learns the peers' rows are there).
The all-reduces alone are timed without the add and norm that follow them in the model (two more kernels there).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CALLS_PER_GRAPH = 64
REPLAYS = 20
WIDTHS = (4096, 8192)
KINDS = ("nccl", "one-shot", "fused-asm", "fused-push")


def _measure(rank: int, port: int, out_file: str) -> None:
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            device_id=torch.device("cuda", rank))
    group = dist.group.WORLD
    symm_mem.enable_symm_mem_for_group(group.group_name)
    try:
        rows = [row for hidden in WIDTHS for row in _one_width(hidden, group)]
        if rank == 0:
            Path(out_file).write_text(json.dumps(rows, indent=1))
    finally:
        dist.destroy_process_group()


def _one_width(hidden: int, group) -> list[dict]:
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    from core.kernels.tp_fusion import Workspace, allocate_workspace, launch_fused_kernel

    dtype = torch.bfloat16
    partial = torch.randn(1, hidden, device="cuda", dtype=dtype)
    residual = torch.randn(1, hidden, device="cuda", dtype=dtype)
    weight = torch.ones(hidden, device="cuda", dtype=dtype)
    out = torch.empty(1, 2 * hidden, device="cuda", dtype=dtype)
    one_shot_in = symm_mem.empty(1, hidden, device="cuda", dtype=dtype)
    symm_mem.rendezvous(one_shot_in, group.group_name)
    workspaces = {}  # one per fused kind: the flag kernel leaves rows where the push kernel wants empty slots
    for kind in KINDS[2:]:
        workspaces[kind] = Workspace(group, 2, dist.get_rank(group), hidden, slots=CALLS_PER_GRAPH,
                                     barrier=kind.removeprefix("fused-"))
        allocate_workspace(workspaces[kind], torch.empty(0, dtype=dtype, device="cuda"))

    def call(kind: str, slot: int) -> None:
        if kind == "nccl":
            dist.all_reduce(partial, group=group)
        elif kind == "one-shot":
            torch.ops.symm_mem.one_shot_all_reduce(one_shot_in, "sum", group.group_name)
        else:
            launch_fused_kernel(partial, residual, weight, out, 1e-5, workspaces[kind], slot)

    return [{"hidden": hidden, "kind": kind, "us_per_call": _per_call_us(call, kind, group)} for kind in KINDS]


def _per_call_us(call, kind: str, group) -> float:
    import torch.distributed as dist

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for slot in range(CALLS_PER_GRAPH):  # eager warm-up: NCCL and Triton set up outside the capture
            call(kind, slot)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for slot in range(CALLS_PER_GRAPH):
                call(kind, slot)
    torch.cuda.current_stream().wait_stream(stream)
    times = []
    for replay in range(3 + REPLAYS):
        dist.barrier(group=group)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        if replay >= 3:
            times.append(start.elapsed_time(end) * 1000 / CALLS_PER_GRAPH)
    return round(statistics.median(times), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args()
    if torch.cuda.device_count() < 2:
        sys.exit("needs two CUDA GPUs")
    from core.parallel.launch import free_port

    out = args.json or Path("/tmp/tp_all_reduce_latency.json")
    mp.spawn(_measure, args=(free_port(), str(out)), nprocs=2, join=True)
    rows = json.loads(out.read_text())
    print(f"{'width':>6}  {'kind':<11} {'us/call':>8}")
    for row in rows:
        print(f"{row['hidden']:>6}  {row['kind']:<11} {row['us_per_call']:>8.2f}")


if __name__ == "__main__":
    main()
