"""One format registry: `nlqo plan` and `nlqo explain` both print every OutputFormat, and each output
parses: JSON with json.loads, DOT with graphviz's `dot -Tsvg` (when installed), HTML in a headless
Chromium with no console error and every plan node drawn. `nlqo explain` runs on a scripted LLM over
a real index built with a hashing embedder.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from browser import CHROMIUM, Chromium
from fakes import HashEmbedder
from nlqo.explain import formats
from nlqo.cli import common, main
from nlqo.config import EngineConfig
from nlqo.main.engine import Engine
from nlqo.index import build_index, open_retriever
from nlqo.kinds import OutputFormat
from nlqo.runtime.llm import ScriptedLLM
from nlqo.common.passages import Passage
from nlqo.ir.syntax import parse

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.nlqo"))
OLDER = REPO / "examples" / "older.nlqo"
DOT = shutil.which("dot")
FORMATS = [f.value for f in OutputFormat]
PASSAGES = [
    Passage("p3", "Ada Lovelace", "Ada Lovelace was born on 10 December 1815."),
    Passage("p4", "Charles Babbage", "Charles Babbage was born on 26 December 1791."),
    Passage("p1", "Jaws (film)", "Jaws is a 1975 thriller film directed by Steven Spielberg."),
]


@pytest.fixture(scope="module")
def chromium():
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; `make install-test` tries)")
    pytest.importorskip("websocket", reason="websocket-client is not installed (pip install -e '.[test]')")
    with Chromium() as browser:
        yield browser.page


def check_parses(fmt: str, path: Path, request) -> dict:
    """Check that the file ``path`` written in ``fmt`` parses; what was found in it."""
    text = path.read_text(encoding="utf-8")
    if fmt == "json":
        data = json.loads(text)
        return {"nodes": {n["id"] for n in data["nodes"]}}
    if fmt == "dot":
        assert text.startswith("digraph plan {") and text.rstrip().endswith("}")
        if DOT is None:
            return {}
        svg = subprocess.run([DOT, "-Tsvg", str(path)], capture_output=True, text=True, timeout=60)
        assert svg.returncode == 0 and svg.stderr == "" and "<svg" in svg.stdout
        return {}
    if fmt == "html":
        page = request.getfixturevalue("chromium")
        page.open(path.as_uri())
        assert page.errors() == []
        assert {url.split("#")[0] for url in page.requests()} == {path.as_uri()}
        nodes = page.eval("Array.from(document.querySelectorAll('#tree .node')).map(b => b.dataset.node)")
        facts = page.eval("document.getElementById('facts').innerText")
        return {"nodes": set(nodes), "facts": facts, "kind": page.eval("document.getElementById('kind').textContent")}
    assert text.startswith("QUERY PLAN (cost model:")
    return {}


def test_both_commands_offer_every_format_of_the_registry(capsys):
    assert set(formats.LOGICAL) == set(formats.PHYSICAL) == set(OutputFormat)
    assert FORMATS == ["text", "json", "dot", "html"]
    for command in (["plan"], ["explain"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        assert "--format {text,json,dot,html}" in capsys.readouterr().out.replace("\n", " ").replace("  ", " ")
    with pytest.raises(SystemExit) as refused:
        main(["plan", str(OLDER), "--format", "svg"])
    assert refused.value.code == 2 and "invalid choice: 'svg'" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_plan_writes_every_format_and_each_parses(example, fmt, tmp_path, capsys, request):
    out = tmp_path / f"plan.{fmt}"
    assert main(["plan", str(example), "--cost-model", "structural", "--format", fmt, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"nlqo: wrote {out}\n"
    found = check_parses(fmt, out, request)
    if fmt in ("json", "html"):
        plan = json.loads(formats.render(formats.LogicalView(_optimize(example)), "json"))
        assert found["nodes"] == {n["id"] for n in plan["nodes"]} and "$root" in found["nodes"]
    if fmt == "html":
        assert found["kind"] == "EXPLAIN"
        for gone in plan["stats"]["left_out"]:  # duplicates.nlqo leaves two atoms out
            assert f"left out: {gone['id']} ({gone['atom']}): {gone['reason']}" in found["facts"]


def _optimize(example: Path):
    from nlqo.optimizer.cost import load_cost_model
    from nlqo.optimizer.optimizer import Optimizer

    return Optimizer(cost_model=load_cost_model("structural")).optimize(parse(example.read_text()))


@pytest.mark.parametrize("fmt", FORMATS)
def test_plan_prints_to_stdout_what_out_writes(fmt, tmp_path, capsys):
    out = tmp_path / "plan.out"
    args = ["plan", str(OLDER), "--cost-model", "structural", "--format", fmt]
    assert main([*args, "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(args) == 0
    assert mask_times(capsys.readouterr().out) == mask_times(out.read_text(encoding="utf-8"))


def mask_times(text: str) -> str:
    """``text`` with the planning time (which differs between two runs) masked."""
    return re.sub(r"\d+\.\d+ ms", "<t> ms", re.sub(r'"planning_ms": [-+.e0-9]+', '"planning_ms": <t>', text))


def test_plan_out_to_a_folder_that_does_not_exist_is_an_error_not_a_traceback(tmp_path, capsys):
    out = tmp_path / "missing" / "plan.html"
    assert main(["plan", str(OLDER), "--cost-model", "structural", "--format", "html", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"nlqo: error: cannot write {out}: No such file or directory\n"


def scripted_engine(tmp_path: Path, monkeypatch) -> Path:
    """`nlqo explain` will run on a scripted LLM over an index of PASSAGES; the IR file to plan."""
    index = tmp_path / "index"
    build_index(PASSAGES, index, HashEmbedder())
    retriever = open_retriever(index, "dense", embedder=HashEmbedder())
    config = EngineConfig(model="scripted", kv_reuse=False, k=2, measure_costs=False, max_hops=2)
    engine = Engine.from_config(
        config, llm=ScriptedLLM([], default=" Charles Babbage."), retriever=retriever, embedder=HashEmbedder()
    )
    monkeypatch.setattr(common, "build_engine", lambda args: engine)
    ir = tmp_path / "older.nlqo"
    ir.write_text(OLDER.read_text())
    return ir


@pytest.mark.parametrize("strategy", ["tree", "linear"])
@pytest.mark.parametrize("analyze", [False, True], ids=["explain", "analyze"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_explain_writes_every_format_and_each_parses(fmt, analyze, strategy, tmp_path, monkeypatch, capsys, request):
    ir = scripted_engine(tmp_path, monkeypatch)
    out = tmp_path / f"explain.{fmt}"
    question = parse(OLDER.read_text()).question or ""
    args = [
        "explain",
        question,
        "--index",
        str(tmp_path / "index"),
        "--ir",
        str(ir),
        "--strategy",
        strategy,
        "--format",
        fmt,
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(args + (["--analyze"] if analyze else [])) == 0
    assert capsys.readouterr().err == ""
    found = check_parses(fmt, out, request)
    text = out.read_text(encoding="utf-8")
    if fmt in ("json", "html"):
        assert found["nodes"] == {"$root", "q1", "q2", "q3", "q4"}
    if fmt == "html":
        assert found["kind"] == ("EXPLAIN ANALYZE" if analyze else "EXPLAIN")
    operator = "ParallelTree" if strategy == "tree" else "LinearTemplate"
    if fmt in ("text", "dot"):
        assert operator in text and ("actual time=" in text) == analyze
    if fmt == "json":
        data = json.loads(text)
        assert data["physical"]["operator"] == strategy and ("analyze" in data) == analyze
