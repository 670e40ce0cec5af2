"""Statistics of each operator's answers, measured by ``nlqo analyze`` on a labelled sample and
stored beside the index (``statistics.json``), with what they were measured on.

The engine uses them only where they match its model, runtime, embedder, k, retrieval mode and
index; a mismatch is refused with the difference named (:func:`check`). Without a file the
engine falls back to the bundled defaults (``default.json`` here, measured on the shared dev sets'
first 50 questions), and EXPLAIN says so.

Since version 2 a file also carries the sample's calibration (how well the model's confidence tells
right answers from wrong ones, and the cascade's escalation fitted from it:
:mod:`nlqo.planner.statistics.calibration`); a version-1 file reads as statistics without one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

import attrs

from nlqo.common.storage import replace_atomically
from nlqo.errors import ConfigError
from nlqo.planner.statistics.calibration import ALL, Calibration

FILENAME = "statistics.json"
FORMAT = "nlqo-statistics"
VERSION = 2
"""Version of the statistics file format (2 added the calibration); version 1 reads as statistics
without calibration, any other version is refused."""
READABLE = (1, VERSION)
"""Versions :func:`load` reads."""
IDENTITY = ("model", "runtime", "embedder", "k", "retrieval", "index_digest")
"""What statistics must have been measured on to be used (``measured_on``)."""
MIN_CLASS = 8
"""Questions a class needs in the sample before its own statistics are used instead of ``all``."""
BUNDLED = Path(__file__).with_name("default.json")


@attrs.frozen
class OperatorStats:
    """One operator's measurements over one class of questions."""

    n: int
    em: float
    em_low: float
    em_high: float
    f1: float = 0.0
    supported: float = 0.0
    """Share of answers supported by their passages (:mod:`nlqo.execution.operators.support`)."""
    seconds: float = 0.0
    prompt_tokens: float = 0.0
    generated_tokens: float = 0.0
    llm_calls: float = 0.0


@attrs.frozen
class Statistics:
    measured_on: Mapping[str, Any]
    operators: Mapping[str, Mapping[str, OperatorStats]]
    """Operator -> question class (or ``all``) -> statistics."""
    sample: Mapping[str, Any] = attrs.field(factory=dict)
    """The question file, its SHA-256 and the ids of the questions measured."""
    source: str = "nlqo analyze"
    prefill_ms_per_token: float | None = None
    """The backend's per-token prefill cost when measured, to scale seconds to another machine."""
    path: str = ""
    bundled: bool = False
    calibration: Calibration | None = None
    """The sample's calibration (confidence against exact match, the cascade's escalation); None
    for a version-1 file or a sample without confidence."""

    def get(self, operator: str, question_class: str) -> tuple[OperatorStats, str] | None:
        """An operator's statistics for a class, or over all questions when the class has fewer
        than :data:`MIN_CLASS`; with the key used. None for an operator never measured."""
        classes = self.operators.get(str(operator))
        if not classes:
            return None
        own = classes.get(str(question_class))
        if own is not None and own.n >= MIN_CLASS:
            return own, str(question_class)
        return (classes[ALL], ALL) if ALL in classes else None

    def describe(self) -> str:
        n = max((c[ALL].n for c in self.operators.values() if ALL in c), default=0)
        where = "bundled defaults" if self.bundled else self.path
        return f"{where} ({self.source}; {n} questions; {self.measured_on.get('model', '?')}, k={self.measured_on.get('k', '?')})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "source": self.source,
            "measured_on": dict(self.measured_on),
            "sample": dict(self.sample),
            "prefill_ms_per_token": self.prefill_ms_per_token,
            "operators": {
                op: {c: attrs.asdict(s) for c, s in classes.items()} for op, classes in self.operators.items()
            },
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
        }


def load(path: str | Path, *, bundled: bool = False) -> Statistics:
    """Read a statistics file; a file that is not one is a :class:`ConfigError` naming it. A
    version-1 file has no calibration."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError(f"not an nlqo statistics file (format {data.get('format')!r})")
        if data.get("version") not in READABLE:
            raise ValueError(f"version {data.get('version')!r}; this nlqo reads versions {READABLE[0]} to {VERSION}")
        operators = {
            op: {c: _operator_stats(f"operators.{op}.{c}", s) for c, s in classes.items()}
            for op, classes in data["operators"].items()
        }
        _check_shape(data)
        if not any(ALL in classes for classes in operators.values()):  # else auto has nothing to choose from
            raise ValueError(f"no operator measured over all questions (no operator has figures under {ALL!r})")
        calibration = data.get("calibration") if data["version"] >= 2 else None
        return Statistics(
            measured_on=data["measured_on"], operators=operators, sample=data.get("sample", {}), source=data.get("source", "?"),
            prefill_ms_per_token=data.get("prefill_ms_per_token"), path=str(path), bundled=bundled,
            calibration=None if calibration is None else Calibration.from_dict(calibration),
        )  # fmt: skip
    except RecursionError:
        raise ConfigError(
            f"{path}: cannot read statistics: JSON nested too deeply; rebuild them with 'nlqo analyze'"
        ) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:  # int(Infinity)
        reason = str(exc).replace("\n", "\\n")  # one line, whatever key or value the message quotes
        raise ConfigError(f"{path}: cannot read statistics: {reason}; rebuild them with 'nlqo analyze'") from None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _operator_stats(where: str, fields: Any) -> OperatorStats:
    """One operator's statistics as JSON holds them; a field that is not a finite number is a ValueError
    naming it (``auto`` compares and scales them)."""
    unknown = [name for name in fields if name not in attrs.fields_dict(OperatorStats)]
    if unknown:  # named as Python writes it: a fuzzed key holding a line break made a message of two lines
        raise ValueError(f"{where} has an unknown field {unknown[0]!r}")
    stats = OperatorStats(**fields)
    for name, value in attrs.asdict(stats).items():
        if not _number(value):
            raise ValueError(f"{where}.{name} is {json.dumps(value)[:40]}, not a number")
    return stats


def _check_shape(data: Mapping[str, Any]) -> None:
    """The fields besides the operators' have their types (a fuzzed file found each one unchecked)."""
    for name, kind, what in (
        ("measured_on", dict, "an object"),
        ("sample", dict, "an object"),
        ("source", str, "a string"),
    ):
        if name in data and not isinstance(data[name], kind):
            raise ValueError(f"{name} is {json.dumps(data[name])[:40]}, not {what}")
    prefill = data.get("prefill_ms_per_token")
    if prefill is not None and not _number(prefill):
        raise ValueError(f"prefill_ms_per_token is {json.dumps(prefill)[:40]}, not a number")


def save(stats: Statistics, path: str | Path) -> Path:
    """Write ``stats`` atomically (a temporary file renamed over the old one)."""
    path = Path(path)
    replace_atomically(path, json.dumps(stats.to_dict(), indent=2, sort_keys=True) + "\n")
    return path


def index_digest(manifest) -> str:
    """A digest of an index's files from its manifest's checksums: equal digests, equal indexes."""
    import hashlib

    entries = sorted((f.path, f.sha256) for f in manifest.files)
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def differences(stats: Statistics, identity: Mapping[str, Any]) -> list[str]:
    """What differs between what ``stats`` were measured on and ``identity`` (the engine's)."""
    out = []
    for key in IDENTITY:
        have, want = stats.measured_on.get(key), identity.get(key)
        if have is not None and want is not None and str(have) != str(want):
            out.append(f"{key} {have!r}, not {want!r}")
    return out


def check(stats: Statistics, identity: Mapping[str, Any]) -> Statistics:
    """``stats`` if they were measured on ``identity``; else a :class:`ConfigError` naming the differences."""
    diff = differences(stats, identity)
    if diff:
        raise ConfigError(
            f"{stats.path}: these statistics were measured with {'; '.join(diff)}; they are not used for another setup. "
            "Rebuild them for this one: nlqo analyze --index DIR --questions FILE (with the same --model, -k and --mode), "
            "or move the file away to use the bundled defaults"
        )
    return stats


def for_index(index: str | Path | None, identity: Mapping[str, Any]) -> Statistics:
    """The statistics beside ``index`` (checked against ``identity``), else the bundled defaults."""
    if index is not None and (Path(index) / FILENAME).is_file():
        return check(load(Path(index) / FILENAME), identity)
    return load(BUNDLED, bundled=True)
