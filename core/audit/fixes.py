"""What to do about a read the sync audit (core.audit.sync) found: a line of text and, where a pattern says it
better, at most six lines of code in the kind of code the read's line is.

A fix depends on the read's kind and on what its value is for, told from the text of its line: a position that the
same step needs (it cannot wait a step), a decision (`if`, `while`, `bool()`: a flag that can be read a step late), or
a value read to be kept (a token: copied into pinned memory and read a step later). A fix names no file of this
repository unless the read is in it (core/: the project's own loops); sites in libraries have their own (KNOWN_SITES).
Torch-free: only text in, text out.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

# What to do about each kind, in one line; the functions below refine it from the line's text.
FIXES = {
    "item": "copy the value into pinned memory with non_blocking=True and read it a step later, once a CUDA event "
            "recorded after the copy has completed: the next step is queued meanwhile",
    "bool": "keep the decision on the device (torch.where, masks), or copy the flag into pinned memory with "
            "non_blocking=True and test it a step later, after its CUDA event (one extra step to drop at the end)",
    "tolist": "copy into pinned memory with non_blocking=True and read the list a step later, once a CUDA event "
              "recorded after the copy has completed",
    "copy": "copy into pinned memory with non_blocking=True and use the copy a step later, once a CUDA event recorded "
            "after it has completed",
    "h2d-copy": "a copy from pageable host memory waits for the device: keep the data on the device across steps, or "
                "copy it from pinned memory with non_blocking=True",
    "pageable-copy": "allocate the destination with pin_memory=True: non_blocking=True into pageable memory blocks",
    "print": "log a pinned copy read later, or print outside the decode loop",
    "nonzero": "use a fixed-size form (torch.where with a fill value, masked_fill, nonzero_static(size=...))",
    "masked-index": "use torch.where / masked_fill, which keep the shape, instead of t[mask]",
    "equal": "compare on the device ((a == b).all()) and read the result a step later, or not at all in the loop",
    "scalar": "build the tensor on the device (torch.stack, torch.cat) instead of from Python numbers read back",
    "synchronize": "wait on an event recorded a step or more earlier instead of emptying the whole queue",
    "event-synchronize": "record the event a step or more before waiting on it, so work is still queued behind it",
    "stream-synchronize": "wait on an event recorded a step or more earlier instead of emptying the stream",
    "sync": "the operation named at this line synchronizes inside PyTorch; look for a form whose output size "
            "or control flow does not depend on device values",
}
# h2d-copy by what was copied (the audit's `what`).
H2D_FIXES = {
    "list-index": "index with a slice (x[:, -1:, :]) instead of a Python list: a list index is copied to the device "
                  "first, and the host waits for that copy",
    "host-index": "make the index tensor on the device once, before the loop: a host index is copied to the device on "
                  "every use, and the host waits for it",
    "built": "keep the values on the device across steps (a device buffer written in place) instead of building a "
             "tensor from Python data each step; or fill a pinned buffer and copy it with non_blocking=True",
    "to-device": "allocate the host tensor with pin_memory=True and copy it with non_blocking=True: a copy from "
                 "pageable memory (or without non_blocking) waits for the device",
}
# A batched loop's per-row bookkeeping: its rows' tokens and finished flags read each step, its positions built from
# Python lists. What the pipelined batched loop does instead (core.load: the slots and their record rows).
BATCHED_READ_FIX = ("a batched loop that reads each step's tokens and finished rows waits for the device every step: "
                    "copy them (one row: tokens, then flags) into pinned memory with non_blocking=True and read them "
                    "`lag` steps later, once a CUDA event says they landed; a finished row keeps its slot, its extra "
                    "steps dropped, until the host learns it finished, then the next request takes the slot (as the "
                    "pipelined batched loop does)")
BATCHED_STATE_FIX = ("keep each row's position and whether it still runs on the device, moved on inside the step "
                     "(positions += live; live &= ~stopped): nothing is built from Python lists or copied to the "
                     "device each step (as the pipelined batched loop's slots do); the host keeps its own list")
BATCHED_READ_CODE = "\n".join([
    "record = torch.cat((next_ids, stopped.long()))  # this step's tokens and flags: one row",
    "pinned[step % ring].copy_(record, non_blocking=True); landed[step % ring].record()",
    "...  # queue the next step first; finished rows keep computing (dropped)",
    "seen = step - lag; landed[seen % ring].synchronize()",
    "row = pinned[seen % ring].tolist(); tokens, flags = row[:rows], row[rows:]",
    "# free the slots whose flag is set, admit waiting requests there"])
BATCHED_STATE_CODE = "\n".join([
    "positions = torch.tensor(first_positions, device=device)  # once, before the loop",
    "live = torch.ones(rows, dtype=torch.bool, device=device)",
    "...  # each step, on the device:",
    "positions += live  # position_ids = positions[:, None]",
    "live &= ~stopped"])
# Per-row bookkeeping in a line: a loop over rows, a name for rows or their stops, or a list built row by row.
_ROWS = re.compile(r"\benumerate\(|\b(finished\w*|stopped|done)\b|\[.*\bfor\b.*\bin\b")
# One row's value read (`if tokens[i].item() == eos`), the index named as rows' usually are (a step's is not): a read
# per row, in a loop over rows.
_ONE_ROW = re.compile(r"\[\s*(i|j|b|r|row|slot|seq)\s*\]\s*\.item\(\)")
IN_THE_BATCHED_LOOPS = " (core/load/batching.py: the pipelined loop's _PinnedRows)"
POSITION_FIX = ("the same step needs this position, so it cannot be read a step late: keep it as a host integer "
                "beside the device counter and advance both (the host knows how far each step moves)")
IN_THE_PROJECT = " (as the pipelined loop does: core/loops/generation.py, HostMirror)"
MAX_CODE_LINES = 6  # the most lines of a fix's pattern (fix_code); the page shows no more (dashboard.views.audit_view)


@dataclass(frozen=True)
class KnownSite:
    """A read in a library the loops meet: the file (its path's end), a text in its line, and what to do."""

    suffix: str
    text: str
    fix: str
    code: str | None = None


_DEFER = ("from transformers.generation.utils import DeferredStopCheck\n"
          "DeferredStopCheck.is_supported = staticmethod(  # transformers allows it on mps only\n"
          "    lambda device, cache, cache_is_returned, is_assistant: not is_assistant\n"
          "    and (cache is None or cache.is_croppable or not cache_is_returned))\n"
          "out = model.generate(**inputs)  # reads the stop flag a step late")
KNOWN_SITES = (
    KnownSite("transformers/masking_utils.py", "fast_all",
              "transformers reads the attention mask on the host to decide whether it can skip the mask: pass "
              "attention_mask=None when no row is padded (as generate() does); for a padded batch, register an sdpa "
              "mask function that builds the mask without trying to skip it",
              "from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask\n\n"
              "def sdpa_mask_without_read(*args, **kwargs):\n"
              "    kwargs[\"allow_is_causal_skip\"] = False  # build the mask instead of reading it\n"
              "    return sdpa_mask(*args, **kwargs)\n"
              "ALL_MASK_ATTENTION_FUNCTIONS.register(\"sdpa\", sdpa_mask_without_read)"),
    KnownSite("transformers/generation/utils.py", "unfinished_sequences.max() == 0",
              "generate()'s StopCheck reads the stop flag every step. transformers' DeferredStopCheck reads it a step "
              "late, but its is_supported() allows it on mps only and no generate() argument changes that: replace "
              "is_supported before calling generate() (it costs one extra forward, which generate() undoes; a streamer "
              "gets each token a step late; compare the output with the default's)", _DEFER),
    KnownSite("transformers/generation/utils.py", "streamer.put(tokens.cpu())",
              "generate() copies each step's tokens to the host for the streamer and waits for them. With "
              "transformers' DeferredStopCheck on (replace its is_supported(), which allows it on mps only), it copies "
              "them into pinned memory without waiting and streams each a step late", _DEFER),
)
_NEEDS_DEFERRED = {"unfinished_sequences.max() == 0", "streamer.put(tokens.cpu())"}


def suggest(file: str, code: str, kind: str, what: str | None = None, in_project: bool = False,
            function: str = "") -> tuple[str, str | None]:
    """(what to do about a read of `kind` at a line of `file` whose text is `code`, in `function`; a pattern in at
    most six lines, or None). `what`: for an h2d-copy, what was copied; `in_project`: the read is in this
    repository's core/."""
    known = _known_site(file, code)
    if known is not None:
        return known.fix, known.code
    fix, pattern = _by_kind(code, kind, what, function)
    if in_project and file.endswith("core/load/batching.py") and fix in (FIXES["tolist"], FIXES["item"], FIXES["bool"],
                                                                           BATCHED_READ_FIX):
        return BATCHED_READ_FIX + IN_THE_BATCHED_LOOPS, BATCHED_READ_CODE
    if in_project and fix in (FIXES["item"], FIXES["bool"], FIXES["tolist"]):
        fix += IN_THE_PROJECT
    return fix, pattern


def _known_site(file: str, code: str) -> KnownSite | None:
    for site in KNOWN_SITES:
        if file.endswith(site.suffix) and site.text in code:
            if site.text in _NEEDS_DEFERRED and not _has_deferred_stop_check():
                return None
            return site
    return None


def _has_deferred_stop_check() -> bool:
    """Whether the transformers this program loaded has DeferredStopCheck.is_supported (5.x; not older ones)."""
    utils = sys.modules.get("transformers.generation.utils")
    return callable(getattr(getattr(utils, "DeferredStopCheck", None), "is_supported", None))


def _by_kind(code: str, kind: str, what: str | None, function: str) -> tuple[str, str | None]:
    batched = _ROWS.search(_strip_comment(code)) is not None
    if (kind == "tolist" and batched) or (kind in ("item", "bool") and _ONE_ROW.search(code)):
        return BATCHED_READ_FIX, BATCHED_READ_CODE
    if kind == "h2d-copy" and batched and (what or _h2d_from_code(code)) == "built":
        return BATCHED_STATE_FIX, BATCHED_STATE_CODE
    if kind in ("item", "tolist", "copy", "bool"):
        if kind != "bool" and is_position(code, function):
            return POSITION_FIX, _position_code(code, kind)
        condition = decision(code)
        if condition is not None or kind == "bool":
            return FIXES["bool"], _flag_code(condition or "flag_tensor")
        return FIXES[kind], _value_code(code, kind)
    if kind == "h2d-copy":
        return H2D_FIXES.get(what or _h2d_from_code(code), FIXES["h2d-copy"]), _h2d_code(code, what)
    return FIXES.get(kind, ""), _OTHER_CODE.get(kind)


# ---- what the value is for, from the line's text

_READ_CALL = re.compile(r"\.(?:item|tolist|cpu|numpy)\(\)|\.to\(|\b(int|float|bool)\(")
# A read inside a subscript or slice (x[:, :n.item()]) decides an index of this very step.
_IN_SUBSCRIPT = re.compile(r"\[[^\]]*(\.(item|tolist)\(\)|\bint\()")
# A name one of whose words says position or length (pos, start_pos, seq_len, cache.offset, cursor, length). A
# heuristic: such a value usually advances by a known amount each step, so the host can keep its own copy of it.
_POSITION_NAME = re.compile(r"(?:^|[_.])(pos|positions?|offsets?|cursor|seqlens?|lengths?|lens?)(?:$|[_.\d])",
                            re.IGNORECASE)
_TARGET = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*=(?!=)")
_CONDITION = re.compile(r"^\s*(?:if|elif|while|assert)\s+(.+?)\s*:?\s*(?:#.*)?$")


def is_position(code: str, function: str = "") -> bool:
    """Whether the read's line uses the value as a position or length the same step needs: inside a subscript, or
    read from (or into, or in a function of) a name that says so (`get_pos`)."""
    if _IN_SUBSCRIPT.search(code):
        return True
    names = [re.sub(r"\[[^\]]*\]", "", receiver(code)), re.sub(r"^(get|read|current)_", "", function)]
    target = _TARGET.match(code)
    if target:
        names.append(target.group(1))
    return any(_POSITION_NAME.search(name) for name in names)


def decision(code: str) -> str | None:
    """The tested expression where the line decides on the read (`if x.any():`, `while ...:`, `bool(flag)`), without
    its `.item()`; None where the line does not decide."""
    match = _CONDITION.match(_strip_comment(code))
    if match:
        tested = match.group(1)
    elif "bool(" in code:
        tested = _call_argument(code, code.index("bool(") + len("bool"))
    else:
        return None
    tested = re.sub(r"\.item\(\)$", "", tested.strip())
    unbalanced = any(tested.count(a) != tested.count(b) for a, b in ("()", "[]"))  # a condition over several lines
    if not tested or unbalanced or re.search(r"\.(item|tolist)\(|\b(and|or|not)\b", tested):
        return "flag_tensor"  # Python logic around the read: the pattern names the device flag instead
    return tested


def receiver(code: str) -> str:
    """The expression whose value the line reads (`token` in `token.item()`, `(a == b).all()` in
    `(a == b).all().item()`, `x` in `int(x)`); "value" where none is found."""
    match = _READ_CALL.search(code)
    if match is None:
        return "value"
    if match.group(1):  # int(x), float(x), bool(x)
        return _call_argument(code, match.end() - 1) or "value"
    return _expression_before(code, match.start()) or "value"


def _expression_before(code: str, end: int) -> str:
    """The dotted, called or indexed expression that ends at `end` (scanning back over balanced brackets)."""
    closing = {")": "(", "]": "["}
    index = end
    while index > 0:
        char = code[index - 1]
        if char in closing:
            depth, index = 1, index - 1
            while index > 0 and depth:
                index -= 1
                depth += {closing[char]: -1, char: 1}.get(code[index], 0)
        elif char.isalnum() or char in "._":
            index -= 1
        else:
            break
    return code[index:end].strip()


def _call_argument(code: str, open_paren: int) -> str:
    """The text between the parenthesis at `open_paren` and its match."""
    depth = 0
    for index in range(open_paren, len(code)):
        depth += {"(": 1, ")": -1}.get(code[index], 0)
        if depth == 0:
            return code[open_paren + 1:index].strip()
    return ""


def _strip_comment(code: str) -> str:
    return code.split("  #", 1)[0].rstrip()


# ---- the patterns, at most six lines each, with the line's own names

def _value_code(code: str, kind: str) -> str:
    name = receiver(code)
    method = {"item": "item()", "tolist": "tolist()", "copy": "clone()"}[kind]
    return "\n".join([
        f"host = torch.empty_like({name}, device=\"cpu\", pin_memory=True)  # once, before the loop",
        "copied = torch.cuda.Event()",
        f"host.copy_({name}, non_blocking=True); copied.record()  # this step, instead of reading it",
        "...  # queue the next step first",
        f"copied.synchronize(); value = host.{method}  # a step later: the copy has landed"])


def _flag_code(condition: str) -> str:
    return "\n".join([
        "flag = torch.zeros((), dtype=torch.bool, pin_memory=True)  # once, before the loop",
        "copied = torch.cuda.Event()",
        f"flag.copy_({condition}, non_blocking=True); copied.record()  # this step, instead of testing it",
        "...  # queue the next step first",
        "copied.synchronize()",
        "if flag: break  # a step late: drop the extra step's token"])


def _position_code(code: str, kind: str) -> str:
    name = receiver(code)
    return "\n".join([
        f"pos = int({name})  # once, before the loop (one read, not one a step)",
        "for _ in range(new_tokens):",
        f"    ...  # use the host integer pos where this line read {name}",
        "    pos += 1  # advance it where the device counter advances"])


def _h2d_from_code(code: str) -> str | None:
    if _LIST_INDEX.search(code):
        return "list-index"
    if re.search(r"torch\.(tensor|as_tensor)\(", code):
        return "built"
    if re.search(r"\.(to|cuda)\(|copy_\(", code):
        return "to-device"
    return None


_LIST_INDEX = re.compile(r"\w\[(?:[^\[\]]*,)?\s*\[\s*(-?\d+)\s*\]")


def _h2d_code(code: str, what: str | None) -> str | None:
    what = what or _h2d_from_code(code)
    if what == "list-index":
        sliced = _sliced(_strip_comment(code).strip())
        return f"{sliced}  # a slice: nothing to copy to the device" if sliced else None
    if what == "host-index":
        return "index = index.to(device)  # once, before the loop: a device index copies nothing"
    if what == "built":
        return "\n".join([
            "ids = torch.zeros(batch, max_len, dtype=torch.long, device=device)  # once, before the loop",
            "ids[:, pos] = next_token  # each step: device to device, nothing to wait for"])
    if what == "to-device":
        return "\n".join([
            "staging = torch.empty(shape, dtype=dtype, pin_memory=True)  # once, before the loop",
            "staging.copy_(values)  # host to host",
            "x = staging.to(device, non_blocking=True)  # queued: the host does not wait",
            "# refill staging only once an event recorded after that copy has completed"])
    return None


def _sliced(code: str) -> str | None:
    """The line with each one-element list index made a slice (x[:, [-1], :] -> x[:, -1:, :]); None if it has
    none."""
    def as_slice(match: re.Match[str]) -> str:
        number = int(match.group(2))
        bound = "" if number == -1 else str(number + 1)
        return f"{match.group(1)}{number}:{bound}"

    out, count = re.subn(r"((?:\w|\])\[(?:[^\[\]]*,)?\s*)\[\s*(-?\d+)\s*\]", as_slice, code)
    return out if count else None


_OTHER_CODE = {
    "nonzero": "index = torch.nonzero_static(x, size=k, fill_value=-1)  # a fixed size: no count to read",
    "masked-index": "y = torch.where(mask, x, 0)  # the same shape: nothing to read",
    "equal": "same = (a == b).all()  # a device bool: copy it to pinned memory and read it a step later",
    "scalar": "t = torch.stack([a, b])  # stays on the device",
    "synchronize": "done = torch.cuda.Event(); done.record()  # after queueing this step\n"
                   "...  # queue the next step\n"
                   "done.synchronize()  # waits for the earlier step only",
    "pageable-copy": "host = torch.empty(shape, dtype=dtype, pin_memory=True)  # once, before the loop\n"
                     "host.copy_(x, non_blocking=True)  # read host once an event recorded after it has completed",
}
_OTHER_CODE["event-synchronize"] = _OTHER_CODE["stream-synchronize"] = _OTHER_CODE["synchronize"]
