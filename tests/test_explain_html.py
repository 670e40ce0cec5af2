"""EXPLAIN as a page: the embedded JSON is inert, and the page works in a real headless Chromium.

The browser tests load the page from a file with the DevTools protocol (tests/browser.py) and
check: no console error and no request but the file itself, every plan node drawn with its
figures, the heaviest node highlighted, a click showing the node's prompts and passages, and text
from a user's corpus shown as text with no script run. EXPLAIN ANALYZE runs on a scripted LLM
over a real index built with a hashing embedder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from browser import CHROMIUM, Chromium
from fakes import HashEmbedder
from nlqo.explain import formats, html, render
from nlqo.cli import common, main
from nlqo.optimizer.cost import CostContext, load_cost_model
from nlqo.config import EngineConfig
from nlqo.main.engine import Engine
from nlqo.index import build_index, open_retriever
from nlqo.runtime.llm import ScriptedLLM
from nlqo.optimizer.optimizer import Optimizer
from nlqo.common.passages import Passage
from nlqo.ir.syntax import parse

REPO = Path(__file__).resolve().parents[1]
OLDER = REPO / "examples" / "older.nlqo"
PASSAGES = [
    Passage("p3", "Ada Lovelace", "Ada Lovelace was born on 10 December 1815."),
    Passage("p4", "Charles Babbage", "Charles Babbage was born on 26 December 1791."),
    Passage("p1", "Jaws (film)", "Jaws is a 1975 thriller film directed by Steven Spielberg."),
]
SCRIPT = "<script>window.__pwned = 'script'</script>"
IMAGE = "<img src=x onerror=\"window.__pwned = 'img'\">"
LINK = "<a href=\"javascript:window.__pwned = 'link'\">click me</a>"
HOSTILE = [
    Passage(
        "evil",
        f"Evil {SCRIPT} title",
        f"Ada Lovelace was born on 10 December 1815. {SCRIPT} {IMAGE} {LINK} & &amp; \u2028 end",
    ),
    *PASSAGES,
]
DATA = re.compile(r'<script type="application/json" id="nlqo-plans">(.*?)</script>', re.S)


def page_data(html: str) -> list[dict]:
    (block,) = DATA.findall(html)
    return json.loads(block)


# --- the page as text ----------------------------------------------------------------------------


@given(
    st.recursive(
        st.text() | st.integers() | st.none(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=8,
    )
)
def test_embedded_json_is_inert_and_parses_back(data):
    text = html.script_json(data)
    assert not set(text) & set("<>&\u2028\u2029")
    assert json.loads(text) == data


def test_the_page_is_self_contained_and_carries_one_copy_of_the_data():
    page = html.render([html.entry({"question": SCRIPT, "nodes": [], "root": "$root"})])
    assert page.count("<script") == 2 and "</script><" not in page.split("nlqo-plans")[1][:200]
    assert page_data(page)[0]["explain"]["question"] == SCRIPT
    template = html.TEMPLATE.read_text()
    assert not re.search(
        r"https?:|//[a-z]|\bsrc=|\bhref=|@import|url\(|innerHTML|outerHTML|insertAdjacentHTML|document\.write", template
    )
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert "default-src 'none'" in csp and "'unsafe-inline'" not in csp and csp.count("'sha256-") == 2
    with pytest.raises(ValueError):
        html.render([])


# --- pages built by `nlqo explain` ----------------------------------------------------------------


@attrs.define(eq=False)
class PacedLLM:
    """A scripted model that reports a wall time of 1 ms per prompt token and 40 ms per generated one."""

    inner: ScriptedLLM
    name: str = "paced"

    def _paced(self, out):
        usage = attrs.evolve(out.usage, wall_ms=1.0 * out.usage.prompt_tokens + 40.0 * out.usage.generated_tokens)
        return attrs.evolve(out, usage=usage)

    def chat(self, messages, *, stop=(), max_tokens=256):
        return self._paced(self.inner.chat(messages, stop=stop, max_tokens=max_tokens))

    def complete(self, prompt, *, stop=(), max_tokens=256):
        return self._paced(self.inner.complete(prompt, stop=stop, max_tokens=max_tokens))


def tree_llm(answer: str = "Charles Babbage") -> PacedLLM:
    """Rewrites each atom into a question, answers leaves briefly and the root at length."""

    def reply(prompt: str) -> str:
        if "Fact to look up:" in prompt:
            return "When was " + prompt.split("Fact to look up: ")[-1].split("\n")[0] + "?"
        if prompt.rstrip().endswith("Charles Babbage?\nAnswer:"):  # the root: the main question
            return answer + " was born first, long before the other one was born in London or anywhere else."
        return "1815"

    return PacedLLM(ScriptedLLM([], default=reply))


def explain_page(
    tmp_path,
    monkeypatch,
    llm,
    *,
    passages=PASSAGES,
    ir: str | None = None,
    strategy: str = "tree",
    analyze: bool = True,
    **engine,
) -> tuple[Path, dict]:
    """Run `nlqo explain --format html` on a fresh index of ``passages``; the page and its EXPLAIN dict."""
    index = tmp_path / "index"
    build_index(passages, index, HashEmbedder())
    retriever = open_retriever(index, "dense", embedder=HashEmbedder())
    config = EngineConfig(model="scripted", kv_reuse=False, k=len(passages), measure_costs=False, **engine)
    built = Engine.from_config(config, llm=llm, retriever=retriever, embedder=HashEmbedder())
    monkeypatch.setattr(common, "build_engine", lambda args: built)
    ir_file = tmp_path / "question.nlqo"
    ir_file.write_text(ir or OLDER.read_text())
    page = tmp_path / "plan.html"
    question = parse(ir_file.read_text()).question or "?"
    args = [
        "explain",
        question,
        "--index",
        str(index),
        "--ir",
        str(ir_file),
        "--strategy",
        strategy,
        "--format",
        "html",
        "--out",
        str(page),
        "--quiet",
    ]
    assert main(args + (["--analyze"] if analyze else [])) == 0
    (only,) = page_data(page.read_text())
    return page, only["explain"]


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; `make install-test` tries)")
    pytest.importorskip("websocket", reason="websocket-client is not installed (pip install -e '.[test]')")
    with Chromium() as chromium:
        yield chromium.page


def load(page, path: Path, fragment: str = "") -> None:
    """Open ``path`` and check it loaded cleanly: nothing but the file requested, no error logged."""
    page.open(path.as_uri() + fragment)
    assert page.errors() == []
    assert {url.split("#")[0] for url in page.requests()} == {path.as_uri()}


def nodes_in_dom(page) -> dict[str, dict]:
    """Every plan node box: its classes and the text of each figure."""
    return page.eval(
        "Object.fromEntries(Array.from(document.querySelectorAll('#tree .node')).map(b => [b.dataset.node, {"
        " classes: Array.from(b.classList), text: b.textContent,"
        " figures: Object.fromEntries(Array.from(b.querySelectorAll('[data-field]')).map(f => [f.dataset.field, f.textContent]))}]))"
    )


def click_node(page, node: str) -> dict:
    """Click a node box like a user; the detail pane's node id and text once it shows."""
    page.click(f'#tree .node[data-node="{node}"]')
    assert page.wait_for(f"document.getElementById('detail').dataset.node === {json.dumps(node)}")
    page.eval("document.querySelectorAll('#detail details').forEach(d => d.open = true)")
    return page.eval(
        "({text: document.getElementById('detail').innerText, steps: document.querySelectorAll('#detail .step').length})"
    )


def ms(x: float) -> str:
    return f"{x / 1000:.1f} s" if x >= 1000 else f"{round(x)} ms"


def test_explain_page_draws_every_node_with_its_cost(browser, tmp_path):
    query = parse(OLDER.read_text())
    model = load_cost_model("structural")
    plan = Optimizer(cost_model=model).optimize(query)
    data = render.to_dict(
        plan, model=model, costs=render.node_costs(plan, model, CostContext(plan.query, plan.relations, None))
    )
    path = html.write(tmp_path / "plan.html", [html.entry(data)])
    load(browser, path)
    boxes = nodes_in_dom(browser)
    assert set(boxes) == {n["id"] for n in data["nodes"]} == {"$root", "q1", "q2", "q3", "q4"}
    for node in data["nodes"]:
        box = boxes[node["id"]]
        assert box["figures"]["cost"] == f"cost {render._fmt(node['cost']['total'])}"
        assert all(f"{k}={render._fmt(v)}" in box["text"] for k, v in node["cost"]["terms"].items())
        assert node["id"] == "$root" or " ".join(node["triple"]) in box["text"].replace("\n", " ")
    assert not any("heaviest" in b["classes"] for b in boxes.values())  # nothing measured, nothing highlighted
    assert browser.eval("document.getElementById('kind').textContent") == "EXPLAIN"
    assert "Run with --analyze" in click_node(browser, "q1")["text"]
    assert browser.errors() == []


def test_explain_analyze_page_shows_actuals_heaviest_node_prompts_and_passages(browser, tmp_path, monkeypatch):
    path, data = explain_page(
        tmp_path, monkeypatch, tree_llm(), tree_queries="rewrite"
    )  # a rewrite call per node to show
    load(browser, path)
    assert browser.eval("document.getElementById('kind').textContent") == "EXPLAIN ANALYZE"
    assert "Answer: Charles Babbage" in browser.eval("document.getElementById('answer').textContent")
    boxes = nodes_in_dom(browser)
    assert set(boxes) == {"$root", "q1", "q2", "q3", "q4"}
    for node in data["nodes"]:
        a, figures = node["actual"], boxes[node["id"]]["figures"]
        assert figures["actual_ms"] == f"time {ms(a['actual_ms'])}"
        assert figures["llm_calls"] == f"LLM {a['llm_calls']}" and a["llm_calls"] == (1 if node["id"] == "$root" else 2)
        assert (
            figures["tokens"]
            == f"tokens {a['computed_prompt_tokens']}/{a['cached_prompt_tokens']}/{a['generated_tokens']}"
        )
        assert figures["passages"] == f"passages {len(a['passages'])}" and len(a["passages"]) == 3
        assert figures["cost"].startswith("cost ") and node["operator"] in boxes[node["id"]]["text"]
    # the root's long answer makes it the heaviest node; exactly that box is highlighted
    times = {n["id"]: n["actual"]["actual_ms"] for n in data["nodes"]}
    assert max(times, key=times.get) == "$root"
    assert [n for n, b in boxes.items() if "heaviest" in b["classes"]] == ["$root"]
    assert "Click a node" in browser.eval("document.getElementById('detail').innerText")
    leaf = click_node(browser, "q1")
    assert leaf["steps"] == 3  # rewrite, retrieval, answer
    assert "Fact to look up: Ada Lovelace born on ?date1" in leaf["text"]  # the rewrite prompt
    assert "When was Ada Lovelace born on ?date1?" in leaf["text"]  # what the model generated
    assert "Ada Lovelace was born on 10 December 1815." in leaf["text"] and "id p3" in leaf["text"]  # a passage
    root = click_node(browser, "$root")
    assert "Question: Who was born first, Ada Lovelace or Charles Babbage?" in root["text"]
    assert browser.eval("location.hash") == "#node=%24root"
    assert browser.eval("document.querySelectorAll('#tree .node.selected').length") == 1
    assert browser.errors() == [] and {u.split("#")[0] for u in browser.requests()} == {path.as_uri()}


def test_linear_plan_page_maps_hops_to_atoms_with_terminator_scores(browser, tmp_path, monkeypatch):
    llm = PacedLLM(
        ScriptedLLM([("Question:$", [" Who directed Jaws?", " Where was Spielberg born?"]), ("", " Cincinnati.")])
    )
    ir = 'question "In which city was the director of the film Jaws born?"\nq1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nanswer ?city\n'
    path, data = explain_page(tmp_path, monkeypatch, llm, ir=ir, strategy="linear", max_hops=2)
    load(browser, path, "#node=q2")  # a fragment opens on a node
    assert browser.wait_for("document.getElementById('detail').dataset.node") == "q2"
    boxes = nodes_in_dom(browser)
    actual = {n["id"]: n["actual"] for n in data["nodes"]}
    for node in ("q1", "q2"):
        assert boxes[node]["figures"]["terminator_score"] == f"stop score {actual[node]['terminator_score']:.2f}"
        assert "LinearTemplate hop" in boxes[node]["text"]
    browser.eval("document.querySelectorAll('#detail details').forEach(d => d.open = true)")
    text = browser.eval("document.getElementById('detail').innerText")
    assert "Where was Spielberg born?" in text and "(Plan step 2: ?d born in ?city)" in text  # the template's prompt
    assert browser.errors() == []


def test_nodes_a_run_never_reached_are_drawn_as_such(browser, tmp_path, monkeypatch):
    llm = PacedLLM(ScriptedLLM([("Question:$", " Who directed Jaws?"), ("", " Spielberg.")]))
    ir = 'question "In which city was the director of the film Jaws born?"\nq1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nanswer ?city\n'
    path, data = explain_page(tmp_path, monkeypatch, llm, ir=ir, strategy="linear", max_hops=1)
    assert "actual" not in {n["id"]: n for n in data["nodes"]}["q2"]
    load(browser, path)
    boxes = nodes_in_dom(browser)
    assert "idle" in boxes["q2"]["classes"] and "never executed" in boxes["q2"]["text"]
    assert "idle" not in boxes["q1"]["classes"] and "actual_ms" in boxes["q1"]["figures"]
    assert "never executed" in click_node(browser, "q2")["text"]


def test_the_page_carries_what_format_json_prints_and_opens_nodes_from_the_keyboard(
    browser, tmp_path, monkeypatch, capsys
):
    path, data = explain_page(tmp_path, monkeypatch, tree_llm(), analyze=False)
    question = parse(OLDER.read_text()).question
    args = [
        "explain",
        question,
        "--index",
        str(tmp_path / "index"),
        "--ir",
        str(tmp_path / "question.nlqo"),
        "--strategy",
        "tree",
        "--quiet",
    ]
    assert main(args + ["--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["stats"].pop("planning_ms") >= 0 and data["stats"].pop("planning_ms") >= 0
    assert data == printed and "analyze" not in data
    load(browser, path)
    assert browser.eval("document.getElementById('kind').textContent") == "EXPLAIN"
    browser.eval("document.querySelector('#tree .node[data-node=\"q2\"]').focus()")
    browser.press("Enter")
    assert browser.wait_for("document.getElementById('detail').dataset.node") == "q2"
    assert browser.errors() == []


def test_text_from_the_corpus_question_and_model_shows_as_text_and_runs_nothing(browser, tmp_path, monkeypatch):
    ir = (
        OLDER.read_text()
        .replace("Who was born first,", f"Who {SCRIPT} was born first,")
        .replace('"Ada Lovelace", "born on"', f'"Ada {IMAGE.replace(chr(34), chr(39))}", "born on"')
    )
    path, data = explain_page(tmp_path, monkeypatch, tree_llm(answer=f"{IMAGE} {LINK}"), passages=HOSTILE, ir=ir)
    html = path.read_text()
    assert "<img" not in html and "javascript:" in html  # the markup is in the file, as JSON text only
    load(browser, path)
    body = browser.eval("document.body.innerText")
    answer = data["analyze"]["answer"]
    assert answer.startswith(f"{IMAGE} {LINK}")
    assert SCRIPT in body and f"Answer: {answer}" in body  # shown as written
    for node in [n["id"] for n in data["nodes"]]:
        detail = click_node(browser, node)
        assert (
            node not in ("$root", "q1")
            or SCRIPT in detail["text"]
            and IMAGE in detail["text"]
            and LINK in detail["text"]
        )
    assert browser.eval("typeof window.__pwned") == "undefined"
    assert browser.eval("document.querySelectorAll('img, a, iframe, object, embed, form').length") == 0
    assert browser.eval("document.scripts.length") == 2
    assert browser.errors() == [] and {u.split("#")[0] for u in browser.requests()} == {path.as_uri()}


def test_the_probe_catches_markup_that_is_not_escaped(browser, tmp_path):
    """The checks above can fail: the same text pasted into a page as markup runs and shows."""
    path = tmp_path / "naive.html"
    path.write_text(f"<!DOCTYPE html><html><body><p>{HOSTILE[0].text}</p></body></html>")
    browser.open(path.as_uri())
    browser.wait_for("typeof window.__pwned !== 'undefined'")
    assert browser.eval("window.__pwned") in ("script", "img")
    assert browser.eval("document.querySelectorAll('img, a').length") == 2
    assert len(browser.requests()) > 1 and browser.eval("document.body.innerText").count("<script>") == 0


# --- bench plan pages ---------------------------------------------------------------------------


def test_bench_writes_one_plan_page_and_answers_md_links_each_planned_run(browser, tmp_path):
    from nlqo.eval.datasets import QuestionSet
    from nlqo.eval.report import write_report
    from nlqo.eval.runner import Bench
    from nlqo.eval.strategy import build_strategy

    rows = [
        {
            "id": "a",
            "question": "Who was born first, Ada Lovelace or Charles Babbage?",
            "answers": ["Charles Babbage"],
            "supporting_titles": [],
        },
        {
            "id": "b",
            "question": f"Was Ada Lovelace {SCRIPT} born before Charles Babbage?",
            "answers": ["no"],
            "supporting_titles": [],
        },
    ]
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ir = 'q1 = ("Ada Lovelace", "born on", ?d1)\nq2 = ("Charles Babbage", "born on", ?d2)\nq3 = (?first, "born before", ?d1)\nanswer ?first'
    inner = tree_llm()
    llm = PacedLLM(ScriptedLLM([("nlqo IR|atomic queries", ir)], default=inner.inner.default))
    index = tmp_path / "index"
    build_index(HOSTILE, index, HashEmbedder())
    retriever = open_retriever(index, "dense", embedder=HashEmbedder())
    strategies = {
        n: build_strategy(n, llm, retriever, embedder=HashEmbedder(), k=len(HOSTILE)) for n in ("standard-rag", "tree")
    }
    out = tmp_path / "run"
    Bench(QuestionSet.load(questions), strategies, out, meta={"model": "scripted", "k": 2}, progress=False).run()

    answers = (out / "answers.md").read_text()
    assert answers.count("[plan](plans.html#plan=") == 2  # tree on both questions; the baseline has no plan
    assert "[plan](plans.html#plan=2-tree)" in answers
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert all(("prompt" not in s) for r in records for s in r["trace"])  # records stay lean
    assert all(r["plan"] is None for r in records if r["strategy"] == "standard-rag")
    plans = page_data((out / "plans.html").read_text())
    assert [p["id"] for p in plans] == ["1-tree", "2-tree"]
    docs = tmp_path / "docs" / "benchmarks.md"
    write_report([out], docs)
    assert (
        "[plans.html](../../../run/plans.html)"
        in (tmp_path / "docs" / "benchmarks" / tmp_path.name / "run.md").read_text()
    )

    path = out / "plans.html"
    load(browser, path, "#plan=2-tree")
    assert (
        browser.eval("document.getElementById('question').textContent")
        == f"Was Ada Lovelace {SCRIPT} born before Charles Babbage?"
    )
    assert browser.eval("document.getElementById('picker').options.length") == 2
    assert set(nodes_in_dom(browser)) == {n["id"] for n in plans[1]["explain"]["nodes"]} >= {"$root", "q1"}
    detail = click_node(browser, "q1")
    assert "prompt not recorded" in detail["text"] and "Evil <script>" in detail["text"]  # passage titles, as text
    assert browser.eval("location.hash") == "#plan=2-tree&node=q1"
    browser.eval(
        "(() => { const p = document.getElementById('picker'); p.value = '1-tree'; p.dispatchEvent(new Event('change')); })()"
    )
    assert browser.wait_for("document.getElementById('question').textContent.startsWith('Who was born first')")
    assert browser.eval("typeof window.__pwned") == "undefined" and browser.errors() == []


def test_a_run_without_plans_has_no_plan_page(tmp_path):
    from nlqo.eval import plan_pages

    record = {"qid": "a", "index": 0, "strategy": "auto", "question": "Q?", "answer": "x", "answers": ["y"], "em": 0.0, "seconds": 1.0,
              "plan": {"question": "Q?", "root": "$root", "nodes": [{"id": "$root", "triple": None, "children": []}]}, "trace": []}  # fmt: skip
    assert plan_pages.write(tmp_path, [record]) == {("a", "auto"): "plans.html#plan=1-auto"}
    assert page_data((tmp_path / "plans.html").read_text())[0]["explain"]["analyze"]["answer"] == "x"
    assert plan_pages.write(tmp_path, [{**record, "plan": None}]) == {} and not (tmp_path / "plans.html").exists()


def test_the_page_shows_autos_choice_with_every_candidate(browser, tmp_path, monkeypatch):
    _, data = explain_page(tmp_path, monkeypatch, tree_llm(), analyze=False)
    data["physical"]["choice"] = {
        "operator": "retrieve",
        "policy": "balanced",
        "question_class": "other",
        "statistics": "statistics.json (nlqo analyze on 50 questions)",
        "reason": "fastest (est. 8.6 s) whose EM lies within the best one's interval",
        "skipped": "no parse: retrieve needs no plan",
        "candidates": [
            {
                "operator": "retrieve",
                "em": 0.32,
                "em_low": 0.21,
                "em_high": 0.46,
                "n": 50,
                "seconds": 8.6,
                "basis": "all",
            },
            {"operator": "tree", "em": 0.4, "em_low": 0.27, "em_high": 0.54, "n": 50, "seconds": 38.5, "basis": "all"},
        ],
        "actual_seconds": 9.1,
        "q_error": 1.058,
    }
    page = html.write(tmp_path / "choice.html", [html.entry(data)])
    load(browser, page)
    text = browser.eval("document.getElementById('choice').innerText")
    assert "policy balanced, question class other; statistics: statistics.json" in text
    assert "retrieve\t32.0% [21.0%, 46.0%]\t50 (all)\t8.6\tchosen" in text
    assert "tree\t40.0% [27.0%, 54.0%]\t50 (all)\t38.5" in text
    assert "chosen: fastest (est. 8.6 s)" in text and "skipped: no parse" in text and "q-error 1.058" in text
    assert browser.eval("document.querySelectorAll('#choice tr.chosen').length") == 1
    assert browser.errors() == []


def test_the_page_shows_the_cascades_decisions_and_the_plan_its_escalation_ran(browser, tmp_path):
    from test_cascade import IR, QUESTION, RAG, calibration, engine, in_turn

    llm = ScriptedLLM([("nlqo IR", IR), (RAG, "Cincinnati")], default="Cincinnati", confidence=in_turn(-3.0, -0.1))
    e = engine(llm, calibration("linear"))
    result = e.ask(QUESTION, strategy="cascade")
    page = tmp_path / "cascade.html"
    page.write_text(formats.render(formats.PhysicalView.of(e.optimizer, result.physical, result), "html"))
    load(browser, page)
    text = browser.eval("document.getElementById('cascade').innerText")
    assert "retrieve's answer: answer.mean_logprob -3.00 < threshold -1.00" in text and "escalate to linear" in text
    assert "keep linear's" in text
    cost = render._fmt(result.escalation.logical.cost.total)
    assert f"escalation's plan: the question parsed and planned, run by linear (cost {cost})" in text
    rows = browser.eval("Array.from(document.querySelectorAll('#cascade li[data-node]')).map(li => li.dataset.node)")
    assert rows == [n for n, _ in result.escalation.logical.tree.preorder()] and {"q1", "q2"} <= set(rows)
    assert "q1: ?d directed Jaws (LinearTemplate hop" in text and "LLM 2" in text
    assert browser.errors() == []
