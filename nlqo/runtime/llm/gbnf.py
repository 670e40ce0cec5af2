"""Lark grammars as GBNF, the grammar format llama.cpp's server (and vLLM's ``guided_grammar``) takes.

Handles what nlqo's grammars use: rules with alternatives, optional parts and repetition (Lark
expands them into plain rules), string terminals, and regex terminals made of literals, character
classes, groups, alternation and bounded repetition. Anything else (anchors, backreferences,
``\\d``-style categories) raises ``ValueError`` naming it.

>>> print(to_gbnf('start: "a" B? | "ok"\\nB: /x[0-9]{1,3}/'))
root ::= A B | A | OK
B ::= "x" ( [0-9] ){1,3}
A ::= "a"
OK ::= "ok"
"""

from __future__ import annotations

import importlib
import re
import sys

import lark

# The regex parser behind ``re`` (``re._parser`` from Python 3.11, ``sre_parse`` before).
_NEW = sys.version_info >= (3, 11)
sre_parse = importlib.import_module("re._parser" if _NEW else "sre_parse")
sre_constants = importlib.import_module("re._constants" if _NEW else "sre_constants")


def _char(code: int) -> str:
    """One character as GBNF writes it inside a string or a class: plain if alphanumeric or a space.

    >>> _char(ord("a")), _char(ord('"')), _char(0x00e9)
    ('a', '\\\\x22', '\\\\u00E9')
    """
    c = chr(code)
    if c.isascii() and (c.isalnum() or c == " "):
        return c
    if code < 0x80:
        return f"\\x{code:02X}"
    if code < 0x10000:
        return f"\\u{code:04X}"
    return f"\\U{code:08X}"


def _literal(text: str) -> str:
    return '"' + "".join(_char(ord(c)) for c in text) + '"'


def _class(items) -> str:
    negate, parts = False, []
    for op, av in items:
        if op is sre_constants.NEGATE:
            negate = True
        elif op is sre_constants.LITERAL:
            parts.append(_char(av))
        elif op is sre_constants.RANGE:
            parts.append(f"{_char(av[0])}-{_char(av[1])}")
        else:
            raise ValueError(f"regex class item {op} has no GBNF form here")
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


def _regex(nodes) -> str:
    out: list[str] = []
    run = ""  # consecutive literal characters, written as one string
    for op, av in nodes:
        if op is sre_constants.LITERAL:
            run += chr(av)
            continue
        if run:
            out.append(_literal(run))
            run = ""
        if op is sre_constants.NOT_LITERAL:
            out.append(f"[^{_char(av)}]")
        elif op is sre_constants.IN:
            out.append(_class(av))
        elif op is sre_constants.ANY:
            out.append("[^\\x0A]")
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
            low, high, sub = av
            body = f"( {_regex(sub)} )"
            if (low, high) == (0, 1):
                out.append(body + "?")
            elif high == sre_constants.MAXREPEAT:
                out.append(body + ("*" if low == 0 else "+" if low == 1 else f"{{{low},}}"))
            else:
                out.append(body + f"{{{low},{high}}}")
        elif op is sre_constants.SUBPATTERN:
            out.append(f"( {_regex(av[-1])} )")
        elif op is sre_constants.BRANCH:
            out.append("( " + " | ".join(_regex(b) for b in av[1]) + " )")
        else:
            raise ValueError(f"regex construct {op} has no GBNF form here")
    if run:
        out.append(_literal(run))
    return " ".join(out) if out else '""'


def _name(name: str, *, terminal: bool) -> str:
    """A GBNF rule name (letters, digits and dashes); terminals are upper case, prefixed if anonymous."""
    clean = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")
    if terminal and not name.isupper():
        clean = "T-" + clean.upper()
    return clean or "anon"


def to_gbnf(grammar: str, *, start: str = "start") -> str:
    """``grammar`` (Lark) as GBNF; its ``start`` rule becomes ``root``."""
    parser = lark.Lark(grammar, start=start)
    terminals = {t.name: t for t in parser.terminals}

    def rule_name(symbol) -> str:
        if symbol.is_term:
            return _name(symbol.name, terminal=True)
        return "root" if symbol.name == start else _name(symbol.name, terminal=False)

    alternatives: dict[str, list[list[str]]] = {"root": []}
    for rule in parser.rules:
        alternatives.setdefault(rule_name(rule.origin), []).append([rule_name(s) for s in rule.expansion])
    lines = []
    for name, alts in alternatives.items():
        filled = [" ".join(a) for a in alts if a]
        body = " | ".join(filled)
        lines.append(f"{name} ::= " + (f"( {body} )?" if len(filled) < len(alts) else body))
    for name, term in terminals.items():
        pattern = term.pattern
        if isinstance(pattern, lark.lexer.PatternStr):
            body = _literal(pattern.value)
        else:
            if pattern.flags:
                raise ValueError(f"terminal {name}: regex flags {pattern.flags} have no GBNF form here")
            body = _regex(sre_parse.parse(pattern.value))
        lines.append(f"{_name(name, terminal=True)} ::= {body}")
    return "\n".join(lines)
