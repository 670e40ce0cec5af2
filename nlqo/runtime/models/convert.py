"""One-time conversion of a GGUF file into a safetensors model directory in nlqo's cache.

Loading a GGUF with transformers de-quantizes every tensor (the 1.5B model takes ~80 s and ~9 GB);
the result is saved once as float32 safetensors and later loads take seconds. The conversion is
written into a staging directory beside the destination and renamed into place at the end, so a
crash or Ctrl-C never leaves a half-written model where a complete one is expected. Staging
directories left by a killed process are removed by the next conversion. One process converts a
model at a time (:mod:`nlqo.runtime.models.lock`); another that asks meanwhile waits and reuses the result.
The marker lists each file's size, modification time and SHA-256: a finished conversion whose files
no longer match is converted again, with a :class:`~nlqo.errors.RepairWarning`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from nlqo.errors import ModelNotAvailable, RepairWarning
from nlqo.runtime.models.lock import building
from nlqo.common.paths import cache_root
from nlqo.common.storage import replace_atomically
from nlqo.runtime.models.parts import stream_sha256

MARKER = "nlqo-model.json"
"""Written last into a converted directory: what it was made from."""


def models_dir(root: Path | None = None) -> Path:
    return (cache_root() if root is None else root) / "models"


def is_converted(folder: Path) -> bool:
    """Whether ``folder`` is a finished conversion (it holds the marker file)."""
    return (folder / MARKER).is_file()


def read_marker(folder: Path) -> dict[str, Any]:
    """The marker of a finished conversion; ``{}`` when it is unreadable (see :func:`damage`)."""
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return marker if isinstance(marker, dict) else {}


def file_stamps(folder: Path) -> dict[str, dict[str, Any]]:
    """Size, modification time and SHA-256 of each file in ``folder`` (for the marker)."""
    stamps = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        stamps[path.relative_to(folder).as_posix()] = {
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "sha256": stream_sha256([path]),
        }
    return stamps


def damage(folder: Path) -> str | None:
    """What is wrong with the finished conversion ``folder``; None when its files are as converted.

    A file whose size and modification time match the marker is taken as it is; one whose time
    changed is hashed, and the marker takes the new time when the bytes are right (a copied cache).
    Markers written before files were listed are trusted.
    """
    marker = read_marker(folder)
    try:
        files = {
            str(name): (int(want["size"]), int(want["mtime_ns"]), str(want["sha256"]))
            for name, want in marker.get("files", {}).items()
        }
    except (AttributeError, KeyError, TypeError, ValueError):
        files = None
    if not marker or files is None:
        return f"its {MARKER} is unreadable"
    touched = {}
    for name, (size, mtime_ns, sha256) in files.items():
        try:
            stat = (folder / name).stat()
        except OSError:
            return f"{name} is missing"
        if stat.st_size != size:
            return f"{name} is {stat.st_size} bytes, expected {size}"
        if stat.st_mtime_ns != mtime_ns:
            actual = stream_sha256([folder / name])
            if actual != sha256:
                return f"SHA-256 of {name} is {actual}, expected {sha256}"
            touched[name] = stat.st_mtime_ns
    if touched:
        for name, mtime_ns in touched.items():
            marker["files"][name]["mtime_ns"] = mtime_ns
        with contextlib.suppress(OSError):  # a read-only cache is hashed again next time
            replace_atomically(folder / MARKER, json.dumps(marker, indent=2) + "\n")
    return None


def _staging_prefix(dest: Path) -> str:
    return f".tmp-{dest.name}-"


def staging_dir(dest: Path) -> Path:
    """A new empty staging directory beside ``dest``, named for this process (see :func:`remove_stale_staging`)."""
    return Path(tempfile.mkdtemp(prefix=f"{_staging_prefix(dest)}{os.getpid()}-", dir=dest.parent))


def set_aside(dest: Path) -> None:
    """Remove ``dest`` (a damaged entry) by renaming it to a staging name first, so a crash midway
    leaves something :func:`remove_stale_staging` removes rather than half a model."""
    aside = staging_dir(dest)
    os.replace(dest, aside / dest.name)
    shutil.rmtree(aside, ignore_errors=True)


def remove_stale_staging(dest: Path) -> list[Path]:
    """Remove the staging directories other processes left for ``dest``; return them.

    Call it holding ``dest``'s lock (:func:`~nlqo.runtime.models.lock.building`): every builder holds it,
    so another process's staging is then a killed builder's, even one the kernel has not yet
    finished ending (its lock goes first)."""
    removed: list[Path] = []
    prefix = _staging_prefix(dest)
    if not dest.parent.is_dir():
        return removed
    for candidate in dest.parent.iterdir():
        if not candidate.name.startswith(prefix):
            continue
        pid_text = candidate.name[len(prefix) :].split("-", 1)[0]
        if pid_text.isdigit() and int(pid_text) != os.getpid():
            shutil.rmtree(candidate, ignore_errors=True)
            removed.append(candidate)
    return removed


@contextlib.contextmanager
def staged_dir(dest: Path) -> Iterator[Path]:
    """Yield an empty staging directory that becomes ``dest`` when the block succeeds.

    On any exception the staging directory is removed and ``dest`` is untouched. If another
    process finished ``dest`` first, its result is kept and ours is discarded.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(dest)
    staging = staging_dir(dest)
    staging.chmod(0o755)
    try:
        yield staging
        try:
            os.rename(staging, dest)
        except OSError:
            if not is_converted(dest):
                raise
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def load_gguf(path: Path):
    """Load (and de-quantize) a GGUF file into a float32 model and its tokenizer, offline."""
    if importlib.util.find_spec("accelerate") is None:
        raise ModelNotAvailable("converting a GGUF file needs the 'accelerate' package: pip install accelerate")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nlqo.common.logs import tame_transformers

    tame_transformers()  # its records and bars go to nlqo's log (to the terminal with --verbose)
    folder, name = str(path.parent), path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, local_files_only=True)
    return model, tokenizer


def save_converted(model, tokenizer, folder: Path) -> None:
    """Save a de-quantized model as plain safetensors (no GGUF quantizer left attached)."""
    model.hf_quantizer = None
    model.config.quantization_config = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def convert_gguf(
    gguf_for: Callable[[Path], Path],
    dest: Path,
    *,
    label: str,
    info: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> bool:
    """Convert the GGUF file returned by ``gguf_for(staging_dir)`` into the directory ``dest``;
    return whether this call converted it (False: another process had, while this one waited).

    ``gguf_for`` may assemble the file inside the staging directory; it is deleted before the
    rename. ``info`` goes into the marker file with the timing and the files' stamps. A ``dest``
    found damaged (see :func:`damage`) or unfinished is set aside and converted again.
    """
    say: Callable[[str], None] = (
        (lambda msg: print(msg, file=sys.stderr, flush=True)) if progress else (lambda msg: None)
    )
    with building(dest, say):
        if is_converted(dest):
            problem = damage(dest)
            if problem is None:
                return False
        else:
            problem = f"it has no {MARKER} (an unfinished conversion)" if dest.exists() else None
        if problem is not None:
            warnings.warn(f"{dest}: {problem}; converting {label} again", RepairWarning, stacklevel=2)
            set_aside(dest)
        start = time.perf_counter()
        with staged_dir(dest) as staging:
            gguf = gguf_for(staging)
            say(f"nlqo: converting {label} to safetensors (one-time) into {dest}")
            model, tokenizer = load_gguf(gguf)
            assembled = gguf.parent == staging
            if assembled:
                gguf.unlink()
            save_converted(model, tokenizer, staging)
            del model, tokenizer
            seconds = round(time.perf_counter() - start, 1)
            source = "assembled from the wheels" if assembled else str(gguf)
            marker = {"source": source, **(info or {}), "seconds": seconds, "files": file_stamps(staging)}
            (staging / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    say(f"nlqo: converted {label} in {seconds:.1f} s")
    return True
