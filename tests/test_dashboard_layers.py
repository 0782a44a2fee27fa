"""dashboard/ in four layers (issue 59, item 4), each a package, each with its import rule:

- dashboard/service: the gradio-free job service and the page's plain data; imports no other layer, and neither gradio
  nor plotly (nor the web server under gradio); never torch;
- dashboard/edge: the server's edge; imports the service, never a view or the UI; no plotly, no torch;
- dashboard/views: plain data in, figures, rows, text and HTML out; imports the service, never the edge or the UI;
  no gradio, no torch;
- dashboard/ui: the Gradio page; imports any layer; no torch.

Each module's imports are read with `ast`, those inside functions too; a layer whose rule would need an exception
moves the piece it needs down, or is handed it. Nothing is left at dashboard/'s top level but its `__init__.py` and
the command forwarder `export_html.py`, and core/ and engine/ import nothing of dashboard/. The benchmark's command
line (cli/) sits above core: it imports the views (--html) and nothing else of the dashboard, and core reaches it only
from core/bench.py's forwarder, inside the function that runs the command.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "dashboard"
LAYERS = ("service", "edge", "views", "ui")
OTHER_FOLDERS = {"bundled", "__pycache__"}  # the page's bundled reports (app.py reads them), and bytecode
# The one module left at the top level: `python -m dashboard.export_html`, the command the docs run, forwarded to the
# module that holds its code.
FORWARDERS = {"export_html.py": "dashboard.views.export_html"}
WEB_SERVER = {"gradio", "gradio_client", "starlette", "fastapi", "uvicorn"}
RULES = {  # layer: (the layers it may not import, the packages it may not import)
    "service": ({"edge", "views", "ui"}, WEB_SERVER | {"plotly", "torch"}),
    "edge": ({"views", "ui"}, {"plotly", "torch"}),
    "views": ({"edge", "ui"}, WEB_SERVER | {"torch"}),
    "ui": (set(), {"torch"}),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) for each module `path` imports, anywhere in it (inside functions too)."""
    return imports_in(path.read_text(encoding="utf-8"), module_name(path), is_package=path.name == "__init__.py")


def imports_in(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, module) for each import in `source`, the module `module`: `from a import b` names both `a` and `a.b`
    (b may be a module), and a relative import is resolved against the module's package."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            named = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, named))
            found += [(node.lineno, f"{named}.{alias.name}") for alias in node.names if alias.name != "*"]
    return sorted(found)


def layer_of(module: str) -> str | None:
    """The layer a dotted module name is in; "top level" for dashboard's own top-level modules; None outside."""
    parts = module.split(".")
    if parts[0] != "dashboard" or len(parts) == 1:
        return None
    return parts[1] if parts[1] in LAYERS else "top level"


def modules_of(layer: str) -> list[Path]:
    found = sorted((DASHBOARD / layer).rglob("*.py"))
    assert len(found) > 1, f"dashboard/{layer}/ holds no modules"
    return found


def broken_rules(layer: str) -> list[str]:
    """Each import in `layer`'s modules that its rule forbids, as 'path:line imports module (why)'."""
    layers, packages = RULES[layer]
    broken = []
    for path in modules_of(layer):
        for line, module in imported(path):
            where = f"{path.relative_to(REPO)}:{line} imports {module}"
            other = layer_of(module)
            if other in layers:
                broken.append(f"{where} (the {other} layer)")
            elif other == "top level":
                broken.append(f"{where} (dashboard's top level: import the layer's module)")
            elif module.split(".")[0] in packages:
                broken.append(f"{where} ({module.split('.')[0]})")
    return sorted(set(broken))


def test_the_service_imports_no_other_layer_and_neither_gradio_nor_plotly_nor_torch():
    assert not broken_rules("service")


def test_the_edge_imports_the_service_and_no_view_or_ui():
    assert not broken_rules("edge")


def test_the_views_import_the_service_and_neither_the_edge_nor_the_ui_nor_gradio():
    assert not broken_rules("views")


def test_the_ui_imports_any_layer_and_no_torch():
    assert not broken_rules("ui")


def test_the_rules_read_imports_inside_functions_and_relative_ones():
    source = "import json\n\n\ndef late():\n    from ..views import charts\n    import gradio as gr\n"
    assert imports_in(source, "dashboard.service.example") == [
        (1, "json"), (5, "dashboard.views"), (5, "dashboard.views.charts"), (6, "gradio")]
    assert imports_in("from . import page\n", "dashboard.ui", is_package=True) == [
        (1, "dashboard.ui"), (1, "dashboard.ui.page")]
    assert layer_of("dashboard.views.charts") == "views" and layer_of("dashboard.export_html") == "top level"
    assert layer_of("core.request.options") is None and layer_of("dashboard") is None


def test_nothing_is_left_at_the_top_level_but_the_package_and_its_forwarder():
    top = {p.name for p in DASHBOARD.glob("*.py")}
    assert top == {"__init__.py", *FORWARDERS}, f"modules at dashboard/'s top level: {sorted(top)}"
    folders = {p.name for p in DASHBOARD.iterdir() if p.is_dir()}
    assert folders <= {*LAYERS, *OTHER_FOLDERS}, f"folders of dashboard/ outside the layers: {sorted(folders)}"
    assert all((DASHBOARD / layer / "__init__.py").is_file() for layer in LAYERS)
    assert not imported(DASHBOARD / "__init__.py"), "dashboard/__init__.py imports nothing: each layer loads alone"
    for name, target in FORWARDERS.items():
        body = ast.parse((DASHBOARD / name).read_text(encoding="utf-8")).body
        kinds = [type(node).__name__ for node in body]
        assert kinds == ["Expr", "ImportFrom", "If"], f"dashboard/{name} is a forwarder: docstring, import, __main__"
        assert {module for _, module in imported(DASHBOARD / name)} == {target, f"{target}.main"}


def test_core_and_engine_import_nothing_of_the_dashboard():
    named = [f"{path.relative_to(REPO)}:{line} imports {module}"
             for folder in ("core", "engine") for path in sorted((REPO / folder).rglob("*.py"))
             for line, module in imported(path) if module.split(".")[0] == "dashboard"]
    assert not named


def test_the_command_line_imports_the_views_alone_and_core_reaches_it_only_from_its_forwarder():
    """cli/ may import the HTML view (dashboard.views), no other layer; in core only core/bench.py names cli, and only
    inside main(), so that importing any of core loads none of cli (nor, through it, the dashboard)."""
    from_cli = [f"{path.relative_to(REPO)}:{line} imports {module}"
                for path in sorted((REPO / "cli").rglob("*.py")) for line, module in imported(path)
                if module.split(".")[0] == "dashboard" and layer_of(module) != "views"]
    assert not from_cli
    forwarder = REPO / "core" / "bench.py"
    from_core = [f"{path.relative_to(REPO)}:{line}" for path in sorted((REPO / "core").rglob("*.py"))
                 for line, module in imported(path) if module.split(".")[0] == "cli"]
    assert all(where.startswith("core/bench.py:") for where in from_core), from_core
    top = ast.parse(forwarder.read_text(encoding="utf-8")).body
    assert not [node for node in top if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cli")]


def test_the_service_and_the_views_load_without_gradio_or_torch():
    """The rules above are per module; this is what they add up to, through core and engine too: every service
    module loads without gradio, plotly or torch, and every view without gradio or torch."""
    for layers, absent in ((("service",), ("gradio", "plotly", "torch")), (("service", "views"), ("gradio", "torch"))):
        modules = [module_name(path) for layer in layers for path in modules_of(layer)]
        code = (f"import importlib, sys\nfor name in {modules!r}:\n    importlib.import_module(name)\n"
                f"print(sorted(set({absent!r}) & set(sys.modules)))")
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]", f"{' and '.join(layers)} loaded {done.stdout.strip()}"
