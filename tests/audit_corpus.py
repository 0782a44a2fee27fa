"""A program for core.audit's tests: a module called once per step, and after each call one read of each kind the
device reads (`# read: KIND`), then look-alikes that read nothing (`# reads nothing`). On CUDA also the waits and
copies only a GPU has. Its line numbers are what the tests check, read from these comments."""

from __future__ import annotations

import sys

import torch


class Step(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1.0


def reads(x: torch.Tensor, mask: torch.Tensor) -> None:
    x.sum().item()  # read: item
    bool(x[0] > 0)  # read: bool
    x.tolist()  # read: tolist
    x.cpu()  # read: copy
    x.nonzero()  # read: nonzero
    x[mask]  # read: masked-index
    torch.equal(x, x)  # read: equal
    print(x, end="\r")  # read: print
    if x.any():  # read: bool
        pass
    torch.tensor([x[0], x[1]])  # read: scalar
    float(x[2])  # read: item


def look_alikes(x: torch.Tensor, mask: torch.Tensor, host: torch.Tensor) -> None:
    _ = x.shape[0] + len(x) + x[1:3].numel()  # reads nothing
    _ = torch.where(mask, x, 0.0) + x.masked_fill(mask, 1.0)  # reads nothing
    host.copy_(x, non_blocking=True)  # reads nothing
    _ = bool(host[0])  # reads nothing


def gpu_reads(x: torch.Tensor, pageable: torch.Tensor) -> None:
    torch.cuda.synchronize()  # read: synchronize
    event = torch.cuda.Event()
    event.record()
    event.synchronize()  # read: event-synchronize
    pageable.copy_(x, non_blocking=True)  # read: pageable-copy


def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    step = Step()
    x = torch.arange(6.0, device=device)
    mask = x > 2
    host = torch.zeros(6, pin_memory=x.is_cuda)
    pageable = torch.zeros(6)
    for _ in range(steps):
        x = step(x)
        reads(x, mask)
        look_alikes(x, mask, host)
        if x.is_cuda:
            gpu_reads(x, pageable)


if __name__ == "__main__":
    main()
