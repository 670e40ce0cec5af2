"""Question -> IR through an LLM, validated by the grammar and repaired within a bound.

By default the reply is constrained by the IR's generation grammar (:mod:`nlqo.ir.grammar`) on
backends that can apply one, so it is valid IR by construction and only a semantic error (the
grounding rule where the grammar cannot express it) goes back for repair. Other backends answer
freely and every error is repaired as before.
"""

from __future__ import annotations

import re

import attrs

from nlqo.config import EngineConfig, default
from nlqo.errors import IRSemanticError, IRSyntaxError, ParseFailure
from nlqo.ir import Const, Query
from nlqo.ir.grammar import MAX_ATOMS, ir_constraint, max_reply_bytes, question_words
from nlqo.runtime.llm.base import LLM, Usage, chat_reusing_prefix
from nlqo.runtime.llm.constrain import ConstrainedCompletion, can_constrain, constrained_chat, enforced, token_level
from nlqo.runtime.prompts import planning
from nlqo.optimizer.rewrite import Program, load_rules
from nlqo.ir.syntax import parse, render


@attrs.frozen
class ParseResult:
    query: Query
    text: str
    """The IR as the LLM finally wrote it (after clean-up)."""
    attempts: int
    usage: Usage
    warnings: tuple[str, ...] = ()
    constrained: bool = False
    """The replies were constrained by the generation grammar (only semantic errors repaired)."""
    mask_ms: float = 0.0
    """Time spent on token masks (constrained replies)."""
    decode_ms: float = 0.0
    """Time of the model's forward passes after the prompts (constrained replies)."""

    @property
    def repairs(self) -> int:
        """Repair calls made: attempts after the first."""
        return self.attempts - 1

    def describe(self) -> str:
        """How the IR came about, for EXPLAIN.

        >>> ParseResult(None, "", 1, Usage(), constrained=True).describe()
        'constrained by the generation grammar, 1 attempt, 0 repairs (repairs for semantic errors only)'
        >>> ParseResult(None, "", 2, Usage()).describe()
        'unconstrained, 2 attempts, 1 repair'
        """
        how = "constrained by the generation grammar" if self.constrained else "unconstrained"
        repairs = f"{self.repairs} repair{'' if self.repairs == 1 else 's'}"
        scope = " (repairs for semantic errors only)" if self.constrained else ""
        return f"{how}, {self.attempts} attempt{'' if self.attempts == 1 else 's'}, {repairs}{scope}"


_LINE = re.compile(r"^\s*(q\w*\s*=|answer\b|relation\b|question\b|#)")


def clean(reply: str) -> str:
    """Keep the IR lines of a reply: drop code fences, chatter and blank lines.

    >>> clean('Sure!\\n```\\nq1 = (?x, "p", "o")\\nanswer ?x\\n```')
    'q1 = (?x, "p", "o")\\nanswer ?x'
    """
    lines = [line.strip() for line in reply.splitlines()]
    return "\n".join(line for line in lines if _LINE.match(line))


_ATOM_LINE = re.compile(r"^q\w*\s*=\s*(.*)$")


def drop_repeats(text: str) -> str:
    """Drop atom lines whose triple repeats an earlier line's, whatever their ids.

    Small models fall into loops that write the same triple until the token budget ends; the
    loop's copies carry nothing and crowd the repair prompt.

    >>> drop_repeats('q1 = (?g, "had", "X")\\nq2 = (?g, "had", "Y")\\nq3 = (?g, "had", "Y")\\nanswer ?g')
    'q1 = (?g, "had", "X")\\nq2 = (?g, "had", "Y")\\nanswer ?g'
    """
    seen: set[str] = set()
    kept = []
    for line in text.splitlines():
        match = _ATOM_LINE.match(line)
        if match is not None:
            if match.group(1) in seen:
                continue
            seen.add(match.group(1))
        kept.append(line)
    return "\n".join(kept)


_QUOTED_VARIABLE = re.compile(r'"(\?[A-Za-z_]\w*)"')


def unquote_variables(text: str) -> str:
    """Quoted variables (``"?name"``, a common slip) as variables.

    >>> unquote_variables('q2 = (?author, "interned", "?name")')
    'q2 = (?author, "interned", ?name)'
    """
    return _QUOTED_VARIABLE.sub(r"\1", text)


def drop_cut_last_line(text: str) -> str:
    """``text`` without its last line when the first syntax error is there: a reply cut off by the
    token budget ends mid-triple.

    >>> drop_cut_last_line('q1 = (?d, "directed", "Jaws")\\nq2 = (?d, "bo')
    'q1 = (?d, "directed", "Jaws")'
    >>> drop_cut_last_line('q1 = (?d "directed", "Jaws")\\nanswer ?d') == 'q1 = (?d "directed", "Jaws")\\nanswer ?d'
    True
    """
    lines = text.splitlines()
    try:
        parse(text, source="<llm>")
    except IRSyntaxError as exc:
        if len(lines) > 1 and exc.line == len(lines):
            return "\n".join(lines[:-1])
    except IRSemanticError:
        pass
    return text


def tidy(reply: str) -> str:
    """``clean``, then the clean-up of ``parse_question(cleanup=True)``: quoted variables unquoted,
    repeated atom lines and a cut-off last line dropped."""
    return drop_cut_last_line(drop_repeats(unquote_variables(clean(reply))))


_words = question_words


def check_grounded(query: Query, question: str) -> None:
    """Reject IR whose subject or object constants share no word with the question.

    Small models sometimes copy the few-shot demonstration instead of decomposing the question.

    >>> from nlqo.ir.syntax import parse
    >>> check_grounded(parse('q1 = (?d, "directed", "Jaws")\\nanswer ?d'), "Who directed Jaws?")
    >>> check_grounded(parse('q1 = (?d, "directed", "Dracula")\\nanswer ?d'), "Who directed Jaws?")
    Traceback (most recent call last):
    ...
    nlqo.errors.IRSemanticError: <llm>: constant "Dracula" of q1 does not come from the question: use only entities the question names
    """
    asked = _words(question)
    for atom in query.atoms:
        for term in (atom.subject, atom.object):
            if isinstance(term, Const) and _words(term.text) and not (_words(term.text) & asked):
                raise IRSemanticError(
                    f"constant {term} of {atom.id} does not come from the question: use only entities the question names",
                    source="<llm>",
                )


def unanchored(query: Query) -> tuple[str, ...]:
    """Ids of atoms linked, through shared variables, to no atom that names a constant.

    Such an atom says nothing about which entity it is about (``?father father of ?child``): its
    retrieval searches on the predicate alone, and as a hint it only restates the question's shape.

    >>> from nlqo.ir.syntax import parse
    >>> unanchored(parse('q1 = (?d, "directed", "Jaws")\\nq2 = (?d, "born in", ?city)\\nanswer ?city'))
    ()
    >>> unanchored(parse('q1 = ("Jaws", "released in", ?y1)\\nq2 = (?film, "released in", ?y2)\\nanswer ?y1, ?y2'))
    ('q2',)
    """
    anchored = {a.id for a in query.atoms if isinstance(a.subject, Const) or isinstance(a.object, Const)}
    reached = set(anchored)
    grew = True
    while grew:
        names = {v for a in query.atoms if a.id in reached for v in a.variables}
        linked = {a.id for a in query.atoms if a.variables & names} - reached
        reached |= linked
        grew = bool(linked)
    return tuple(a.id for a in query.atoms if a.id not in reached)


def anchor_error(query: Query, ids: tuple[str, ...]) -> str:
    """The repair message for atoms :func:`unanchored` found."""
    shown = ", ".join(f"{i} = {query.atom(i).text()}" for i in ids)
    return (
        f"{shown}: {'this atom names' if len(ids) == 1 else 'these atoms name'} no entity of the question and "
        "shares no variable with an atom that does; write the entity each is about as a quoted string from the question"
    )


def parse_question(
    question: str,
    llm: LLM,
    *,
    repairs: int = default("repairs"),
    cleanup: bool = default("ir_cleanup"),
    constrained: bool = default("constrained"),
    max_atoms: int = MAX_ATOMS,
    anchored: bool = default("anchored"),
    anchor_repairs: int = default("anchor_repairs"),
    spans: bool = default("span_constants"),
) -> ParseResult:
    """Ask ``llm`` for the IR of ``question``; on invalid IR send the error back, at most ``repairs`` times.

    With ``constrained`` (the default) and a backend that can apply a grammar, every reply follows
    the generation grammar (at most ``max_atoms`` atoms, constants from the question, an answer
    line naming only variables of the atoms): its tokens are masked, the scaffold is forced, and
    the token budget is one the grammar cannot exceed. A reply constrained token by token that
    still fails is repaired only for a semantic error. ``constrained=False`` asks as before.

    With ``cleanup`` each reply is first tidied (``tidy``): quoted variables are unquoted, and
    repeated atom lines and a last line cut off mid-way are dropped, so a looping model's IR is
    parsed, or repaired, from its useful part. The
    result has the question attached, variables normalised and duplicate atoms merged.

    ``anchored`` makes the constrained reply's first atom name a constant, and ``spans`` its
    constants runs of the question's words (:func:`~nlqo.ir.grammar.constant_terminal`); both are
    off by default (measured, not kept: docs/ir.md). Valid IR with atoms linked to no entity of the
    question (:func:`unanchored`) is sent back at most ``anchor_repairs`` times (default none); if
    no repair anchors them, the first such IR is kept with a warning (a plan with a loose atom still
    beats no plan).
    Raises :class:`ParseFailure` showing every attempt and its error.
    """
    usage = Usage()
    attempts: list[str] = []
    errors: list[str] = []
    prompt = planning.PARSE
    messages = prompt.messages(question=question)
    constraint = (
        ir_constraint(question, max_atoms, anchored=anchored, spans=spans)
        if constrained and can_constrain(llm)
        else None
    )
    # Applied token by token, the grammar ends the reply and bounds its length; a server is given
    # the prompt's budget (servers refuse one beyond their context) and validated after the fact.
    budget = max(prompt.max_tokens, max_reply_bytes(max_atoms, question)) if token_level(llm) else prompt.max_tokens
    mask_ms = decode_ms = 0.0
    left = repairs
    """Repair calls still allowed; once valid IR with loose atoms is found, only ``anchor_repairs``."""
    loose: tuple[Query, str] | None = None
    """The first valid IR with unanchored atoms, and the warning it is kept with."""
    while True:
        if constraint is None:
            reply = chat_reusing_prefix(llm, messages, stop=prompt.stop, max_tokens=prompt.max_tokens)
        else:
            reply = constrained_chat(llm, messages, constraint, max_tokens=budget)
            if isinstance(reply, ConstrainedCompletion):
                mask_ms, decode_ms = mask_ms + reply.mask_ms, decode_ms + reply.decode_ms
        usage = usage + reply.usage
        text = tidy(reply.text) if cleanup else clean(reply.text)
        if attempts and reply.text == attempts[-1]:
            # The same IR with the same error makes the same repair prompt: a greedy model would
            # only repeat itself again, so stop here.
            attempts.append(reply.text)
            errors.append(errors[-1])
            break
        attempts.append(reply.text)
        try:
            query = parse(text, source="<llm>")
            check_grounded(query, question)
        except (IRSyntaxError, IRSemanticError) as exc:
            error = exc.label if isinstance(exc, IRSyntaxError) else str(exc)
            errors.append(str(exc))
            if isinstance(exc, IRSyntaxError) and enforced(reply):
                errors[-1] += f" (a constrained reply, finish: {reply.finish_reason}: syntax errors are not repaired)"
                break
        else:
            ids = unanchored(query)
            if not ids:
                return _result(query, question, len(attempts), usage, constraint is not None, mask_ms, decode_ms)
            error = anchor_error(query, ids)
            errors.append(error)
            if loose is None:
                loose, left = (
                    (
                        query,
                        f"atoms {', '.join(ids)} name no entity of the question, nor share a variable with an atom that does",
                    ),
                    anchor_repairs,
                )
        if left == 0:
            break
        left -= 1
        prompt = planning.REPAIR
        messages = prompt.messages(question=question, previous=text or reply.text, error=error)
    if loose is not None:
        return _result(
            loose[0], question, len(attempts), usage, constraint is not None, mask_ms, decode_ms, warning=loose[1]
        )
    repeated = len(attempts) > 1 and attempts[-1] == attempts[-2]
    raise ParseFailure(
        f"the LLM did not write valid IR for {question!r} in {len(attempts)} attempts"
        + (" (it repeated itself, so no further repair was asked for)" if repeated else ""),
        attempts=tuple(attempts),
        errors=tuple(errors),
    )


def parse_configured(question: str, llm: LLM, config: EngineConfig) -> ParseResult:
    """:func:`parse_question` with the parse settings of ``config`` (the engine's, ``nlqo parse``'s and the plan benchmark's)."""
    return parse_question(
        question,
        llm,
        repairs=config.repairs,
        cleanup=config.ir_cleanup,
        constrained=config.constrained,
        max_atoms=config.parse_atoms,
        anchored=config.anchored,
        anchor_repairs=config.anchor_repairs,
        spans=config.span_constants,
    )


def _result(
    query: Query,
    question: str,
    attempts: int,
    usage: Usage,
    constrained: bool,
    mask_ms: float,
    decode_ms: float,
    *,
    warning: str | None = None,
) -> ParseResult:
    """The parse result of valid IR: question attached, variables normalised, duplicate atoms merged."""
    program = Program(attrs.evolve(query, question=question))
    for name, rule in load_rules():
        if name in ("normalize_variables", "merge_duplicate_atoms"):
            program = rule(program)
    warnings = (warning,) if warning else ()
    return ParseResult(
        program.query,
        render(program.query),
        attempts,
        usage,
        warnings + program.warnings,
        constrained=constrained,
        mask_ms=mask_ms,
        decode_ms=decode_ms,
    )
