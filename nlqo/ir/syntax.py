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
import os
from collections import Counter

import lark

from nlqo.errors import IRSemanticError, IRSyntaxError
from nlqo.ir import Atom, Const, Query, Relation, Var
from nlqo.ir.pins import check_pins
from nlqo.common.paths import read_bytes
from nlqo.common.resources import builtin_dir

# Bad inputs by what is wrong with them; lark matches a failure to the closest example.
_ERROR_EXAMPLES: dict[str, list[str]] = {
    "missing comma between the terms of a triple": [
        'q1 = (?a "p", ?b)',
        'q1 = (?a, "p" ?b)',
        "q1 = (?a ?b, ?c)",
    ],
    "a triple needs exactly three terms: (subject, predicate, object)": [
        'q1 = (?a, "p")',
        'q1 = (?a, "p", ?b, ?c)',
        "q1 = (?a)",
        "q1 = ()",
    ],
    "missing closing parenthesis after the object": ['q1 = (?a, "p", ?b', 'q1 = (?a, "p", ?b\n'],
    "an atom is written id = (subject, predicate, object)": ['q1 (?a, "p", ?b)', 'q1 = ?a, "p", ?b', "q1 = ", "q1"],
    'a term is a ?variable or a "quoted string"': [
        'q1 = (a, "p", ?b)',
        "q1 = (?a, p, ?b)",
        'q1 = (?a, "p", b)',
        'q1 = (?, "p", ?b)',
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
    'the question is written: question "text"': ["question What is it?", "question"],
    "the answer is written: answer ?variable or answer ATOM_ID (several: answer ?a, ?b)": [
        "answer",
        'answer "x"',
        "answer ?a ?b",
        "answer ?a,",
    ],
    "one statement a line: put a line break between statements": [
        'q1 = (?a, "p", ?b) q2 = (?a, "p", ?b)',
        "answer ?a answer ?b",
        'question "a" answer ?b',
    ],
    "unknown statement: expected question, an atom (id = (s, p, o)), relation or answer": [
        "select ?a",
        '= (?a, "p", ?b)',
        '(?a, "p", ?b)',
        '1q = (?a, "p", ?b)',
        '"x"',
    ],
}


@functools.cache
def _parser() -> lark.Lark:
    path = builtin_dir("grammar") / "nlqo.lark"
    return lark.Lark(path.read_text(), parser="lalr", propagate_positions=True, maybe_placeholders=False)


def _string(token: lark.Token) -> str:
    """A STRING token's text; lone surrogate escapes (``\\ud800``) are refused: no output could print them."""
    text = json.loads(str(token))
    for i, ch in enumerate(text):
        if "\ud800" <= ch <= "\udfff":
            raise IRSyntaxError(
                f"string escape \\u{ord(ch):04x} is half of a surrogate pair: write the character itself or both halves",
                line=token.line or 1,
                column=token.column or 1,
                label="unterminated or malformed string (strings are double-quoted, one line, JSON escapes)",
                text=str(token),
            )
    return text


class _ToIR(lark.Transformer):
    def var(self, items):
        return Var(str(items[0])[1:])

    def const(self, items):
        return Const(_string(items[0]))

    @lark.v_args(meta=True)
    def question(self, meta, items):
        return ("question", meta.line, _string(items[0]))

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
    if not text.strip():
        raise IRSemanticError("empty IR: write at least one atom line and an answer line", source=source)
    try:
        tree = _parser().parse(text)
    except lark.UnexpectedInput as exc:
        raise _syntax_error(exc, text, source) from None
    try:
        statements = _ToIR().transform(tree)
    except lark.exceptions.VisitError as exc:
        if isinstance(exc.orig_exc, IRSyntaxError):
            e = exc.orig_exc
            shown = _lines(text)[e.line - 1] if 0 < e.line <= len(_lines(text)) else ""
            raise IRSyntaxError(
                e.args[0].split(": ", 1)[1], line=e.line, column=e.column, label=e.label, text=shown, source=source
            ) from None
        raise
    return _build(statements, source)


def read(path: str | os.PathLike[str], *, source: str | None = None) -> Query:
    """Parse an IR file. Whatever the file holds, the result is a :class:`Query` or an IR error
    naming the file (and the line and column where there is one): empty files, bytes that are not
    UTF-8 and binary files included; a path with no file to read is an
    :class:`~nlqo.errors.InputFileError` naming it and what is there."""
    data = read_bytes(path, "an IR file (.nlqo)")
    return parse_bytes(data, source=source or str(path))


def parse_bytes(data: bytes, *, source: str = "<ir>") -> Query:
    """:func:`parse` for raw bytes, which must be UTF-8 text (a BOM is allowed).

    >>> parse_bytes(b'q1 = (?x, "p", "\\xff")\\nanswer ?x')
    Traceback (most recent call last):
    ...
    nlqo.errors.IRSyntaxError: <ir>:1:17: not UTF-8 text (byte 0xff); save the file as UTF-8
      q1 = (?x, "p", "
                      ^
    """
    if b"\x00" in data:
        line = data.count(b"\n", 0, data.index(b"\x00")) + 1
        column = data.index(b"\x00") - (data.rfind(b"\n", 0, data.index(b"\x00")) + 1) + 1
        raise IRSyntaxError(
            "a NUL byte: this is a binary file, not IR text",
            line=line,
            column=column,
            label="binary file",
            text="",
            source=source,
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        good = data[: exc.start].decode("utf-8", errors="replace")
        line = good.count("\n") + 1
        shown = good.rsplit("\n", 1)[-1]
        message = (
            f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8\n{pointer(shown, len(shown) + 1)}"
        )
        raise IRSyntaxError(
            message, line=line, column=len(shown) + 1, label="not UTF-8 text", text=shown, source=source
        ) from None
    return parse(text, source=source)


def _lines(text: str) -> list[str]:
    """Lines as the grammar counts them (only ``\\n`` ends a line)."""
    return text.split("\n")


def _syntax_error(exc: lark.UnexpectedInput, text: str, source: str) -> IRSyntaxError:
    label = _classify_line(text, getattr(exc, "line", 0)) or _match(exc) or "unexpected input"
    if isinstance(exc, lark.UnexpectedCharacters) and text[exc.pos_in_stream : exc.pos_in_stream + 1] == '"':
        label = "unterminated or malformed string (strings are double-quoted, one line, JSON escapes)"
    line = getattr(exc, "line", None) or 1
    column = getattr(exc, "column", None) or 1
    if line < 0:  # end of input
        lines = _lines(text.rstrip("\n")) or [""]
        line, column = len(lines), len(lines[-1]) + 1
    lines = _lines(text)
    shown = lines[line - 1].rstrip("\r") if 0 < line <= len(lines) else ""
    return IRSyntaxError(
        f"{label}\n{pointer(shown, column)}", line=line, column=column, label=label, text=shown, source=source
    )


def pointer(line: str, column: int, width: int = 120) -> str:
    """Two indented lines: ``line`` and a caret under ``column``; a long line is cut to ``width``
    characters around the column, with ``...`` where it was cut.

    >>> print(pointer("q1 = (?a ?b)", 10))
      q1 = (?a ?b)
               ^
    >>> pointer("x" * 1000 + "!" + "x" * 1000, 1001, width=10).split("\\n")
    ['  ...xxxxx!xxxx...', '          ^']
    """
    column = max(column, 1)
    start = max(0, min(column - 1 - width // 2, len(line) - width))
    cut = ("..." if start else "") + line[start : start + width] + ("..." if start + width < len(line) else "")
    return f"  {cut}\n  {' ' * (column - 1 - start + (3 if start else 0))}^"


def _classify_line(text: str, line: int) -> str | None:
    """Label an error by parsing its line alone: lark's example matching depends on the parser
    stack, which is only comparable from the start of a statement."""
    lines = _lines(text)
    if not 0 < line <= len(lines):
        return None
    try:
        _parser().parse(lines[line - 1])
    except lark.UnexpectedInput as exc:
        return _match(exc)
    return None


@functools.cache
def _example_errors() -> tuple[tuple[str, lark.UnexpectedInput], ...]:
    """Each labelled example with the error it raises, parsed once."""
    out = []
    for label, examples in _ERROR_EXAMPLES.items():
        for example in examples:
            try:
                _parser().parse(example)
            except lark.UnexpectedInput as exc:
                out.append((label, exc))
    return tuple(out)


def _match(exc: lark.UnexpectedInput) -> str | None:
    """The label of the example whose error is most like ``exc``: lark's ``match_examples`` with
    ``use_accepts``, which raises TypeError while logging the case of one parser state with
    different accepted tokens (lark 1.3), skipping that case instead."""
    found = None
    for label, example in _example_errors():
        if example.state != exc.state:
            continue
        tokens = (lark.UnexpectedToken, lark.UnexpectedEOF)
        if (
            isinstance(exc, lark.UnexpectedToken)
            and isinstance(example, lark.UnexpectedToken)
            and example.accepts != exc.accepts
        ):
            continue
        if isinstance(exc, tokens) and isinstance(example, tokens) and example.token == exc.token:
            return label
        found = found or label
    return found


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
        raise IRSemanticError('no atoms: write at least one line like q1 = (?x, "predicate", "object")', source=source)
    counts = Counter(a.id for _, a in atoms)
    for line, a in atoms:
        if counts[a.id] > 1:
            raise IRSemanticError(f"duplicate atom id {a.id!r}", line=line, source=source)
    ids = set(counts)
    for line, r in relations:
        for ref in (r.left, r.right):
            if ref not in ids:
                raise IRSemanticError(
                    f"relation names unknown atom {ref!r} (atoms: {', '.join(sorted(ids))})", line=line, source=source
                )
        if r.left == r.right:
            raise IRSemanticError(f"relation of atom {r.left!r} with itself", line=line, source=source)
    check_pins([r for _, r in relations], lines=[line for line, _ in relations], source=source)
    if answer is None:
        raise IRSemanticError("no answer statement: add 'answer ?variable' or 'answer ATOM_ID'", source=source)
    line, targets = answer
    for target in targets:
        if isinstance(target, Var):
            if not any(target.name in a.variables for _, a in atoms):
                raise IRSemanticError(
                    f"answer variable {target} is not mentioned by any atom", line=line, source=source
                )
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
