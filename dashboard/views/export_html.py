"""`python -m dashboard.export_html REPORT.json[.gz] OUT.html`: a run's report (core.bench's, the page's download of
one, or a load report) as one self-contained HTML file that opens offline, with no server and no network
(dashboard.views.run_html); `python -m core.bench ... --html OUT.html` runs this after its run.

A load report's sentences (what the run shows, the CLI's text) are core.load.report's, which imports torch: given with
--described (core.bench passes those it printed), else made in a child process as Replay makes them
(dashboard.service.load_describe), else left out with a line saying why. Whatever cannot be exported is one line on
stderr: exit code 2 for a file that is not a report, 1 for the rest (plotly not installed, the file not written).

The command keeps its name: dashboard/export_html.py only forwards `python -m dashboard.export_html` here.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.documents.files import check_output_path, read_bounded
from core.documents.kinds import AUDIT, LOAD, kind_of
from core.documents.schema import load
from core.request.run_schema import OneLineParser
from core.text import escaped

PROG = "python -m dashboard.export_html"
NEEDS_EXTRA = ("exporting a run as HTML needs {missing} (the dashboard extra), which is not installed here: run pip "
               "install \".[dashboard]\" in the syncscope checkout")
AUDIT_REPORT = ("this JSON is an audit report of a program (python -m core.audit): open it in the dashboard's Your "
                "loop tab; the export is of core.bench's reports")
MAX_DESCRIBED_BYTES = 4 * 2**20

Described = dict[str, list[str]]


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("report", metavar="REPORT.json", help="a report of python -m core.bench --json (.json or .json.gz), "
                                                         "or one the dashboard's page downloaded")
    p.add_argument("out", metavar="OUT.html", help="the HTML file to write")
    p.add_argument("--described", metavar="SENTENCES.json", default=None,
                   help='a load report\'s sentences, as {"findings": [...], "text": [...]} (core.load.report\'s '
                        "load_findings and load_text); without it they are made in a child process")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_output_path(args.out, "cannot write")
        document = load(Path(args.report))
        if kind_of(document) == AUDIT:
            raise ValueError(f"{args.report}: {AUDIT_REPORT}")
        described = read_described(Path(args.described)) if args.described else None
    except ValueError as exc:
        return _fail(str(exc), 2)
    try:  # plotly is the dashboard extra's: imported here, so that its absence is one line, not a traceback
        from dashboard.views.run_html import run_html, write_html
    except ModuleNotFoundError as missing:
        return _fail(NEEDS_EXTRA.format(missing=missing.name), 1)
    why_not = None
    if kind_of(document) == LOAD and described is None:
        described, why_not = _described_in_child(document)
    try:
        write_html(args.out, run_html(document, described=described, why_not=why_not))
    except OSError as exc:
        return _fail(f"could not write {args.out} ({exc.strerror or exc})", 1)
    print(f"wrote {escaped(args.out)}")
    return 0


def read_described(path: Path) -> Described:
    """The sentences in a --described file; ValueError in one line when it is not {"findings": [...], "text": [...]}
    of strings."""
    try:
        answer = json.loads(read_bounded(path, MAX_DESCRIBED_BYTES, "a file of sentences"))
    except ValueError as exc:
        raise ValueError(f"--described {path}: {exc}") from None
    if not (isinstance(answer, dict) and _sentences(answer.get("findings")) and _sentences(answer.get("text"))):
        raise ValueError(f'--described {path}: not {{"findings": [...], "text": [...]}} of sentences')
    return {"findings": answer["findings"], "text": answer["text"]}


def _sentences(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(line, str) for line in value)


def _described_in_child(document: dict[str, Any]) -> tuple[Described | None, str | None]:
    from dashboard.service import load_describe

    # its log is the server's; here the one line of why_not, in the file, says it
    logging.getLogger(load_describe.__name__).addHandler(logging.NullHandler())
    try:
        return load_describe.LoadDescriber().describe(document), None
    except ValueError as exc:
        return None, str(exc)


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"{PROG}: error: {escaped(message)}\n")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
