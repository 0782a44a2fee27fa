"""The rename that the wheel's build applies to the checkout's modules: `core.x` becomes `syncscope.core.x`.

The checkout keeps `app.py`, `core/`, `engine/` and `dashboard/` at its top and imports them absolutely; the installed
distribution holds them under `syncscope/`, so their absolute imports of each other are rewritten in the built copy.
Only import statements change (found by `ast`, lazy ones inside functions too, and edited at their tokens' places, so
comments and layout stay). A string that names one of these modules is not rewritten: `module_strings` finds them,
so that a test keeps them known.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

# The checkout's importable names, all under PACKAGE when installed.
TOP_LEVEL = ("app", "cli", "core", "dashboard", "engine")
PACKAGE = "syncscope"
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # a line as Python's tokenizer ends one
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?::[A-Za-z_][\w.]*)?")

Edit = tuple[int, int, str]  # [start, end) in characters of the source, and the text that replaces it


def _renamed(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in TOP_LEVEL


class _Places:
    """Character offsets in a source of ast's places (line, UTF-8 byte column) and tokenize's (line, character)."""

    def __init__(self, source: str):
        self.lines = _LINE.findall(source)
        self.starts = [0, 0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def of_ast(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1] if line <= len(self.lines) else ""
        return self.starts[line] + len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def of_token(self, place: tuple[int, int]) -> int:
        return self.starts[place[0]] + place[1]


def _import_edits(node: ast.Import, places: _Places, where: str) -> list[Edit]:
    edits = []
    for alias in node.names:
        if not _renamed(alias.name):
            continue
        start = places.of_ast(alias.lineno, alias.col_offset)
        if alias.asname is not None:
            edits.append((start, start, f"{PACKAGE}."))
        elif "." not in alias.name and len(node.names) == 1:  # `import app` binds `app`, and so does the rewrite
            end = places.of_ast(node.end_lineno or node.lineno, node.end_col_offset or 0)
            edits.append((places.of_ast(node.lineno, node.col_offset), end, f"from {PACKAGE} import {alias.name}"))
        else:
            raise ValueError(f"{where}:{node.lineno}: `import {alias.name}` binds `{alias.name.split('.')[0]}`, which "
                             f"cannot be moved under {PACKAGE}: write `from ... import ...`, or `import ... as ...`")
    return edits


def _edits(source: str, where: str) -> list[Edit]:
    """Every edit of an absolute import of TOP_LEVEL's modules in `source`."""
    places = _Places(source)
    names = [places.of_token(t.start) for t in tokenize.generate_tokens(io.StringIO(source).readline)
             if t.type == tokenize.NAME]
    edits = []
    for node in ast.walk(ast.parse(source, filename=where)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _renamed(node.module):
            statement = places.of_ast(node.lineno, node.col_offset)
            module = next(at for at in names if at > statement)  # the name after `from`
            edits.append((module, module, f"{PACKAGE}."))
        elif isinstance(node, ast.Import):
            edits.extend(_import_edits(node, places, where))
    return edits


def rewrite_imports(source: str, where: str = "<source>") -> str:
    """`source` with its absolute imports of TOP_LEVEL's modules moved under PACKAGE; ValueError, naming `where` and
    the line, for an import that cannot be moved. Rewriting a rewritten source changes nothing."""
    for start, end, text in sorted(_edits(source, where), reverse=True):
        source = source[:start] + text + source[end:]
    return source


def module_strings(source: str, where: str = "<source>") -> list[tuple[int, str]]:
    """(line, text) of each string constant that is a dotted name under TOP_LEVEL (`"core.bench"`,
    `"core.request.options"`, `"app:cli"`): a module named in a string, which the rewrite leaves as it is."""
    found = []
    for node in ast.walk(ast.parse(source, filename=where)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.fullmatch(node.value):
            module = node.value.split(":")[0]
            if _renamed(module) and (module != node.value or "." in module):  # not a bare word such as "app"
                found.append((node.lineno, node.value))
    return sorted(found)
