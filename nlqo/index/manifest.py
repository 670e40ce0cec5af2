"""``manifest.json``: what an index holds, how it was built, and checksums of its files."""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

import attrs

from nlqo.errors import IndexFileError
from nlqo.common.paths import FILE, found

FILENAME = "manifest.json"
FORMAT = "nlqo-index"
FORMAT_VERSION = 1
"""Version of the manifest format; an index of another version must be rebuilt."""
REBUILD = "rebuild it with:"
"""How every message about a damaged index ends, before the command that rebuilds it."""


@attrs.frozen
class FileEntry:
    """One file of the index, relative to its folder."""

    path: str
    size: int
    sha256: str

    @classmethod
    def of(cls, folder: Path, rel: str) -> FileEntry:
        file = folder / rel
        return cls(path=rel, size=file.stat().st_size, sha256=sha256_file(file))


@attrs.frozen
class Manifest:
    """Everything needed to open and trust an index."""

    embedder: str
    """Name the embedder was loaded by (``SentenceEmbedder.name``)."""
    dim: int
    count: int
    """Number of passages (= vectors = BM25 documents)."""
    kind: str
    """FAISS index kind: ``flat``, ``hnsw`` or ``ivf``."""
    source: str
    created: str
    """UTC time, ISO 8601."""
    nlqo_version: str
    files: tuple[FileEntry, ...] = ()
    query_prefix: str = ""
    passage_prefix: str = ""
    embed_title: bool = True
    """Whether passages were embedded and BM25-indexed as ``title + newline + text``."""
    faiss: dict = attrs.field(factory=dict, hash=False)
    """Search-time FAISS parameters (``nprobe``, ``ef_search``) and build parameters."""
    skipped: int = 0
    """Bad corpus records skipped at build time."""

    def to_json(self) -> str:
        data = {"format": FORMAT, "format_version": FORMAT_VERSION, **attrs.asdict(self)}
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str, *, path: str = FILENAME) -> Manifest:
        hint = rebuild_hint(Path(path).parent)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise IndexFileError(f"{path}: not valid JSON ({exc}); the index is damaged, {hint}") from exc
        except RecursionError:  # '[' * 100000
            raise IndexFileError(f"{path}: not valid JSON (nested too deeply); the index is damaged, {hint}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise IndexFileError(f"{path}: not an nlqo index manifest; {hint}")
        if data.get("format_version") != FORMAT_VERSION:
            raise IndexFileError(
                f"{path}: index format version {data.get('format_version')} is not supported "
                f"(this nlqo reads version {FORMAT_VERSION}); {hint}"
            )
        data.pop("format")
        data.pop("format_version")
        try:
            _check_types(data, _TYPES, also=("files",))
            files = data.get("files", [])
            if not isinstance(files, list):
                raise TypeError(f"'files' is {json_type(files)}, not a list")
            for entry in files:
                _check_types(entry, _FILE_TYPES, "a file entry")
            data["files"] = tuple(FileEntry(**f) for f in files)
            return cls(**data)
        except TypeError as exc:
            raise IndexFileError(f"{path}: malformed manifest ({exc}); the index is damaged, {hint}") from exc

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        file = folder / FILENAME
        what = found(file)
        if what.startswith("nothing"):
            raise IndexFileError(
                f"{folder}: not an nlqo index (no {FILENAME}: {holding(folder)}); expected a folder written by 'nlqo index SOURCE --out DIR'"
            )
        if what != FILE:
            raise IndexFileError(
                f"{file}: expected the index's manifest, a JSON file, found {what}; {rebuild_hint(folder)}"
            )
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise IndexFileError(
                f"{file}: not valid UTF-8 ({exc}); the index is damaged, {rebuild_hint(folder)}"
            ) from exc
        except OSError as exc:
            raise IndexFileError(f"{file}: cannot be read ({exc.strerror or exc}); {rebuild_hint(folder)}") from exc
        return cls.from_json(text, path=str(file))

    def verify(self, folder: Path, *, checksums: bool = True) -> None:
        """Check that every listed file exists with its size and, if ``checksums``, its SHA-256."""
        hint = rebuild_hint(folder, self.source)
        for entry in self.files:
            file = folder / entry.path
            try:
                size = file.stat().st_size if file.is_file() else None
            except OSError as exc:  # a listed name too long for the file system (found by fuzzing)
                raise IndexFileError(
                    f"{file}: listed in the manifest but cannot be read ({exc.strerror}); {hint}"
                ) from None
            if size is None:
                raise IndexFileError(f"{file}: listed in the manifest but missing; {hint}")
            if size != entry.size:
                raise IndexFileError(
                    f"{file}: size {size} differs from the manifest's {entry.size}; the index is damaged, {hint}"
                )
            if checksums and sha256_file(file) != entry.sha256:
                raise IndexFileError(f"{file}: checksum differs from the manifest; the index is damaged, {hint}")


_TYPES = {"embedder": str, "dim": int, "count": int, "kind": str, "source": str, "created": str, "nlqo_version": str,
          "query_prefix": str, "passage_prefix": str, "embed_title": bool, "faiss": dict, "skipped": int}  # fmt: skip
_FILE_TYPES = {"path": str, "size": int, "sha256": str}


def _check_types(data: object, types: dict[str, type], what: str = "the manifest", also: tuple[str, ...] = ()) -> None:
    """Raise TypeError unless ``data`` is a JSON object whose fields are known (``types`` and ``also``)
    and have their types. An unknown field is named as Python writes it: a fuzzed ``"\\n"`` key made
    a message of two lines."""
    if not isinstance(data, dict):
        raise TypeError(f"{what} is {json_type(data)}, not an object")
    unknown = [name for name in data if name not in types and name not in also]
    if unknown:
        raise TypeError(f"{what} has an unknown field {unknown[0]!r}")
    for name, expected in types.items():
        value = data.get(name)
        if name in data and (not isinstance(value, expected) or (expected is int and isinstance(value, bool))):
            raise TypeError(f"field {name!r} of {what} is {json_type(value)}, not {json_type(expected())}")


def json_type(value: object) -> str:
    """The JSON type of a value, for messages.

    >>> json_type(None), json_type(3), json_type("x"), json_type([])
    ('null', 'a number', 'a string', 'a list')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    for kind, name in ((str, "a string"), (list, "a list"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def holding(folder: Path) -> str:
    """What ``folder`` holds, in a few names, for a message about a folder that is not an index."""
    try:
        names = sorted(p.name for p in folder.iterdir())
    except OSError as exc:
        return f"the folder cannot be listed ({exc.strerror or exc})"
    if not names:
        return "the folder is empty"
    more = f" and {len(names) - 4} more" if len(names) > 4 else ""
    return f"the folder holds {', '.join(names[:4])}{more}"


def is_nlqo_manifest(file: Path) -> bool:
    """Whether ``file`` is an nlqo index manifest (of any version), whatever else the index holds."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def rebuild_hint(folder: Path, source: str | None = None) -> str:
    """How to rebuild the index in ``folder`` from ``source`` (a corpus path; unknown: ``SOURCE``).

    >>> rebuild_hint(Path("my idx"), "/data/c.jsonl")
    "rebuild it with: nlqo index /data/c.jsonl --out 'my idx'"
    """
    corpus = shlex.quote(source) if source and not source.startswith("<") else "SOURCE"
    return f"{REBUILD} nlqo index {corpus} --out {shlex.quote(str(folder))}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
