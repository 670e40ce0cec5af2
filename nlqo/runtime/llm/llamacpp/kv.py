"""The context's KV sequences (slots): which tokens each one holds, which handle used it last, and
the saved prefix states restored into them, so a request computes only what no slot or saved
prefix already has."""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

from nlqo.errors import LLMError
from nlqo.runtime.llm.llamacpp.request import Request, Slot
from nlqo.runtime.llm.tokens import common_prefix


class Slots:
    """The slots of one context and the llama.cpp calls that move KV state in and out of them.

    Not thread-safe: the runtime calls it from its scheduler thread, or with its lock held."""

    def __init__(self, ll: Any, ctx: Any, mem: Any, n_seq: int, *, name: str) -> None:
        self.ll, self.ctx, self.mem, self.name = ll, ctx, mem, name
        self.slots = [Slot(seq) for seq in range(n_seq)]
        self._clock = itertools.count(1)

    def idle(self) -> list[Slot]:
        return [s for s in self.slots if not s.busy]

    def forget(self, owner: int) -> None:
        """Stop reusing the tokens of ``owner``'s idle slots."""
        for slot in self.slots:
            if slot.owner == owner and not slot.busy:
                slot.owner = -1

    def place(self, r: Request, idle: list[Slot]) -> None:
        """Choose ``r``'s slot and make its KV state hold the longest reusable prefix of ``r.ids``."""
        ll, limit = self.ll, len(r.ids) - 1  # the last prompt token is always computed: its logits start generation
        best_slot, best_n = None, 0
        best_saved: tuple[int, ...] | None = None
        if r.reuse:
            for slot in idle:
                if slot.owner == r.owner:
                    n = min(common_prefix(slot.tokens, r.ids), limit)
                    if n > best_n:
                        best_slot, best_n = slot, n
            for key in r.saved:
                n = min(common_prefix(key, r.ids), limit)
                if n > best_n:
                    best_slot, best_saved, best_n = None, key, n
        if best_slot is None:
            # the least recently used idle slot, preferring one that holds nothing of this owner
            best_slot = min(idle, key=lambda s: (s.owner == r.owner and bool(s.tokens), s.used))
            ll.llama_memory_seq_rm(self.mem, best_slot.seq, -1, -1)
            best_slot.tokens = ()
            if best_saved is not None:
                state = r.saved[best_saved]
                r.saved.move_to_end(best_saved)
                buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
                if ll.llama_state_seq_set_data(self.ctx, buf, len(state), best_slot.seq) == 0:
                    raise LLMError(f"{self.name}: could not restore a saved prefix of {len(best_saved)} tokens")
                best_slot.tokens = best_saved
            else:
                best_n = 0
        if best_n < len(best_slot.tokens):
            if not ll.llama_memory_seq_rm(self.mem, best_slot.seq, best_n, -1):
                ll.llama_memory_seq_rm(self.mem, best_slot.seq, -1, -1)
                best_n = 0
        best_slot.tokens = tuple(r.ids[:best_n])
        best_slot.busy, best_slot.owner = True, r.owner
        r.slot, r.pos, r.cached = best_slot, best_n, best_n

    def save(self, r: Request, key: tuple[int, ...]) -> None:
        """Copy the KV state of ``r``'s slot (which holds exactly ``key``) to ``r``'s saved prefixes."""
        if r.saved_size <= 0 or key in r.saved:
            if key in r.saved:
                r.saved.move_to_end(key)
            return
        ll, seq = self.ll, r.seq
        size = ll.llama_state_seq_get_size(self.ctx, seq)
        buf = (ctypes.c_uint8 * size)()
        written = ll.llama_state_seq_get_data(self.ctx, buf, size, seq)
        r.saved[key] = bytes(buf[:written])
        while len(r.saved) > r.saved_size:
            r.saved.popitem(last=False)

    def release(self, slot: Slot, tokens: tuple[int, ...], *, clear: bool) -> None:
        """Free ``slot`` for the next request, holding ``tokens`` (nothing when ``clear``)."""
        if clear:
            self.ll.llama_memory_seq_rm(self.mem, slot.seq, -1, -1)
            tokens = ()
        slot.tokens, slot.busy, slot.used = tokens, False, next(self._clock)
