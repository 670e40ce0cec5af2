"""Extractive compression of retrieved passages (issue 54, item 4): each passage keeps the ``keep``
sentences that match the query best, in their order in the passage. A sentence's rank in its passage
fuses two rankings by reciprocal rank, as hybrid search does: by the embedder's cosine similarity to
the query, and by BM25 over the sentences of the hits (the search's query is the question, or a
sub-question, so each hop compresses for its own query)."""

from __future__ import annotations

import re
from typing import Sequence

import attrs
import numpy as np

from nlqo.common.passages import Embedder, Hit, Retriever
from nlqo.config import default
from nlqo.index.fusion import reciprocal_rank_fusion

_END = re.compile(r"[.!?][\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")
_WORD_BEFORE = re.compile(r"([\w.]+)$")
_ABBREVIATIONS = frozenset(
    "st mr mrs ms dr jr sr mt ft fr gen col lt sgt capt prof rev gov sen rep inc co corp ltd bros no nos vol vs "
    "ca c approx est fl r b d jan feb mar apr aug sep sept oct nov dec".split()
)
"""Words a period after which ends no sentence (``St. Louis``, ``c. 1920``, ``Dr. No``)."""


def sentences(text: str) -> list[str]:
    """``text`` cut after each sentence's end (., ! or ?, then a capital or a digit), except after
    an abbreviation, an initial (``John F. Kennedy``) or dotted letters (``U.S.``).

    >>> sentences("Jaws is a 1975 film. It was directed by Steven Spielberg! Was it? 3 sequels followed.")
    ['Jaws is a 1975 film.', 'It was directed by Steven Spielberg!', 'Was it?', '3 sequels followed.']
    >>> sentences("Born c. 1920 in St. Louis, John F. Kennedy moved to the U.S. Army. He left.")
    ['Born c. 1920 in St. Louis, John F. Kennedy moved to the U.S. Army.', 'He left.']
    """
    out, start = [], 0
    for end in _END.finditer(text):
        before = _WORD_BEFORE.search(text, start, end.start())
        word = before.group(1).lower() if before else ""
        if text[end.start()] == "." and (word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()) or "." in word):
            continue
        out.append(text[start : end.end()].strip())
        start = end.end()
    out.append(text[start:].strip())
    return [s for s in out if s]


def compress(hits: Sequence[Hit], query: str, embedder: Embedder, keep: int) -> list[Hit]:
    """``hits`` with each passage cut to its ``keep`` sentences that match ``query`` best, in order.

    Passages of ``keep`` sentences or fewer are left whole, and so are all when none is longer."""
    split = [sentences(h.passage.text) for h in hits]
    if keep <= 0 or all(len(s) <= keep for s in split):
        return list(hits)
    pool = [s for parts in split for s in parts]
    dense = _dense_scores(pool, query, embedder)
    lexical = _bm25_scores(pool, query)
    out, start = [], 0
    for hit, parts in zip(hits, split):
        rows = range(start, start + len(parts))
        start += len(parts)
        if len(parts) <= keep:
            out.append(hit)
            continue
        rankings = [sorted(rows, key=lambda i: (-scores[i], i)) for scores in (dense, lexical)]
        chosen = sorted(row for row, _ in reciprocal_rank_fusion(rankings)[:keep])
        text = " ".join(pool[i] for i in chosen)
        out.append(attrs.evolve(hit, passage=attrs.evolve(hit.passage, text=text)))
    return out


def _dense_scores(pool: Sequence[str], query: str, embedder: Embedder) -> np.ndarray:
    q = embedder.encode([query], kind="query")[0]
    return embedder.encode(list(pool), kind="passage") @ q


def _bm25_scores(pool: Sequence[str], query: str) -> np.ndarray:
    from nlqo.common.extras import need
    from nlqo.index.bm25 import tokenize

    bm25s = need("bm25s", "index")
    docs, terms = tokenize(list(pool)), tokenize([query])[0]
    vocab = {t for d in docs for t in d}
    if not vocab or not any(t in vocab for t in terms):
        return np.zeros(len(pool))
    model = bm25s.BM25()
    model.index(docs, show_progress=False)
    return np.asarray(model.get_scores([t for t in terms if t in vocab]), dtype=float)


@attrs.define(eq=False)
class CompressingRetriever:
    """A retriever whose passages are cut to the ``keep`` sentences that match the query best."""

    retriever: Retriever
    embedder: Embedder
    keep: int

    def search(self, query: str, k: int = default("k")) -> list[Hit]:
        return compress(self.retriever.search(query, k), query, self.embedder, self.keep)


def compressing(retriever: Retriever, embedder: Embedder, keep: int) -> Retriever:
    """``retriever`` itself when ``keep`` is 0, else a :class:`CompressingRetriever` over it."""
    return CompressingRetriever(retriever, embedder, keep) if keep > 0 else retriever
