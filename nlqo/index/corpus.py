"""Read a corpus into passages: JSON Lines (optionally gzipped) or a folder of .txt/.md files.

Bad records (invalid JSON, missing text, duplicate ids, undecodable files) raise ``CorpusError``
naming the file and line with ``on_error="fail"``; with ``"skip"`` they are collected in
``Corpus.skipped`` and a warning gives the count once the corpus has been read.
"""

from __future__ import annotations

import codecs
import gzip
import json
import warnings
import zlib
from pathlib import Path
from typing import IO, Iterator, cast

import attrs

from nlqo.errors import CorpusError
from nlqo.index.chunking import Chunking, chunk_text, first_heading
from nlqo.index.manifest import json_type as _json_type
from nlqo.common.passages import Passage
from nlqo.common.paths import FILE, FOLDER, found

ON_ERROR = ("skip", "fail")
TEXT_SUFFIXES = (".txt", ".md", ".markdown")


@attrs.frozen
class Fields:
    """Names of the JSON fields that hold a passage's id, title and text."""

    id: str = "id"
    title: str = "title"
    """Optional in each record; a missing title is the empty string."""
    text: str = "text"


@attrs.define(eq=False)
class Corpus:
    """A corpus source; iterate it to read passages (once per iteration).

    ``source`` is a ``.jsonl``/``.jsonl.gz`` file, a ``.txt``/``.md`` file, or a folder searched
    recursively for ``.txt``/``.md`` files (hidden files and folders are ignored).
    """

    source: Path = attrs.field(converter=Path)
    fields: Fields = Fields()
    chunking: Chunking = Chunking()
    on_error: str = attrs.field(default="fail", validator=attrs.validators.in_(ON_ERROR))
    skipped: list[CorpusError] = attrs.field(factory=list, init=False)
    """Errors of the records skipped by the last iteration."""

    def __iter__(self) -> Iterator[Passage]:
        self.skipped = []
        seen: dict[str, int | None] = {}
        what = found(self.source)
        if what not in (FILE, FOLDER):
            raise CorpusError(f"expected a corpus file or a folder of text files, found {what}", path=str(self.source))
        for passage, line in self._records():
            if passage.id in seen:
                first = seen[passage.id]
                self._bad(
                    CorpusError(
                        f"duplicate id {passage.id!r} (first seen {_where(first)})", path=str(self.source), line=line
                    )
                )
                continue
            seen[passage.id] = line
            yield passage
        if self.skipped:
            warnings.warn(f"skipped {len(self.skipped)} bad corpus record(s); first: {self.skipped[0]}", stacklevel=2)

    def _records(self) -> Iterator[tuple[Passage, int | None]]:
        if self.source.is_dir():
            for path in _text_files(self.source):
                for passage in self._text_file(path, path.relative_to(self.source).as_posix()):
                    yield passage, None
        elif self.source.name.lower().endswith(TEXT_SUFFIXES):
            for passage in self._text_file(self.source, self.source.name):
                yield passage, None
        else:
            yield from self._jsonl(self.source)

    def _jsonl(self, path: Path) -> Iterator[tuple[Passage, int]]:
        try:
            fh, zipped = _open_binary(path)
        except OSError as exc:
            raise CorpusError(f"cannot be read ({exc.strerror or exc})", path=str(path)) from None
        named_gz = path.name.lower().endswith(".gz") and not zipped
        with fh:
            lineno = 0
            while True:
                try:
                    raw = fh.readline()
                except (OSError, EOFError, zlib.error) as exc:  # a truncated or corrupt gzip stream, a read error
                    self._bad(CorpusError(f"cannot read past this line: {exc}", path=str(path), line=lineno + 1))
                    return
                if not raw:
                    return
                lineno += 1
                try:
                    line = _decode(raw[3:] if lineno == 1 and raw.startswith(codecs.BOM_UTF8) else raw)
                    passage = self._record(line) if line.strip() else None
                except ValueError as exc:
                    hint = " (the file is named .gz but is not gzip-compressed)" if named_gz else ""
                    self._bad(CorpusError(f"{exc}{hint}", path=str(path), line=lineno))
                    continue
                if passage is not None:
                    yield passage, lineno

    def _record(self, line: str) -> Passage:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        except RecursionError:
            raise ValueError("invalid JSON: nested too deeply") from None
        except ValueError:  # an integer of more digits than Python converts
            raise ValueError("invalid JSON: a number of more than 4,300 digits") from None
        if not isinstance(record, dict):
            raise ValueError(f"expected a JSON object, got {_json_type(record)}")
        f = self.fields
        fields = ", ".join(sorted(record)) or "none"
        text = record.get(f.text)
        if f.text not in record or text is None or (isinstance(text, str) and not text.strip()):
            raise ValueError(f"missing or empty text field {f.text!r} (fields: {fields}); name it with --text-field")
        if not isinstance(text, str):
            raise ValueError(f"text field {f.text!r} is {_json_type(text)}, not a string")
        ident = record.get(f.id)
        if f.id not in record or ident is None or ident == "":
            raise ValueError(f"missing id field {f.id!r} (fields: {fields}); name it with --id-field")
        if not isinstance(ident, (str, int)) or isinstance(ident, bool):
            raise ValueError(f"id field {f.id!r} is {_json_type(ident)}, not a string or a whole number")
        title = record.get(f.title, "")
        if title is None:
            title = ""
        if not isinstance(title, str):
            raise ValueError(f"title field {f.title!r} is {_json_type(title)}, not a string")
        for name, value in ((f.id, str(ident)), (f.title, title), (f.text, text)):
            _check_surrogates(name, value)
        return Passage(id=str(ident), title=title, text=text)

    def _text_file(self, path: Path, rel: str) -> Iterator[Passage]:
        try:
            data = path.read_bytes()
        except OSError as exc:
            self._bad(CorpusError(f"cannot be read ({exc.strerror or exc})", path=str(path)))
            return
        try:
            content = _decode(data[3:] if data.startswith(codecs.BOM_UTF8) else data)
        except ValueError as exc:
            bad = data.count(b"\n", 0, getattr(exc, "start", 0)) + 1
            self._bad(CorpusError(str(exc), path=str(path), line=bad))
            return
        if not content.strip():
            self._bad(CorpusError("empty file", path=str(path)))
            return
        title = first_heading(content) or path.stem
        for n, chunk in enumerate(chunk_text(content, self.chunking)):
            yield Passage(id=f"{rel}#{n}", title=title, text=chunk)

    def _bad(self, error: CorpusError) -> None:
        if self.on_error == "fail":
            raise error
        self.skipped.append(error)


def _where(line: int | None) -> str:
    return f"on line {line}" if line else "earlier"


def _text_files(folder: Path) -> list[Path]:
    found = []
    for path in folder.rglob("*"):
        rel = path.relative_to(folder).parts
        if any(part.startswith(".") for part in rel):
            continue
        if path.is_file() and path.name.lower().endswith(TEXT_SUFFIXES):
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def _open_binary(path: Path) -> tuple[IO[bytes], bool]:
    """The file's bytes, gunzipped when it starts with the gzip magic number (then ``True``)."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return cast(IO[bytes], gzip.open(path, "rb")), True
    return open(path, "rb"), False


class _NotText(ValueError):
    """Bytes that are not UTF-8; ``start`` is the offset of the first bad byte."""

    def __init__(self, message: str, start: int):
        self.start = start
        super().__init__(message)


def _decode(raw: bytes) -> str:
    """``raw`` as UTF-8, or :class:`_NotText` naming the first bad byte and its column.

    >>> _decode(b'{"text": "caf\\xe9"}')
    Traceback (most recent call last):
    ...
    nlqo.index.corpus._NotText: not UTF-8 text (byte 0xe9 at column 14); save the file as UTF-8
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise _NotText(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {column}); save the file as UTF-8", exc.start
        ) from None


def _check_surrogates(field: str, value: str) -> None:
    """Refuse half a surrogate pair (``\\ud800`` in JSON): no file or database can store it."""
    for i, ch in enumerate(value):
        if "\ud800" <= ch <= "\udfff":
            raise ValueError(
                f"field {field!r} holds \\u{ord(ch):04x}, half of a surrogate pair, at character {i + 1}: write the character itself or both halves"
            )
