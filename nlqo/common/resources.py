"""Find the definition files (grammars, rewrite-rule lists, cost models).

They live in the top-level folders ``grammar/``, ``rules/`` and ``cost_models/`` of a source
checkout and ship inside the wheel as ``nlqo/_data/<folder>``. Users add folders of their own
with the ``NLQO_PATH`` environment variable (``os.pathsep``-separated) or a ``--path`` option;
those are searched first, both as ``<dir>/<folder>/<name>`` and ``<dir>/<name>``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from nlqo.common import paths
from nlqo.errors import ConfigError

KINDS = ("grammar", "rules", "cost_models")
FILES = {
    "grammar": "a grammar file (.lark)",
    "rules": "a rule list (.rules)",
    "cost_models": "a cost-model file (.cost)",
}
"""What a file of each kind is, for messages."""
_PACKAGE = Path(__file__).resolve().parents[1]


def builtin_dir(kind: str) -> Path:
    """The folder holding the built-in definitions of ``kind`` (wheel first, then checkout)."""
    if kind not in KINDS:
        raise ValueError(f"unknown resource kind {kind!r}")
    for candidate in (_PACKAGE / "_data" / kind, _PACKAGE.parent / kind):
        if candidate.is_dir():
            return candidate
    raise ConfigError(
        f"nlqo's built-in {kind}/ folder is missing (looked in {_PACKAGE / '_data'} and {_PACKAGE.parent})"
    )


def search_path(extra: Sequence[str | Path] = (), env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """User folders in search order: ``extra`` first, then ``NLQO_PATH``."""
    variables = os.environ if env is None else env
    from_env = [p for p in variables.get("NLQO_PATH", "").split(os.pathsep) if p]
    return tuple(Path(p) for p in (*extra, *from_env))


def find(kind: str, name: str, suffix: str, extra: Sequence[str | Path] = ()) -> Path:
    """Resolve ``name`` (a path, or a bare name without suffix) to a definition file.

    >>> find("cost_models", "default", ".cost").name
    'default.cost'
    >>> find("cost_models", "/nowhere/mine.cost", ".cost")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    nlqo.errors.ConfigError: /nowhere/mine.cost: expected a cost-model file (.cost), found nothing (no such file or folder); or name a known one: default, ...
    """
    as_path = Path(name)
    if as_path.suffix == suffix or os.sep in name:
        if as_path.is_file():
            return as_path
        what = paths.found(as_path)
        known = ", ".join(sorted(available(kind, suffix, extra))) or "none"
        hint = f"; or name a known one: {known}" if what.startswith("nothing") else ""
        raise ConfigError(f"{name}: expected {FILES[kind]}, found {what}{hint}")
    filename = name + suffix
    for folder in search_path(extra):
        for candidate in (folder / kind / filename, folder / filename):
            if candidate.is_file():
                return candidate
    candidate = builtin_dir(kind) / filename
    if candidate.is_file():
        return candidate
    known = ", ".join(sorted(available(kind, suffix, extra))) or "none"
    raise ConfigError(f"no {kind} definition named {name!r} (known: {known})")


def available(kind: str, suffix: str, extra: Sequence[str | Path] = ()) -> dict[str, Path]:
    """Every definition of ``kind`` by name; user folders shadow the built-ins."""
    found: dict[str, Path] = {}
    folders: Iterable[Path] = [builtin_dir(kind)]
    for folder in reversed(search_path(extra)):
        folders = [*folders, folder / kind, folder]
    for folder in folders:
        if folder.is_dir():
            for path in sorted(folder.glob("*" + suffix)):
                found[path.stem] = path
    return found
