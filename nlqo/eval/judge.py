"""LLM-judge accuracy: a second model says whether a prediction means the same as a gold answer."""

from __future__ import annotations

from typing import Sequence

import attrs

from nlqo.config import default
from nlqo.eval.metrics import yes_no
from nlqo.runtime.llm.base import LLM
from nlqo.runtime.llm.constrain import can_constrain, choice, constrained_chat
from nlqo.runtime.prompts import Prompt
from nlqo.runtime.prompts.baselines import JUDGE


_VERDICT = choice(("yes", "no"), name="judge")


@attrs.define(eq=False)
class LLMJudge:
    """Grades predictions with ``llm`` (any backend: a bigger local model, a server, a scripted double).

    >>> from nlqo.runtime.llm.scripted import ScriptedLLM
    >>> judge = LLMJudge(ScriptedLLM([("Predicted answer: Toronto", "No."), ("Predicted answer", "Yes")]))
    >>> judge.grade("Where?", ["Montreal, Quebec"], "Montreal"), judge.grade("Where?", ["Montreal"], "Toronto")
    (True, False)
    >>> judge.grade("Where?", ["Montreal"], "  ")
    False
    """

    llm: LLM
    prompt: Prompt = JUDGE
    constrained: bool = default("constrained")
    """Constrain the verdict to yes or no where the LLM can (the reply is then one word)."""

    @property
    def name(self) -> str:
        return getattr(self.llm, "model", None) or self.llm.name

    def grade(self, question: str, golds: Sequence[str], prediction: str) -> bool:
        """Whether the judge accepts ``prediction``; an empty prediction is wrong without asking."""
        if not prediction.strip():
            return False
        messages = self.prompt.messages(question=question, gold=" | ".join(golds), prediction=prediction.strip())
        constraint = _VERDICT if self.constrained and can_constrain(self.llm) else None
        reply = constrained_chat(
            self.llm, messages, constraint, stop=self.prompt.stop, max_tokens=self.prompt.max_tokens, prefix_cache=False
        )
        return yes_no(reply.text) == "yes"
