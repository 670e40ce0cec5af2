import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from nlqo.errors import ParseFailure
from nlqo.ir import Var
from nlqo.runtime.llm import ScriptedLLM
from nlqo.parser.parse import parse_question

GOOD = 'q1 = (?Director, "directed", "Jaws")\nq2 = (?director, "born in", ?city)\nq3 = (?director, "directed", "Jaws")\nanswer ?city'


def test_valid_output_is_parsed_normalised_and_deduplicated():
    llm = ScriptedLLM([("Question:", "Here you go:\n```\n" + GOOD + "\n```")])
    result = parse_question("Where was the director of Jaws born?", llm)
    q = result.query
    assert q.question == "Where was the director of Jaws born?"
    assert [a.id for a in q.atoms] == ["q1", "q2"]
    assert q.atoms[0].subject == Var("director")
    assert q.answer == (Var("city"),)
    assert result.attempts == 1
    assert result.warnings == ("merged into q1 (the same triple): q3 (?director directed Jaws)",)
    assert result.usage.calls == 1


def test_invalid_output_is_repaired_with_the_error_in_the_prompt():
    llm = ScriptedLLM([("not valid IR", GOOD), ("Question:", 'q1 = (?director "directed", "Jaws")\nanswer ?director')])
    result = parse_question("Where was the director of Jaws born?", llm)
    assert result.attempts == 2
    assert "missing comma between the terms of a triple" in llm.calls[1]
    assert 'q1 = (?director "directed", "Jaws")' in llm.calls[1]
    assert result.usage.calls == 2


def test_gives_up_after_the_repair_budget_and_shows_every_attempt():
    replies = iter(["I cannot do that.", "Still no.", "No IR here."])
    llm = ScriptedLLM([], default=lambda prompt: next(replies))
    with pytest.raises(ParseFailure) as info:
        parse_question("Who?", llm, repairs=2)
    assert len(llm.calls) == 3
    err = info.value
    assert err.attempts == ("I cannot do that.", "Still no.", "No IR here.")
    assert "empty IR" in err.errors[0]
    assert "No IR here." in str(err) and "attempt 3" in str(err) and "in 3 attempts" in str(err)


def test_a_repair_that_repeats_the_reply_stops_the_repairs():
    """The same reply and error make the same repair prompt: a greedy model would repeat itself."""
    bad = 'q1 = (?d, "died", "Payment On Demand")\nanswer Payment On Demand'
    llm = ScriptedLLM([("", bad)])
    with pytest.raises(ParseFailure, match="in 2 attempts \\(it repeated itself") as info:
        parse_question("Which film has the director died earlier, Payment On Demand or X?", llm, repairs=2)
    assert len(llm.calls) == 2 and info.value.attempts == (bad, bad)


LOOPING = (
    'q1 = (?g, "had", "Bastarz")\n'
    + "".join(f'q{i} = (?g, "had", "members")\n' for i in range(2, 15))
    + 'q15 = (?g, "ha'
)
"""A reply of a model caught in a loop: one triple over and over until the token budget cut it."""


def test_cleanup_parses_a_looping_reply_from_its_useful_part():
    looped = LOOPING.replace('q15 = (?g, "ha', 'answer ?g\nq15 = (?g, "ha')
    strict = ScriptedLLM([("", looped)])
    with pytest.raises(ParseFailure):
        parse_question("How many members has the group of Bastarz?", strict, repairs=0)
    llm = ScriptedLLM([("", looped)])
    result = parse_question("How many members has the group of Bastarz?", llm, repairs=0, cleanup=True)
    assert result.attempts == 1
    assert [a.text() for a in result.query.atoms] == ["?g had Bastarz", "?g had members"]


def looping_then_fixed() -> ScriptedLLM:
    replies = iter([LOOPING, 'q1 = (?g, "had", "Bastarz")\nanswer ?g'])
    return ScriptedLLM([], default=lambda prompt: next(replies))


def test_cleanup_sends_the_repair_only_the_useful_part():
    llm = looping_then_fixed()
    result = parse_question("How many members has the group of Bastarz?", llm, cleanup=True)
    assert result.attempts == 2
    repair = llm.calls[1]
    assert "no answer statement" in repair
    assert repair.count('"members"') == 1 and 'q15 = (?g, "ha' not in repair


def test_without_cleanup_the_repair_sees_the_whole_loop():
    llm = looping_then_fixed()
    parse_question("How many members has the group of Bastarz?", llm)
    assert llm.calls[1].count('"members"') == 13 and "unterminated" in llm.calls[1]


def test_recorded_failure_text_gives_back_the_replies():
    err = ParseFailure(
        "no IR", attempts=("q1 = (?a\n  ^", "Still no."), errors=("<llm>:1:8: bad\n  q1\n  ^", "no atoms")
    )
    assert ParseFailure.replies_in(str(err)) == ("q1 = (?a\n  ^", "Still no.")


@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",))), min_size=1, max_size=3))
def test_replies_in_inverts_the_failure_message(replies):
    assume(all("\n>>> " not in r and "--- attempt" not in r for r in replies))
    err = ParseFailure("no IR", attempts=tuple(replies), errors=tuple("e" for _ in replies))
    assert ParseFailure.replies_in(str(err)) == tuple(replies)


LOOSE = 'q1 = ("Jaws", "released in", ?year1)\nq2 = (?film, "released in", ?year2)\nanswer ?year1, ?year2'
ANCHORED = 'q1 = ("Jaws", "released in", ?year1)\nq2 = ("Alien", "released in", ?year2)\nanswer ?year1, ?year2'
COMPARE = "Which film came out first, Jaws or Alien?"


def test_an_atom_linked_to_no_entity_is_sent_back_once_with_its_text():
    llm = ScriptedLLM([("no entity of the question", ANCHORED), ("Question:", LOOSE)])
    result = parse_question(COMPARE, llm, anchor_repairs=1)
    assert result.attempts == 2 and result.warnings == ()
    assert [a.subject for a in result.query.atoms][1].text == "Alien"
    assert "q2 = ?film released in ?year2: this atom names no entity of the question" in llm.calls[1]


def test_loose_ir_is_kept_with_a_warning_when_the_repair_does_not_anchor_it():
    still_loose = LOOSE.replace("?film", "?movie")
    llm = ScriptedLLM([("no entity of the question", still_loose), ("Question:", LOOSE)])
    result = parse_question(COMPARE, llm, repairs=2, anchor_repairs=1)
    assert len(llm.calls) == 2  # one anchor repair, not the syntax repairs' budget
    assert result.attempts == 2
    assert [str(a.subject) for a in result.query.atoms] == ['"Jaws"', "?film"]  # the first loose IR
    assert result.warnings[0].startswith("atoms q2 name no entity of the question")


def test_a_repair_that_breaks_the_ir_keeps_the_loose_ir():
    llm = ScriptedLLM([("no entity of the question", "I cannot."), ("Question:", LOOSE)])
    result = parse_question(COMPARE, llm, anchor_repairs=1)
    assert len(llm.calls) == 2 and str(result.query.atoms[1].subject) == "?film"


def test_by_default_loose_ir_is_kept_at_once_with_a_warning():
    llm = ScriptedLLM([("Question:", LOOSE)])
    result = parse_question(COMPARE, llm)
    assert len(llm.calls) == 1 and result.attempts == 1
    assert result.warnings == ("atoms q2 name no entity of the question, nor share a variable with an atom that does",)


@given(
    st.lists(
        st.tuples(st.sampled_from(["?a", "?b", "?c", '"Jaws"']), st.sampled_from(["?a", "?b", "?c", '"Alien"'])),
        min_size=1,
        max_size=4,
    )
)
def test_unanchored_atoms_are_exactly_those_with_no_path_to_a_constant(pairs):
    from nlqo.parser.parse import unanchored
    from nlqo.ir.syntax import parse

    text = "\n".join(f'q{i} = ({s}, "p{i}", {o})' for i, (s, o) in enumerate(pairs, 1))
    variables = [t for pair in pairs for t in pair if t.startswith("?")]
    query = parse(text + "\nanswer " + (variables[0] if variables else "q1"))
    loose = set(unanchored(query))
    # independently: union-find over atoms sharing a variable; loose = components without a constant
    parent = list(range(len(pairs)))

    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for i, a in enumerate(pairs):
        for j, b in enumerate(pairs):
            if {t for t in a if t.startswith("?")} & {t for t in b if t.startswith("?")}:
                parent[root(i)] = root(j)
    anchored_roots = {root(i) for i, (s, o) in enumerate(pairs) if not (s.startswith("?") and o.startswith("?"))}
    assert loose == {f"q{i + 1}" for i in range(len(pairs)) if root(i) not in anchored_roots}


def test_explain_shows_the_warning_of_a_loose_atom():
    from nlqo.config import EngineConfig
    from nlqo.main.engine import Engine
    from nlqo.explain.render import text as explain
    from nlqo.testing import PASSAGES, HashEmbedder, KeywordRetriever

    llm = ScriptedLLM([("nlqo IR", LOOSE)], default=lambda prompt: "none")
    config = EngineConfig(cost_model="structural", strategy="tree", measure_costs=False)
    engine = Engine.from_config(config, llm=llm, retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder())
    plan = engine.plan(COMPARE).plan
    assert "Warning: atoms q2 name no entity of the question, nor share a variable with an atom that does" in explain(
        plan
    )
