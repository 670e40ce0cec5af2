"""One exception hierarchy for the whole engine."""

from __future__ import annotations

import re

_ATTEMPT = re.compile(r"(?m)^--- attempt \d+ ---\n")


class NlqoError(Exception):
    """Base class of every error nlqo raises on purpose."""


class IRSyntaxError(NlqoError):
    """IR text that does not parse. Carries the position and a readable label."""

    def __init__(self, message: str, *, line: int, column: int, label: str, text: str, source: str = "<ir>"):
        self.line = line
        self.column = column
        self.label = label
        self.text = text
        self.source = source
        super().__init__(f"{source}:{line}:{column}: {message}")


class IRSemanticError(NlqoError):
    """IR that parses but does not make sense (unknown ids, unbound answer, duplicates, contradictory pins).

    ``line`` is the first line at fault; ``lines`` every line involved (two contradictory pins, a cycle).
    """

    def __init__(self, message: str, *, line: int | None = None, source: str = "<ir>", lines: tuple[int, ...] = ()):
        self.lines = lines or ((line,) if line else ())
        self.line = line if line else (self.lines[0] if self.lines else None)
        self.source = source
        where = f"{source}:{self.line}: " if self.line else f"{source}: "
        super().__init__(where + message)


class ParseFailure(NlqoError):
    """The LLM did not produce valid IR within the repair budget."""

    def __init__(self, message: str, *, attempts: tuple[str, ...], errors: tuple[str, ...]):
        self.attempts = attempts
        self.errors = errors
        shown = "\n".join(
            f"--- attempt {i + 1} ---\n{text}\n>>> {err}" for i, (text, err) in enumerate(zip(attempts, errors))
        )
        super().__init__(f"{message}\n{shown}")

    @staticmethod
    def replies_in(text: str) -> tuple[str, ...]:
        """The LLM replies quoted in ``str(failure)``, for readers of recorded traces.

        Each attempt is shown as ``--- attempt N ---``, the reply, then ``>>> `` and its error.
        """
        return tuple(part.split("\n>>> ")[0] for part in _ATTEMPT.split(text)[1:])


class CostModelError(NlqoError):
    """A cost-model file that does not parse or names an unknown metric."""


class OptimizeError(NlqoError):
    """The optimizer was given something it cannot plan."""


class LimitError(NlqoError):
    """An input beyond a documented limit (atoms to plan, characters of a question); names the limit and how to change it."""


class QuestionError(NlqoError):
    """A question (or query) that cannot be asked: empty, without a word, or holding characters that are not text."""


class ConfigError(NlqoError):
    """Bad configuration, named with its file and line where there is one."""


class InputFileError(NlqoError):
    """A file the user named that cannot be read as one: nothing there, a folder, no permission, not UTF-8
    text. The message names the path, what was expected and what is there (``PATH: expected X, found Y``)."""


class LLMError(NlqoError):
    """A backend failed to answer (connection, timeout, bad response)."""


class ModelNotAvailable(NlqoError):
    """A named model is not installed or cannot be loaded offline."""


class IndexFileError(NlqoError):
    """An index that cannot be built or opened."""


class CorpusError(NlqoError):
    """Bad corpus input; names the file and line."""

    def __init__(self, message: str, *, path: str, line: int | None = None):
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")


class ClusterError(NlqoError):
    """A Dask cluster (``--cluster``) that failed the work it was given."""


class WriteError(NlqoError):
    """A file that could not be written (disk full, no permission); names the file and what was kept."""

    def __init__(self, message: str, *, path: str):
        self.path = path
        super().__init__(message)


class RepairWarning(UserWarning):
    """Damage nlqo found and repaired on its own: a torn last record dropped, a damaged index rebuilt."""


class MissingExtra(ConfigError):
    """A part of nlqo whose libraries were not installed: the message names the extra that brings them."""
