"""Question-answering strategies by name: the baselines and nlqo's own executors.

A name may carry options in brackets, ``linear[tau=0.8,kv_reuse=off]``; the built strategy then
reports that full name. The engine's strategies (``auto`` and each operator) are built by
:func:`nlqo.main.by_name.build`, imported only when one is built.

>>> parse_spec("linear[tau=0.8,kv_reuse=off]")
('linear', {'tau': 0.8, 'kv_reuse': False})
>>> spec_name("linear", {"tau": 0.8, "kv_reuse": False})
'linear[tau=0.8,kv_reuse=off]'
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

import attrs

from nlqo.config import STRATEGIES as PLANNED, EngineConfig, sentence_count, default
from nlqo.errors import ConfigError
from nlqo.execution.trace import RunResult, Trace
from nlqo.kinds import AUTO, Operator
from nlqo.runtime.llm.base import LLM
from nlqo.common.passages import Embedder, Retriever
from nlqo.eval.baselines import BASELINES

STRATEGIES: tuple[str, ...] = (*BASELINES, *PLANNED)
"""Every strategy name ``build_strategy`` knows: the baselines, then the engine's (:data:`nlqo.config.STRATEGIES`)."""
BENCH = (*BASELINES, Operator.LINEAR.value, Operator.TREE.value, AUTO)
"""What ``nlqo bench`` runs without ``--strategies``: every baseline, the template, the tree and ``auto``."""

_SPEC = re.compile(r"^\s*([A-Za-z][\w-]*)\s*(?:\[(.*)\])?\s*$")


@runtime_checkable
class Strategy(Protocol):
    """Answers one question at a time, recording every call in the trace."""

    name: str

    def run(self, question: str, trace: Trace | None = None) -> RunResult: ...


def parse_value(text: str) -> Any:
    """An option value: on/off/true/false, an int, a float, else the text.

    >>> parse_value("on"), parse_value("5"), parse_value("0.85"), parse_value("dp")
    (True, 5, 0.85, 'dp')
    """
    low = text.strip().lower()
    if low in ("on", "true", "yes"):
        return True
    if low in ("off", "false", "no"):
        return False
    for kind in (int, float):
        try:
            return kind(low)
        except ValueError:
            pass
    return text.strip()


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``name[opt=value,...]`` into the name and its options."""
    match = _SPEC.match(spec)
    if match is None:
        raise ConfigError(f"bad strategy {spec!r}: write NAME or NAME[option=value,...]")
    name, body = match.group(1), match.group(2)
    options: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in (body or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"bad option {item!r} in strategy {spec!r}: write option=value")
        options[key.strip()] = parse_value(value)
    return name, options


def spec_name(name: str, options: dict[str, Any]) -> str:
    """The display name of a strategy with options (the inverse of ``parse_spec``)."""
    if not options:
        return name
    return f"{name}[{','.join(f'{k}={format_value(v)}' for k, v in options.items())}]"


def split_specs(text: str) -> list[str]:
    """Split a comma-separated strategy list, keeping commas inside brackets.

    >>> split_specs("no-rag, linear[tau=0.8,alpha=5],tree")
    ['no-rag', 'linear[tau=0.8,alpha=5]', 'tree']
    """
    out, depth, current = [], 0, ""
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    out.append(current.strip())
    return [s for s in out if s]


@attrs.define(eq=False)
class Named:
    """A strategy reported under another name (a variant such as ``linear[tau=0.8]``)."""

    name: str
    inner: Strategy

    def run(self, question: str, trace: Trace | None = None) -> RunResult:
        return attrs.evolve(self.inner.run(question, trace), strategy=self.name)


def build_strategy(
    name: str,
    llm: LLM,
    retriever: Retriever,
    *,
    embedder: Embedder | None = None,
    k: int = default("k"),
    config: EngineConfig | None = None,
    **options: Any,
) -> Strategy:
    """The strategy called ``name`` (options in brackets merge with ``options``); nlqo's own
    strategies start from ``config`` (the bench's shared planning options)."""
    base, spec_options = parse_spec(name)
    options = {**spec_options, **options}
    full = spec_name(base, options)
    if base in BASELINES:
        cls = BASELINES[base]
        retriever = _compressing(retriever, embedder, options.pop("compress", 0))
        allowed = {a.name for a in attrs.fields(cls)} - {"llm", "retriever", "k"}
        unknown = sorted(set(options) - allowed)
        if unknown:
            accepts = ", ".join(sorted(allowed)) or "none"
            raise ConfigError(f"strategy {base!r} has no option {', '.join(unknown)} (it accepts: {accepts})")
        try:
            strategy = cls(llm=llm, retriever=retriever, k=k, **options)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"strategy {full!r}: {exc}") from exc
    elif base in PLANNED:
        from nlqo.main.by_name import build

        strategy = build(base, llm, retriever, embedder=embedder, k=k, config=config, **options)
    else:
        raise ConfigError(f"unknown strategy {base!r} (choose from {', '.join(STRATEGIES)})")
    return strategy if full == base else Named(full, strategy)


def _compressing(retriever: Retriever, embedder: Embedder | None, keep: Any) -> Retriever:
    """A baseline's retriever with its passages compressed to ``keep`` sentences (its ``compress`` option)."""
    from nlqo.index.compress import compressing

    try:
        keep = sentence_count(keep)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    if not keep:
        return retriever
    if embedder is None:
        raise ConfigError("compress needs an embedder: the index's")
    return compressing(retriever, embedder, keep)


def build_strategies(specs, llm, index, *, retrieval: str, k: int, config) -> dict:
    """Strategy name -> strategy over ``index`` (planned ones start from ``config``). Each gets a
    fork of ``llm`` with its own prefix cache when the backend declares forks, so no strategy's
    timing depends on which one ran before it."""
    from nlqo.runtime.llm.base import forked

    retriever = index.retriever(retrieval)
    return {
        spec: build_strategy(spec, forked(llm), retriever, embedder=index.embedder, k=k, config=config)
        for spec in specs
    }
