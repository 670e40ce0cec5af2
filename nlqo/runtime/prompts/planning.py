"""Prompts of the planning stage: question -> IR, pair relations, context-aware merge checks."""

from __future__ import annotations

from nlqo.runtime.prompts.base import Prompt

_IR_RULES = """Rewrite the question as atomic queries in the nlqo IR, one statement a line:
  qN = (subject, "predicate", object)   # each term is a ?variable or a "quoted string"
  answer ?variable                      # the variable whose value answers the question
                                        # (a comparison lists each side: answer ?a, ?b)
Each atom is one subject-predicate-object fact to look up. Use a ?variable for every unknown
entity and reuse it where the same unknown appears again. Use as few atoms as the question needs
(one to four). Write only the IR lines, nothing else."""

PARSE = Prompt(
    name="parse",
    instruction=_IR_RULES,
    template="Question: {question}",
    examples=(
        (
            "Question: Which Canadian rock band released Counterparts and had a drummer in the Modern Drummer Hall of Fame?",
            'q1 = (?band, "released", "Counterparts")\n'
            'q2 = (?drummer, "drummer of", ?band)\n'
            'q3 = (?drummer, "inducted into", "Modern Drummer Hall of Fame")\n'
            "answer ?band",
        ),
        (
            "Question: In which city was the director of the film Jaws born?",
            'q1 = (?director, "directed", "Jaws")\nq2 = (?director, "born in", ?city)\nanswer ?city',
        ),
        (
            "Question: Which university did the author of the novel Dracula attend?",
            'q1 = (?author, "wrote", "Dracula")\nq2 = (?author, "attended", ?university)\nanswer ?university',
        ),
        (
            "Question: Which film came out first, Jaws or Alien?",
            'q1 = ("Jaws", "released in", ?year1)\nq2 = ("Alien", "released in", ?year2)\nanswer ?year1, ?year2',
        ),
    ),
    stop=("\n\n\n", "Question:"),
    max_tokens=200,
)

REPAIR = Prompt(
    name="parse-repair",
    instruction=_IR_RULES,
    template="Question: {question}\n\nYour previous answer was:\n{previous}\n\nIt is not valid IR: {error}\n"
    "Write the corrected IR lines only.",
    stop=("\n\n\n", "Question:"),
    max_tokens=200,
)

RELATION = Prompt(
    name="relation",
    instruction="Two atomic queries come from one question. Say how A relates to B:\n"
    "parent - B must be answered first and its answer is needed to answer A\n"
    "child - A must be answered first and its answer is needed to answer B\n"
    "sibling - both are independent parts of the same step\n"
    "none - unrelated\n"
    "Reply with one word: parent, child, sibling or none.",
    template="Question: {question}\nA: {a}\nB: {b}\nRelation of A to B:",
    examples=(
        (
            "Question: In which city was the director of Jaws born?\nA: ?director born in ?city\n"
            "B: ?director directed Jaws\nRelation of A to B:",
            "parent",
        ),
        (
            "Question: Who is older, Emma Watson or Daniel Radcliffe?\nA: Emma Watson born on ?date1\n"
            "B: Daniel Radcliffe born on ?date2\nRelation of A to B:",
            "sibling",
        ),
    ),
    stop=("\n",),
    max_tokens=4,
)

MERGE = Prompt(
    name="merge-check",
    instruction="A plan answers a question by answering atomic queries bottom-up: a child's answer "
    "feeds its parent. Given the plan built so far, say whether attaching the new query under the "
    "named parent is sensible. Reply with one word: yes or no.",
    template="Question: {question}\nPlan so far:\n{tree}\nAttach: {child}\nUnder: {parent}\nSensible?",
    stop=("\n",),
    max_tokens=3,
)
