"""docs/architecture.md's claims hold: its generated tables match the code, every setting's default
is written once (in EngineConfig), and every operator or strategy name is defined once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import attrs
import pytest

from nlqo import kinds
from nlqo.cli import reference
from nlqo.config import STRATEGIES, EngineConfig
from nlqo.eval.baselines import BASELINES

PACKAGE = Path(__file__).resolve().parents[1] / "nlqo"
FIELDS = {f.name: f.default for f in attrs.fields(EngineConfig)}

SAME_NAME_OTHER_MEANING = {
    ("runtime/cluster.py", "workers"): "Dask worker processes of a local cluster",
    ("parser/parse.py", "constrained"): "ParseResult: whether this parse was constrained",
    ("optimizer/plan.py", "budget"): "SearchStats: the budget a search used",
    ("optimizer/plan.py", "beam"): "SearchStats: the beam a search used",
    ("planner/statistics/policy.py", "statistics"): "Choice: where the statistics came from",
    ("planner/statistics/store.py", "path"): "Statistics: the file read",
    ("serve/app.py", "model"): "the model name the service reports",
    ("testing/oracle.py", "max_atoms"): "the brute-force oracle's size limit",
    ("testing/strategies.py", "max_atoms"): "sizes of generated test queries",
}
"""Names of EngineConfig fields used elsewhere for something else (not a second default)."""


def _block(name: str) -> str:
    text = reference.PAGE.read_text(encoding="utf-8")
    found = re.search(rf"<!-- BEGIN {name} -->\n(.*?)\n<!-- END {name} -->", text, flags=re.S)
    assert found, f"docs/architecture.md has no block {name}: run python -m nlqo.cli.reference"
    return found.group(1)


@pytest.mark.parametrize("name", sorted(reference.BLOCKS))
def test_the_generated_tables_match_the_code(name):
    assert _block(name) == reference.BLOCKS[name](), "docs/architecture.md is stale: run python -m nlqo.cli.reference"


def test_the_settings_table_has_every_field_once():
    rows = [line for line in _block("settings").splitlines()[2:]]
    assert sorted(row.split("|")[1].strip(" `") for row in rows) == sorted(FIELDS)


def test_the_vocabularies_table_names_every_operator_and_baseline():
    table = _block("vocabularies")
    for name in (*kinds.Operator.values(), *BASELINES, *kinds.StopReason.values()):
        assert f"`{name}`" in table


def _literal(node: ast.expr | None):
    """The value of a literal default: a constant or a :mod:`nlqo.kinds` member (``Policy.BALANCED``),
    also as ``attrs.field(default=...)``; else None."""
    if isinstance(node, ast.Call) and ast.unparse(node.func) in ("attrs.field", "attr.ib", "field"):
        node = next((k.value for k in node.keywords if k.arg == "default"), None)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        member = getattr(getattr(kinds, node.value.id, None), node.attr, None)
        return member.value if isinstance(member, kinds._Word) else None
    return node.value if isinstance(node, ast.Constant) else None


def _literal_defaults(path: Path):
    """(name, value, line) of each literal default a parameter or class attribute is given."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = list(zip(positional[len(positional) - len(a.defaults) :], a.defaults))
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            for arg, d in pairs:
                if _literal(d) is not None:
                    yield arg.arg, _literal(d), d.lineno
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _literal(node.value) is not None:
            yield node.target.id, _literal(node.value), node.lineno


def test_every_setting_default_is_written_only_in_engine_config():
    seconds = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "config.py":
            continue
        for name, value, line in _literal_defaults(path):
            if name in FIELDS and (rel, name) not in SAME_NAME_OTHER_MEANING:
                seconds.append(f"nlqo/{rel}:{line}: {name} = {value!r} (use config.default({name!r}))")
    assert not seconds, "\n".join(seconds)


def test_the_default_finder_sees_a_second_default(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text(
        "def search(query, k: int = 3, *, tau=0.85, policy: str = Policy.BALANCED, x=Policy.nothing):\n    pass\n"
        "class A:\n    beam: int = 32\n    k: int = attrs.field(default=3, validator=positive)\n"
        "    retrieval: str = attrs.field(default=RetrievalMode.HYBRID)\n    runtime: str = attrs.field(factory=str)\n"
    )
    found = {(n, v) for n, v, _ in _literal_defaults(sample)}
    assert found == {("k", 3), ("tau", 0.85), ("policy", "balanced"), ("beam", 32), ("retrieval", "hybrid")}
    assert {name for name, _ in found} <= set(FIELDS)  # each one a second owner the test above reports


def test_every_engine_strategy_name_is_defined_once():
    # An operator's name is a member of kinds.Operator; nothing else assigns the string to a name.
    names = set(STRATEGIES) | set(BASELINES)
    allowed = {("index/bm25.py", "DIRNAME"), ("execution/operators/cascade.py", "NODE")}  # a folder name, a trace label
    seconds = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in ("kinds.py", "eval/baselines.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name) and node.value.value in names and (rel, t.id) not in allowed:
                        seconds.append(f"nlqo/{rel}:{node.lineno}: {t.id} = {node.value.value!r}")
    assert not seconds, "\n".join(seconds)
