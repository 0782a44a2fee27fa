"""SYNCSCOPE_KERNEL_PDL on a Hopper GPU: the project's kernels launched with PDL, by Triton and inside a step-graph
compile, compute what they compute without it. Skipped without a GPU of compute capability 9.0 or newer; the flag's
way to the kernels is checked on the CPU (tests/test_kernel_pdl.py)."""

import pytest
import torch

from core.kernels import pdl
from core.kernels.pdl import KERNEL_PDL_ENV, supports_pdl
from core.loops.generation import generate
from core.models import load_model
from tests.conftest import requires_cuda

pytestmark = [
    pytest.mark.cuda,
    requires_cuda,
    pytest.mark.skipif(not (torch.cuda.is_available() and supports_pdl("cuda")), reason="needs a Hopper or newer GPU"),
]

PROMPT = "Tell me about the sea and the ships on it."
CHOICES = ("wait", "prefetch")


@pytest.fixture
def edits(monkeypatch):
    """Counts the user-defined kernels whose generated source got `launch_pdl`; compiles skip inductor's caches, so
    every graph is generated here."""
    count = []
    edit = pdl.with_launch_pdl
    monkeypatch.setattr(pdl, "with_launch_pdl", lambda source: count.append(1) or edit(source))
    monkeypatch.setattr(torch._inductor.config, "fx_graph_cache", False)
    monkeypatch.setattr(torch._functorch.config, "enable_autograd_cache", False)
    return count


def _tokens(monkeypatch, choice: str, dtype: str, loop: str = "pipelined", compile: str = "step-graph") -> list:
    monkeypatch.setenv(KERNEL_PDL_ENV, choice)
    torch._dynamo.reset()
    loaded = load_model("tiny-random", device="cuda", dtype=dtype)  # its own compiled steps
    assert loaded.decode_layers
    return generate(loaded, PROMPT, loop=loop, compile=compile, cache="static", max_new_tokens=40, ignore_eos=True,
                    lag=2).token_ids


def test_launched_by_triton_every_kernel_gives_the_same_bits(monkeypatch):
    from core.kernels import decode_layer, triton_attention
    from core.kernels.triton_gemv import Around, launch_gemv

    generator = torch.Generator(device="cuda").manual_seed(0)

    def random(*shape):
        return torch.randn(*shape, generator=generator, device="cuda").to(torch.bfloat16)

    x, weight, norm = random(1, 1, 2048), random(3072, 2048), random(2048)
    keys, values = random(1, 8, 512, 64), random(1, 8, 512, 64)
    cos, sin = random(64), random(64)

    def direct(kernel):
        return kernel

    def run() -> list[torch.Tensor]:
        k, v = keys.clone(), values.clone()
        out = [launch_gemv(x, weight, None, False, direct, around=Around(norm=norm, eps=1e-5))]
        length = torch.tensor(300, device="cuda")
        out.append(decode_layer.launch_qkv(x, norm, 1e-5, weight, None, cos, sin, k, v, length, 32, direct))
        out += [k, v]
        out.append(triton_attention._launch(out[1], k, v, None, 0.125, direct,
                                            triton_attention._kernels(), split_keys=64))  # attend and combine
        torch.cuda.synchronize()
        return out

    monkeypatch.setenv(KERNEL_PDL_ENV, "off")
    expected = run()
    for choice in CHOICES:
        monkeypatch.setenv(KERNEL_PDL_ENV, choice)
        assert all(torch.equal(a, b) for a, b in zip(run(), expected, strict=True)), choice


def test_each_choice_gives_the_off_choices_bf16_tokens(monkeypatch, fast_tiny_compiles, edits):
    off = _tokens(monkeypatch, "off", "bf16")
    assert not edits
    for choice in CHOICES:
        assert _tokens(monkeypatch, choice, "bf16") == off, choice
        assert edits, f"{choice}: no kernel of the step was generated with launch_pdl"
        edits.clear()


def test_each_choice_gives_the_naive_loops_fp32_tokens(monkeypatch, fast_tiny_compiles, edits):
    eager = _tokens(monkeypatch, "off", "fp32", loop="naive", compile="off")
    for choice in CHOICES:
        assert _tokens(monkeypatch, choice, "fp32") == eager, choice
        assert _tokens(monkeypatch, choice, "fp32", loop="naive") == eager, choice
        assert edits, choice
        edits.clear()
