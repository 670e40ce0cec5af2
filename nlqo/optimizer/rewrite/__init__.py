"""Rewrite rules: pure functions ``Program -> Program`` run before the search, one per module.

The order of the rules is data: ``rules/default.rules`` lists rule names, one a line. Third-party
packages add rules under the entry-point group ``nlqo.rules``.
"""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable, Sequence

import attrs

from nlqo.errors import ConfigError
from nlqo.ir import Atom, Query
from nlqo.optimizer.plan import LeftOut
from nlqo.common.paths import read_text
from nlqo.common.resources import find


@attrs.frozen
class Program:
    """A query on its way through the rewrite rules, with the warnings they raised and the atoms they took out."""

    query: Query
    warnings: tuple[str, ...] = ()
    left_out: tuple[LeftOut, ...] = ()
    """Atoms a rule removed from ``query``, with the reason; the plan reports them."""

    def warn(self, message: str) -> "Program":
        return attrs.evolve(self, warnings=(*self.warnings, message))

    def took_out(self, atom: Atom, reason: str) -> "Program":
        """Record that a rule removed ``atom`` (also as a warning); the rule removes it from the query itself."""
        return attrs.evolve(
            self.warn(f"{reason}: {atom.id} ({atom.text()})"),
            left_out=(*self.left_out, LeftOut(atom.id, reason, atom.text())),
        )


Rule = Callable[[Program], Program]


def load_rule(name: str) -> Rule:
    """A rule by name: a module of ``nlqo.optimizer.rewrite`` with the function of the same name, or an entry point."""
    for ep in entry_points(group="nlqo.rules"):
        if ep.name == name:
            return ep.load()
    rule = None
    if name.isidentifier() and not name.startswith("_"):  # '__init__' would import the package again
        try:
            rule = getattr(importlib.import_module(f"nlqo.optimizer.rewrite.{name}"), name, None)
        except ModuleNotFoundError:
            pass
    if not inspect.isfunction(rule):
        raise ConfigError(f"unknown rewrite rule {name!r}")
    return rule


def load_rules(name_or_path: str = "default", path: Sequence[str | Path] = ()) -> tuple[tuple[str, Rule], ...]:
    """The ordered rule list of a ``.rules`` file; a bad name is reported with file and line."""
    file = find("rules", name_or_path, ".rules", path)
    rules = []
    # lines end at \n only, as editors count them (splitlines also splits at \f, \x1c, \u2028, ...)
    for number, line in enumerate(read_text(file, "a rule list (.rules)").split("\n"), 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        try:
            rules.append((name, load_rule(name)))
        except ConfigError as exc:
            raise ConfigError(f"{file}:{number}: {exc}") from None
    return tuple(rules)


def rewrite(query: Query, rules: Sequence[tuple[str, Rule]] | None = None) -> Program:
    """Run ``rules`` (default: ``rules/default.rules``) in order."""
    program = Program(query)
    for _, rule in rules if rules is not None else load_rules():
        program = rule(program)
    return program
