"""The kinds of document and their schema names: what a document says it is, and the one error a document that is not
right is refused with. Every other module of core.documents builds on this one."""

from typing import Any

BENCH_SCHEMA_PREFIX, AUDIT_SCHEMA_PREFIX = "syncscope.bench/", "syncscope.audit/"  # any version of each
LOAD_SCHEMA_PREFIX = "syncscope.load/"
PAGE_REPORT_SCHEMA_PREFIX = "syncscope.page-report/"
# The version each kind is written at today; core.documents.upgrades brings an older one up to it.
BENCH_VERSION = AUDIT_VERSION = LOAD_VERSION = PAGE_REPORT_VERSION = 1
BENCH_SCHEMA = f"{BENCH_SCHEMA_PREFIX}{BENCH_VERSION}"
PAGE_REPORT_SCHEMA = f"{PAGE_REPORT_SCHEMA_PREFIX}{PAGE_REPORT_VERSION}"
AUDIT_SCHEMA = f"{AUDIT_SCHEMA_PREFIX}{AUDIT_VERSION}"
LOAD_SCHEMA = f"{LOAD_SCHEMA_PREFIX}{LOAD_VERSION}"
BENCH, PAGE, AUDIT, LOAD = "bench", "page", "audit", "load"  # the kinds of document, as load(expect=...) names them
PREFIXES = {PAGE: PAGE_REPORT_SCHEMA_PREFIX, BENCH: BENCH_SCHEMA_PREFIX, LOAD: LOAD_SCHEMA_PREFIX,
            AUDIT: AUDIT_SCHEMA_PREFIX}
VERSIONS = {BENCH: BENCH_VERSION, PAGE: PAGE_REPORT_VERSION, AUDIT: AUDIT_VERSION, LOAD: LOAD_VERSION}

NOT_A_BENCH_REPORT = (f"this JSON is not a syncscope benchmark report (no \"schema\": \"{BENCH_SCHEMA}\"); write one "
                      "with python -m core.bench ... --json results.json")
NOT_AN_AUDIT_REPORT = (f"this JSON is not an audit report (no \"schema\": \"{AUDIT_SCHEMA}\"); write one with "
                       "python -m core.audit --json audit.json -- your_script.py")
AUDIT_NOT_BENCH = "this JSON is an audit report of a program (python -m core.audit), not a benchmark report"
BENCH_NOT_AUDIT = "this JSON is a benchmark report (python -m core.bench), not an audit report of a program"
NOT_A_LOAD_REPORT = (f"this JSON is not a load report (no \"schema\": \"{LOAD_SCHEMA}\"); write one with "
                     "python -m core.bench --requests N --json load.json")
LOAD_NOT_BENCH = ("this JSON is a load report (python -m core.bench --requests N), not a benchmark report of one "
                  "request")


class ReportError(ValueError):
    """A document that load() refuses; its message is one line saying why. `found` is the kind of document it was
    (BENCH, PAGE, AUDIT or LOAD) where it was one of ours, else None."""

    def __init__(self, reason: str, found: str | None = None):
        super().__init__(reason)
        self.found = found


def kind_of(document: Any) -> str | None:
    """BENCH, PAGE, AUDIT or LOAD by a document's schema; None for anything else."""
    schema = str(document.get("schema", "")) if isinstance(document, dict) else ""
    return next((kind for kind, prefix in PREFIXES.items() if schema.startswith(prefix)), None)


def version_of(document: dict[str, Any]) -> int:
    """The version a document of ours was written at: the number after its schema's slash (1 where it is no
    number: version 1 is the oldest, and its upgrades look before they change)."""
    number = str(document.get("schema", "")).rpartition("/")[2]
    return int(number) if number.isascii() and number.isdigit() else 1


def refusal(found: str | None, expect: str | None) -> str:
    """Why a document of kind `found` (None: none of ours) is not what a reader that `expect`s a kind opens."""
    if expect == AUDIT:
        return BENCH_NOT_AUDIT if found in (BENCH, PAGE) else NOT_AN_AUDIT_REPORT
    if expect == LOAD:
        return NOT_A_LOAD_REPORT
    if found == LOAD:
        return LOAD_NOT_BENCH
    return AUDIT_NOT_BENCH if found == AUDIT else NOT_A_BENCH_REPORT
