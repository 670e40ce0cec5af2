"""Optional parts of nlqo and the libraries they need: ``pip install nlqo`` is the IR, the optimizer,
cost models, EXPLAIN of plans and the testing kit; each extra adds one part.

>>> need("json", "llm").__name__
'json'
>>> need("no_such_library_here", "serve")
Traceback (most recent call last):
...
nlqo.errors.MissingExtra: this needs the no_such_library_here package, part of nlqo's serve extra (the HTTP service): pip install 'nlqo[serve]'
"""

from __future__ import annotations

import importlib
from types import ModuleType

from nlqo.errors import MissingExtra

EXTRAS = {
    "llm": "a local or served LLM: llama.cpp, transformers, constrained decoding",
    "index": "indexes, retrieval and the embedder (also the cost models' similarity term)",
    "serve": "the HTTP service",
    "eval": "benchmarks, reports and plots",
    "cluster": "Dask clusters for batch work",
}
"""Each extra of pyproject.toml and the part of nlqo it brings (``all`` brings every one)."""


def need(module: str, extra: str) -> ModuleType:
    """``module`` imported, or :class:`MissingExtra` saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and exc.name != module and not module.startswith(exc.name + "."):
            raise  # the library is there but something it needs is broken: its own error says more
        package = module.split(".")[0]
        raise MissingExtra(
            f"this needs the {package} package, part of nlqo's {extra} extra ({EXTRAS[extra]}): "
            f"pip install 'nlqo[{extra}]'"
        ) from exc
