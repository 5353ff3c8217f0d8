"""The package's layers: every import of a perfkit module (at the top or inside a function, since a lazy
import is a dependency all the same) goes down the layers or stays within one, and no modules import each
other in a loop. docs/architecture.md describes the same layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "perfkit"

# Lowest first. A module belongs to the longest prefix listed; it may import its own layer and those below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("perfkit._started", "perfkit.errors", "perfkit._atomic", "perfkit._tf", "perfkit._libc"),
    ("perfkit.profiler",),
    ("perfkit.config", "perfkit.cluster", "perfkit.machine", "perfkit.results", "perfkit.runmeta", "perfkit.schedulers",
     "perfkit.events"),
    ("perfkit.workloads",),
    ("perfkit.analysis", "perfkit.trainer.hosts"),
    ("perfkit.trainer.worker",),
    ("perfkit.trainer",),
    ("perfkit.studies", "perfkit.live"),
    ("perfkit.cli",),
    ("perfkit", "perfkit.__main__"),
)


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The perfkit modules that ``name`` imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "perfkit")
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            if node.module.split(".")[0] != "perfkit":
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return {m for m in found if m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def layer(module: str) -> int:
    best, rank = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    assert rank >= 0, f"{module} is in no layer: add it to LAYERS and docs/architecture.md"
    return rank


def test_the_import_graph_is_read() -> None:
    # the checks below mean something only if the graph holds the package's real imports
    assert len(MODULES) > 80 and "perfkit.trainer.worker.main" in MODULES
    assert "perfkit.trainer.worker.part" in GRAPH["perfkit.trainer.worker.record"]
    assert "perfkit.analysis.renderers.console" in GRAPH["perfkit.analysis.renderers.html"]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_goes_up_a_layer(module: str) -> None:
    upward = sorted(m for m in GRAPH[module] if layer(m) > layer(module))
    assert not upward, f"{module} (layer {layer(module)}) imports from higher layers: {upward}"


def test_no_modules_import_each_other_in_a_loop() -> None:
    done: set[str] = set()

    def visit(module: str, stack: list[str]) -> None:
        if module in stack:
            raise AssertionError("import loop: " + " -> ".join(stack[stack.index(module):] + [module]))
        if module in done:
            return
        for dep in sorted(GRAPH.get(module, ())):
            if dep in GRAPH:
                visit(dep, [*stack, module])
        done.add(module)

    for module in sorted(GRAPH):
        visit(module, [])


def test_cli_commands_do_not_import_each_other() -> None:
    commands = {m for m in MODULES if m.startswith("perfkit.cli.") and not m.split(".")[-1].startswith("_")}
    for module in commands:
        assert not GRAPH[module] & commands, f"{module} imports another command: {GRAPH[module] & commands}"


def test_the_package_never_imports_the_benchmarks() -> None:
    """benchmarks/ sits beside the package and is not installed with it (docs/architecture.md): an import of
    it from perfkit would work in a checkout and fail in every installed copy."""
    offenders = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{name} imports {m}" for m in mods if m.split(".")[0] in ("benchmarks", "tests")]
    assert not offenders, offenders
