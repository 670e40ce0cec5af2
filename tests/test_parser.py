import pytest

from nlqo.errors import ParseFailure
from nlqo.ir import Var
from nlqo.llm import ScriptedLLM
from nlqo.parser import parse_question

GOOD = 'q1 = (?Director, "directed", "Jaws")\nq2 = (?director, "born in", ?city)\nq3 = (?director, "directed", "Jaws")\nanswer ?city'


def test_valid_output_is_parsed_normalised_and_deduplicated():
    llm = ScriptedLLM([("Question:", "Here you go:\n```\n" + GOOD + "\n```")])
    result = parse_question("Where was the director of Jaws born?", llm)
    q = result.query
    assert q.question == "Where was the director of Jaws born?"
    assert [a.id for a in q.atoms] == ["q1", "q2"]
    assert q.atoms[0].subject == Var("director")
    assert q.answer == Var("city")
    assert result.attempts == 1
    assert result.warnings == ("merged duplicate atom q3 into q1",)
    assert result.usage.calls == 1


def test_invalid_output_is_repaired_with_the_error_in_the_prompt():
    llm = ScriptedLLM([("not valid IR", GOOD), ("Question:", 'q1 = (?director "directed", "Jaws")\nanswer ?director')])
    result = parse_question("Where was the director of Jaws born?", llm)
    assert result.attempts == 2
    assert "missing comma between the terms of a triple" in llm.calls[1]
    assert 'q1 = (?director "directed", "Jaws")' in llm.calls[1]
    assert result.usage.calls == 2


def test_gives_up_after_the_repair_budget_and_shows_every_attempt():
    llm = ScriptedLLM([("", "I cannot do that.")])
    with pytest.raises(ParseFailure) as info:
        parse_question("Who?", llm, repairs=2)
    assert len(llm.calls) == 3
    err = info.value
    assert len(err.attempts) == 3 and all(a == "I cannot do that." for a in err.attempts)
    assert "no atoms" in err.errors[0]
    assert "I cannot do that." in str(err) and "attempt 3" in str(err)
