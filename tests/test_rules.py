"""Golden fixtures for the rewrite rules: one fixture file per rule, `# title:` cases with
`# expect:` output and `# warning:` lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from nlqo.optimizer.rewrite import load_rule, load_rules, rewrite
from nlqo.ir.syntax import parse, render
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


def test_merge_renames_relations_and_answers_only_where_it_merged():
    from nlqo.optimizer.plan import LeftOut
    from nlqo.optimizer.rewrite import Program
    from nlqo.optimizer.rewrite.merge_duplicate_atoms import merge_duplicate_atoms

    q = parse(
        'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nq3 = (?d, "Born In", ?city)\n'
        'q4 = (?d, "DIRECTED", "jaws")\nq5 = (?city, "in", "Ohio")\n'
        "relation q3 parent q1\nrelation q2 parent q4\nrelation q4 sibling q1\nrelation q5 sibling q2\n"
        "answer q1, q3, q2, ?city"
    )
    p = merge_duplicate_atoms(Program(q))
    assert render(p.query) == (
        'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nq5 = (?city, "in", "Ohio")\n'
        "relation q2 parent q1\nrelation q5 sibling q2\nanswer q1, q2, ?city\n"
    )
    assert p.warnings == (
        "merged into q2 (the same triple): q3 (?d Born In ?city)",
        "merged into q1 (the same triple): q4 (?d DIRECTED jaws)",
    )
    assert p.left_out == (
        LeftOut("q3", "merged into q2 (the same triple)", "?d Born In ?city"),
        LeftOut("q4", "merged into q1 (the same triple)", "?d DIRECTED jaws"),
    )


def test_merge_compares_constants_by_case_only():
    from nlqo.optimizer.rewrite import Program
    from nlqo.optimizer.rewrite.merge_duplicate_atoms import merge_duplicate_atoms

    # "Straße" and "STRASSE" differ in more than case (they only meet in upper case); a constant
    # and a variable of the same name are different terms
    q = parse(
        'q1 = (?x, "on", "Straße")\nq2 = (?x, "on", "STRASSE")\nq3 = (?x, "on", "strasse")\n'
        'q4 = (?x, "is", ?y)\nq5 = (?x, "is", "y")\nanswer ?x'
    )
    p = merge_duplicate_atoms(Program(q))
    assert [a.id for a in p.query.atoms] == ["q1", "q2", "q4", "q5"]
    assert p.warnings == ("merged into q2 (the same triple): q3 (?x on strasse)",)


def test_drop_unreachable_keeps_the_relations_of_the_atoms_it_keeps():
    from nlqo.optimizer.plan import LeftOut
    from nlqo.optimizer.rewrite import Program
    from nlqo.optimizer.rewrite.drop_unreachable import drop_unreachable

    q = parse(
        'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nq3 = (?x, "capital of", "France")\n'
        "relation q2 parent q1\nrelation q3 none q2\nrelation q1 none q3\nanswer ?city"
    )
    p = drop_unreachable(Program(q).warn("earlier"))
    assert render(p.query) == (
        'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nrelation q2 parent q1\nanswer ?city\n'
    )
    reason = "no path to the answer through shared variables or pinned relations"
    assert p.warnings == ("earlier", f"{reason}: q3 (?x capital of France)")
    assert p.left_out == (LeftOut("q3", reason, "?x capital of France"),)


def test_normalize_variables_names():
    from nlqo.ir import Atom, Const, Query, Var
    from nlqo.optimizer.rewrite import Program
    from nlqo.optimizer.rewrite.normalize_variables import normalize_variables

    q = Query(
        (Atom("q1", Var("__"), Const("p"), Var("Été_2")), Atom("q2", Var("A-b"), Const(" a\t b "), Var("x"))),
        answer=(Var("A_B"), "q1", Var("a__b")),
    )
    out = normalize_variables(Program(q)).query
    assert out.atoms == (
        Atom("q1", Var("x"), Const("p"), Var("t_2")),
        Atom("q2", Var("a_b"), Const("a b"), Var("x")),
    )
    assert out.answer == (Var("a_b"), "q1")


def test_rewrite_runs_the_rules_it_is_given_in_order():
    from nlqo.optimizer.rewrite import Program

    q = parse('q1 = (?A, "p", "x")\nq2 = (?a, "p", "x")\nanswer ?a')
    seen = []

    def first(program: Program) -> Program:
        seen.append("first")
        return program.warn("one")

    def second(program: Program) -> Program:
        seen.append("second")
        return program.warn("two")

    out = rewrite(q, [("first", first), ("second", second)])
    assert seen == ["first", "second"] and out.warnings == ("one", "two") and out.query == q
    assert rewrite(q, []) == Program(q)


def test_rule_lists_allow_comments_and_blank_lines(tmp_path):
    (tmp_path / "mine.rules").write_text("# my rules\nnormalize_variables  # first # really\n\n   \ndrop_unreachable\n")
    rules = load_rules("mine", path=[tmp_path])
    assert [name for name, _ in rules] == ["normalize_variables", "drop_unreachable"]
    assert [rule.__name__ for _, rule in rules] == ["normalize_variables", "drop_unreachable"]
    assert load_rules(str(tmp_path / "mine.rules")) == rules


def test_unknown_rule_is_refused_by_name():
    from nlqo.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^unknown rewrite rule 'no_such_rule'$"):
        load_rule("no_such_rule")


def test_a_rule_from_an_installed_package(tmp_path, monkeypatch):
    (tmp_path / "myrules.py").write_text("def shout(program):\n    return program.warn('shout')\n")
    dist = tmp_path / "myrules-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myrules\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[nlqo.rules]\nshout = myrules:shout\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from nlqo.optimizer.rewrite.normalize_variables import normalize_variables

    assert load_rule("shout").__module__ == "myrules"
    assert load_rule("normalize_variables") is normalize_variables
    (tmp_path / "mine.rules").write_text("shout\n")
    q = parse('q1 = (?a, "p", "x")\nanswer ?a')
    assert rewrite(q, load_rules("mine", path=[tmp_path])).warnings == ("shout",)
