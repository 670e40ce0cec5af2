"""A deterministic fake world for differential plan testing (NoREC-style): facts, passages that
state them, and an LLM stand-in that answers each step of a run from the facts alone. In such a
world every valid plan of a question, lowered either way, must give the same answer, and that
answer is the world's truth; :func:`check_differential` checks it across the DP's plan, greedy's,
the plan under each shipped cost model, and both lowerings (the TSSS linear template, stepping
through the plan's atoms, and the PlanRAG tree).

>>> check_differential(MOVIES, "In which country was the director of Jaws born?")
'USA'
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

import attrs

from nlqo.runtime.llm.base import ChatMessage, Completion, Usage
from nlqo.common.passages import Passage
from nlqo.ir.syntax import parse
from nlqo.testing.fakes import HashEmbedder, KeywordRetriever
from nlqo.testing.invariants import InvariantError

Fact = tuple[str, str, str]


@attrs.frozen
class World:
    """Facts (subject, predicate, object), and each question's IR and true answer."""

    facts: tuple[Fact, ...]
    questions: Mapping[str, tuple[str, str]] = attrs.field(factory=dict)
    """Question -> (its IR text, its answer)."""

    @property
    def passages(self) -> list[Passage]:
        return [Passage(id=f"f{i}", title=s, text=f"{s} {p} {o}.") for i, (s, p, o) in enumerate(self.facts)]

    def solve(self, atom_text: str, bindings: Mapping[str, str]) -> tuple[Fact, dict[str, str]] | None:
        """The one fact an atom's text (``?var`` for a variable, bound ones by their values)
        matches, and the variables it binds; None when no fact or several match."""
        found = []
        for fact in self.facts:
            names: dict[str, str] = {}
            pattern = ""
            for i, value in enumerate(fact):
                pattern += (" " if i else "") + rf"(?:{re.escape(value)}|\?(?P<v{i}>\w+))"
            m = re.fullmatch(pattern, atom_text)
            if m is None:
                continue
            for i, value in enumerate(fact):
                if (name := m.group(f"v{i}")) is not None:
                    names[name] = value
            if all(bindings.get(n, v) == v for n, v in names.items()):
                found.append((fact, names))
        return found[0] if len(found) == 1 else None


class WorldLLM:
    """Answers every prompt of a run from the world's facts: the parse prompt with the question's
    IR, relation questions with ``sibling``, a tree node's question by the fact its atom matches,
    the root by its children's agreed answer, and the linear template's steps by solving each
    step's atom with what earlier steps bound."""

    name = "world"

    def __init__(self, world: World):
        self.world = world

    def chat(self, messages: Sequence[ChatMessage], *, stop: Sequence[str] = (), max_tokens: int = 64) -> Completion:
        text = messages[-1].content
        if "\nA: " in text and "Relation of A to B" in text:
            return _reply("sibling")
        if text.startswith("Question: ") and "\n" not in text.strip():
            return _reply(self.world.questions[text.removeprefix("Question: ").strip()][0])
        if "\nAttach: " in text:
            return _reply("yes")
        question = text.rsplit("Question: ", 1)[-1].removesuffix("\nAnswer:").strip()
        if (m := re.fullmatch(r"What is \?(\w+) in: (.*)\?", question)) is not None:
            solved = self.world.solve(m.group(2), {})
            return _reply(solved[1].get(m.group(1), "") if solved else "")
        known = re.findall(r"^- .*\? (.+)$", text, flags=re.M)
        return _reply(known[-1] if known and len(set(known)) == 1 else "")

    def complete(self, prompt: str, *, stop: Sequence[str] = (), max_tokens: int = 64) -> Completion:
        asked = re.findall(r"^Main Question: (.*)$", prompt, flags=re.M)[-1]
        run = prompt.rsplit(f"Main Question: {asked}\n", 1)[-1]
        steps = [q for q in re.findall(r"^Question: (.*)$", run, flags=re.M) if q != asked]
        bindings: dict[str, str] = {}
        for step in steps[:-1] if prompt.endswith("Based on the contexts,") else steps:
            if (solved := self.world.solve(step, bindings)) is not None:
                bindings.update(solved[1])
        if prompt.endswith("Based on the contexts,"):  # state the fact the current step retrieves
            solved = self.world.solve(steps[-1], bindings) if steps else None
            return _reply(" " + " ".join(solved[0]) + "." if solved else " nothing is known.")
        if prompt.endswith("Question:"):  # the plan's steps are done: propose the main question
            return _reply(" " + asked)
        answer = parse(self.world.questions[asked][0]).answer[0]  # the final answer: the answer variable's value
        return _reply(" " + bindings.get(getattr(answer, "name", ""), ""))


def _reply(text: str) -> Completion:
    return Completion(text, Usage(prompt_tokens=1, generated_tokens=1, calls=1))


MOVIES = World(
    facts=(
        ("Steven Spielberg", "directed", "Jaws"),
        ("Ridley Scott", "directed", "Alien"),
        ("Steven Spielberg", "born in", "Cincinnati"),
        ("Ridley Scott", "born in", "South Shields"),
        ("Cincinnati", "lies in", "USA"),
        ("South Shields", "lies in", "England"),
        ("Jaws", "released in", "1975"),
        ("Alien", "released in", "1979"),
    ),
    questions={
        "In which country was the director of Jaws born?": (
            'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?c)\nq3 = (?c, "lies in", ?n)\nanswer ?n',
            "USA",
        ),
        "In which town was the director of Alien born?": (
            'q1 = (?d, "directed", "Alien")\nq2 = (?d, "born in", ?t)\nanswer ?t',
            "South Shields",
        ),
        "Who directed the film released in 1975?": (
            'q1 = (?f, "released in", "1975")\nq2 = (?d, "directed", ?f)\nanswer ?d',
            "Steven Spielberg",
        ),
        "Which film did the man born in Cincinnati direct, released in 1975?": (
            'q1 = (?d, "born in", "Cincinnati")\nq2 = (?d, "directed", ?f)\nq3 = (?f, "released in", "1975")\n'
            "answer ?f",
            "Jaws",
        ),
    },
)
"""A small world of films, directors and places, with chains and a question whose answer two atoms
both hold."""


def check_differential(world: World, question: str) -> str:
    """Run ``question`` in ``world`` under every search and cost model and both lowerings; every run
    must give the world's answer. Returns it."""
    from nlqo.config import EngineConfig
    from nlqo.main.engine import Engine

    truth = world.questions[question][1]
    retriever = KeywordRetriever(world.passages)
    runs = []
    for cost_model in ("structural", "default", "shallow"):
        for budget in (50_000, 0):
            for strategy in ("tree", "linear"):
                config = EngineConfig(
                    cost_model=cost_model, budget=budget, strategy=strategy, plan_steps=True, measure_costs=False,
                    kv_reuse=False, repairs=0, hold_options=False,
                )  # fmt: skip
                engine = Engine.from_config(config, llm=WorldLLM(world), retriever=retriever, embedder=HashEmbedder())
                # plan() forces the operator on the parsed plan (ask() runs a forced template unparsed)
                result = engine.execute(question, engine.plan(question, strategy=strategy), strategy=strategy)
                runs.append((f"{strategy}, {cost_model}, budget {budget}", result.answer))
    wrong = [f"{name}: {answer!r}" for name, answer in runs if answer != truth]
    if wrong:
        raise InvariantError(f"{question!r} is {truth!r} in the world, but " + "; ".join(wrong))
    return truth


__all__ = ["MOVIES", "World", "WorldLLM", "check_differential"]
