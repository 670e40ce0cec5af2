"""Prompts of execution: the TSSS linear template and the PlanRAG tree-node prompts.

The linear template is plain text that the model continues. Its scaffold is never generated: the
executor appends each fixed segment and generates only the sub-question, the evidence sentence,
and the final answer.
"""

from __future__ import annotations

import attrs

from nlqo.config import default
from nlqo.runtime.prompts.base import Prompt


@attrs.frozen
class LinearTemplate:
    """The fixed reasoning scaffold of the linear (TSSS) operator.

    Every segment starts on a new line; the executor adds the line break after generated text.
    """

    prefix: str
    """Instruction and few-shot demonstrations; identical for every question, so prefilled once."""
    main: str = "Main Question: {question}\n"
    propose: str = (
        "To answer the Main Question ({question}), {facts}I propose the following additional question:\nQuestion:"
    )
    facts: str = "using the following facts:\n{lines}\n"
    hint: str = "(Plan step {step}: {atom})\n"
    contexts: str = "Contexts:\n{passages}\nBased on the contexts,"
    final: str = "So the answer to the Main Question ({question}) is:"
    passage: str = "[{n}] {title}: {text}"
    passage_words: int = 80
    """Passages are cut to this many words in the prompt."""
    question_first: bool = default("question_first")
    """The first hop retrieves with the Main Question itself and states its fact before any
    sub-question is proposed (the demonstrations must show the same)."""

    @property
    def scaffold(self) -> str:
        """The prefix without its closing line breaks: the part computed once and reused.

        The line breaks go with the first segment (:meth:`opening`) so that the token boundary
        between the two is the one the whole text has: tokenizers merge "\\n\\n" at the end of a
        text into one token but split it before a word.

        >>> t = LinearTemplate(prefix="Intro.\\n\\n")
        >>> t.scaffold, t.opening("Q?")
        ('Intro.', '\\n\\nMain Question: Q?\\n')
        >>> t.scaffold + t.opening("Q?") == t.prefix + t.main.format(question="Q?")
        True
        """
        return self.prefix.rstrip("\n")

    def opening(self, question: str) -> str:
        """The line breaks that close the prefix, then the main question."""
        return self.prefix[len(self.scaffold) :] + self.main.format(question=question)

    def facts_clause(self, facts: list[str]) -> str:
        if not facts:
            return ""
        return self.facts.format(lines="\n".join(f"- {f}" for f in facts))

    def render_passages(self, passages) -> str:
        lines = []
        for n, p in enumerate(passages, 1):
            words = p.text.split()
            text = " ".join(words[: self.passage_words]) + (" ..." if len(words) > self.passage_words else "")
            lines.append(self.passage.format(n=n, title=p.title, text=text))
        return "\n".join(lines)


_DEMO_Q = "In which city was the director of the film Jaws born?"
_DEMO = f"""Main Question: {_DEMO_Q}
To answer the Main Question ({_DEMO_Q}), I propose the following additional question:
Question: Who directed the film Jaws?
Contexts:
[1] Jaws (film): Jaws is a 1975 American thriller film directed by Steven Spielberg and based on the 1974 novel by Peter Benchley.
[2] Jaws 2: Jaws 2 is a 1978 American thriller film directed by Jeannot Szwarc.
Based on the contexts, the film Jaws was directed by Steven Spielberg.
To answer the Main Question ({_DEMO_Q}), using the following facts:
- the film Jaws was directed by Steven Spielberg.
I propose the following additional question:
Question: In which city was Steven Spielberg born?
Contexts:
[1] Steven Spielberg: Steven Allan Spielberg (born December 18, 1946) is an American filmmaker. He was born in Cincinnati, Ohio.
[2] Spielberg (film): Spielberg is a 2017 documentary about Steven Spielberg.
Based on the contexts, Steven Spielberg was born in Cincinnati.
To answer the Main Question ({_DEMO_Q}), using the following facts:
- the film Jaws was directed by Steven Spielberg.
- Steven Spielberg was born in Cincinnati.
I propose the following additional question:
Question: {_DEMO_Q}
So the answer to the Main Question ({_DEMO_Q}) is: Cincinnati

"""

_COMPARE_Q = "Which film came out first, Jaws or Alien?"
_COMPARE = f"""Main Question: {_COMPARE_Q}
To answer the Main Question ({_COMPARE_Q}), I propose the following additional question:
Question: When was the film Jaws released?
Contexts:
[1] Jaws (film): Jaws is a 1975 American thriller film directed by Steven Spielberg.
[2] Jaws (novel): Jaws is a 1974 novel by Peter Benchley.
Based on the contexts, the film Jaws was released in 1975.
To answer the Main Question ({_COMPARE_Q}), using the following facts:
- the film Jaws was released in 1975.
I propose the following additional question:
Question: When was the film Alien released?
Contexts:
[1] Alien (film): Alien is a 1979 science fiction horror film directed by Ridley Scott.
[2] Aliens (film): Aliens is a 1986 science fiction action film directed by James Cameron.
Based on the contexts, the film Alien was released in 1979.
To answer the Main Question ({_COMPARE_Q}), using the following facts:
- the film Jaws was released in 1975.
- the film Alien was released in 1979.
I propose the following additional question:
Question: {_COMPARE_Q}
So the answer to the Main Question ({_COMPARE_Q}) is: Jaws

"""

DEMO_ANSWERS = ("Cincinnati", "Jaws", "Steven Spielberg", "1975", "1979")
"""Answers the demonstrations of this module give (final and intermediate): a prediction equal to
one that no retrieved passage supports was copied from a demonstration (``nlqo.eval.leaks``)."""


def _question_first(demo: str, first_proposal: str) -> str:
    """A demonstration with its first proposal taken out, so that the Main Question's own contexts
    come first (as :data:`LINEAR_QUESTION_FIRST` runs)."""
    question = demo.split("\n", 1)[0].removeprefix("Main Question: ")
    proposal = f"To answer the Main Question ({question}), I propose the following additional question:\nQuestion: {first_proposal}\n"
    assert proposal in demo
    return demo.replace(proposal, "", 1)


_DEMO_FIRST = _question_first(_DEMO, "Who directed the film Jaws?")
_COMPARE_FIRST = _question_first(_COMPARE, "When was the film Jaws released?")

_SHORT_ANSWER = (
    "then give a short answer (a name, date, number, or yes/no), not a sentence. When the Main "
    "Question asks which of several things, the answer is one of them.\n\n"
)

LINEAR = LinearTemplate(
    prefix="Answer the Main Question step by step. At each step propose one additional question that "
    "retrieves a missing fact, read the contexts, and state the fact they give in one sentence. When the "
    "facts are enough, propose the Main Question itself, " + _SHORT_ANSWER + _DEMO + _COMPARE,
)

LINEAR_QUESTION_FIRST = LinearTemplate(
    prefix="Answer the Main Question step by step. First read the contexts found for the Main Question and "
    "state the fact they give in one sentence. Then, at each step, propose one additional question that "
    "retrieves a missing fact, read the contexts, and state the fact they give in one sentence. When the "
    "facts are enough, propose the Main Question itself, " + _SHORT_ANSWER + _DEMO_FIRST + _COMPARE_FIRST,
    question_first=True,
)
"""The linear template whose first hop retrieves with the Main Question (``EngineConfig.question_first``)."""

REWRITE = Prompt(
    name="tree-rewrite",
    instruction="Rewrite a fact to look up as one short, self-contained question. Replace every "
    "?variable whose value is given in the known answers by that value. Write only the question.",
    template="Main question: {question}\nKnown answers:\n{known}\nFact to look up: {atom}\nQuestion:",
    examples=(
        (
            "Main question: In which city was the director of Jaws born?\nKnown answers:\n(none)\n"
            "Fact to look up: ?director directed Jaws\nQuestion:",
            "Who directed the film Jaws?",
        ),
        (
            "Main question: In which city was the director of Jaws born?\nKnown answers:\n"
            "- Who directed the film Jaws? Steven Spielberg\nFact to look up: ?director born in ?city\nQuestion:",
            "In which city was Steven Spielberg born?",
        ),
    ),
    stop=("\n",),
    max_tokens=40,
)

ANSWER = Prompt(
    name="tree-answer",
    instruction="Answer the question from the contexts and the known answers. Reply with a short "
    "answer only (a name, date, number, or yes/no), not a sentence. When the question asks which of "
    "several things, the answer is one of them.",
    template="Contexts:\n{passages}\n{known}Question: {question}\nAnswer:",
    examples=(
        (
            "Contexts:\n[1] Jaws (film): Jaws is a 1975 American thriller film directed by Steven Spielberg.\n"
            "Question: Who directed the film Jaws?\nAnswer:",
            "Steven Spielberg",
        ),
    ),
    stop=("\n",),
    max_tokens=24,
)

KNOWN = "Known answers:\n{lines}\n"
