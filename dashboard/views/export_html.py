"""`python -m dashboard.export_html REPORT.json[.gz] OUT.html`: a run's report (core.bench's, the page's download of
one, or a load report) as one self-contained HTML file that opens offline, with no server and no network
(dashboard.views.run_html); `python -m core.bench ... --html OUT.html` writes the same file in process.

A load report's sentences (what the run shows, the CLI's text) are worded here as Replay words them (core.load.words),
or left out with a line saying why. Whatever cannot be exported is one line on stderr: exit code 2 for a file that is
not a report, 1 for the rest (plotly not installed, the file not written).

The command keeps its name: dashboard/export_html.py only forwards `python -m dashboard.export_html` here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from core.documents.files import check_output_path
from core.documents.kinds import AUDIT, kind_of
from core.documents.schema import load
from core.request.run_schema import OneLineParser
from core.text import escaped

# The command, dashboard/export_html.py beside this package: python -m dashboard.export_html in the checkout,
# python -m syncscope.dashboard.export_html installed.
PROG = f"python -m {__package__.rpartition('.')[0]}.export_html"
NEEDS_EXTRA = ("exporting a run as HTML needs {missing} (the dashboard extra), which is not installed here: run pip "
               "install \".[dashboard]\" in the syncscope checkout")
AUDIT_REPORT = ("this JSON is an audit report of a program (python -m core.audit): open it in the dashboard's Your "
                "loop tab; the export is of core.bench's reports")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("report", metavar="REPORT.json", help="a report of python -m core.bench --json (.json or .json.gz), "
                                                         "or one the dashboard's page downloaded")
    p.add_argument("out", metavar="OUT.html", help="the HTML file to write")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_output_path(args.out, "cannot write")
        document = load(Path(args.report))
        if kind_of(document) == AUDIT:
            raise ValueError(f"{args.report}: {AUDIT_REPORT}")
    except ValueError as exc:
        return _fail(str(exc), 2)
    try:  # plotly is the dashboard extra's: imported here, so that its absence is one line, not a traceback
        from dashboard.views.run_html import run_html, write_html
    except ModuleNotFoundError as missing:
        return _fail(NEEDS_EXTRA.format(missing=missing.name), 1)
    try:
        write_html(args.out, run_html(document))
    except OSError as exc:
        return _fail(f"could not write {args.out} ({exc.strerror or exc})", 1)
    print(f"wrote {escaped(args.out)}")
    return 0


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"{PROG}: error: {escaped(message)}\n")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
