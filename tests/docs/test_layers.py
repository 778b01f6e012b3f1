"""The layout's one rule: a module imports only from its own package or a lower row.

Every ``import``/``from ... import`` statement of every module in the package is read
from its syntax tree, wherever it stands (module level, inside a function, under
``if TYPE_CHECKING``), and so is every ``importlib.import_module("dpforge...")`` call
with a literal name.  The allow-list of exceptions is empty.  Also checked: every
package folder is listed in ``pyproject.toml`` (a folder missing there is silently left
out of a built wheel), and every deprecated alias resolves to a module or name that
exists.
"""

from __future__ import annotations

import ast
import importlib
import tomllib
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: row of each top-level part of the package (the package root's own modules included)
ROWS: dict[str, int] = {
    "dpforge": 0,  # the root __init__: version and the alias finder only
    "dpforge._deprecated": 0,
    "dpforge.errors": 0,
    "dpforge.validation": 0,
    "dpforge.parallel": 0,
    "dpforge.files": 0,
    "dpforge.mechanisms": 1,
    "dpforge.accounting": 2,
    "dpforge.design": 3,
    "dpforge.budget": 3,
    "dpforge.train": 4,
    "dpforge.plots": 4,
    "dpforge.cli": 5,
}
#: imports allowed against the rows; must stay empty
ALLOWED: set[tuple[str, str]] = set()
#: folders that are not part of the import package
NOT_PACKAGE = {"tests", "benchmarks", "examples", "notebooks", "docs", ".ci", ".git", "build", "dist"}


def _module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in NOT_PACKAGE or any(part.startswith(".") for part in relative.parts):
            continue
        parts = list(relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(["dpforge", *parts])] = path
    return modules


def _part(module: str) -> str:
    """The key of ROWS a module belongs to (the longest prefix)."""
    matches = [key for key in ROWS if module == key or module.startswith(key + ".")]
    if not matches:
        raise AssertionError(f"{module} belongs to no row of the layout: add it to ROWS and to the README's Layout")
    return max(matches, key=len)


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, node.lineno))
            # `from dpforge.x import y` may import the submodule dpforge.x.y
            found += [(f"{target}.{alias.name}", node.lineno) for alias in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.append((node.args[0].value, node.lineno))
    return [(name, line) for name, line in found if name == "dpforge" or name.startswith("dpforge.")]


def test_every_module_belongs_to_a_row():
    for module in _module_files():
        _part(module)


def test_no_import_runs_up_the_rows():
    modules = _module_files()
    violations = []
    for module, path in sorted(modules.items()):
        own = _part(module)
        for target, line in _imports(module, path):
            if target == "dpforge" and module != "dpforge":
                continue  # `from dpforge import _deprecated` etc. are caught by their full names below
            other = _part(target) if target != "dpforge" else "dpforge"
            if other == own or ROWS[other] < ROWS[own] or ROWS[other] == ROWS[own] == 0:
                continue  # own package, a lower row, or the root's own modules (row 0 is one package)
            if (module, target) not in ALLOWED:
                violations.append(f"{path.relative_to(ROOT)}:{line}: {module} (row {ROWS[own]}) imports {target} (row {ROWS[other]})")
    assert not violations, "imports running up the rows:\n" + "\n".join(violations)


def test_layer_test_sees_lazy_imports(tmp_path):
    """The walk must find imports inside functions and literal import_module calls."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f():\n    from dpforge.cli import main\n\n"
        "def g():\n    import importlib\n    importlib.import_module('dpforge.train.noise')\n"
    )
    names = [name for name, _ in _imports("dpforge.mechanisms.sample", sample)]
    assert "dpforge.cli" in names and "dpforge.train.noise" in names


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    folders = {module for module, path in _module_files().items() if path.name == "__init__.py"}
    assert folders <= listed, f"packages missing from pyproject.toml: {sorted(folders - listed)}"
    assert listed <= folders, f"pyproject.toml lists packages that do not exist: {sorted(listed - folders)}"


def test_deprecated_aliases_resolve_and_warn():
    from dpforge import _deprecated

    for old, new in _deprecated.MOVED_MODULES.items():
        importlib.import_module(new)
        assert old not in _module_files(), f"{old} is both a real module and an alias"
    for package, names in _deprecated.MOVED_NAMES.items():
        module = importlib.import_module(package)
        for name, target in names.items():
            with pytest.warns(DeprecationWarning, match=f"{package}.{name} moved to {target}"):
                value = getattr(module, name)
            assert value is getattr(importlib.import_module(target), name)


def test_old_module_path_is_the_new_module_with_a_warning():
    import sys

    old, new = "dpforge.mechanisms.lmo_search", "dpforge.design.search"
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.import_module(new)  # the new path itself never warns
