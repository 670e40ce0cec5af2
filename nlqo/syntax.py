"""Text form of the IR: parse with the LALR grammar in ``grammar/nlqo.lark``, render canonically.

>>> q = parse('q1 = (?x, "capital of", "France")\\nanswer ?x')
>>> q.atoms[0].object
Const(text='France')
>>> print(render(q), end="")
q1 = (?x, "capital of", "France")
answer ?x
>>> parse(render(q)) == q
True
"""

from __future__ import annotations

import functools
import json
from collections import Counter

import lark

from nlqo.errors import IRSemanticError, IRSyntaxError
from nlqo.ir import Atom, Const, Query, Relation, Var
from nlqo.resources import builtin_dir

# Bad inputs by what is wrong with them; lark matches a failure to the closest example.
_ERROR_EXAMPLES: dict[str, list[str]] = {
    "missing comma between the terms of a triple": [
        'q1 = (?a "p", ?b)',
        'q1 = (?a, "p" ?b)',
        'q1 = (?a ?b, ?c)',
    ],
    "a triple needs exactly three terms: (subject, predicate, object)": [
        'q1 = (?a, "p")',
        'q1 = (?a, "p", ?b, ?c)',
        'q1 = (?a)',
        "q1 = ()",
    ],
    "missing closing parenthesis after the object": ['q1 = (?a, "p", ?b', 'q1 = (?a, "p", ?b\n'],
    "an atom is written id = (subject, predicate, object)": ['q1 (?a, "p", ?b)', 'q1 = ?a, "p", ?b', "q1 = ", "q1"],
    "a term is a ?variable or a \"quoted string\"": [
        "q1 = (a, \"p\", ?b)",
        'q1 = (?a, p, ?b)',
        'q1 = (?a, "p", b)',
        "q1 = (?, \"p\", ?b)",
    ],
    "unterminated or malformed string (strings are double-quoted, one line, JSON escapes)": [
        'q1 = (?a, "p, ?b)',
        'question "abc',
        'q1 = (?a, "p\\q", ?b)',
    ],
    "a relation is written: relation ID parent|sibling|none ID": [
        "relation q1 child q2",
        "relation q1 q2",
        "relation q1 parent",
        "relation parent q2",
        "relation",
    ],
    "the question is written: question \"text\"": ["question What is it?", "question"],
    "the answer is written: answer ?variable or answer ATOM_ID (several: answer ?a, ?b)": ["answer", 'answer "x"', "answer ?a ?b", "answer ?a,"],
    "one statement a line: put a line break between statements": [
        'q1 = (?a, "p", ?b) q2 = (?a, "p", ?b)',
        "answer ?a answer ?b",
        'question "a" answer ?b',
    ],
    "unknown statement: expected question, an atom (id = (s, p, o)), relation or answer": [
        "select ?a",
        "= (?a, \"p\", ?b)",
        "(?a, \"p\", ?b)",
        "1q = (?a, \"p\", ?b)",
        '"x"',
    ],
}


@functools.cache
def _parser() -> lark.Lark:
    path = builtin_dir("grammar") / "nlqo.lark"
    return lark.Lark(path.read_text(), parser="lalr", propagate_positions=True, maybe_placeholders=False)


class _ToIR(lark.Transformer):
    def var(self, items):
        return Var(str(items[0])[1:])

    def const(self, items):
        return Const(json.loads(str(items[0])))

    @lark.v_args(meta=True)
    def question(self, meta, items):
        return ("question", meta.line, json.loads(str(items[0])))

    @lark.v_args(meta=True)
    def atom(self, meta, items):
        return ("atom", meta.line, Atom(str(items[0]), items[1], items[2], items[3]))

    @lark.v_args(meta=True)
    def relation(self, meta, items):
        return ("relation", meta.line, Relation(str(items[0]), str(items[1]), str(items[2])))

    @lark.v_args(meta=True)
    def answer(self, meta, items):
        targets = tuple(Var(str(t)[1:]) if str(t).startswith("?") else str(t) for t in items)
        return ("answer", meta.line, targets)

    def start(self, items):
        return [i for i in items if i is not None]


def parse(text: str, *, source: str = "<ir>") -> Query:
    """Parse IR text into a :class:`Query`, checking syntax and meaning.

    Raises :class:`IRSyntaxError` (with line, column and a readable label) or
    :class:`IRSemanticError`.
    """
    try:
        tree = _parser().parse(text)
    except lark.UnexpectedInput as exc:
        raise _syntax_error(exc, text, source) from None
    return _build(_ToIR().transform(tree), source)


def _syntax_error(exc: lark.UnexpectedInput, text: str, source: str) -> IRSyntaxError:
    label = _classify_line(text, getattr(exc, "line", 0)) or exc.match_examples(
        _parser().parse, _ERROR_EXAMPLES, use_accepts=True
    ) or "unexpected input"
    if isinstance(exc, lark.UnexpectedCharacters) and text[exc.pos_in_stream : exc.pos_in_stream + 1] == '"':
        label = "unterminated or malformed string (strings are double-quoted, one line, JSON escapes)"
    line = getattr(exc, "line", None) or 1
    column = getattr(exc, "column", None) or 1
    if line < 0:  # end of input
        lines = text.splitlines() or [""]
        line, column = len(lines), len(lines[-1]) + 1
    lines = text.splitlines()
    shown = lines[line - 1] if 0 < line <= len(lines) else ""
    caret = " " * (max(column, 1) - 1) + "^"
    message = f"{label}\n  {shown}\n  {caret}"
    return IRSyntaxError(message, line=line, column=column, label=label, text=shown, source=source)


def _classify_line(text: str, line: int) -> str | None:
    """Label an error by parsing its line alone: lark's example matching depends on the parser
    stack, which is only comparable from the start of a statement."""
    lines = text.splitlines()
    if not 0 < line <= len(lines):
        return None
    try:
        _parser().parse(lines[line - 1])
    except lark.UnexpectedInput as exc:
        return exc.match_examples(_parser().parse, _ERROR_EXAMPLES, use_accepts=True)
    return None


def _build(statements: list[tuple[str, int, object]], source: str) -> Query:
    question: str | None = None
    answer: tuple[int, tuple[Var | str, ...]] | None = None
    atoms: list[tuple[int, Atom]] = []
    relations: list[tuple[int, Relation]] = []
    for kind, line, value in statements:
        if kind == "question":
            if question is not None:
                raise IRSemanticError("more than one question statement", line=line, source=source)
            question = value  # type: ignore[assignment]
        elif kind == "answer":
            if answer is not None:
                raise IRSemanticError("more than one answer statement", line=line, source=source)
            answer = (line, value)  # type: ignore[assignment]
        elif kind == "atom":
            atoms.append((line, value))  # type: ignore[arg-type]
        else:
            relations.append((line, value))  # type: ignore[arg-type]
    if not atoms:
        raise IRSemanticError("no atoms: write at least one line like q1 = (?x, \"predicate\", \"object\")", source=source)
    counts = Counter(a.id for _, a in atoms)
    for line, a in atoms:
        if counts[a.id] > 1:
            raise IRSemanticError(f"duplicate atom id {a.id!r}", line=line, source=source)
    ids = set(counts)
    for line, r in relations:
        for ref in (r.left, r.right):
            if ref not in ids:
                raise IRSemanticError(f"relation names unknown atom {ref!r} (atoms: {', '.join(sorted(ids))})", line=line, source=source)
        if r.left == r.right:
            raise IRSemanticError(f"relation of atom {r.left!r} with itself", line=line, source=source)
    if answer is None:
        raise IRSemanticError("no answer statement: add 'answer ?variable' or 'answer ATOM_ID'", source=source)
    line, targets = answer
    for target in targets:
        if isinstance(target, Var):
            if not any(target.name in a.variables for _, a in atoms):
                raise IRSemanticError(f"answer variable {target} is not mentioned by any atom", line=line, source=source)
        elif target not in ids:
            raise IRSemanticError(f"answer names unknown atom {target!r}", line=line, source=source)
    if len(set(targets)) != len(targets):
        raise IRSemanticError("answer names a target twice", line=line, source=source)
    return Query(
        atoms=tuple(a for _, a in atoms),
        answer=targets,
        question=question,
        relations=tuple(r for _, r in relations),
    )


def answer_text(query: Query) -> str:
    """The answer targets as the IR writes them: ``?year1, ?year2``."""
    return ", ".join(str(t) for t in query.answer)


def render(query: Query) -> str:
    """Canonical text: question, atoms, relations, answer; one statement a line."""
    lines = []
    if query.question is not None:
        lines.append(f"question {json.dumps(query.question, ensure_ascii=False)}")
    for a in query.atoms:
        lines.append(f"{a.id} = ({a.subject}, {a.predicate}, {a.object})")
    for r in query.relations:
        lines.append(f"relation {r.left} {r.kind} {r.right}")
    lines.append(f"answer {answer_text(query)}")
    return "\n".join(lines) + "\n"
