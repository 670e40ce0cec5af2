"""Golden fixtures for rewrite rules: one file per rule, cases as ``# title:`` blocks.

A case is IR text, a ``# expect:`` line, the expected IR, and ``# warning:`` lines for the
warnings the rule raises, in order::

    # title: a repeated triple is merged
    q1 = (?d, "directed", "Jaws")
    q2 = (?d, "Directed", "JAWS")
    answer ?d
    # expect:
    q1 = (?d, "directed", "Jaws")
    answer ?d
    # warning: merged into q1 (the same triple): q2 (?d Directed JAWS)
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import attrs

from nlqo.optimizer.rewrite import Program, Rule
from nlqo.ir.syntax import parse, render


@attrs.frozen
class RuleCase:
    title: str
    given: str
    expected: str
    warnings: tuple[str, ...]


def rule_cases(path: str | Path) -> Iterator[RuleCase]:
    """The cases of one fixture file."""
    text = Path(path).read_text(encoding="utf-8")
    blocks = text.split("# title: ")[1:]
    if not blocks:
        raise ValueError(f"{path}: no '# title:' case")
    for block in blocks:
        title, _, body = block.partition("\n")
        given, found, expected = body.partition("# expect:\n")
        if not found:
            raise ValueError(f"{path}: case {title!r} has no '# expect:' line")
        warnings = tuple(line[len("# warning: ") :] for line in expected.splitlines() if line.startswith("# warning: "))
        expected = "\n".join(line for line in expected.splitlines() if line and not line.startswith("#")) + "\n"
        yield RuleCase(title.strip(), given, expected, warnings)


def check_rule_file(path: str | Path, rule: Rule) -> int:
    """Run ``rule`` on every case of the fixture file; raise ``AssertionError`` naming the case on
    any difference. Also checks that the rule leaves its input alone, gives the same result twice,
    and writes IR that reads back as itself. Returns the number of cases."""
    count = 0
    for case in rule_cases(path):
        where = f"{path}: {case.title}"
        before = parse(case.given, source=where)
        program = Program(before)
        out = rule(program)
        assert render(out.query) == case.expected, f"{where}: got\n{render(out.query)}expected\n{case.expected}"
        assert out.warnings == case.warnings, f"{where}: warnings {out.warnings} != {case.warnings}"
        assert program.query == before, f"{where}: the rule changed its input"
        assert rule(Program(before)) == out, f"{where}: a second run gave another result"
        assert parse(render(out.query)) == out.query, f"{where}: the output does not read back as itself"
        count += 1
    return count
