"""The lab's index (benchmarks/lab/INDEX.md): one row per run of the diary (benchmarks/lab/RESULTS.md) and per results
folder it does not tell of: its date, what ran, where its files are, and its headline figure (the diary's first bold
sentence with a number in it, or the folder README's). Regenerate it after adding a run:

    python benchmarks/lab_index.py
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

LAB = Path(__file__).resolve().parent / "lab"
DIARY, RESULTS, INDEX = LAB / "RESULTS.md", LAB / "results", LAB / "INDEX.md"
_RUN = re.compile(r"^## (?P<title>[A-Z][a-z-]+ run: .+)$", re.MULTILINE)
_DATE = re.compile(r"20\d\d-\d\d-\d\d")
_FOLDER = re.compile(r"results/((?:h200|cpu)[\w.-]*)")
_BOLD = re.compile(r"\*\*([^*\n]+?)\*\*")
HEAD = ("# The lab's index\n\nWhat each device call or run measured, where its reports and logs are, and its headline "
        "figure. The diary ([RESULTS.md](RESULTS.md)) tells each run in full; the results' folders hold their scripts "
        "and a README where they have one. Written by `python benchmarks/lab_index.py`.\n\n"
        "| date | what ran | where | headline |\n|---|---|---|---|\n")


@dataclass(frozen=True)
class Row:
    date: str
    what: str
    where: tuple[str, ...]
    headline: str

    def line(self) -> str:
        where = ", ".join(f"[{name}](results/{name})" for name in self.where) or "(the diary only)"
        return f"| {self.date} | {_cell(self.what)} | {where} | {_cell(self.headline)} |"


def diary_rows(text: str) -> list[Row]:
    """One row per run the diary tells of."""
    starts = list(_RUN.finditer(text))
    rows = []
    for index, start in enumerate(starts):
        body = text[start.end(): starts[index + 1].start() if index + 1 < len(starts) else len(text)]
        title = start.group("title")
        dates = _DATE.findall(title) or _DATE.findall(body)
        folders = tuple(dict.fromkeys(f.rstrip(".") for f in _FOLDER.findall(body)))
        rows.append(Row(dates[0] if dates else "", title, folders, headline(body)))
    return rows


def folder_rows(told: set[str], results: Path = RESULTS) -> list[Row]:
    """A row for each results folder the diary does not name, from its README's title and first bold figure."""
    rows = []
    for folder in sorted(p for p in results.iterdir() if p.is_dir() and p.name not in told and p.name != "__pycache__"):
        readme = folder / "README.md"
        text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
        title = text.splitlines()[0].lstrip("# ").strip() if text else "(no README: see the diary)"
        dates = _DATE.findall(folder.name) or _DATE.findall(text)
        rows.append(Row(dates[0] if dates else "", title, (folder.name,), headline(text)))
    return rows


def headline(text: str) -> str:
    """What a run found, with its figure: the first bold phrase of a few words with a number in it (the diary's
    way of marking it), else the first sentence with a rate in it, else the first sentence."""
    bold = next((b for b in _BOLD.findall(text) if re.search(r"\d", b) and len(b.split()) >= 3 and len(b) <= 240
                 and not b.rstrip().endswith(":")),
                None)
    if bold:
        return bold
    prose = [line.lstrip("- *") for line in text.splitlines() if line and not line.startswith(("#", "|", "```"))]
    sentences = [s for s in re.split(r"(?<=[.;])\s+", " ".join(prose)) if len(s) >= 30 and not s.endswith(":")]
    for figure in (r"\d[\d,.]* (decode )?tok/s", r"\d\.\d+x\b", r"\d+(\.\d+)? ?(ms|%)"):
        found = next((s for s in sentences if re.search(figure, s)), None)
        if found:
            return found.replace("**", "")[:240]
    return sentences[0][:240] if sentences else ""


def index_text(diary: str, results: Path = RESULTS) -> str:
    rows = diary_rows(diary)
    told = {name for row in rows for name in row.where}
    every = sorted([*rows, *folder_rows(told, results)], key=lambda row: row.date)
    return HEAD + "\n".join(row.line() for row in every) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")[:300]


def main() -> int:
    INDEX.write_text(index_text(DIARY.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {INDEX}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
