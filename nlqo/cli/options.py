"""Command-line options generated from the fields of :class:`~nlqo.config.EngineConfig`: each
field's flag, type, choices, help text and default come from the field, so a new option is one
field, and no default is written twice.

>>> parser = argparse.ArgumentParser()
>>> add_config_options(parser, names=("tau", "kv_reuse", "hold_options"))
>>> config_from_args(parser.parse_args(["--tau", "0.8", "--no-kv-reuse", "--hold-options", "off"]))
... # doctest: +ELLIPSIS
EngineConfig(model='qwen2.5-coder-1.5b', ..., tau=0.8, max_hops=10, kv_reuse=False, ..., hold_options=False, ...)
"""

from __future__ import annotations

import argparse
import typing
from typing import Any, Iterable

import attrs

from nlqo.config import SECTIONS, EngineConfig, Flag
from nlqo.errors import ConfigError

GROUP_TITLES = {
    "model": "model",
    "retrieve": "retrieval",
    "parse": "parsing",
    "optimize": "planning",
    "lower": "lowering",
    "execute": "execution",
    "statistics": "statistics (auto)",
}


def on_off(text: str) -> bool:
    """``on`` or ``off`` as a bool (an argparse type).

    >>> on_off("on"), on_off("off")
    (True, False)
    """
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, not {text!r}")
    return text == "on"


def flagged(names: Iterable[str] | None = None, sections: Iterable[str] | None = None) -> list[attrs.Attribute]:
    """The fields with a flag, in section order, restricted to ``names`` or ``sections`` when given."""
    wanted_names = set(names) if names is not None else None
    wanted_sections = set(sections) if sections is not None else None
    fields = [
        f
        for f in attrs.fields(EngineConfig)
        if f.metadata.get("flag") is not None
        and (wanted_names is None or f.name in wanted_names)
        and (wanted_sections is None or f.metadata["section"] in wanted_sections)
    ]
    return sorted(fields, key=lambda f: SECTIONS.index(f.metadata["section"]))


def shown(value: Any) -> str:
    """A default as the user would type it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    return str(value)


def _type(field: attrs.Attribute) -> Any:
    """The argparse type of a value flag, from the field's annotation (``int | None`` -> int)."""
    hints = typing.get_type_hints(EngineConfig)
    args = [a for a in typing.get_args(hints[field.name]) if a is not type(None)] or [hints[field.name]]
    kind = args[0]
    return kind if kind in (int, float) else None


def _help(field: attrs.Attribute) -> str:
    text: str = field.metadata["help"]
    flag: Flag = field.metadata["flag"]
    if flag.style == "negate":
        return f"turn off what is on by default: {text}"
    if flag.style in ("switch", "list") or field.default is None:
        return text  # a None default is explained in the text ("None: ...")
    return f"{text} (default: {shown(field.default)})"


def add_config_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    names: Iterable[str] | None = None,
    sections: Iterable[str] | None = None,
    grouped: bool = False,
) -> None:
    """Add the flags of the chosen fields, each defaulting to its field's default (switches and
    lists: to not given). ``grouped`` puts each section in its own help group (``parser`` must then
    be a parser)."""
    groups: dict[str, Any] = {}
    for field in flagged(names, sections):
        target = parser
        if grouped:
            title = GROUP_TITLES[field.metadata["section"]]
            if title not in groups:
                groups[title] = parser.add_argument_group(title)
            target = groups[title]
        flag: Flag = field.metadata["flag"]
        common: dict[str, Any] = {"dest": flag.dest, "help": _help(field)}
        if flag.style == "switch" or flag.style == "negate":
            target.add_argument(*flag.names, action="store_true", default=None, **common)
        elif flag.style == "on-off":
            target.add_argument(*flag.names, type=on_off, default=field.default, metavar="on|off", **common)
        elif flag.style == "list":
            target.add_argument(*flag.names, action="append", default=None, metavar=flag.metavar, **common)
        else:
            choices = field.metadata["choices"]
            target.add_argument(
                *flag.names, type=_type(field), choices=choices, default=field.default, metavar=flag.metavar, **common
            )


def add_ablation_options(group: argparse._ArgumentGroup, order: Iterable[str]) -> None:
    """``nlqo bench``'s lists of values, one flag per field in ``order`` (``--NAME LIST``: each value a variant)."""
    fields = {f.name: f for f in attrs.fields(EngineConfig)}
    for name in order:
        field = fields[name]
        flag: Flag = field.metadata["flag"]
        if not flag.ablation:
            raise ValueError(f"{name} is not an ablation field")
        boolean = isinstance(field.default, bool)
        values = (
            "on, off or on,off"
            if boolean
            else "comma-separated, e.g. " + ",".join(field.metadata["choices"] or (shown(field.default),))
        )
        group.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            metavar="on|off" if boolean else "LIST",
            help=f"{field.metadata['help']} ({values}; default {shown(field.default)})",
        )


def parse_params(items: list[str]) -> dict[str, float]:
    """``--param NAME=VALUE`` values as a dict.

    >>> parse_params(["alpha=5", "w = 0.5"])
    {'alpha': 5.0, 'w': 0.5}
    """
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ConfigError(f"--param wants NAME=NUMBER, got {item!r}")
    return out


def config_from_args(args: argparse.Namespace, base: EngineConfig | None = None) -> EngineConfig:
    """``base`` (default: the defaults) changed by every config flag the command was given."""
    given = vars(args)
    changes: dict[str, Any] = {}
    for field in flagged():
        flag: Flag = field.metadata["flag"]
        value = given.get(flag.dest)
        if value is None:
            continue
        if flag.style == "negate":
            if value:
                changes[field.name] = False
        elif flag.style == "switch":
            if value:
                changes[field.name] = True
        elif field.name == "params":
            changes[field.name] = parse_params(value)
        else:
            changes[field.name] = value
    if given.get("index") is not None:
        changes["index"] = given["index"]
    try:
        return attrs.evolve(base or EngineConfig(), **changes)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
