"""What the two local backends (transformers and llama.cpp) share: ``complete`` and ``chat`` over
their own ``generate_ids``, and the token bookkeeping of their sessions.

A backend mixes in :class:`TokenLLM` and provides ``encode``, ``format_chat`` and
``generate_ids``; a session mixes in :class:`TokenSegments` and keeps its tokens in ``_ids``.
"""

from __future__ import annotations

from typing import Any, Sequence

from nlqo.runtime.llm.base import ChatMessage, Completion
from nlqo.runtime.llm.constrain import Constraint


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token sequences.

    >>> common_prefix((1, 2, 3), [1, 2, 4, 5])
    2
    """
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class TokenLLM:
    """``complete`` and ``chat`` as token-level continuations (``generate_ids``)."""

    __slots__ = ()

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        raise NotImplementedError

    def format_chat(self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True) -> str:
        raise NotImplementedError

    def generate_ids(
        self,
        ids: Sequence[int],
        *,
        stop: Sequence[str] = (),
        max_tokens: int = 256,
        prefix_cache: bool = False,
        remember: int | None = None,
        constraint: Constraint | None = None,
    ) -> tuple[Completion, tuple[int, ...]]:
        raise NotImplementedError

    def complete(
        self,
        prompt: str,
        *,
        stop: Sequence[str] = (),
        max_tokens: int = 256,
        prefix_cache: bool = False,
        constraint: Constraint | None = None,
    ) -> Completion:
        """Continue raw ``prompt`` (tokenized with the vocabulary's special tokens, like a prompt)."""
        ids = self.encode(prompt, special=True)
        return self.generate_ids(
            ids, stop=stop, max_tokens=max_tokens, prefix_cache=prefix_cache, constraint=constraint
        )[0]

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] = (),
        max_tokens: int = 256,
        prefix_cache: bool = False,
        constraint: Constraint | None = None,
    ) -> Completion:
        """Answer ``messages`` formatted with the model's chat template (under ``constraint`` when given).

        With ``prefix_cache`` the state saved for later calls is that of the prompt's scaffold
        (:meth:`scaffold_length`), which every prompt of its kind starts with: a whole prompt,
        question and passages included, would rarely serve again, and would push the scaffolds out
        of the backend's few saved prefixes.
        """
        ids = self.encode(self.format_chat(messages))
        remember = self.scaffold_length(messages, ids) if prefix_cache else None
        return self.generate_ids(
            ids, stop=stop, max_tokens=max_tokens, prefix_cache=prefix_cache, remember=remember, constraint=constraint
        )[0]

    def scaffold_length(self, messages: Sequence[ChatMessage], ids: Sequence[int]) -> int:
        """Tokens of ``ids`` (``messages`` formatted) before the last message's text: the system
        prompt, the demonstrations and the last message's header, which prompts of one kind share."""
        if not messages:
            return len(ids)
        *before, last = messages
        head = self.encode(self.format_chat([*before, ChatMessage(last.role, "")], add_generation_prompt=False))
        return common_prefix(head, ids)


class TokenSegments:
    """A session's token sequence: fixed text appended as separately tokenized segments."""

    __slots__ = ()
    llm: Any
    _ids: list[int]

    @property
    def token_ids(self) -> tuple[int, ...]:
        """Everything the model has seen or will see next, generated tokens included."""
        return tuple(self._ids)

    @property
    def text(self) -> str:
        return self.llm.decode(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def append(self, text: str) -> tuple[int, ...]:
        """Add fixed ``text`` (tokenized on its own, no special tokens); return its token ids.

        Nothing is computed until the next ``generate``, which prefills only the new tokens.
        """
        return self.append_ids(self.llm.encode(text))

    def append_ids(self, ids: Sequence[int]) -> tuple[int, ...]:
        ids = tuple(int(i) for i in ids)
        self._ids.extend(ids)
        return ids
