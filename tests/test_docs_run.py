"""Docs that run (issue 52): every shell command block of README.md and docs/*.md runs, on the demo index
and the 135M model, and what a block shows is what it prints (tests/docs_run.py says how blocks are found,
marked, run and compared). The code blocks of docs/testing.md and docs/cost-models.md run in
tests/test_docs.py; here their shell commands do (docs/cost-models.md's step 2 plans with the
``waves.cost`` its step 1 writes), as do docs/serving.md's replicas behind nginx.

A failure names the block, the command and the difference, and prints the real transcript of the page in
the page's form: paste the parts that are right into the page. ``NLQO_DOCS_TRANSCRIPTS=DIR`` also writes
each page's transcript to DIR.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from docs_run import PAGES, ROOT, TEST_MODEL, all_blocks, blocks, requirements, run_page
from realmodels import load_or_skip, unavailable

RUN_PAGES = [page for page in PAGES if any(b.runs for b in blocks(page))]


def test_every_command_block_is_run_or_marked_with_a_reason():
    """The listing (pytest -s shows it): every command block, run or not and why. A marker's reason is
    required, and a marker stands only before a command block."""
    listing = []
    for block in all_blocks():
        if block.marker and not block.is_shell:
            pytest.fail(f"{block.where}: a {block.marker[0]} marker before a block that is not a shell command")
        if block.marker:
            assert block.marker[1].strip(), f"{block.where}: the {block.marker[0]} marker gives no reason"
        if block.is_shell:
            shows = any(c.shown for c in block.commands())
            kind = block.marker[0] if block.marker else "run, output compared" if shows else "run"
            reason = f": {block.marker[1]}" if block.marker else ""
            listing.append(f"{block.where:28} {kind}{reason}")
    print("\n".join(listing))
    assert len(listing) >= 25


def test_the_pages_named_in_issue_52_are_run():
    """docs/serving.md's replica transcripts run and are compared; docs/cost-models.md's walkthrough runs
    its step-2 commands on the file its step 1 writes; the README's demo command runs."""
    serving = [b for b in blocks(ROOT / "docs" / "serving.md") if "serve-replicas.sh" in b.body and b.compares]
    assert len(serving) == 2 and all(b.commands()[0].shown for b in serving)
    assert all(len(b.commands()) == 7 for b in serving)
    cost = blocks(ROOT / "docs" / "cost-models.md")
    assert any(b.writes == "~/my-nlqo/cost_models/waves.cost" for b in cost)
    assert any(b.runs and "--cost-model waves" in b.body for b in cost)
    readme = blocks(ROOT / "README.md")
    assert any(b.runs and b.body.startswith('nlqo ask "In which city') for b in readme)


STALE = """\
```
$ nlqo plan bad.nlqo
nlqo: error: bad.nlqo:1:15: a message nlqo does not print
```

```
nlqo plan missing.nlqo
```

<!-- not-run: a reason -->
```
nlqo plan missing.nlqo
```

```
$ nlqo plan examples/older.nlqo --cost-model structural --verbose
QUERY PLAN (cost model: structural; lower cost is better)
...
Planning: dp, 0 LLM calls, 0 cache hits, 2 pruned pairs, 99.9 ms
...
```
"""


def test_a_stale_output_and_a_failing_command_fail_the_page(tmp_path):
    """The checker itself, on a page of nlqo plan commands (no model): a shown output the command does not
    print and a command that fails are reported; a not-run block is not run; a timing and ``...`` match."""
    page = tmp_path / "page.md"
    page.write_text(STALE, encoding="utf-8")
    (tmp_path / "index").mkdir()
    (tmp_path / "work").mkdir()
    result = run_page(page, tmp_path / "work", tmp_path / "index")
    assert [r.command.text for r in result.runs] == [
        "nlqo plan bad.nlqo",
        "nlqo plan missing.nlqo",
        "nlqo plan examples/older.nlqo --cost-model structural --verbose",
    ]
    first, second = result.problems
    assert "page.md:1, line 2: $ nlqo plan bad.nlqo: the output differs" in first
    assert "-nlqo: error: bad.nlqo:1:15: a message nlqo does not print" in first
    assert "+nlqo: error: bad.nlqo:1:15: missing comma between the terms of a triple" in first
    assert "page.md:6, line 7: $ nlqo plan missing.nlqo: exit 2, the page implies 0" in second


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory) -> Path:
    """The index `make demo` builds (the Makefile's command), once for every page."""
    from nlqo.runtime.models.gguf import find_gguf

    load_or_skip(lambda: find_gguf(TEST_MODEL, progress=False))
    out = tmp_path_factory.mktemp("docs-run") / "demo-index"
    nlqo = Path(sys.executable).with_name("nlqo")
    subprocess.run(
        [str(nlqo), "index", "examples/demo_corpus.jsonl", "--out", str(out), "--quiet"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return out


@pytest.mark.real_model
@pytest.mark.parametrize(
    "page",
    [
        pytest.param(p, id=str(p.relative_to(ROOT)), marks=[pytest.mark.server] if p.name == "serving.md" else [])
        for p in RUN_PAGES
    ],
)
def test_the_commands_of_the_page_run_and_print_what_it_shows(page, demo_index, tmp_path):
    missing = requirements(page)
    if missing:
        unavailable(f"{page.relative_to(ROOT)}'s commands need {', '.join(missing)}")
    result = run_page(page, tmp_path, demo_index)
    folder = os.environ.get("NLQO_DOCS_TRANSCRIPTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / page.name).with_suffix(".transcript.md").write_text(result.transcript, encoding="utf-8")
    seconds = ", ".join(f"{r.seconds:.0f} s" for r in result.runs)
    print(f"{page.relative_to(ROOT)}: {len(result.runs)} commands ({seconds})")
    assert not result.problems, (
        "\n\n".join(result.problems)
        + f"\n\nThe real transcript of {page.relative_to(ROOT)} (paste what is right into the page):\n\n"
        + result.transcript
    )
