"""core.audit.sync: every host read of a device value found at its line, per decode step (on the CPU here:
what would block on a GPU; tests/test_cuda.py checks the CUDA side)."""

from __future__ import annotations

import os
import sys
import threading

import pytest
import torch

import core.audit.sites as sync_sites
import core.audit.sync as sync_audit
from core.audit.dispatch import host_memory
from core.audit.sync import KINDS, SyncAudit, loop_steps
from core.bench import main
from core.compare import compare
from core.loops.generation import generate
from core.request.options import BenchRequest, GenerationOptions
from tests.conftest import TINY

STEPS = 5
PADDED = ["Hi", "A much longer prompt, so that the first row is padded"]


def read_every_kind(x: torch.Tensor, mask: torch.Tensor) -> None:
    """One read of each kind the CPU can see, one per line, and look-alikes that read nothing."""
    x.sum().item()
    bool(x[0] > 0)
    x.tolist()
    x.cpu()
    x.numpy()
    x.nonzero()
    x[mask]
    torch.equal(x, x)
    f"{x}"
    if x.any():
        pass
    torch.tensor([x[0], x[1]])
    float(x[2])
    torch.argwhere(x)
    x.masked_select(mask)
    x[[0, 1]]
    torch.tensor([1.0, 2.0], device=x.device)


def read_nothing(x: torch.Tensor, mask: torch.Tensor, host: torch.Tensor) -> None:
    _ = x.shape[0] + len(x) + x.numel()
    _ = x[1], x[1:3], x[torch.tensor([0, 2])]  # indexing by position reads nothing
    _ = torch.where(mask, x, 0.0), x.masked_fill(mask, 0.0), x.to(torch.float64), x.sum() > 0
    _ = bool(host[0]), host.tolist(), host[0].item()  # host memory: no device value
    filled = x.clone()
    filled[mask] = 0.0  # PyTorch runs this as masked_fill_: no count of the mask


def audited(steps: int, body, device: str = "cpu") -> dict:
    audit = SyncAudit(device)
    with audit:
        for index in range(steps):
            audit.step(index)
            body()
            audit.queued()
        audit.end()
    return audit.result()


def test_each_kind_of_read_is_found_at_its_line_once_per_step():
    x, mask = torch.arange(6.0), torch.arange(6.0) > 2
    result = audited(STEPS, lambda: read_every_kind(x, mask))
    first = read_every_kind.__code__.co_firstlineno
    found = {(site["line"] - first, site["kind"]): site["per_step"] for site in result["sites"]}
    expected = {(2, "item"), (3, "bool"), (4, "tolist"), (5, "copy"), (6, "copy"), (7, "nonzero"), (8, "masked-index"),
                (9, "equal"), (10, "print"), (11, "bool"), (13, "scalar"), (14, "item"), (15, "nonzero"),
                (16, "masked-index"), (17, "h2d-copy"), (18, "h2d-copy")}
    assert set(found) == expected
    assert all(per_step == 1.0 for per_step in found.values())
    assert {kind for _, kind in expected} | {"pageable-copy", "synchronize", "event-synchronize",
                                             "stream-synchronize", "sync"} == set(KINDS)
    site = next(s for s in result["sites"] if s["kind"] == "equal")
    assert site["file"] == "tests/test_sync_audit.py" and site["code"] == "torch.equal(x, x)" and site["fix"]
    assert result["reads_per_step"] == [16] * STEPS and result["most_reads_in_a_decode_step"] == 16
    assert "cost nothing here" in result["note"]


def test_look_alikes_and_host_memory_give_no_site():
    x, mask, host = torch.arange(6.0), torch.arange(6.0) > 2, host_memory(torch.ones(3))
    result = audited(STEPS, lambda: read_nothing(x, mask, host))
    assert result["sites"] == [] and result["reads_per_step"] == [0] * STEPS


def test_reads_outside_steps_and_in_the_first_and_last_step_are_not_decode_reads():
    x = torch.arange(3.0)
    audit = SyncAudit("cpu")
    with audit:
        x.tolist()  # before the first step
        for index in range(4):
            audit.step(index)
            if index in (0, 3):
                x.tolist()  # the prefill's and the final step's waits: every loop has them
        audit.end()
        x.tolist()
    result = audit.result()
    assert result["reads"] == 4 and result["reads_per_step"] == [1, 0, 0, 1]
    assert result["decode_steps"] == 2 and result["reads_per_decode_step"] == 0.0


def test_a_read_is_counted_once_though_torch_reads_again_inside_it():
    x = torch.arange(4.0)
    result = audited(3, lambda: print(x, end=""))  # printing calls item() and tolist() inside torch
    assert [(s["kind"], s["count"]) for s in result["sites"]] == [("print", 3)]


def sites_by_line(result: dict, function) -> dict:
    """(line within `function`, kind) -> the site, for the sites in `function`."""
    first = function.__code__.co_firstlineno
    return {(s["line"] - first, s["kind"]): s for s in result["sites"] if s["function"] == function.__name__}


def decode_on_a_thread(audit: SyncAudit, x: torch.Tensor, mask: torch.Tensor) -> None:
    """A decode loop on a thread of its own, marking its steps there; it starts one more thread."""
    for index in range(STEPS):
        audit.step(index)
        x.sum().item()
        x[mask]  # only the dispatch mode sees it: the thread needs one of its own
        audit.queued()
    helper = threading.Thread(target=lambda: x.tolist(), name="helper")
    helper.start()
    helper.join()


def test_reads_on_threads_the_run_starts_are_counted_with_their_thread_s_name():
    x, mask, go = torch.arange(6.0), torch.arange(6.0) > 2, threading.Event()
    before = threading.Thread(target=lambda: go.wait() and x.sum().item())  # started before the audit: not its own
    before.start()
    audit = SyncAudit("cpu")
    with audit:
        go.set()
        before.join()
        decoder = threading.Thread(target=decode_on_a_thread, args=(audit, x, mask), name="decoder")
        decoder.start()
        assert audit.wait_for_threads() == []
        audit.end()
    x.sum().item()  # after the audit: nothing
    result = audit.result()
    found = {key: (s["per_step"], s["count"], s["thread"]) for key, s in sites_by_line(result, decode_on_a_thread)
             .items()}
    assert found == {(4, "item"): (1.0, STEPS, "decoder"), (5, "masked-index"): (1.0, STEPS, "decoder")}
    helper = [s for s in result["sites"] if s["kind"] == "tolist"]
    assert [(s["thread"], s["count"], s["function"]) for s in helper] == [("helper", 1, "<lambda>")]
    assert result["reads"] == 2 * STEPS + 1 and result["threads"] == {"decoder": 2 * STEPS, "helper": 1}
    assert result["reads_per_step"] == [2] * (STEPS - 1) + [3]  # the helper's read: in the last step


def copies_to_the_host(tok: torch.Tensor) -> None:
    host = tok.cpu()  # the one read here: the copy
    host.tolist()  # host memory
    host[0].tolist()  # a view of it
    host.clone().tolist()  # computed from host memory alone
    tok.cpu().numpy()  # one read; the array is host memory
    tok.to("cpu").tolist()  # one read: the copy


def test_host_copies_are_host_memory_on_the_cpu_too_so_only_the_copy_is_a_read():
    tok = torch.arange(4)
    result = audited(STEPS, lambda: copies_to_the_host(tok))
    assert {key: s["per_step"] for key, s in sites_by_line(result, copies_to_the_host).items()} == \
        {(1, "copy"): 1.0, (5, "copy"): 1.0, (6, "copy"): 1.0}
    assert result["reads_per_step"] == [3] * STEPS
    assert tok.sum().item() == 6  # the program's tensors are as they were


def copies_to_the_device(x: torch.Tensor, host: torch.Tensor, buffer: torch.Tensor) -> None:
    torch.tensor([1, 2], device=x.device)  # built from Python data on the device
    x[:, [-1], :]  # a list index: copied to the device first
    x[:, -1:, :]  # a slice: nothing to copy
    host.to(x.device)  # from host memory, blocking
    host.to(x.device, non_blocking=True)  # from (pinned) host memory, queued: not a read
    buffer.copy_(host)  # from host memory, blocking
    buffer.copy_(host, non_blocking=True)  # queued: not a read
    x[:, host[:1].long()]  # a host tensor as the index
    torch.tensor([1, 2])  # a host tensor: no device named


def test_copies_from_host_memory_to_the_device_are_h2d_copies_with_a_fix_that_fits():
    x, host, buffer = torch.arange(24.0).view(2, 3, 4), host_memory(torch.zeros(4)), torch.zeros(4)
    result = audited(STEPS, lambda: copies_to_the_device(x, host, buffer))
    found = sites_by_line(result, copies_to_the_device)
    assert {key: s["per_step"] for key, s in found.items()} == {
        (1, "h2d-copy"): 1.0, (2, "h2d-copy"): 1.0, (4, "h2d-copy"): 1.0, (6, "h2d-copy"): 1.0, (8, "h2d-copy"): 1.0}
    assert found[(2, "h2d-copy")]["fix_code"].startswith("x[:, -1:, :]  # a slice")
    assert "slice" in found[(2, "h2d-copy")]["fix"] and "pin_memory=True" in found[(4, "h2d-copy")]["fix"]
    assert "device across steps" in found[(1, "h2d-copy")]["fix"] and "index" in found[(8, "h2d-copy")]["fix"]
    assert "h2d-copy" in KINDS and sync_audit.FIXES["h2d-copy"]


def test_a_sync_only_the_debug_mode_sees_is_filed_by_what_its_subscript_holds():
    """On CUDA a list index's copy is seen only as a sync at its line: the names in the subscript say which it is."""
    x, last, mask = torch.zeros(2, 3), [-1], torch.zeros(2, 3, dtype=torch.bool, device="meta")  # a device mask
    listed = sync_sites.sync_kind(sys._getframe()), x[:, last]
    literal = sync_sites.sync_kind(sys._getframe()), x[:, [-1]]
    masked = sync_sites.sync_kind(sys._getframe()), x[mask] if mask.device.type == "cpu" else None
    assert [listed[0], literal[0], masked[0]] == [("h2d-copy", "list-index"), ("h2d-copy", "list-index"),
                                                   ("masked-index", None)]


def get_pos(seqlens: torch.Tensor) -> int:
    return seqlens[0].item()


def attention(seqlens: torch.Tensor) -> int:
    return get_pos(seqlens) + 1


def a_layer_s_forward(seqlens: torch.Tensor) -> None:
    attention(seqlens)
    attention(seqlens)
    get_pos(seqlens)  # a third caller, less often


def test_a_site_keeps_its_most_frequent_callers_and_its_counts_do_not_split_by_caller():
    seqlens = torch.tensor([5])
    result = audited(STEPS, lambda: a_layer_s_forward(seqlens))
    (site,) = result["sites"]
    assert (site["function"], site["per_step"], site["thread"]) == ("get_pos", 3.0, None)
    line = attention.__code__.co_firstlineno + 1
    assert site["callers"] == [f"tests/test_sync_audit.py:{line} attention",
                               f"tests/test_sync_audit.py:{a_layer_s_forward.__code__.co_firstlineno + 1} "
                               "a_layer_s_forward"]
    assert "the same step needs this position" in site["fix"] and "pos += 1" in site["fix_code"]


def test_fixes_of_a_program_s_own_sites_name_no_file_of_this_repository(tiny):
    x, mask = torch.arange(6.0), torch.arange(6.0) > 2
    result = audited(STEPS, lambda: read_every_kind(x, mask))
    for site in result["sites"]:
        texts = site["fix"] + (site["fix_code"] or "")
        assert site["fix"] and "core/" not in texts and "syncscope" not in texts, site
        assert site["fix_code"] is None or len(site["fix_code"].splitlines()) <= 6, site
    decision = next(s for s in result["sites"] if s["code"] == "if x.any():")
    assert "flag.copy_(x.any(), non_blocking=True)" in decision["fix_code"]
    naive = next(s for s in loop_audit(tiny, "Hello there", loop="naive")["sites"] if s["in_decode_steps"])
    assert "core/loops/generation.py, HostMirror" in naive["fix"], "a site in this repository may name its files"


def loop_audit(loaded, prompt, **options) -> dict:
    generate(loaded, prompt, max_new_tokens=10, ignore_eos=True, **options)  # its shape's setup run, before the audit
    audit = SyncAudit("cpu")
    with audit, loop_steps(audit):
        generate(loaded, prompt, max_new_tokens=10, ignore_eos=True, **options)
    return audit.result()


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("prompt", ["Hello there", PADDED], ids=["batch-1", "padded-batch-2"])
def test_the_pipelined_loop_reads_nothing_per_step_and_the_naive_loop_only_its_eos_check(tiny, cache, prompt):
    piped = loop_audit(tiny, prompt, loop="pipelined", cache=cache)
    assert piped["reads_per_decode_step"] == 0.0 and piped["decode_steps"] == 8
    naive = loop_audit(tiny, prompt, loop="naive", cache=cache)
    decode = [s for s in naive["sites"] if s["in_decode_steps"]]
    assert naive["reads_per_decode_step"] == 1.0 and len(decode) == 1
    assert (decode[0]["file"], decode[0]["function"], decode[0]["kind"]) == \
        ("core/loops/generation.py", "read_stop_flag", "item")


@pytest.mark.slow
@pytest.mark.parametrize("options", [dict(cache="static", compile="default"), dict(do_sample=True, seed=3),
                                     dict(lag=3), dict(cache="static", compile="reduce-overhead")],
                         ids=["compiled", "sampled", "lag-3", "cuda-graph-mode-on-the-cpu"])
def test_the_pipelined_loop_reads_nothing_per_step_in_other_modes(tiny, options):
    assert loop_audit(tiny, PADDED, loop="pipelined", **options)["reads_per_decode_step"] == 0.0


@pytest.fixture(scope="module")
def hf_modules_tiny():
    """tiny-random with transformers' modules and mask functions as they are (--hf-modules)."""
    from core.models.loading import load_model

    return load_model(TINY, device="cpu", hf_modules=True)


def mask_read(result: dict) -> dict:
    site = next(s for s in result["sites"] if s["in_decode_steps"])
    assert site["file"] == "transformers/masking_utils.py" and "fast_all(padding_mask)" in site["code"]
    assert site["kind"] == "bool" and site["per_step"] == 1.0 and site["where"] == "inside a step"
    return site


def test_the_audit_sees_transformers_mask_read_where_the_loops_do_not_avoid_it(hf_modules_tiny, monkeypatch):
    """Unprepared (--hf-modules), a padded batch's decode steps read the mask in transformers; with no row padded the
    loops pass no mask, and forced to pass one, they read it too."""
    from core.loops import step

    assert loop_audit(hf_modules_tiny, "Hello there", loop="pipelined")["reads_per_decode_step"] == 0.0
    assert "attention_mask=None" in mask_read(loop_audit(hf_modules_tiny, PADDED, loop="pipelined"))["fix"]
    begin = step.DecodeSetup.begin

    def with_the_mask(self, *args, **kwargs):
        cache = begin(self, *args, **kwargs)
        self.decode_mask = True
        return cache

    monkeypatch.setattr(step.DecodeSetup, "begin", with_the_mask)
    mask_read(loop_audit(hf_modules_tiny, "Hello there", loop="pipelined"))


def test_compare_audits_each_contestant_after_its_trials(tiny):
    request = BenchRequest(prompt="Hello there", options=GenerationOptions(max_new_tokens=12, ignore_eos=True),
                           trials=1, contestants=("naive", "pipelined", "hf"), audit=True)
    report = compare(tiny, request)
    audits = report["sync_audit"]
    assert audits["naive"]["reads_per_decode_step"] == 1.0 and audits["pipelined"]["reads_per_decode_step"] == 0.0
    hf = [s for s in audits["hf"]["sites"] if s["in_decode_steps"]]
    assert len(hf) == 1 and hf[0]["file"] == "transformers/generation/utils.py" and hf[0]["per_step"] == 1.0
    assert "unfinished_sequences.max() == 0" in hf[0]["code"] and "DeferredStopCheck" in hf[0]["fix"]
    assert all(a["rate_vs_timed"] > 0 and a["started_ms"] > 0 for a in audits.values())
    assert len(report["runs"]) == 3  # the audited runs are not trials


def test_the_cli_prints_the_top_sites(capsys):
    assert main(["--model", "tiny-random", "--device", "cpu", "--prompt-tokens", "8", "--max-new-tokens", "8",
                 "--trials", "1", "--ignore-eos", "--audit"]) == 0
    out = capsys.readouterr().out
    assert "naive: 1 read of a device value per decode step, over" in out
    assert "pipelined: 0 reads of device values per decode step, over" in out
    assert "core/loops/generation.py:" in out and "cost nothing here" in out


def test_no_read_is_placed_in_the_audits_own_files():
    """Every file of core/audit/ (the sync audit, and what runs a program under it, its __main__.py too) is the
    audit's own, never the program's; the project's loops beside it in core/ are the program's."""
    package = os.path.dirname(sync_sites.__file__)
    own = [os.path.join(package, name) for name in os.listdir(package) if name.endswith(".py")]
    assert len(own) > 10 and not [path for path in own if sync_sites.in_program(path)]
    assert sync_sites.in_program(os.path.join(sync_sites.CORE_DIR, "loops", "generation.py"))
    assert sync_sites.in_program(os.path.join(sync_sites.CORE_DIR, "audit_loop.py")), "core/audit/ alone, no prefix"
