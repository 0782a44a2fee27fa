"""syncscope's build, beside pyproject.toml (which holds the metadata, the dependencies and the commands).

The checkout's top-level `app.py`, `core/`, `engine/` and `dashboard/` are installed as `syncscope.app`,
`syncscope.core`, `syncscope.engine` and `syncscope.dashboard`, so that an installed syncscope claims no name as
generic as `core` or `app`. Why a build step: the checkout keeps its layout and its imports (`from core.request.options
import ...`, `python -m core.bench`, the tests), and mapping the folders under `syncscope` (package_dir) is not enough
on its own, since the modules import each other as `core.…`. So the build's copy of each module has its absolute imports
of the four rewritten to `syncscope.…` (build_support/rename.py), and nothing else in it changes. A module named in a
string is not rewritten: such code derives the name from `__name__` (core/__init__.py), and tests/test_packaging.py
keeps the strings that remain known.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel
from setuptools.errors import SetupError

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # setuptools' build backend does not put setup.py's folder on sys.path

from build_support.rename import PACKAGE, TOP_LEVEL, rewrite_imports  # noqa: E402

MODULES = [name for name in TOP_LEVEL if (HERE / f"{name}.py").is_file()]  # app.py
FOLDERS = [name for name in TOP_LEVEL if (HERE / name).is_dir()]  # core, engine, dashboard


def package_dirs() -> dict[str, str]:
    """Each installed package and the checkout's folder it is built from (`syncscope` itself from build_support)."""
    found = {PACKAGE: "build_support/syncscope"}
    for folder in FOLDERS:
        for init in sorted((HERE / folder).rglob("__init__.py")):
            relative = init.parent.relative_to(HERE)
            found[".".join((PACKAGE, *relative.parts))] = relative.as_posix()
    return found


class BuildPy(build_py):
    """Adds app.py to the `syncscope` package, and rewrites the imports of each module it copies."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        if package == PACKAGE:
            modules += [(PACKAGE, name, f"{name}.py") for name in MODULES]
        return modules

    def build_module(self, module: str, module_file: str, package: str) -> tuple[str, bool]:
        outfile, copied = super().build_module(module, module_file, package)
        if not self.dry_run:  # also when the copy was up to date: the rewrite of a rewritten file changes nothing
            built = Path(outfile)
            built.write_bytes(rewrite_imports(built.read_bytes().decode("utf-8"), module_file).encode("utf-8"))
        return outfile, copied


class NoEditable(editable_wheel):
    """An editable install would serve the checkout's files unrewritten, as `syncscope.core` importing `core`."""

    def run(self) -> None:
        raise SetupError("syncscope has no editable install: in the checkout, run it as it is (make run, "
                         "python -m core.bench, python -m core.audit); elsewhere, pip install the checkout's folder")


setup(
    packages=list(package_dirs()),
    package_dir=package_dirs(),
    package_data={f"{PACKAGE}.dashboard": ["bundled/*/*.json", "bundled/*/*.json.gz"],  # the page's bundled reports
                  f"{PACKAGE}.dashboard.ui": ["explain.md"],  # the page's Explain section, read at run time
                  f"{PACKAGE}.core.kernels": ["gemv_configs.json"]},  # the gemv kernel's measured configurations
    cmdclass={"build_py": BuildPy, "editable_wheel": NoEditable},
)
