"""Golden fixtures for the rewrite rules: one fixture file per rule, `# title:` cases with
`# expect:` output and `# warning:` lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from nlqo.rewrite import Program, load_rule, load_rules, rewrite
from nlqo.syntax import parse, render

FIXTURES = Path(__file__).parent / "fixtures" / "rules"


def cases(rule: str):
    text = (FIXTURES / f"{rule}.nlqo").read_text()
    for block in text.split("# title: ")[1:]:
        title, _, body = block.partition("\n")
        given, _, expected = body.partition("# expect:\n")
        warnings = tuple(line[len("# warning: ") :] for line in expected.splitlines() if line.startswith("# warning: "))
        expected = "\n".join(line for line in expected.splitlines() if not line.startswith("#")) + "\n"
        yield pytest.param(given, expected, warnings, id=f"{rule}: {title}")


def check_file(rule: str):
    fn = load_rule(rule)
    for case in cases(rule):
        given, expected, warnings = case.values
        out = fn(Program(parse(given)))
        assert render(out.query) == expected, case.id
        assert out.warnings == warnings, case.id
        assert parse(render(out.query)) == out.query


@pytest.mark.parametrize("rule", [p.stem for p in sorted(FIXTURES.glob("*.nlqo"))])
def test_rule_fixtures(rule):
    check_file(rule)


def test_every_default_rule_has_a_fixture():
    assert {name for name, _ in load_rules()} == {p.stem for p in FIXTURES.glob("*.nlqo")}


def test_rules_are_pure():
    q = parse('q1 = (?A, "p", "x")\nq2 = (?a, "p", "x")\nq3 = (?z, "r", "y")\nanswer ?a')
    before = render(q)
    first = rewrite(q)
    assert render(q) == before
    assert rewrite(q) == first
    assert [a.id for a in first.query.atoms] == ["q1"]
    assert len(first.warnings) == 2


def test_unknown_rule_in_a_rule_list_names_file_and_line(tmp_path):
    from nlqo.errors import ConfigError

    (tmp_path / "mine.rules").write_text("normalize_variables\n\nno_such_rule\n")
    with pytest.raises(ConfigError, match=r"mine.rules:3: unknown rewrite rule 'no_such_rule'"):
        load_rules("mine", path=[tmp_path])
