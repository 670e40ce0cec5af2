"""Golden fixtures for the rewrite rules: one fixture file per rule, `# title:` cases with
`# expect:` output and `# warning:` lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from nlqo.rewrite import load_rule, load_rules, rewrite
from nlqo.syntax import parse, render
from nlqo.testing import check_rule_file, rule_cases

FIXTURES = Path(__file__).parent / "fixtures" / "rules"


@pytest.mark.parametrize("rule", [p.stem for p in sorted(FIXTURES.glob("*.nlqo"))])
def test_rule_fixtures(rule):
    assert check_rule_file(FIXTURES / f"{rule}.nlqo", load_rule(rule)) == len(
        list(rule_cases(FIXTURES / f"{rule}.nlqo"))
    )


def test_the_fixture_runner_fails_on_a_wrong_expectation(tmp_path):
    bad = tmp_path / "normalize_variables.nlqo"
    bad.write_text(
        '# title: wrong on purpose\nq1 = (?A, "p", "x")\nanswer ?A\n# expect:\nq1 = (?A, "p", "x")\nanswer ?A\n'
    )
    with pytest.raises(AssertionError, match="wrong on purpose"):
        check_rule_file(bad, load_rule("normalize_variables"))


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
