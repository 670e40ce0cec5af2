"""Prompts of the baseline strategies and of the LLM judge.

The wording follows FlashRAG (github.com/RUC-NLPIR/FlashRAG): the default ``PromptTemplate`` of
``flashrag/prompt/base_prompt.py`` (no-rag, standard-rag, iter-retgen), ``IRCOTPipeline`` and
``SelfAskPipeline`` in ``flashrag/pipeline/active_pipeline.py`` with the multi-hop self-ask
instruction of ``flashrag/prompt/selfask_examplars.py``. The few-shot demonstrations are our own.

``no-rag``, ``standard-rag`` and ``iter-retgen`` are chat prompts (FlashRAG applies the chat
template for instruction-tuned models); ``ircot`` and ``self-ask`` are raw completions, as
FlashRAG sends them to local generators, so the model continues a scratchpad.
"""

from __future__ import annotations

from typing import Sequence

import attrs

from nlqo.common.passages import Hit
from nlqo.runtime.prompts.base import Prompt


@attrs.frozen
class TextPrompt:
    """A raw-completion prompt: one ``str.format`` template that the model continues.

    >>> TextPrompt("t", "Q: {question}\\nA:").text(question="Why?")
    'Q: Why?\\nA:'
    """

    name: str
    template: str
    stop: tuple[str, ...] = ()
    max_tokens: int = 64

    def text(self, **inputs: str) -> str:
        return self.template.format(**inputs)


@attrs.frozen
class PassageFormat:
    """How retrieved passages are listed in a prompt; ``{n}`` is the 1-based position.

    >>> from nlqo.common.passages import Passage
    >>> hit = Hit(Passage("1", "Paris", "Capital of France."), 1.0, 1)
    >>> DOCS.render([hit])
    'Doc 1(Title: Paris) Capital of France.\\n'
    """

    item: str

    def render(self, hits: Sequence[Hit]) -> str:
        return "".join(self.item.format(n=i, title=h.passage.title, text=h.passage.text) for i, h in enumerate(hits, 1))


DOCS = PassageFormat("Doc {n}(Title: {title}) {text}\n")
"""FlashRAG's default reference format."""

WIKI = PassageFormat("Wikipedia Title: {title}\n{text}\n\n")
"""IRCoT's reference format."""

CONTEXTS = PassageFormat("Context{n}: {title}: {text}\n")
"""Self-ask's reference format (with the title, as in its demonstrations)."""

NO_RAG = Prompt(
    name="no-rag",
    instruction="Answer the question based on your own knowledge. Only give me the answer and do not output any other words.",
    template="Question: {question}",
    max_tokens=32,
)

STANDARD_RAG = Prompt(
    name="standard-rag",
    instruction="Answer the question based on the given documents. Only give me the answer and do not output any other words.",
    template="The following are given documents.\n\n{reference}\nQuestion: {question}",
    max_tokens=32,
)
"""Also the prompt of every iter-retgen round."""

IRCOT_ANSWER_MARK = "So the answer is:"

_IRCOT_INSTRUCTION = (
    "You serve as an intelligent assistant, adept at guiding users through complex, multi-hop reasoning "
    "across multiple documents. The task is shown through a demonstration: a set of documents, a question, "
    "and its multi-hop reasoning thoughts. Your task is to generate one thought for the current step; "
    "DON'T generate the whole thoughts at once! If you reach what you believe to be the final step, "
    f'start with "{IRCOT_ANSWER_MARK}".'
)

_IRCOT_DEMO = (
    "Wikipedia Title: Lake Titicaca\n"
    "Lake Titicaca is a large freshwater lake in the Andes on the border of Bolivia and Peru.\n\n"
    "Wikipedia Title: Puno\n"
    "Puno is a city in southern Peru on the shore of Lake Titicaca. It is the capital of the Puno Region.\n\n"
    "Wikipedia Title: Copacabana, Bolivia\n"
    "Copacabana is the main Bolivian town on the shore of Lake Titicaca, in the La Paz Department.\n\n"
    "Question: Are Puno and Copacabana located in the same country?\n"
    "Thought: Puno is located in Peru. Copacabana is located in Bolivia. Thus, they are not in the "
    f"same country. {IRCOT_ANSWER_MARK} no.\n\n"
)

IRCOT = TextPrompt(
    name="ircot",
    template=_IRCOT_INSTRUCTION + "\n\n" + _IRCOT_DEMO + "{reference}Question: {question}\nThought:{thoughts}",
    stop=(".", "\n"),
    max_tokens=64,
)
"""One thought sentence per call: generation stops at the first period or newline."""

FOLLOW_UP = "Follow up:"
INTERMEDIATE = "Intermediate answer:"
SELF_ASK_ANSWER_MARK = "So the final answer is:"

_SELF_ASK_INSTRUCTION = (
    "Given the following question, answer it by providing follow up questions and intermediate answers. "
    "If intermediate questions are not necessary, answer the question directly. You are provided with "
    "evidence that can help you arrive at the answer before the question."
)

_SELF_ASK_DEMOS = f"""#
Context1: Gustave Eiffel: Alexandre Gustave Eiffel (15 December 1832 - 27 December 1923) was a French civil engineer whose company designed and built the Eiffel Tower.
Question: When did the engineer whose company built the Eiffel Tower die?
Are follow up questions needed here: Yes.
{FOLLOW_UP} Whose company built the Eiffel Tower?
{INTERMEDIATE} The Eiffel Tower was built by the company of Gustave Eiffel.
{FOLLOW_UP} When did Gustave Eiffel die?
{INTERMEDIATE} Gustave Eiffel died on 27 December 1923.
{SELF_ASK_ANSWER_MARK} 27 December 1923
#
Context1: The Old Man and the Sea: The Old Man and the Sea is a 1952 novella by the American writer Ernest Hemingway.
Context2: Moby-Dick: Moby-Dick is an 1851 novel by the American writer Herman Melville.
Question: Which book was published first, The Old Man and the Sea or Moby-Dick?
Are follow up questions needed here: Yes.
{FOLLOW_UP} When was The Old Man and the Sea published?
{INTERMEDIATE} The Old Man and the Sea was published in 1952.
{FOLLOW_UP} When was Moby-Dick published?
{INTERMEDIATE} Moby-Dick was published in 1851.
{SELF_ASK_ANSWER_MARK} Moby-Dick
#
Context1: Frankenstein: Frankenstein; or, The Modern Prometheus is an 1818 novel written by the English author Mary Shelley.
Context2: Mary Shelley: Mary Wollstonecraft Shelley was an English novelist. In 1816 she married the poet Percy Bysshe Shelley.
Question: Who was the husband of the author of Frankenstein?
Are follow up questions needed here: Yes.
{FOLLOW_UP} Who wrote Frankenstein?
{INTERMEDIATE} Frankenstein was written by Mary Shelley.
{FOLLOW_UP} Who was the husband of Mary Shelley?
{INTERMEDIATE} The husband of Mary Shelley was Percy Bysshe Shelley.
{SELF_ASK_ANSWER_MARK} Percy Bysshe Shelley
#"""

DEMO_ANSWERS = (
    "27 December 1923",
    "Moby-Dick",
    "Percy Bysshe Shelley",
    "Gustave Eiffel",
    "Mary Shelley",
    "Peru",
    "Bolivia",
)
"""Answers the demonstrations of this module give (yes/no left out: they answer real questions too)."""

SELF_ASK = TextPrompt(
    name="self-ask",
    template=_SELF_ASK_INSTRUCTION + "\n" + _SELF_ASK_DEMOS + "\n{reference}\nQuestion: {question}\n"
    "Are follow up questions needed here: Yes.\n{scratchpad}",
    stop=("\nContext", "#"),
    max_tokens=64,
)
"""Each call also stops at the marker the scratchpad expects next (see ``nlqo.eval.baselines``)."""

JUDGE = Prompt(
    name="judge",
    instruction="You grade answers to questions. Given a question, its gold answers and a predicted answer, "
    "say whether the predicted answer means the same as one of the gold answers. Reply with yes or no only.",
    template="Question: {question}\nGold answers: {gold}\nPredicted answer: {prediction}\nIs the predicted answer correct?",
    max_tokens=4,
)
"""The LLM judge of ``nlqo.eval.judge`` (an evaluation prompt, kept beside the baselines it grades)."""

PROMPTS: tuple[Prompt | TextPrompt, ...] = (NO_RAG, STANDARD_RAG, IRCOT, SELF_ASK, JUDGE)
