"""nlqo: a natural-language query optimizer.

A multi-hop question is parsed into a small program of triples (the IR), optimised into the
cheapest logical query tree (LQT) under a pluggable cost model, lowered to a physical plan and
executed with a local LLM and a dense retriever. Every step can be EXPLAINed.

The Python API is one configuration value and one engine built from it::

    from nlqo import Engine, EngineConfig

    engine = Engine.from_config(EngineConfig(index=".nlqo/demo-index", cost_model="structural"))
    planned = engine.plan("In which city was the director of Jaws born?")
    result = engine.ask("In which city was the director of Jaws born?")

(``Engine``'s docstring runs the same with a scripted LLM.) Importing ``nlqo`` loads nothing heavy:
``Engine`` and ``EngineConfig`` are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nlqo._version import __version__

__all__ = ["Engine", "EngineConfig", "__version__"]

if TYPE_CHECKING:
    from nlqo.config import EngineConfig
    from nlqo.main.engine import Engine


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from nlqo.main.engine import Engine

        return Engine
    if name == "EngineConfig":
        from nlqo.config import EngineConfig

        return EngineConfig
    raise AttributeError(f"module 'nlqo' has no attribute {name!r}")
