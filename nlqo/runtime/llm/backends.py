"""Backends by name: ``load_llm`` turns a model name into an :class:`~nlqo.runtime.llm.base.LLM`.

A name ``SCHEME:SPEC`` goes to the backend registered as ``SCHEME``: the built-in ``openai``
(``openai:MODEL@URL``, an OpenAI-compatible server) or one an installed package registers under
the entry-point group ``nlqo.backends``. Any other name is a local model (a bundled name, a model
folder or a ``.gguf`` file). A backend package therefore needs no edit of nlqo::

    # pyproject.toml of the package
    [project.entry-points."nlqo.backends"]
    mybackend = "mypkg.backend:load"

    # mypkg/backend.py
    def load(spec: str, **options) -> MyLLM:   # options: runtime, quantize, threads
        return MyLLM(spec)

and ``nlqo ask ... --model mybackend:some-model`` uses it. The backend declares what it can do
with a ``capabilities`` attribute (:class:`nlqo.runtime.llm.base.Capabilities`).

>>> sorted(backends())[:1]
['openai']
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Callable

from nlqo.config import default
from nlqo.errors import ConfigError
from nlqo.runtime.llm.base import LLM
from nlqo.common.extras import need

Loader = Callable[..., LLM]
"""``loader(spec, *, runtime, quantize, threads) -> LLM``."""


def _openai(spec: str, **_options: Any) -> LLM:
    from nlqo.runtime.llm.openai_compat import OpenAICompatLLM

    model, _, url = spec.partition("@")
    return OpenAICompatLLM.from_env(base_url=url or "http://127.0.0.1:8000/v1", model=model)


def backends() -> dict[str, Loader]:
    """Built-in backends, then those of installed packages (entry points ``nlqo.backends``)."""
    found: dict[str, Loader] = {"openai": _openai}
    for ep in entry_points(group="nlqo.backends"):
        found[ep.name] = ep.load()
    return found


def load_llm(
    name: str,
    *,
    runtime: str = default("runtime"),
    quantize: str = default("quantize"),
    threads: int | None = None,
    progress: bool = True,
) -> LLM:
    """A backend by model name: ``SCHEME:SPEC`` of a registered backend, else a local model.

    ``runtime``, ``quantize`` and ``threads`` apply to local models; a registered backend gets
    them too and may ignore them. ``progress`` (local models) shows verification and loading bars.
    """
    scheme, sep, spec = name.partition(":")
    if sep and scheme and "/" not in scheme:
        registered = backends()
        if scheme in registered:
            return registered[scheme](spec, runtime=runtime, quantize=quantize, threads=threads)
        if len(scheme) > 1:  # not a Windows drive letter
            raise ConfigError(
                f"no backend {scheme!r} for model {name!r} (installed backends: {', '.join(sorted(registered))})"
            )
    return _local(name, runtime=runtime, quantize=quantize, threads=threads, progress=progress)


def _local(name: str, *, runtime: str, quantize: str, threads: int | None, progress: bool = True) -> LLM:
    """A local model on the runtime ``runtime`` asks for (:func:`nlqo.runtime.models.load_local`)."""
    from nlqo.runtime.models import load_local

    need("transformers", "llm")
    return load_local(name, runtime=runtime, quantize=quantize, threads=threads, progress=progress)


def runtime_of(llm: Any) -> str:
    """Which runtime ``llm`` runs on: 'llama-cpp', 'transformers', 'server' or its class name."""
    kind = type(getattr(llm, "inner", llm)).__name__
    return {"LlamaCppLLM": "llama-cpp", "TransformersLLM": "transformers", "OpenAICompatLLM": "server"}.get(kind, kind)
