"""The layout docs/architecture.md draws: imports read top to bottom, no stage imports a later one."""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "triage"
# Layers, lowest first; a module may import its own layer and the ones below it.
LAYERS = {
    "model": 0, "vocabulary": 0, "errors": 0, "redact": 0, "tomlread": 0, "bundled": 0, "__init__": 0,
    "sources": 1, "logs": 2, "metrics": 2, "gpu": 2, "read": 3, "facts": 4, "decide": 5, "capacity": 6,
    "report": 7, "render": 8, "pipeline": 9, "selftest": 10, "ruletests": 10, "alerts": 10, "cli": 11,
    "__main__": 11,
}
# docs/architecture.md names this one, and why.
ALLOWED_UPWARD = {("render/selftest.py", "selftest")}


def _imports(path: Path) -> set[str]:
    """The top-level parts of triage the module imports (lazy imports inside functions included)."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(package[:len(package) - (node.level - 1)]) if node.level > 1 else list(package)
            target = base + (node.module.split(".") if node.module else [])
            if target:
                found.add(target[0])
            else:                                   # from . import x (at the top of the package)
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("triage."):
            found.add(node.module.split(".")[1])
    return found


def test_every_module_belongs_to_a_layer():
    tops = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in PACKAGE.glob("*")
            if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert tops <= set(LAYERS), tops - set(LAYERS)


def test_no_stage_imports_a_later_one():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        mine = LAYERS[rel.parts[0].removesuffix(".py")]
        for imported in _imports(path) & set(LAYERS):
            if LAYERS[imported] > mine and (rel.as_posix(), imported) not in ALLOWED_UPWARD:
                upward.append(f"{rel.as_posix()} imports {imported}")
    assert not upward, upward


def test_every_fix_the_rules_may_name_has_a_solver():
    """The capacity model has a solver for every fix name the rules may use (vocabulary.FIX_NAMES) and no other."""
    from triage.capacity.fixes import FIXES
    from triage.vocabulary import FIX_NAMES
    assert set(FIXES) == FIX_NAMES
