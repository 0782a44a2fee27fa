"""Programmatic dependent launch: the choice, the report, and (on a Hopper GPU) where the generated kernels wait."""

import re

import pytest
import torch

from core.bench import main
from core.kernels.pdl import (
    SafePdlCacheKey,
    install_safe_pdl_placement,
    pdl_in_effect,
    pdl_inductor_options,
    supports_pdl,
)
from core.request.options import STEP_GRAPH
from core.tuning import Tuning


def test_pdl_is_off_by_default_and_a_typo_is_refused():
    assert Tuning.from_environment({}).pdl == "off"
    assert Tuning.from_environment({"SYNCSCOPE_PDL": " Inductor "}).pdl == "inductor"
    with pytest.raises(ValueError, match="SYNCSCOPE_PDL must be one of off, safe, inductor, got 'fast'"):
        Tuning.from_environment({"SYNCSCOPE_PDL": "fast"})


def test_the_cli_refuses_a_bad_choice_before_any_work(monkeypatch, capsys):
    monkeypatch.setenv("SYNCSCOPE_PDL", "always")
    assert main(["--model", "tiny-random", "--max-new-tokens", "2"]) == 2
    assert "SYNCSCOPE_PDL must be one of" in capsys.readouterr().err


def test_no_pdl_on_the_cpu_and_no_options_for_it():
    assert not supports_pdl("cpu")
    assert pdl_inductor_options("cpu", "safe") == {}
    assert pdl_in_effect("cpu", STEP_GRAPH, "safe", {}) == "unsupported"


def test_the_report_follows_the_mode_and_the_users_inductor_options(monkeypatch):
    monkeypatch.setattr("core.kernels.pdl.supports_pdl", lambda device: True)
    assert pdl_in_effect("cuda", STEP_GRAPH, "safe", {}) == "safe"
    assert pdl_in_effect("cuda", "reduce-overhead", "safe", {}) == "off"
    assert pdl_in_effect("cuda", STEP_GRAPH, "safe", {"triton.enable_pdl": False}) == "off"
    assert pdl_in_effect("cuda", "reduce-overhead", "safe", {"triton.enable_pdl": True}) == "inductor"
    assert pdl_in_effect("cuda", STEP_GRAPH, "off", {}) == "off"
    assert pdl_in_effect("cuda", STEP_GRAPH, "off", {"triton.enable_pdl": True}) == "inductor"


def test_the_safe_options_carry_a_cache_key_of_their_own(monkeypatch):
    monkeypatch.setattr("core.kernels.pdl.supports_pdl", lambda device: True)
    safe = pdl_inductor_options("cuda", "safe")
    assert safe["triton.enable_pdl"] is True and isinstance(safe["post_grad_custom_post_pass"], SafePdlCacheKey)
    assert safe["post_grad_custom_post_pass"].uuid() == "syncscope-safe-pdl-1"
    assert pdl_inductor_options("cuda", "inductor") == {"triton.enable_pdl": True}
    assert pdl_inductor_options("cuda", "off") == {}


def test_installing_the_safe_placement_twice_patches_once():
    from torch._inductor.codegen.triton import TritonKernel

    install_safe_pdl_placement()
    first = TritonKernel._handle_pdl_before_access
    install_safe_pdl_placement()
    assert TritonKernel._handle_pdl_before_access is first and first._syncscope_safe


@pytest.mark.cuda
@pytest.mark.skipif(not (torch.cuda.is_available() and supports_pdl("cuda")), reason="needs a Hopper or newer GPU")
def test_every_generated_kernel_waits_before_its_first_memory_access():
    from torch._inductor.utils import run_and_get_code

    def chain(x):
        total = x.sin().sum()  # a reduction
        ramp = torch.arange(x.numel(), device=x.device, dtype=x.dtype)  # a kernel that loads nothing
        return (ramp * total + x.cos()).relu()  # reads what two kernels back wrote

    torch._dynamo.reset()
    compiled = torch.compile(chain, options=pdl_inductor_options("cuda", "safe"))
    x = torch.randn(4096, device="cuda")
    out, sources = run_and_get_code(compiled, x)
    torch.testing.assert_close(out, chain(x))
    kernels = [k for src in sources for k in re.split(r"@triton\.jit", src)[1:]]
    assert kernels
    for kernel in kernels:
        body = kernel.split("\n\n\n")[0]
        first_access = min(i for i in (body.find("tl.load("), body.find("tl.store(")) if i >= 0)
        wait = body.find("gdc_wait()")
        assert 0 <= wait < first_access, body
