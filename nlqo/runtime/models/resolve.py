"""Turn what a user typed (a bundled name, a folder, a .gguf file, a hub id) into a local model folder.

Everything resolves to a transformers model directory (``config.json``, safetensors, tokenizer)
that loads with ``local_files_only=True``: bundled models and GGUF files are verified and
converted once into the cache (see :mod:`nlqo.runtime.models.convert`); hub ids are looked up in the
local Hugging Face cache only, since nothing is downloaded at run time.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import re
from pathlib import Path

import attrs

from nlqo.errors import ModelNotAvailable
from nlqo.runtime.models.convert import convert_gguf, damage, is_converted, models_dir, read_marker
from nlqo.runtime.models.parts import assemble, locate
from nlqo.runtime.models.registry import BUNDLED, BundledModel
from nlqo.common.paths import FILE, FOLDER, NOTHING, found

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class Origin(enum.Enum):
    BUNDLED = "bundled"
    DIRECTORY = "directory"
    GGUF = "gguf"
    HUB = "hub"


@attrs.frozen
class ResolvedModel:
    """A model ready to load offline from ``path``."""

    name: str
    """The bundled name, or the path / hub id as given."""
    path: Path
    """A transformers model directory."""
    origin: Origin
    sha256: str | None = None
    """SHA-256 of the source GGUF, for bundled models."""
    converted_now: bool = False
    """Whether this call ran the one-time conversion."""


def bundled_dir(model: BundledModel, root: Path | None = None) -> Path:
    """Where the converted ``model`` lives in the cache (the hash keeps releases apart)."""
    return models_dir(root) / f"{model.name}-{model.sha256[:12]}"


def gguf_dir(path: Path, root: Path | None = None) -> Path:
    """Where a user's GGUF file is converted to, keyed by its path, size and mtime."""
    path = path.resolve()
    stat = path.stat()
    key = hashlib.sha1(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    stem = re.sub(r"[^\w.-]", "_", path.stem)
    return models_dir(root) / f"gguf-{stem}-{key}"


def resolve_model(
    name_or_path: str | Path,
    *,
    cache_dir: Path | None = None,
    registry: tuple[BundledModel, ...] = BUNDLED,
    progress: bool = True,
) -> ResolvedModel:
    """Resolve a bundled model name, a model directory, a ``.gguf`` file or a cached hub id.

    ``cache_dir`` overrides the cache root (``$NLQO_CACHE``, else ``~/.cache/nlqo``).
    Raises :class:`~nlqo.errors.ModelNotAvailable` with what to do next.
    """
    text = str(name_or_path)
    for model in registry:
        if model.name == text:
            return _bundled(model, cache_dir, progress)
    path = local_path(text)
    if path is not None and path.is_dir():
        return _directory(text, path, cache_dir, progress, Origin.DIRECTORY)
    if path is not None:
        if path.suffix.lower() != ".gguf":
            raise ModelNotAvailable(f"{text}: not a model directory or a .gguf file")
        return _gguf(text, path, cache_dir, progress)
    if _HUB_ID.match(text):
        return _hub(text, cache_dir, progress)
    known = ", ".join(m.name for m in registry)
    raise ModelNotAvailable(
        f"unknown model {text!r} (known: {known}); "
        "or give a local model directory, a .gguf file, or a Hugging Face id already in the local cache"
    )


def local_path(text: str) -> Path | None:
    """The readable file or folder ``text`` names; None when nothing is there and ``text`` may be a
    model name or a hub id. Raises :class:`ModelNotAvailable` saying what is there for a path
    where no model can be read (a symlink loop, nothing under a file, no permission)."""
    path = Path(text).expanduser()
    what = found(path)
    if what in (FILE, FOLDER):
        return path
    if what == NOTHING:
        hub_id = _HUB_ID.match(text) is not None
        if not (os.sep in text and not hub_id or text.startswith(("~", ".")) or path.suffix.lower() == ".gguf"):
            return None  # a name: resolve_model says whether it knows it
    raise ModelNotAvailable(f"{text}: expected a bundled model name, a model folder or a .gguf file, found {what}")


def _bundled(model: BundledModel, root: Path | None, progress: bool) -> ResolvedModel:
    dest = bundled_dir(model, root)
    if is_converted(dest) and read_marker(dest).get("sha256") == model.sha256 and damage(dest) is None:
        return ResolvedModel(model.name, dest, Origin.BUNDLED, model.sha256)
    locate(model)  # fail early, naming the missing packages
    info = {"name": model.name, "sha256": model.sha256, "requirements": list(model.requirements())}
    converted = convert_gguf(
        lambda staging: assemble(model, staging, progress=progress),
        dest,
        label=model.name,
        info=info,
        progress=progress,
    )
    return ResolvedModel(model.name, dest, Origin.BUNDLED, model.sha256, converted_now=converted)


def _directory(name: str, folder: Path, root: Path | None, progress: bool, origin: Origin) -> ResolvedModel:
    config = folder / "config.json"
    if os.path.lexists(config):
        problem = _not_a_model_config(config)
        if problem:
            raise ModelNotAvailable(f"{name}: not a model directory ({config} {problem})")
        return ResolvedModel(name, folder, origin)
    ggufs = sorted(folder.glob("*.gguf"))
    if len(ggufs) == 1:
        return attrs.evolve(_gguf(name, ggufs[0], root, progress), origin=origin)
    found = "several .gguf files" if ggufs else "neither config.json nor a .gguf file"
    raise ModelNotAvailable(f"{name}: not a model directory ({folder} holds {found})")


def _not_a_model_config(config: Path) -> str | None:
    """Why ``config`` is not a transformers model's ``config.json`` (another program's, say), or None."""
    what = found(config)
    if what != FILE:
        return f"is {what}"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        return f"is not JSON ({exc})"
    if not isinstance(data, dict) or not (data.get("model_type") or data.get("architectures")):
        return "is not a transformers model's configuration: it names no model_type"
    return None


def _gguf(name: str, path: Path, root: Path | None, progress: bool) -> ResolvedModel:
    dest = gguf_dir(path, root)
    if is_converted(dest) and damage(dest) is None:
        return ResolvedModel(name, dest, Origin.GGUF)
    info = {"name": name, "file": str(path.resolve()), "size": path.stat().st_size}
    converted = convert_gguf(lambda staging: path, dest, label=path.name, info=info, progress=progress)
    return ResolvedModel(name, dest, Origin.GGUF, converted_now=converted)


def _hub(repo_id: str, root: Path | None, progress: bool) -> ResolvedModel:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(repo_id, local_files_only=True)
    except (LocalEntryNotFoundError, HFValidationError, OSError) as exc:
        raise ModelNotAvailable(
            f"{repo_id!r} is neither a bundled model, a local path, nor in the local Hugging Face cache "
            f"(nlqo never downloads at run time): {type(exc).__name__}"
        ) from None
    return _directory(repo_id, Path(folder), root, progress, Origin.HUB)
