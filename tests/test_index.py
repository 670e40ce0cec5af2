"""Index build, open, search (dense, BM25, hybrid), integrity checks, atomic replacement, CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nlqo.cli import main
from nlqo.errors import CorpusError, IndexFileError
from nlqo.index import DenseParams, Index, build_index, open_retriever
from nlqo.index import atomic
from nlqo.common.passages import Hit, Passage, Retriever

REPO = Path(__file__).resolve().parents[1]

CORPUS = [
    Passage(
        "eiffel",
        "Eiffel Tower",
        "The Eiffel Tower is a wrought-iron lattice tower in Paris, France, completed in 1889.",
    ),
    Passage(
        "python",
        "Python (programming language)",
        "Python is a high-level programming language created by Guido van Rossum.",
    ),
    Passage(
        "amazon", "Amazon River", "The Amazon River in South America is the largest river by discharge volume of water."
    ),
    Passage(
        "mozart",
        "Wolfgang Amadeus Mozart",
        "Mozart was a prolific composer of the Classical period, born in Salzburg in 1756.",
    ),
    Passage("everest", "Mount Everest", "Mount Everest is Earth's highest mountain above sea level, in the Himalayas."),
    Passage("penicillin", "Penicillin", "Alexander Fleming discovered penicillin, the first antibiotic, in 1928."),
    Passage("apollo", "Apollo 11", "Apollo 11 was the spaceflight that first landed humans on the Moon in July 1969."),
    Passage("sushi", "Sushi", "Sushi is a Japanese dish of vinegared rice with raw fish and vegetables."),
]

QUERIES = [
    ("Who discovered the first antibiotic?", "penicillin"),
    ("Which composer was born in Salzburg?", "mozart"),
    ("When did humans first land on the Moon?", "apollo"),
    ("What is the highest mountain on Earth?", "everest"),
]

FAKE_EMBEDDER = '''
import re, zlib, time
import numpy as np

class HashEmbedder:
    """Deterministic bag-of-words hashing embedder for tests (no model)."""

    def __init__(self, name="hash-test", dim=64, delay=0.0, fail_after=None):
        self.name, self.dim, self.delay, self.fail_after, self.calls = name, dim, delay, fail_after, 0

    def encode(self, texts, *, kind="query", progress=None):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise RuntimeError("injected embedding failure")
        time.sleep(self.delay)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\\w+", text.lower()):
                out[i, zlib.crc32(word.encode()) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)
'''
_namespace: dict = {}
exec(FAKE_EMBEDDER, _namespace)  # the same source runs in the subprocess below
HashEmbedder = _namespace["HashEmbedder"]


def write_corpus(path: Path, passages=CORPUS) -> Path:
    path.write_text("".join(json.dumps({"id": p.id, "title": p.title, "text": p.text}) + "\n" for p in passages))
    return path


@pytest.fixture
def fake_index(tmp_path) -> Path:
    out = tmp_path / "idx"
    build_index(CORPUS, out, HashEmbedder())
    return out


# --- build and open, with the hashing embedder -------------------------------------------------


def test_manifest_records_build(tmp_path):
    source = write_corpus(tmp_path / "c.jsonl")
    report = build_index(source, tmp_path / "idx", HashEmbedder())
    m = Index.open(tmp_path / "idx", embedder=HashEmbedder()).manifest
    assert m == report.manifest
    assert (m.embedder, m.dim, m.count, m.kind, m.skipped) == ("hash-test", 64, 8, "flat", 0)
    assert m.source == str(source.absolute())
    assert {f.path for f in m.files} >= {"dense.faiss", "passages.sqlite", "bm25/vocab.index.json"}
    on_disk = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert on_disk["format"] == "nlqo-index" and on_disk["nlqo_version"] and on_disk["created"]
    assert all(len(f["sha256"]) == 64 and f["size"] > 0 for f in on_disk["files"])


def test_bm25_search_finds_the_passage(fake_index):
    index = Index.open(fake_index)
    hits = index.bm25_search("Alexander Fleming antibiotic", k=3)
    assert hits[0].passage.id == "penicillin"
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert index.bm25_search("zzzz qqqq", k=3) == []
    assert index.bm25_search("the of a", k=3) == []


def test_dense_search_with_given_embedder(fake_index):
    index = Index.open(fake_index, embedder=HashEmbedder())
    hits = index.search("Amazon River discharge volume", k=2)
    assert hits[0].passage == CORPUS[2]
    assert hits[0].score >= hits[1].score
    assert len(index.search("anything", k=50)) == len(CORPUS)


def test_get_by_id_and_len(fake_index):
    index = Index.open(fake_index)
    assert index.get("sushi") == CORPUS[7]
    assert index.get("nope") is None
    assert len(index) == 8


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_faiss_kinds(tmp_path, kind):
    build_index(CORPUS, tmp_path / "idx", HashEmbedder(), kind=kind)
    index = Index.open(tmp_path / "idx", embedder=HashEmbedder())
    assert index.manifest.kind == kind
    assert index.search("Mount Everest Himalayas mountain", k=1)[0].passage.id == "everest"


def test_ivf_parameters_recorded(tmp_path):
    build_index(CORPUS, tmp_path / "idx", HashEmbedder(), params=DenseParams(kind="ivf", nlist=2, nprobe=2))
    m = Index.open(tmp_path / "idx").manifest
    assert (m.kind, m.faiss["nlist"], m.faiss["nprobe"]) == ("ivf", 2, 2)


def test_skipped_records_counted_in_manifest(tmp_path):
    source = write_corpus(tmp_path / "c.jsonl")
    with source.open("a") as fh:
        fh.write("{broken\n")
    with pytest.raises(CorpusError, match=r"c\.jsonl:9: invalid JSON"):
        build_index(source, tmp_path / "idx", HashEmbedder())
    assert not (tmp_path / "idx").exists()
    with pytest.warns(UserWarning, match="skipped 1"):
        report = build_index(source, tmp_path / "idx", HashEmbedder(), on_error="skip")
    assert report.manifest.skipped == 1 and report.manifest.count == 8
    assert report.skipped[0].line == 9


def test_empty_corpus_is_an_error(tmp_path):
    with pytest.raises(IndexFileError, match="no passages"):
        build_index([], tmp_path / "idx", HashEmbedder())


def test_refuses_to_replace_a_folder_that_is_not_an_index(tmp_path):
    precious = tmp_path / "docs"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    with pytest.raises(IndexFileError, match="refusing"):
        build_index(CORPUS, precious, HashEmbedder())
    assert (precious / "thesis.tex").read_text() == "years of work"


# --- integrity and embedder checks -----------------------------------------------------------


def test_embedder_mismatch_is_a_clear_error(fake_index):
    with pytest.raises(
        IndexFileError, match=r"built with embedder 'hash-test' \(dimension 64\), not 'other' \(dimension 64\)"
    ):
        Index.open(fake_index, embedder=HashEmbedder(name="other"))
    with pytest.raises(IndexFileError, match="dimension 32"):
        Index.open(fake_index, embedder=HashEmbedder(dim=32))
    # by name: refused before any model is loaded
    with pytest.raises(IndexFileError, match="built with embedder 'hash-test', not 'all-minilm-l6-v2'"):
        Index.open(fake_index, embedder="all-minilm-l6-v2")


def test_corrupted_file_detected_by_checksum(fake_index):
    target = fake_index / "dense.faiss"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(IndexFileError, match="dense.faiss: checksum differs"):
        Index.open(fake_index)
    Index.open(fake_index, verify=False)  # same size: only the checksum would notice


def test_truncated_or_missing_file_detected_without_checksums(fake_index):
    (fake_index / "passages.sqlite").write_bytes(b"short")
    with pytest.raises(IndexFileError, match="passages.sqlite: size 5 differs"):
        Index.open(fake_index, verify=False)
    (fake_index / "bm25" / "vocab.index.json").unlink()
    with pytest.raises(IndexFileError, match="missing"):
        Index.open(fake_index, verify=False)


def test_not_an_index(tmp_path):
    with pytest.raises(IndexFileError, match="no such index folder"):
        Index.open(tmp_path / "nowhere")
    with pytest.raises(IndexFileError, match="no manifest.json"):
        Index.open(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "nlqo-index", "format_version": 99}')
    with pytest.raises(IndexFileError, match="format version 99 is not supported"):
        Index.open(tmp_path)


# --- retrievers --------------------------------------------------------------------------------


def test_retrievers_implement_the_protocol(fake_index):
    index = Index.open(fake_index, embedder=HashEmbedder())
    for mode in ("dense", "bm25", "hybrid"):
        retriever = index.retriever(mode)
        assert isinstance(retriever, Retriever)
        hits = retriever.search("Sushi Japanese vinegared rice raw fish", k=2)
        assert all(isinstance(h, Hit) for h in hits)
        assert hits[0].passage.id == "sushi"
    with pytest.raises(ValueError, match="unknown retrieval mode 'sparse'"):
        index.retriever("sparse")
    assert isinstance(open_retriever(fake_index, "bm25"), Retriever)


def test_hybrid_fuses_both_rankings(fake_index):
    index = Index.open(fake_index, embedder=HashEmbedder())
    query = "Apollo 11 landed humans on the Moon"
    dense_ids = [h.passage.id for h in index.search(query, k=8)]
    bm25_ids = [h.passage.id for h in index.bm25_search(query, k=8)]
    hybrid = index.hybrid_search(query, k=8)
    assert hybrid[0].passage.id == "apollo"
    expected = {pid: 0.0 for pid in dense_ids + bm25_ids}
    for ranking in (dense_ids, bm25_ids):
        for rank, pid in enumerate(ranking, start=1):
            expected[pid] += 1 / (60 + rank)
    assert {h.passage.id: pytest.approx(h.score) for h in hybrid} == expected


def test_concurrent_searches_agree_with_serial(fake_index):
    index = Index.open(fake_index, embedder=HashEmbedder())
    queries = [q for q, _ in QUERIES] * 5
    serial = [[h.passage.id for h in index.hybrid_search(q, k=3)] for q in queries]
    results: dict[int, list[str]] = {}

    def work(i: int) -> None:
        results[i] = [h.passage.id for h in index.hybrid_search(queries[i], k=3)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(queries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(len(queries))] == serial


# --- atomic replacement ------------------------------------------------------------------------

NEW_CORPUS = [Passage("new", "Replacement", "Only the new index holds this replacement passage about zebras.")]


def assert_old_index_answers(path: Path) -> None:
    index = Index.open(path, embedder=HashEmbedder())
    assert index.manifest.count == len(CORPUS)
    assert index.bm25_search("Alexander Fleming antibiotic", k=1)[0].passage.id == "penicillin"
    assert index.search("zebras replacement", k=1)[0].passage.id != "new"


def test_failed_build_keeps_the_old_index(fake_index):
    with pytest.raises(RuntimeError, match="injected"):
        build_index(NEW_CORPUS, fake_index, HashEmbedder(fail_after=0))
    assert_old_index_answers(fake_index)
    assert atomic.leftovers(fake_index, "tmp") == []


def test_successful_rebuild_replaces_the_index(fake_index):
    build_index(NEW_CORPUS, fake_index, HashEmbedder())
    index = Index.open(fake_index, embedder=HashEmbedder())
    assert index.manifest.count == 1 and index.search("zebras", k=1)[0].passage.id == "new"
    assert atomic.leftovers(fake_index, "tmp") == [] and atomic.leftovers(fake_index, "old") == []


KILLED_BUILD = (
    FAKE_EMBEDDER
    + """
import sys
from pathlib import Path
from nlqo.index import build_index
from nlqo.common.passages import Passage

class Announcing(HashEmbedder):
    def encode(self, texts, *, kind="query", progress=None):
        Path(sys.argv[2]).write_text("embedding")  # the passage store is already written
        return super().encode(texts, kind=kind, progress=progress)

passages = [Passage(f"p{i}", "Replacement", f"replacement passage {i} about zebras") for i in range(50)]
build_index(passages, sys.argv[1], Announcing(delay=600))
"""
)


def test_killed_build_leaves_the_old_index_intact(fake_index, tmp_path):
    started = tmp_path / "started"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(fake_index), str(started)], cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert proc.poll() is None, "the build subprocess exited early"
            assert time.monotonic() < deadline, "the build subprocess never started embedding"
            time.sleep(0.1)
        (tmp,) = atomic.leftovers(fake_index, "tmp")
        assert (tmp / "passages.sqlite").is_file()  # it had started writing the new index
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert atomic.leftovers(fake_index, "tmp") == [tmp]
    assert_old_index_answers(fake_index)
    build_index(NEW_CORPUS, fake_index, HashEmbedder())  # the next build clears the dead one's folder
    assert atomic.leftovers(fake_index, "tmp") == []
    assert Index.open(fake_index).manifest.count == 1


def test_interrupted_fallback_swap_is_recovered(fake_index):
    aside = fake_index.parent / f".{fake_index.name}.old-12345"
    os.rename(fake_index, aside)  # as if killed between the two renames of the fallback swap
    with pytest.raises(IndexFileError, match=r"interrupted build left the previous index at .*old-12345"):
        Index.open(fake_index)
    with pytest.raises(RuntimeError, match="injected"):
        build_index(NEW_CORPUS, fake_index, HashEmbedder(fail_after=0))
    assert_old_index_answers(fake_index)


def test_fallback_swap_without_renameat2(fake_index, monkeypatch):
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    build_index(NEW_CORPUS, fake_index, HashEmbedder())
    assert Index.open(fake_index).manifest.count == 1
    assert atomic.leftovers(fake_index, "old") == [] and atomic.leftovers(fake_index, "tmp") == []


# --- CLI (retrieve works without loading a model in BM25 mode) --------------------------------


def test_cli_retrieve_bm25_json(fake_index, capsys):
    code = main(
        [
            "retrieve",
            "--index",
            str(fake_index),
            "Fleming penicillin antibiotic",
            "-k",
            "2",
            "--mode",
            "bm25",
            "--format",
            "json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "bm25" and out["k"] == 2
    assert out["hits"][0]["id"] == "penicillin" and out["hits"][0]["rank"] == 1
    assert out["hits"][0]["title"] == "Penicillin" and "Fleming" in out["hits"][0]["text"]


def test_cli_retrieve_text(fake_index, capsys):
    assert main(["retrieve", "--index", str(fake_index), "Amazon river discharge", "-k", "1", "--mode", "bm25"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1. Amazon River  [id amazon, score ")
    assert "largest river by discharge" in out


def test_cli_retrieve_errors(fake_index, tmp_path, capsys):
    assert main(["retrieve", "--index", str(tmp_path / "none"), "q"]) == 2
    assert "no such index folder" in capsys.readouterr().err
    assert main(["retrieve", "--index", str(fake_index), "q", "--embedder", "all-minilm-l6-v2"]) == 2
    assert "built with embedder 'hash-test'" in capsys.readouterr().err


def test_cli_help_mentions_formats(capsys):
    with pytest.raises(SystemExit):
        main(["index", "--help"])
    out = capsys.readouterr().out
    assert "--on-error" in out and "--id-field" in out and "--overlap" in out and ".jsonl.gz" in out


# --- the real embedder ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedder():
    from nlqo.runtime.embed import SentenceEmbedder

    return SentenceEmbedder.load()


@pytest.fixture(scope="module")
def real_index(tmp_path_factory, embedder) -> Path:
    out = tmp_path_factory.mktemp("real") / "idx"
    build_index(CORPUS, out, embedder)
    return out


@pytest.mark.real_model
@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
@pytest.mark.parametrize("query, expected", QUERIES)
def test_real_retrieval_puts_the_right_passage_first(real_index, embedder, mode, query, expected):
    retriever = Index.open(real_index, embedder=embedder).retriever(mode)
    assert retriever.search(query, k=3)[0].passage.id == expected


@pytest.mark.real_model
def test_real_dense_paraphrase_without_shared_words(real_index, embedder):
    index = Index.open(real_index, embedder=embedder)
    assert index.search("Which software language did van Rossum design?", k=1)[0].passage.id == "python"
    assert index.search("raw seafood dish from Japan", k=1)[0].passage.id == "sushi"


@pytest.mark.real_model
def test_real_embedder_loaded_lazily_from_manifest(real_index):
    index = Index.open(real_index)
    assert index.search("Who discovered the first antibiotic?", k=1)[0].passage.id == "penicillin"
    assert index.embedder.name == "all-minilm-l6-v2"


@pytest.mark.real_model
def test_real_index_refuses_other_embedder(real_index):
    with pytest.raises(
        IndexFileError, match=r"built with embedder 'all-minilm-l6-v2' \(dimension 384\), not 'hash-test'"
    ):
        Index.open(real_index, embedder=HashEmbedder())


@pytest.mark.real_model
def test_cli_index_then_retrieve(tmp_path, capsys):
    source = write_corpus(tmp_path / "c.jsonl")
    with source.open("a") as fh:
        fh.write("not json at all\n")
    out = tmp_path / "idx"
    assert main(["index", str(source), "--out", str(out), "--quiet"]) == 2
    assert f"{source}:9: invalid JSON" in capsys.readouterr().err
    assert main(["index", str(source), "--out", str(out), "--quiet", "--on-error", "skip", "--kind", "hnsw"]) == 0
    captured = capsys.readouterr()
    assert f"skipped {source}:9: invalid JSON" in captured.err
    summary = captured.out.strip().splitlines()[-1]
    assert summary.startswith("indexed 8 passages in ")
    assert (
        "passages/s" in summary
        and "[hnsw, all-minilm-l6-v2, dim 384]" in summary
        and "skipped 1 bad records" in summary
    )
    assert main(["retrieve", "--index", str(out), "When did humans first land on the Moon?", "--format", "json"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert [h["rank"] for h in hits] == [1, 2, 3] and hits[0]["id"] == "apollo"


@pytest.mark.real_model
def test_cli_index_text_folder(tmp_path, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "volcanoes.md").write_text(
        "# Volcanoes\n\nMount Etna in Sicily is one of the most active volcanoes in the world.\n"
    )
    (docs / "bees.txt").write_text("Honey bees communicate the location of flowers with a waggle dance.\n")
    assert (
        main(["index", str(docs), "--out", str(tmp_path / "idx"), "-q", "--max-tokens", "50", "--overlap", "10"]) == 0
    )
    assert capsys.readouterr().out.startswith("indexed 2 passages")
    assert (
        main(
            [
                "retrieve",
                "-i",
                str(tmp_path / "idx"),
                "How do bees tell each other where flowers are?",
                "-k",
                "1",
                "--mode",
                "dense",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("1. bees  [id bees.txt#0, score ")
