"""The repository's top level holds what the project card names and the build needs, nothing else: a stray file at
the root (a shell's mistyped redirection, a notebook's scratch) fails here before it is committed twice."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOT_NAMES = {
    ".ci", ".gitignore", "CONTRIBUTING.md", "MANIFEST.in", "Makefile", "README.md", "RELIABILITY.md", "app.py",
    "benchmarks", "build_support", "cli", "core", "dashboard", "docs", "engine", "examples", "pyproject.toml",
    "requirements-dev.txt", "requirements.txt", "setup.py", "tests",
}


def tracked_top_level() -> set[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    return {path.split("/", 1)[0] for path in listed.stdout.split("\0") if path}


def test_the_root_holds_only_the_allowed_names():
    stray = sorted(tracked_top_level() - ROOT_NAMES)
    assert not stray, f"files at the repository's root that are not on its allow-list: {stray}"


def test_the_app_and_the_page_read_nothing_of_the_lab():
    """The lab (benchmarks/lab: device calls, their results, the diary) is not the product: the page offers its own
    curated reports (dashboard/bundled), installed with the package."""
    import ast

    for path in [REPO / "app.py", *sorted((REPO / "dashboard").rglob("*.py"))]:
        strings = [node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)]
        named = [s for s in strings if "benchmarks" in s or "lab/results" in s]
        assert not named, f"{path.relative_to(REPO)} names the lab: {named[:3]}"


def test_the_bundled_reports_are_a_curated_few_that_all_open():
    import app

    reports, audits = app.find_bundled(app.BUNDLED_DIR)
    bundled = sorted(p for p in app.BUNDLED_DIR.rglob("*") if p.is_file())
    assert len(bundled) <= 12 and sum(p.stat().st_size for p in bundled) < 2 * 2**20
    assert sorted([*reports.values(), *audits.values()]) == bundled, "every bundled file opens in Replay or Your loop"
    assert "h200-2026-12-01/audit-ro-1b.json.gz" in reports, "the README's featured report"


def test_the_labs_index_is_current_and_names_every_results_folder():
    from benchmarks.lab_index import INDEX, RESULTS, index_text

    text = INDEX.read_text(encoding="utf-8")
    assert text == index_text((RESULTS.parent / "RESULTS.md").read_text(encoding="utf-8")), \
        "benchmarks/lab/INDEX.md is out of date: run python benchmarks/lab_index.py"
    folders = {p.name for p in RESULTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert all(f"(results/{name})" in text for name in folders)


AUDIT_MODULES = {  # core/audit/: the audit's command line and Python API, and the sync audit itself
    "__init__.py", "__main__.py", "runner.py", "steps.py", "compile.py", "stop.py", "report.py", "words.py",
    "sync.py", "dispatch.py", "fixes.py", "results.py", "sites.py", "wrappers.py",
}


def test_the_audits_modules_are_in_one_package():
    """Issue 59: the audit was spread over core/audit*.py and core/measure/sync_*.py; it is core/audit/ alone."""
    scattered = sorted(p.relative_to(REPO).as_posix() for p in [*(REPO / "core").glob("audit_*.py"),
                                                                 *(REPO / "core" / "measure").glob("sync_*.py")])
    assert not scattered, f"audit modules outside core/audit/: {scattered}"
    assert not (REPO / "core" / "audit.py").exists(), "core/audit.py would be shadowed by the package core/audit/"
    assert {p.name for p in (REPO / "core" / "audit").glob("*.py")} == AUDIT_MODULES


CORE_TOP_LEVEL = {  # core/'s own modules: its entry points and what every group shares; the rest is in a group
    "__init__.py", "bench.py", "compare.py", "phases.py", "tuning.py", "text.py", "caches.py",
}
CORE_GROUPS = {  # a folder of core/ each, and the modules it holds
    "request": {"options.py", "run_schema.py", "load.py", "load_schema.py", "workload.py"},
    "models": {"loading.py", "sources.py", "size.py", "random_weights.py", "specs.py", "memory.py"},
    "documents": {"schema.py", "files.py", "kinds.py", "fields.py", "upgrades.py", "bench_report.py", "load_report.py",
                  "audit_report.py", "page_report.py"},
    "report": {"build.py", "diff.py", "explain.py"},
}


def test_cores_top_level_is_grouped_into_request_models_documents_and_report():
    """Issue 59: core/ had 23 flat modules in unmarked clusters; what a run asks for, the models and the report are
    each a package, and a new module at core's top level is a choice this test makes someone write down."""
    top = {p.name for p in (REPO / "core").glob("*.py")}
    assert top == CORE_TOP_LEVEL, f"core/'s top level changed: {sorted(top ^ CORE_TOP_LEVEL)}"
    for group, modules in CORE_GROUPS.items():
        held = {p.name for p in (REPO / "core" / group).glob("*.py")} - {"__init__.py"}
        assert held == modules, f"core/{group}/ holds {sorted(held)}"
        assert not (REPO / "core" / f"{group}.py").exists(), f"core/{group}.py would be shadowed by its package"


def test_cores_rooms_import_each_other_one_way():
    """Core's rooms (a package, or a module at its top level) import each other without a circle, so that each group
    stands above what it needs: the documents below the models, the measurements and the audit that write them, the
    report above all of those. Imports inside functions count too."""
    from graphlib import CycleError, TopologicalSorter

    from tests.test_dashboard_layers import imported

    def room(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if parts[0] == "core" and len(parts) > 1 else None

    needs: dict[str, set[str]] = {}
    for path in sorted((REPO / "core").rglob("*.py")):
        parts = path.relative_to(REPO / "core").with_suffix("").parts
        if parts == ("__init__",):
            continue  # core/__init__.py hands names on lazily, from below
        own = parts[0]
        needs.setdefault(own, set()).update(r for _, module in imported(path) if (r := room(module)) not in {None, own})
    try:
        order = list(TopologicalSorter(needs).static_order())
    except CycleError as error:
        raise AssertionError(f"core's rooms import each other in a circle: {error.args[1]}") from None
    assert order.index("documents") < min(order.index(r) for r in ("models", "measure", "audit", "report"))
    assert order.index("report") > max(order.index(r) for r in ("models", "measure", "audit", "loops"))


MODULE_LINES = {"core": 600, "dashboard": 500}  # issue 65's bars: a module past its bar is split by what it holds


def test_no_module_outgrows_its_bar():
    grown = {p.relative_to(REPO).as_posix(): lines for folder, bar in MODULE_LINES.items()
             for p in sorted((REPO / folder).rglob("*.py")) if (lines := len(p.read_text().splitlines())) > bar}
    assert not grown, f"modules over their bar ({MODULE_LINES} lines): {grown}"
