"""core.audit.fixes: what the audit suggests for a read, told from the read's kind and its line's text. What
the value is for (a position the same step needs, a decision, a value to keep), the expression read, the patterns in
the line's own names, library sites by their own fix, and this repository's files named only for its own reads.
(The audit's sites carrying these fixes end to end: test_sync_audit.py.) Torch-free: text in, text out."""

from __future__ import annotations

import sys
import types

import pytest

from core.audit.fixes import (
    BATCHED_READ_FIX,
    FIXES,
    H2D_FIXES,
    IN_THE_BATCHED_LOOPS,
    IN_THE_PROJECT,
    MAX_CODE_LINES,
    POSITION_FIX,
    decision,
    is_position,
    receiver,
    suggest,
)

USER = "my_loop.py"
STOP_CHECK = ".venv/lib/python3.11/site-packages/transformers/generation/utils.py"


@pytest.mark.parametrize(("code", "function", "position"), [
    ("x = y[:, :n.item()]", "", True),  # inside a subscript: this very step's index
    ("start_pos = cache.offset.item()", "", True),
    ("length = int(seq_len)", "", True),
    ("n = cursor.item()", "", True),
    ("value = counter.item()", "get_pos", True),  # the function says what it reads
    ("tok = next_token.item()", "", False),
    ("possible = x.item()", "", False),  # a word that starts with pos is no position
    ("ids = t.tolist()", "", False),
])
def test_a_position_is_told_by_a_subscript_or_a_name_that_says_so(code, function, position):
    assert is_position(code, function) is position


@pytest.mark.parametrize(("code", "tested"), [
    ("if done.all().item():", "done.all()"),
    ("    if (unfinished == 0).all().item():  # all stopped?", "(unfinished == 0).all()"),
    ("flag = bool(stop)", "stop"),
    ("assert x.any()", "x.any()"),
    ("while not finished.any():", "flag_tensor"),  # Python logic around the read: the pattern names a device flag
    ("if a.item() and b:", "flag_tensor"),
    ("if (done.all()", "flag_tensor"),  # a condition over several lines
    ("tok = next_token.item()", None),  # no decision
])
def test_a_decision_is_the_tested_expression_without_its_read(code, tested):
    assert decision(code) == tested


@pytest.mark.parametrize(("code", "read"), [
    ("tok = next_token.item()", "next_token"),
    ("same = (a == b).all().item()", "(a == b).all()"),
    ("rows = out[:, step].tolist()", "out[:, step]"),
    ("n = int(lengths[0])", "lengths[0]"),
    ("h = x.to('cpu')", "x"),
    ("print('no read here')", "value"),
])
def test_the_receiver_is_the_expression_whose_value_is_read(code, read):
    assert receiver(code) == read


def test_a_token_read_is_copied_to_pinned_memory_and_read_a_step_later_in_the_lines_own_names():
    fix, code = suggest(USER, "tok = next_token.item()", "item")
    assert fix == FIXES["item"]
    assert "torch.empty_like(next_token, device=\"cpu\", pin_memory=True)" in code
    assert "host.copy_(next_token, non_blocking=True)" in code and code.endswith("value = host.item()  # a step "
                                                                               "later: the copy has landed")
    assert suggest(USER, "rows = out.tolist()", "tolist")[1].splitlines()[-1].startswith("copied.synchronize(); "
                                                                                          "value = host.tolist()")


def test_a_position_cannot_wait_a_step_so_the_host_keeps_its_own():
    fix, code = suggest(USER, "start_pos = cache.offset.item()", "item")
    assert fix == POSITION_FIX and code.startswith("pos = int(cache.offset)  # once, before the loop")
    # bool() decides, whatever the name: a stop flag may be read a step late.
    assert suggest(USER, "if bool(seq_len_done):", "bool")[0] == FIXES["bool"]


def test_a_decision_becomes_a_flag_copied_and_tested_a_step_late():
    fix, code = suggest(USER, "if done.all().item():", "item")
    assert fix == FIXES["bool"]
    assert "flag.copy_(done.all(), non_blocking=True)" in code and code.endswith("if flag: break  # a step late: "
                                                                                "drop the extra step's token")
    assert "flag.copy_(a, non_blocking=True)" in suggest(USER, "x = bool(a) or b", "bool")[1]
    # A bool read on a line that tests nothing visible (the test is elsewhere): the pattern names a device flag.
    assert "flag.copy_(flag_tensor, non_blocking=True)" in suggest(USER, "return stop", "bool")[1]


@pytest.mark.parametrize(("code", "what", "fix", "pattern"), [
    ("h = x[:, [-1], :]", None, H2D_FIXES["list-index"], "h = x[:, -1:, :]  # a slice"),
    ("h = x[[3]]", "list-index", H2D_FIXES["list-index"], "h = x[3:4]  # a slice"),
    ("ids = torch.tensor(ids, device=dev)", None, H2D_FIXES["built"], "ids = torch.zeros("),
    ("x = host.to(device)", None, H2D_FIXES["to-device"], "staging = torch.empty(shape"),
    ("y = x[index]", "host-index", H2D_FIXES["host-index"], "index = index.to(device)  # once"),
    ("y = something(x)", None, FIXES["h2d-copy"], None),
])
def test_a_copy_to_the_device_gets_the_fix_of_what_was_copied(code, what, fix, pattern):
    got_fix, got_code = suggest(USER, code, "h2d-copy", what)
    assert got_fix == fix
    assert (got_code is None) if pattern is None else got_code.startswith(pattern)


@pytest.mark.parametrize("kind", [*FIXES, "no-such-kind"])
def test_every_kind_has_a_fix_in_at_most_six_lines_that_names_no_file_of_this_repository(kind):
    fix, code = suggest(USER, "x = y[:, [-1]].item()" if kind == "h2d-copy" else "v = thing.item()", kind)
    assert bool(fix) is (kind != "no-such-kind")
    text = fix + (code or "")
    assert "core/" not in text and "syncscope" not in text
    assert code is None or len(code.splitlines()) <= MAX_CODE_LINES


def test_only_a_read_in_the_projects_own_loops_is_pointed_at_their_code():
    for kind, code in (("item", "tok = t.item()"), ("bool", "if done:"), ("tolist", "r = t.tolist()")):
        assert suggest("core/loops/generation.py", code, kind, in_project=True)[0].endswith(IN_THE_PROJECT), kind
        assert IN_THE_PROJECT not in suggest(USER, code, kind)[0], kind
    # A position or another kind has nothing in the loops to point at.
    assert IN_THE_PROJECT not in suggest("core/x.py", "pos = p.item()", "item", in_project=True)[0]
    assert IN_THE_PROJECT not in suggest("core/x.py", "n = x.nonzero()", "nonzero", in_project=True)[0]


def test_a_transformers_mask_read_gets_its_own_fix_in_its_file_only():
    fix, code = suggest(".venv/lib/site-packages/transformers/masking_utils.py",
                        "if fast_all(padding_mask):", "bool")
    assert "attention_mask=None" in fix and "allow_is_causal_skip" in code
    assert suggest(USER, "if fast_all(padding_mask):", "bool")[0] == FIXES["bool"]


def test_generates_stop_check_gets_deferred_stop_check_only_where_transformers_has_it(monkeypatch):
    with_it = types.ModuleType("transformers.generation.utils")
    with_it.DeferredStopCheck = type("DeferredStopCheck", (), {"is_supported": staticmethod(lambda *a: False)})
    monkeypatch.setitem(sys.modules, "transformers.generation.utils", with_it)
    fix, code = suggest(STOP_CHECK, "this_peer_finished = unfinished_sequences.max() == 0", "item")
    assert "DeferredStopCheck" in fix and "DeferredStopCheck.is_supported = staticmethod(" in code
    assert len(code.splitlines()) <= MAX_CODE_LINES

    older = types.ModuleType("transformers.generation.utils")  # a transformers before DeferredStopCheck
    monkeypatch.setitem(sys.modules, "transformers.generation.utils", older)
    fix, code = suggest(STOP_CHECK, "this_peer_finished = unfinished_sequences.max() == 0", "item")
    assert "DeferredStopCheck" not in fix + (code or "")


@pytest.mark.parametrize("code", ["if finished[i].item():", "if tokens[i].item() == eos_id:",
                                  "token = next_ids[row].item()"])
def test_a_read_per_row_is_fixed_as_the_pipelined_batched_loop_reads_every_row_at_once(code):
    fix, pattern = suggest(USER, code, "item")
    assert fix == BATCHED_READ_FIX and "pinned[step % ring].copy_(record, non_blocking=True)" in pattern


@pytest.mark.parametrize(("code", "kind"), [("return bool(state.done[index].item())", "bool"),
                                            ("tok = next_token[0].item()", "item")])
def test_a_read_indexed_by_a_step_or_a_number_is_not_taken_for_a_read_per_row(code, kind):
    assert suggest(USER, code, kind)[0] != BATCHED_READ_FIX


def test_every_read_in_the_batched_loops_names_the_pipelined_batched_loop_as_its_fix():
    for code, kind in (("finished = fields[3].item()", "item"), ("row = record.tolist()", "tolist")):
        fix, _ = suggest("core/load/batching.py", code, kind, in_project=True)
        assert fix == BATCHED_READ_FIX + IN_THE_BATCHED_LOOPS, code
