"""Question -> IR through an LLM, validated by the grammar and repaired within a bound."""

from __future__ import annotations

import re

import attrs

from nlqo.errors import IRSemanticError, IRSyntaxError, ParseFailure
from nlqo.ir import Query
from nlqo.llm.base import LLM, Usage
from nlqo.prompts import planning
from nlqo.rewrite import Program, load_rules
from nlqo.syntax import parse, render


@attrs.frozen
class ParseResult:
    query: Query
    text: str
    """The IR as the LLM finally wrote it (after clean-up)."""
    attempts: int
    usage: Usage
    warnings: tuple[str, ...] = ()


_LINE = re.compile(r"^\s*(q\w*\s*=|answer\b|relation\b|question\b|#)")


def clean(reply: str) -> str:
    """Keep the IR lines of a reply: drop code fences, chatter and blank lines.

    >>> clean('Sure!\\n```\\nq1 = (?x, "p", "o")\\nanswer ?x\\n```')
    'q1 = (?x, "p", "o")\\nanswer ?x'
    """
    lines = [line.strip() for line in reply.splitlines()]
    return "\n".join(line for line in lines if _LINE.match(line))


def parse_question(question: str, llm: LLM, *, repairs: int = 2) -> ParseResult:
    """Ask ``llm`` for the IR of ``question``; on invalid IR send the error back, at most ``repairs`` times.

    The result has the question attached, variables normalised and duplicate atoms merged.
    Raises :class:`ParseFailure` showing every attempt and its error.
    """
    usage = Usage()
    attempts: list[str] = []
    errors: list[str] = []
    prompt = planning.PARSE
    messages = prompt.messages(question=question)
    for attempt in range(repairs + 1):
        reply = llm.chat(messages, stop=prompt.stop, max_tokens=prompt.max_tokens)
        usage = usage + reply.usage
        text = clean(reply.text)
        attempts.append(reply.text)
        try:
            query = parse(text, source="<llm>")
        except (IRSyntaxError, IRSemanticError) as exc:
            label = exc.label if isinstance(exc, IRSyntaxError) else str(exc)
            errors.append(str(exc))
            repair = planning.REPAIR
            messages = repair.messages(question=question, previous=text or reply.text, error=label)
            prompt = repair
            continue
        query = attrs.evolve(query, question=question)
        program = Program(query)
        for name, rule in load_rules():
            if name in ("normalize_variables", "merge_duplicate_atoms"):
                program = rule(program)
        return ParseResult(program.query, render(program.query), attempt + 1, usage, program.warnings)
    raise ParseFailure(
        f"the LLM did not write valid IR for {question!r} in {repairs + 1} attempts",
        attempts=tuple(attempts),
        errors=tuple(errors),
    )
