"""The torch-free modules of core (issue 65, item 5): what a run asks for (core/request), the documents and their files
(core/documents), the tuning switches (core/tuning.py) and every `words.py` (a report in words) import no torch, and
neither gradio nor plotly, so that the dashboard's server, the engine's protocol and any process can read a request,
load a document and word a report without them.

Each is loaded in a child process in which importing those packages is refused and named, as
tests/test_dashboard_layers.py loads the dashboard's layers: an import that a `try` would swallow is named too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.test_dashboard_layers import module_name

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN = ("torch", "gradio", "plotly")
WORDS_UNDER = ("core", "engine", "dashboard")
# The child: a finder ahead of every other refuses the forbidden packages and notes the line that asked for one.
CHILD = """
import importlib, json, sys, traceback

forbidden, modules, root = json.loads(sys.argv[1])
asked = {}


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in forbidden:
            return None
        ours = [f for f in traceback.extract_stack() if f.filename.startswith(root)]
        where = f"{ours[-1].filename[len(root):]}:{ours[-1].lineno}" if ours else "?"
        asked.setdefault(current, []).append(f"{where} imports {name}")
        raise ImportError(f"{name} is refused in this check")


sys.meta_path.insert(0, Refuse())
for current in modules:
    try:
        importlib.import_module(current)
    except ImportError as exc:
        asked.setdefault(current, []).append(f"fails to load: {exc}")
print(json.dumps(asked))
"""


def torch_free_modules() -> list[str]:
    """core/request's and core/documents' modules, core/tuning.py, and every words.py."""
    paths = [*(REPO / "core/request").rglob("*.py"), *(REPO / "core/documents").rglob("*.py"), REPO / "core/tuning.py"]
    paths += [path for folder in WORDS_UNDER for path in (REPO / folder).rglob("words.py")]
    return sorted({module_name(path) for path in paths})


def forbidden_imports(modules: list[str], root: Path = REPO) -> dict[str, list[str]]:
    """For each of `modules` (loaded in order, in one child started in `root`) that asked for a forbidden package:
    'path:line imports package' for each ask (the path is `root`'s)."""
    argument = json.dumps([FORBIDDEN, modules, f"{root}/"])
    done = subprocess.run([sys.executable, "-c", CHILD, argument], cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_requests_the_documents_the_tuning_and_every_words_module_import_no_torch_gradio_or_plotly():
    modules = torch_free_modules()
    assert {"core.request.options", "core.documents.schema", "core.tuning", "core.load.words",
            "core.audit.words"} <= set(modules)
    asked = forbidden_imports(modules)
    assert not asked, "\n".join(f"{module}: {'; '.join(lines)}" for module, lines in asked.items())


def test_the_check_names_the_line_even_where_a_try_swallows_the_import(tmp_path):
    (tmp_path / "plain.py").write_text("import json\n")
    (tmp_path / "guarded.py").write_text("try:\n    import torch\nexcept ImportError:\n    torch = None\n")
    (tmp_path / "drawn.py").write_text("import plain\nfrom plotly import graph_objects\n")
    assert forbidden_imports(["plain", "guarded", "drawn"], tmp_path) == {
        "guarded": ["guarded.py:2 imports torch"],
        "drawn": ["drawn.py:2 imports plotly", "fails to load: plotly is refused in this check"]}
