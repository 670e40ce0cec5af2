"""Question files: JSON Lines (optionally gzipped) with ``id``, ``question``, ``answers`` and more.

The shape is that of ``../shared/data`` (see its README): ``answers`` lists the gold answer first,
then aliases; ``supporting_titles`` names the gold passages. A file whose gold answers are all
yes or no (StrategyQA) is a yes/no set, scored after mapping predictions to yes/no.
"""

from __future__ import annotations

import codecs
import gzip
import json
import zlib
from pathlib import Path
from typing import Any, Iterator

import attrs

from nlqo.common.paths import dataset_name
from nlqo.index.manifest import sha256_file
from nlqo.errors import CorpusError

OPEN = "open"
YES_NO = "yes/no"
_YES_NO_WORDS = frozenset({"yes", "no"})


@attrs.frozen
class Question:
    """One question with its gold answers (first = canonical) and gold supporting titles."""

    id: str
    question: str
    answers: tuple[str, ...]
    type: str = ""
    supporting_titles: tuple[str, ...] = ()

    @property
    def is_yes_no(self) -> bool:
        """Whether every gold answer is yes or no.

        >>> Question("1", "Is it?", ("Yes",)).is_yes_no, Question("2", "Who?", ("Rush",)).is_yes_no
        (True, False)
        """
        return all(a.strip().lower().rstrip(".") in _YES_NO_WORDS for a in self.answers)


@attrs.frozen
class QuestionSet:
    """The questions of one file, in file order. Read it with ``QuestionSet.load``."""

    name: str
    """The file name without ``.jsonl[.gz]``, e.g. ``hotpotqa_dev_199``."""
    path: str
    questions: tuple[Question, ...]
    kind: str
    """``open`` or ``yes/no`` (every gold answer of the file is yes or no)."""
    sha256: str = ""
    """Of the file's bytes, so a resumed run can tell the file changed."""

    @classmethod
    def load(cls, path: str | Path, *, limit: int | None = None, skip: int = 0) -> QuestionSet:
        """Read ``path``; keep the first ``limit`` questions, less the first ``skip`` of them (a
        calibration sample held out). Bad lines are errors naming file and line."""
        path = Path(path)
        questions = tuple(_read(path, limit))[skip:]
        if not questions:
            raise CorpusError("no questions", path=str(path))
        kind = YES_NO if all(q.is_yes_no for q in questions) else OPEN
        return cls(
            name=dataset_name(path), path=str(path.resolve()), questions=questions, kind=kind, sha256=sha256_file(path)
        )

    def __len__(self) -> int:
        return len(self.questions)


def parse_question(record: Any) -> Question:
    """A ``Question`` from one decoded record; ``answers`` may also be a string or ``answer``.

    >>> parse_question({"id": 7, "question": "Who?", "answer": "Rush", "supporting_titles": ["A", "A", "B"]})
    Question(id='7', question='Who?', answers=('Rush',), type='', supporting_titles=('A', 'B'))
    """
    if not isinstance(record, dict):
        raise ValueError("a record must be a JSON object")
    missing = [f for f in ("id", "question") if f not in record]
    answers = record.get("answers", record.get("answer"))
    if answers is None:
        missing.append("answers")
    if missing:
        raise ValueError(f"missing field(s): {', '.join(missing)}")
    if not isinstance(answers, (str, list)):
        raise ValueError(f"the answers are {_json_type(answers)}, not a string or a list of strings")
    given = [answers] if isinstance(answers, str) else answers
    answers = [str(a) for a in given if str(a).strip()]
    if not answers:
        raise ValueError("no gold answer")
    supporting = record.get("supporting_titles") or ()
    if not isinstance(supporting, (list, tuple)):
        raise ValueError(f"supporting_titles is {_json_type(supporting)}, not a list of titles")
    titles = dict.fromkeys(str(t) for t in supporting)
    return Question(
        id=str(record["id"]),
        question=str(record["question"]),
        answers=tuple(answers),
        type=str(record.get("type") or ""),
        supporting_titles=tuple(titles),
    )


def _json_type(value: Any) -> str:
    """The JSON type of a decoded value, for messages.

    >>> _json_type(7), _json_type(True), _json_type({})
    ('a number', 'true or false', 'an object')
    """
    if isinstance(value, bool):
        return "true or false"
    kinds = ((int, "a number"), (float, "a number"), (dict, "an object"), (list, "a list"), (str, "a string"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "null")


def _record(raw: bytes) -> Any:
    """One line's JSON value; a line that is not UTF-8 or not JSON is a ValueError saying where and why."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); save the file as UTF-8"
        ) from None
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply") from None


def _read(path: Path, limit: int | None) -> Iterator[Question]:
    if limit is not None and limit <= 0:
        return
    count = line_no = 0
    try:
        fh = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    except FileNotFoundError as exc:
        raise CorpusError("no such question file", path=str(path)) from exc
    except OSError as exc:
        raise CorpusError(f"cannot read: {exc}", path=str(path)) from exc
    with fh:
        while True:
            try:
                raw = fh.readline()
            except (OSError, EOFError, zlib.error) as exc:  # a truncated or corrupt gzip stream, a read error
                raise CorpusError(f"cannot read past this line: {exc}", path=str(path), line=line_no + 1) from None
            if not raw:
                return
            line_no += 1
            if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[3:]
            if not raw.strip():
                continue
            try:
                yield parse_question(_record(raw))
            except ValueError as exc:  # JSONDecodeError is a ValueError
                raise CorpusError(str(exc), path=str(path), line=line_no) from None
            count += 1
            if limit is not None and count >= limit:
                return
