"""Corpus reading: JSON Lines (plain and gzipped), field mapping, bad records, text folders."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from nlqo.errors import CorpusError
from nlqo.index import Chunking, Corpus, Fields, chunk_text
from nlqo.common.passages import Passage


def write_jsonl(path: Path, lines: list[str]) -> Path:
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def record(**fields) -> str:
    return json.dumps(fields)


GOOD = [record(id="a", title="Alpha", text="first text"), record(id="b", title="Beta", text="second text")]


@pytest.mark.parametrize("name", ["c.jsonl", "c.jsonl.gz"])
def test_reads_jsonl_plain_and_gzipped(tmp_path, name):
    path = write_jsonl(tmp_path / name, GOOD)
    assert list(Corpus(path)) == [Passage("a", "Alpha", "first text"), Passage("b", "Beta", "second text")]


def test_gzip_detected_by_content_not_name(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(gzip.compress(("\n".join(GOOD) + "\n").encode()))
    assert [p.id for p in Corpus(path)] == ["a", "b"]


def test_field_mapping_optional_title_and_numeric_ids(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [record(doc=7, body="some body"), "", record(doc=8, name="N", body="x y")])
    corpus = Corpus(path, fields=Fields(id="doc", title="name", text="body"))
    assert list(corpus) == [Passage("7", "", "some body"), Passage("8", "N", "x y")]


def test_bad_json_fails_naming_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [GOOD[0], "{not json", GOOD[1]])
    with pytest.raises(CorpusError) as info:
        list(Corpus(path))
    assert info.value.path == str(path)
    assert info.value.line == 2
    assert str(info.value).startswith(f"{path}:2: invalid JSON")


def test_skip_collects_errors_and_warns(tmp_path):
    lines = [
        GOOD[0],
        "{not json",
        record(id="x", title="no text"),
        record(id="y", text="   "),
        "[1, 2]",
        record(title="T", text="no id"),
        record(id="a", text="duplicate id"),
        GOOD[1],
    ]
    path = write_jsonl(tmp_path / "c.jsonl", lines)
    corpus = Corpus(path, on_error="skip")
    with pytest.warns(UserWarning, match=r"skipped 6 bad corpus record"):
        passages = list(corpus)
    assert [p.id for p in passages] == ["a", "b"]
    assert [e.line for e in corpus.skipped] == [2, 3, 4, 5, 6, 7]
    messages = [str(e) for e in corpus.skipped]
    assert "invalid JSON" in messages[0]
    assert "missing or empty text field 'text'" in messages[1]
    assert "missing or empty text" in messages[2]
    assert "expected a JSON object" in messages[3]
    assert "missing id field 'id'" in messages[4] and "--id-field" in messages[4]
    assert "duplicate id 'a' (first seen on line 1)" in messages[5]


@pytest.mark.parametrize(
    "bad, line, words",
    [
        (record(id="x", title="t"), 2, "missing or empty text"),
        (record(id="a", text="again"), 2, "duplicate id"),
    ],
)
def test_fail_mode_stops_at_first_bad_record(tmp_path, bad, line, words):
    path = write_jsonl(tmp_path / "c.jsonl", [GOOD[0], bad, GOOD[1]])
    with pytest.raises(CorpusError, match=words) as info:
        list(Corpus(path, on_error="fail"))
    assert info.value.line == line


def test_invalid_utf8_line_is_reported_and_skippable(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(GOOD[0].encode() + b"\n" + b'{"id": "z", "text": "\xff\xfe"}\n' + GOOD[1].encode() + b"\n")
    corpus = Corpus(path, on_error="skip")
    with pytest.warns(UserWarning):
        assert [p.id for p in corpus] == ["a", "b"]
    assert corpus.skipped[0].line == 2 and str(corpus.skipped[0]).endswith(
        "c.jsonl:2: not UTF-8 text (byte 0xff at column 22); save the file as UTF-8"
    )


def test_truncated_gzip_is_reported(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    full = gzip.compress(("\n".join(GOOD * 200) + "\n").encode())
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(CorpusError, match="cannot read"):
        list(Corpus(path))


def test_missing_source(tmp_path):
    with pytest.raises(CorpusError, match="no such file"):
        list(Corpus(tmp_path / "nope.jsonl"))


def test_on_error_is_validated():
    with pytest.raises(ValueError):
        Corpus("x.jsonl", on_error="ignore")


# --- folders of text files ------------------------------------------------------------------


def words(n: int, start: int = 0) -> str:
    return " ".join(f"w{i}" for i in range(start, start + n))


def test_text_folder_titles_ids_and_order(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("# Bridges of Paris\n\nThe Pont Neuf is old.\n")
    (tmp_path / "a.txt").write_text("Plain text file.\n\nSecond paragraph.\n")
    (tmp_path / "ignored.pdf").write_text("not text")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.txt").write_text("hidden")
    passages = list(Corpus(tmp_path))
    assert [(p.id, p.title) for p in passages] == [("a.txt#0", "a"), ("sub/b.md#0", "Bridges of Paris")]
    assert passages[0].text == "Plain text file.\n\nSecond paragraph."
    assert passages[1].text == "# Bridges of Paris\n\nThe Pont Neuf is old."


def test_single_text_file_source(tmp_path):
    path = tmp_path / "note.md"
    path.write_text(words(30))
    passages = list(Corpus(path, chunking=Chunking(max_tokens=10, overlap=0)))
    assert [p.id for p in passages] == ["note.md#0", "note.md#1", "note.md#2"]
    assert {p.title for p in passages} == {"note"}


def test_long_paragraph_windows_overlap(tmp_path):
    (tmp_path / "long.txt").write_text(words(100))
    chunking = Chunking(max_tokens=30, overlap=10)
    chunks = [p.text.split() for p in Corpus(tmp_path, chunking=chunking)]
    assert all(len(c) <= 30 for c in chunks)
    for left, right in zip(chunks, chunks[1:]):
        assert left[-10:] == right[:10]
    covered = [w for c in chunks for w in c]
    assert set(covered) == set(words(100).split())
    assert chunks[0][0] == "w0" and chunks[-1][-1] == "w99"


def test_paragraphs_that_fit_are_kept_whole():
    text = f"{words(12, 0)}\n\n{words(12, 100)}\n\n{words(12, 200)}"
    chunks = chunk_text(text, Chunking(max_tokens=30, overlap=0))
    assert chunks == [f"{words(12, 0)}\n\n{words(12, 100)}", words(12, 200)]


def test_chunk_ends_at_paragraph_break_then_overlaps():
    text = f"{words(20, 0)}\n\n{words(20, 100)}"
    chunks = chunk_text(text, Chunking(max_tokens=30, overlap=5))
    assert chunks[0] == words(20, 0)
    assert chunks[1].split()[:5] == words(5, 15).split()
    assert chunks[1].endswith(words(20, 100))


def test_empty_and_undecodable_files_are_bad_records(tmp_path):
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "ok.txt").write_text("fine")
    with pytest.raises(CorpusError, match="empty file"):
        list(Corpus(tmp_path))
    corpus = Corpus(tmp_path, on_error="skip")
    with pytest.warns(UserWarning, match="skipped 2"):
        assert [p.id for p in corpus] == ["ok.txt#0"]
    assert sorted(Path(e.path).name for e in corpus.skipped) == ["empty.txt", "latin1.txt"]


def test_chunking_validates_overlap():
    with pytest.raises(ValueError, match="overlap"):
        Chunking(max_tokens=10, overlap=10)
