"""The definition folders ship inside the wheel and are found from an installed wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory, repo):
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(repo)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.fail(f"building the wheel failed:\n{proc.stderr[-2000:]}")
    return next(out.glob("nlqo-*.whl"))


def test_wheel_carries_grammars_rules_and_cost_models(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in (
        "nlqo/_data/grammar/nlqo.lark",
        "nlqo/_data/grammar/cost.lark",
        "nlqo/_data/rules/default.rules",
        "nlqo/_data/cost_models/default.cost",
        "nlqo/_data/cost_models/structural.cost",
        "nlqo/explain/page.html",
    ):
        assert path in names
    assert not any(n.startswith(("tests/", "grammar/", "benchmarks/")) for n in names)


def test_installed_wheel_finds_its_definitions(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target), str(wheel)],
        check=True,
    )
    code = (
        "import nlqo.common.resources as r, nlqo.ir.syntax as s, nlqo.optimizer.cost as c;"
        "print(r.builtin_dir('grammar'));"
        'print(s.parse(\'q1 = (?x, "p", "o")\\nanswer ?x\').atoms[0].id);'
        "print(c.load_cost_model('structural').formula())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[0] == str(target / "nlqo" / "_data" / "grammar")
    assert out[1:] == ["q1", "depth + imbalance - size - edges"]


def test_nlqo_testing_works_from_an_installed_wheel(wheel, tmp_path):
    """Users property-test their own rules with it, outside a checkout: the strategies, checkers,
    oracle, fixture runner and fakes all come from the wheel."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target), str(wheel)],
        check=True,
    )
    code = (
        "import nlqo.testing as t, nlqo.testing.strategies as s\n"
        "from hypothesis import given, settings\n"
        "@settings(max_examples=10, deadline=None)\n"
        "@given(s.plans(cost_models=s.cost_models()))\n"
        "def check(p):\n"
        "    t.check_plan(p)\n"
        "    assert t.cheapest(p, p.stats and __import__('nlqo.optimizer.cost', fromlist=['x']).load_cost_model('structural')).cover >= 0\n"
        "check()\n"
        "print(t.__file__)\n"
        "print(t.ScriptedLLM([('x', 'y')]).complete('x').text, type(t.HashEmbedder()).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == str(target / "nlqo" / "testing" / "__init__.py")
    assert lines[1] == "y HashEmbedder"


HEAVY = ("torch", "transformers", "sentence_transformers", "faiss", "fastapi", "uvicorn", "matplotlib", "llama_cpp")
BLOCK_HEAVY = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    f"        if name.split('.')[0] in {HEAVY!r}:\n"
    "            raise ImportError(f'blocked: {name}', name=name)\n"
    "sys.meta_path.insert(0, Block())\n"
)


def test_the_core_requires_no_heavy_library(wheel):
    """``pip install nlqo`` (no extras) brings attrs, lark and numpy; the rest comes with an extra."""
    meta = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA"))
    requires = [
        line.removeprefix("Requires-Dist:").strip()
        for line in zipfile.ZipFile(wheel).read(meta).decode().splitlines()
        if line.startswith("Requires-Dist:")
    ]
    core = sorted(r.split(">")[0].split("=")[0].split("<")[0].strip() for r in requires if "extra ==" not in r)
    assert core == ["attrs", "lark", "numpy"]
    extras = {r.split("extra ==")[1].strip().strip("'\"") for r in requires if "extra ==" in r}
    assert {"llm", "index", "serve", "eval", "all"} <= extras


def test_plans_and_the_testing_kit_run_without_the_heavy_libraries(wheel, tmp_path, repo):
    """With torch, transformers, FAISS, FastAPI, matplotlib and llama.cpp unimportable, the core works:
    `nlqo plan` on the structural cost model and the kit's checks; a part that needs an extra says which."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target), str(wheel)],
        check=True,
    )
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "NLQO_CACHE": str(tmp_path / "cache")}
    example = str(repo / "examples" / "director_birthplace.nlqo")
    plan = BLOCK_HEAVY + (
        "from nlqo.cli import main\n"
        f"code = main(['plan', {example!r}, '--cost-model', 'structural', '--format', 'json'])\n"
        f"assert not [m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]\n"
        "sys.exit(code)\n"
    )
    out = subprocess.run([sys.executable, "-c", plan], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert '"answer_var": "?city"' in out.stdout
    kit = BLOCK_HEAVY + (
        "import nlqo.testing as t\n"
        "from nlqo.ir.syntax import parse\n"
        "from nlqo.optimizer.optimizer import Optimizer\n"
        't.check_plan(Optimizer().optimize(parse(\'q1 = ("Jaws", "directed by", ?d)\\nanswer ?d\')))\n'
        "from nlqo.common.extras import need\n"
        "try:\n"
        "    need('faiss', 'index')\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", kit], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("MissingExtra this needs the faiss package, part of nlqo's index extra")
    assert "pip install 'nlqo[index]'" in out.stdout
