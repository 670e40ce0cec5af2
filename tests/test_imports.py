"""The import graph of nlqo/ has no circles, and the stages keep their layers (import-linter's contract in
pyproject.toml: a module imports from its own layer and those below, never above).

Every import counts, also those inside functions (they still tie the modules together); only
imports under ``if TYPE_CHECKING:`` do not, as they never run. ``from nlqo.pkg import name``
counts as an import of the submodule ``nlqo.pkg.name`` when there is one, else of ``nlqo.pkg``.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nlqo"


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(tree: ast.AST):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _imports(node)


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the nlqo modules it imports."""

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                    )
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            graph[name] |= {t for t in map(owner, targets) if t and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_circles_and_nothing_else():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_graph_sees_imports_inside_functions_but_not_type_checking_ones(tmp_path):
    pkg = tmp_path / "nlqo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from nlqo.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from nlqo import a\nfrom . import c\n"
    )
    (pkg / "sub" / "c.py").write_text("from .. import a\n")
    graph = import_graph(modules(pkg))
    assert (
        graph["nlqo.a"] == {"nlqo.sub.b"}
        and graph["nlqo.sub.b"] == {"nlqo.sub.c"}
        and graph["nlqo.sub.c"] == {"nlqo.a"}
    )
    assert circles(graph) == [["nlqo.a", "nlqo.sub.b", "nlqo.sub.c"]]


def test_nlqo_has_no_import_circles():
    assert circles(import_graph(modules())) == []


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter's verdict on the nlqo package under ``root`` by the contract in pyproject.toml."""
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("lint-imports")),
            "--config",
            str(PACKAGE.parent / "pyproject.toml"),
            "--no-cache",
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
    )


def test_the_stages_keep_their_layers():
    """The layers contract (pyproject.toml, docs/architecture.md) holds on nlqo/ as it is."""
    run = lint_imports(PACKAGE.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Contracts: 1 kept, 0 broken." in run.stdout


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("optimizer/dp.py", "    from nlqo.cli import main\n"),  # inside a function: it still ties the layers
        ("main/engine.py", "from nlqo.eval import baselines\n"),
        ("runtime/llm/base.py", "if TYPE_CHECKING:\n    from nlqo.execution.trace import Trace\n"),
    ],
)
def test_an_upward_import_breaks_the_layers(tmp_path, module, upward):
    shutil.copytree(PACKAGE, tmp_path / "nlqo", ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "nlqo" / module
    text = target.read_text(encoding="utf-8")
    if upward.startswith("    "):
        upward = "def _upward():\n" + upward
    if "TYPE_CHECKING" in upward:
        upward = "from typing import TYPE_CHECKING\n" + upward
    target.write_text(text + "\n\n" + upward, encoding="utf-8")
    run = lint_imports(tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Contracts: 0 kept, 1 broken." in run.stdout
    assert module.replace("/", ".").removesuffix(".py") in run.stdout
