"""The reference tables of docs/architecture.md, generated from their owners: every setting and its
default (:class:`~nlqo.config.EngineConfig`), every vocabulary (:mod:`nlqo.kinds` and the strategy
registries) and the fixed constants of the algorithms. ``python -m nlqo.cli.reference`` rewrites the
blocks; a test fails when the page and the code disagree.

>>> "| `k` | retrieve | `3` |" in settings_table()
True
"""

from __future__ import annotations

import ast
import enum
import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import attrs

from nlqo import kinds
from nlqo.config import SECTIONS, STRATEGIES, EngineConfig

PAGE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"

CONSTANTS: tuple[tuple[str, str], ...] = (
    ("nlqo.execution.operators.iterate", "ROUNDS"),
    ("nlqo.planner.statistics.store", "MIN_CLASS"),
    ("nlqo.planner.statistics.store", "VERSION"),
    ("nlqo.planner.statistics.calibration", "MIN_CALIBRATION"),
    ("nlqo.planner.statistics.calibration", "BOOTSTRAP"),
    ("nlqo.planner.statistics.calibration", "SEED"),
    ("nlqo.execution.physical", "PASSAGE_TOKENS"),
    ("nlqo.execution.choice", "MAX_PASSAGES"),
    ("nlqo.execution.fallback", "MAX_SPAN_WORDS"),
    ("nlqo.index.fusion", "HYBRID_DEPTH"),
    ("nlqo.index.fusion", "RRF_K"),
    ("nlqo.optimizer.dp", "PROBES_PER_PAIR"),
    ("nlqo.ir.grammar", "MAX_TARGETS"),
    ("nlqo.runtime.llm.llamacpp.loading", "DEFAULT_N_SEQ"),
    ("nlqo.runtime.llm.llamacpp.loading", "DEFAULT_N_CTX_SEQ"),
    ("nlqo.runtime.llm.llamacpp.loading", "PREFILL_CHUNK"),
    ("nlqo.index.manifest", "FORMAT_VERSION"),
)
"""Fixed constants of the algorithms and file formats (not settings): module and name. Each has a
docstring in its module, which the table shows."""


def _shown(value: Any) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None:
        return "None"
    if isinstance(value, tuple) and not value:
        return "()"
    return f"`{value}`"


def _flag(field: attrs.Attribute) -> str:
    flag = field.metadata.get("flag")
    if flag is None:
        return "(API only)"
    return ", ".join(f"`{n}`" for n in flag.names) + (" (bench ablation)" if flag.ablation else "")


def settings_table() -> str:
    """Every field of :class:`EngineConfig`, by section: its default, flag and meaning."""
    rows = ["| setting | section | default | flag | meaning |", "|---|---|---|---|---|"]
    fields: list[attrs.Attribute] = sorted(
        attrs.fields(EngineConfig), key=lambda f: SECTIONS.index(f.metadata["section"])
    )
    for f in fields:
        help_text = f.metadata["help"].replace("|", "/")
        rows.append(f"| `{f.name}` | {f.metadata['section']} | {_shown(f.default)} | {_flag(f)} | {help_text} |")
    return "\n".join(rows)


def _vocabularies() -> list[tuple[str, str, tuple[str, ...]]]:
    from nlqo.eval.baselines import BASELINES

    found = [
        (f"`kinds.{name}`", _sentence(obj.__doc__ or ""), obj.values())
        for name, obj in vars(kinds).items()
        if isinstance(obj, type) and issubclass(obj, kinds._Word) and obj is not kinds._Word
    ]
    found.append(("`config.STRATEGIES`", "auto, or one operator forced (built-in or an entry point's)", STRATEGIES))
    found.append(("`eval.baselines.BASELINES`", "the baselines nlqo is measured against", tuple(BASELINES)))
    return found


def vocabularies_table() -> str:
    """Every closed vocabulary: its one owner and its values."""
    rows = ["| vocabulary | what it names | values |", "|---|---|---|"]
    for owner, what, values in _vocabularies():
        rows.append(f"| {owner} | {what} | {', '.join(f'`{v}`' for v in values)} |")
    return "\n".join(rows)


def constant_doc(module: str, name: str) -> str:
    """The docstring under ``name = ...`` in ``module``'s source."""
    source = importlib.util.find_spec(module).origin  # type: ignore[union-attr]
    body = ast.parse(Path(str(source)).read_text(encoding="utf-8")).body
    for statement, after in zip(body, body[1:]):
        targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                return str(after.value.value)
    raise LookupError(f"{module}.{name} has no docstring")


def _sentence(doc: str) -> str:
    """The first sentence of a docstring, with reST roles and double backquotes made Markdown."""
    text = " ".join(doc.split("\n\n")[0].split())
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")
    head = re.split(r"(?<=[.:])\s(?=[A-Z(])", text, maxsplit=1)[0]
    return head.replace("|", "/")


def constants_table() -> str:
    """The algorithms' fixed constants and their docstrings, read from their owning modules."""
    rows = ["| constant | value | meaning |", "|---|---|---|"]
    for module, name in CONSTANTS:
        value = getattr(importlib.import_module(module), name)
        rows.append(f"| `{module}.{name}` | `{value}` | {_sentence(constant_doc(module, name))} |")
    return "\n".join(rows)


BLOCKS = {"settings": settings_table, "vocabularies": vocabularies_table, "constants": constants_table}
"""The generated blocks of docs/architecture.md, by name."""


def write(page: Path = PAGE) -> None:
    """Rewrite every generated block of ``page``."""
    from nlqo.common.docblocks import write_block

    for name, render in BLOCKS.items():
        write_block(page, name, render())


if __name__ == "__main__":
    write()
