"""Every relative link in README.md and docs/ points at a file that exists (links inside code
spans are examples, not links)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`[^`]*`")


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    links = LINK.findall(CODE.sub("", text))
    return [link.split("#", 1)[0] for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]


def test_the_link_finder_sees_links_and_skips_code():
    page = ROOT / "docs" / "benchmarks.md"
    assert "experiments/README.md" in relative_links(page)
    assert relative_links(ROOT / "docs" / "explain.md").count("plans.html") == 0  # only in a code span


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = [link for link in relative_links(page) if link and not (page.parent / link).exists()]
    assert broken == [], f"{page.relative_to(ROOT)} links to missing files: {broken}"
