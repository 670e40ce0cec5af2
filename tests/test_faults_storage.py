"""Fault injection for the commands that write: ``nlqo bench`` and ``nlqo index`` killed with SIGKILL
at a named point and resumed, damaged index and records files, and a disk that fills up.

The killed runs are real subprocesses (``tests/faultproc.py``) with a scripted LLM and a hashing
embedder; every check counts and compares the ids of what is on disk.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultproc import fake_models
from nlqo.cli import main
from nlqo.eval.records import append_records, read_records
from nlqo.index import Index, atomic
from nlqo.index import dense as dense_module

REPO = Path(__file__).resolve().parents[1]
FAULTPROC = REPO / "tests" / "faultproc.py"

OLD = [
    ("paris", "Paris", "Paris is the capital of France."),
    ("eiffel", "Eiffel Tower", "The Eiffel Tower in Paris was completed in 1889."),
    ("rush", "Counterparts", "Counterparts is an album by the Canadian rock band Rush."),
    ("mozart", "Mozart", "Mozart was born in Salzburg in 1756."),
    ("fleming", "Penicillin", "Alexander Fleming discovered penicillin in 1928."),
    ("apollo", "Apollo 11", "Apollo 11 landed humans on the Moon in 1969."),
    ("everest", "Mount Everest", "Mount Everest is the highest mountain on Earth."),
    ("nile", "Nile", "The Nile is a river in Africa."),
]
NEW = [(f"zebra-{i}", f"Zebra {i}", f"Zebra number {i} lives on the savanna.") for i in range(30)]
QUESTIONS = [
    ("q1", "What is the capital of France?", "Paris"),
    ("q2", "When was the Eiffel Tower completed?", "1889"),
    ("q3", "Which band released Counterparts?", "Rush"),
    ("q4", "Where was Mozart born?", "Salzburg"),
    ("q5", "Who discovered penicillin?", "Fleming"),
    ("q6", "When did Apollo 11 land on the Moon?", "1969"),
]
STRATEGIES = ("no-rag", "standard-rag")
ALL_RUNS = sorted((q, s) for q, _, _ in QUESTIONS for s in STRATEGIES)
TIMING = ("seconds", "planning_s", "execution_s")


def write_corpus(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in rows), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path) -> Path:
    """``old.jsonl`` and ``new.jsonl`` corpora and a question file ``q.jsonl`` in ``tmp_path``."""
    write_corpus(tmp_path / "old.jsonl", OLD)
    write_corpus(tmp_path / "new.jsonl", NEW)
    rows = [{"id": i, "question": q, "answers": [a]} for i, q, a in QUESTIONS]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return tmp_path


def cli(*argv: object) -> int:
    """``nlqo ARGV`` in this process, with the scripted LLM and the hashing embedder."""
    with fake_models():
        return main([str(a) for a in argv])


def killed(tmp_path: Path, point: str, n: int, *argv: object) -> None:
    """``nlqo ARGV`` in a subprocess, killed with SIGKILL when it reaches ``point`` the ``n``-th time."""
    marker = tmp_path / f"at-{point}-{n}"
    marker.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])}
    cmd = [sys.executable, str(FAULTPROC), point, str(n), str(marker), *map(str, argv)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(f"nlqo exited with {proc.returncode} before {point}: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            assert time.monotonic() < deadline, f"nlqo never reached {point}"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL


def bench_args(files: Path, out: str, *extra: object) -> list[object]:
    return ["bench", "--questions", files / "q.jsonl", "--corpus", files / "old.jsonl", "--out", files / out,
            "--model", "scripted", "--strategies", ",".join(STRATEGIES), "--quiet", *extra]  # fmt: skip


def runs(out: Path) -> list[tuple[str, str]]:
    """(question, strategy) of every record on disk, in file order (repeats kept)."""
    return [(r["qid"], r["strategy"]) for r in read_records(out / "records.jsonl", repair=False)]


def answers(out: Path) -> dict[tuple[str, str], tuple[str, float]]:
    return {
        (r["qid"], r["strategy"]): (r["answer"], r["em"]) for r in read_records(out / "records.jsonl", repair=False)
    }


def statistics(out: Path) -> dict:
    """``summary.json`` without run metadata and wall-clock times."""
    summary = json.loads((out / "summary.json").read_text())
    results = {n: {k: v for k, v in r.items() if k not in TIMING} for n, r in summary.pop("results").items()}
    summary.pop("meta")
    return {**summary, "results": results}


def passage_ids(index: Path) -> list[str]:
    with sqlite3.connect(index / "passages.sqlite") as conn:
        return [row[0] for row in conn.execute("SELECT id FROM passages ORDER BY row")]


@pytest.fixture
def clean(files) -> Path:
    """An uninterrupted bench run in ``files/clean``: what every resumed run must end with."""
    assert cli(*bench_args(files, "clean")) == 0
    assert sorted(runs(files / "clean")) == ALL_RUNS
    return files / "clean"


# --- nlqo bench killed and resumed --------------------------------------------------------------


@pytest.mark.parametrize(("point", "n", "on_disk"), [("record", 5, 5), ("torn-record", 4, 3), ("summary", 1, 12)])
def test_a_killed_bench_resumes_with_every_record_once(files, clean, capsys, point, n, on_disk):
    out = files / "run"
    killed(files, point, n, *bench_args(files, "run"))
    before = runs(out)
    assert len(before) == on_disk and len(set(before)) == on_disk
    assert not (out / "summary.json").exists()
    index_files = {f: (out / "index" / f).read_bytes() for f in ("manifest.json", "dense.faiss", "passages.sqlite")}
    capsys.readouterr()

    assert cli(*bench_args(files, "run")) == 0
    err = capsys.readouterr().err
    assert runs(out)[:on_disk] == before  # the records written before the kill stay, in order
    assert sorted(runs(out)) == ALL_RUNS  # none lost, none twice
    assert answers(out) == answers(clean) and statistics(out) == statistics(clean)
    assert {f: (out / "index" / f).read_bytes() for f in index_files} == index_files  # the index is reused as it was
    if point == "torn-record":
        assert (
            f"nlqo: warning: {out}/records.jsonl:4: dropped a torn last record" in err and "its run goes again" in err
        )
    else:
        assert "warning" not in err
    assert (out / "records.jsonl").read_bytes().endswith(b"}\n") and "Traceback" not in err


def test_a_bench_killed_while_it_builds_its_index_builds_it_again(files, clean, capsys):
    out = files / "run"
    killed(files, "swap", 1, *bench_args(files, "run"))
    assert not (out / "index").exists() and len(atomic.leftovers(out / "index", "tmp")) == 1
    assert not (out / "records.jsonl").exists()

    assert cli(*bench_args(files, "run")) == 0
    assert "unfinished index of a build that was killed" in capsys.readouterr().err
    assert atomic.leftovers(out / "index", "tmp") == []
    assert passage_ids(out / "index") == [i for i, _, _ in OLD]
    assert sorted(runs(out)) == ALL_RUNS and statistics(out) == statistics(clean)


# --- nlqo index killed and run again -------------------------------------------------------------


@pytest.mark.parametrize("point", ["store", "dense", "bm25", "swap", "set-aside"])
def test_a_killed_index_build_keeps_the_old_index_and_the_next_build_replaces_it(files, capsys, point):
    idx = files / "idx"
    assert cli("index", files / "old.jsonl", "--out", idx, "--quiet") == 0
    before = (idx / "manifest.json").read_bytes()

    killed(files, point, 1, "index", files / "new.jsonl", "--out", idx, "--quiet")
    capsys.readouterr()
    if point == "set-aside":  # killed between the two renames of the swap without renameat2
        (aside,) = atomic.leftovers(idx, "old")
        assert not idx.exists() and (aside / "manifest.json").read_bytes() == before
        assert cli("retrieve", "--index", idx, "Paris", "--mode", "bm25") == 2
        assert f"interrupted build left the previous index at {aside}" in capsys.readouterr().err
    else:
        assert (idx / "manifest.json").read_bytes() == before
        with Index.open(idx) as old:  # every checksum holds
            assert old.manifest.count == len(OLD) and old.bm25_search("Salzburg", k=1)[0].passage.id == "mozart"
        assert passage_ids(idx) == [i for i, _, _ in OLD]
        assert len(atomic.leftovers(idx, "tmp")) == 1  # the dead build's folder

    assert cli("index", files / "new.jsonl", "--out", idx, "--quiet") == 0
    err = capsys.readouterr().err
    assert ("put back the previous index" in err) == (point == "set-aside")
    assert "unfinished index of a build that was killed" in err
    ids = passage_ids(idx)
    assert ids == [i for i, _, _ in NEW] and len(set(ids)) == len(NEW)
    assert Index.open(idx).manifest.count == len(NEW)
    assert atomic.leftovers(idx, "tmp") == [] and atomic.leftovers(idx, "old") == []


# --- damaged index files ---------------------------------------------------------------------------


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "manifest torn": ("manifest.json", lambda p: p.write_bytes(p.read_bytes()[:100]), "not valid JSON"),
    "manifest not UTF-8": ("manifest.json", lambda p: p.write_bytes(b"\xff\xfe" + p.read_bytes()), "not valid UTF-8"),
    "manifest of another format": (
        "manifest.json",
        lambda p: p.write_text('{"format": "x"}'),
        "not an nlqo index manifest",
    ),
    "faiss byte flipped": ("dense.faiss", flip_last_byte, "checksum differs from the manifest; the index is damaged"),
    "faiss cut short": ("dense.faiss", lambda p: p.write_bytes(p.read_bytes()[:-8]), "differs from the manifest's"),
    "store byte flipped": (
        "passages.sqlite",
        flip_last_byte,
        "checksum differs from the manifest; the index is damaged",
    ),
    "bm25 file deleted": ("bm25/vocab.index.json", Path.unlink, "listed in the manifest but missing"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_index_is_refused_with_the_command_that_rebuilds_it(files, capsys, damage):
    idx = files / "idx"
    assert cli("index", files / "old.jsonl", "--out", idx, "--quiet") == 0
    name, spoil, says = DAMAGE[damage]
    spoil(idx / name)
    capsys.readouterr()

    assert cli("retrieve", "--index", idx, "Salzburg", "--mode", "bm25") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nlqo: error: {idx / name}: ") and says in err and "Traceback" not in err
    fix = err.rsplit("rebuild it with: ", 1)[1].strip()
    source = files / "old.jsonl" if name != "manifest.json" else "SOURCE"  # a damaged manifest no longer says
    assert fix == f"nlqo index {source} --out {idx}"

    assert cli(*shlex.split(fix.replace("SOURCE", str(files / "old.jsonl")))[1:], "--quiet") == 0  # the fix works
    capsys.readouterr()
    assert cli("retrieve", "--index", idx, "Salzburg", "--mode", "bm25", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["hits"][0]["id"] == "mozart"


def test_a_damaged_faiss_file_is_refused_even_without_checksums(files, capsys):
    idx = files / "idx"
    assert cli("index", files / "old.jsonl", "--out", idx, "--quiet") == 0
    (idx / "dense.faiss").write_bytes(b"\0" * (idx / "dense.faiss").stat().st_size)  # same size
    assert cli("retrieve", "--index", idx, "Salzburg", "--mode", "bm25", "--no-verify") == 2
    err = capsys.readouterr().err
    assert (
        f"{idx / 'dense.faiss'}: cannot read the FAISS index" in err
        and "the index is damaged, rebuild it with: nlqo index" in err
    )


def test_bench_rebuilds_a_damaged_index_of_its_own_and_resumes(files, clean, capsys):
    out = files / "run"
    killed(files, "record", 5, *bench_args(files, "run"))
    flip_last_byte(out / "index" / "dense.faiss")
    capsys.readouterr()

    assert cli(*bench_args(files, "run")) == 0
    err = capsys.readouterr().err
    assert (
        f"nlqo: warning: {out / 'index' / 'dense.faiss'}: checksum differs" in err
        and f"rebuilding {out / 'index'} from" in err
    )
    assert "rebuild it with" not in err
    assert sorted(runs(out)) == ALL_RUNS and statistics(out) == statistics(clean)  # the rebuilt index is the same index


# --- damaged records and run files ------------------------------------------------------------------


def insert_line(path: Path, number: int, line: bytes) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[: number - 1], line, *lines[number - 1 :]]))


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b"garbage\n", "not a JSON record (Expecting value"),
        (
            b'{"qid": "q1", "strategy": "no-rag", "answer": "\xff\xfe"}\n',
            "not a JSON record ('utf-8' codec can't decode",
        ),
        (b"[1, 2]\n", "a JSON list, not a record object"),
        (b'{"answer": "Paris"}\n', "record without 'qid', 'strategy'"),
    ],
)
def test_a_bad_line_in_the_middle_of_the_records_is_a_located_error(files, clean, capsys, line, says):
    path = clean / "records.jsonl"
    insert_line(path, 3, line)
    damaged = path.read_bytes()
    capsys.readouterr()

    assert cli(*bench_args(files, "clean")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nlqo: error: {path}:3: ") and says in err
    assert "delete line 3 (a run it held goes again when you resume) or use another --out folder" in err
    assert path.read_bytes() == damaged  # nothing is cut or appended

    lines = path.read_bytes().splitlines(keepends=True)  # follow the advice: delete line 3
    path.write_bytes(b"".join(lines[:2] + lines[3:]))
    assert cli(*bench_args(files, "clean")) == 0
    assert sorted(runs(clean)) == ALL_RUNS


def test_a_record_may_hold_any_line_separator_inside_a_string(tmp_path):
    path = tmp_path / "records.jsonl"
    records = [
        {"qid": "a", "strategy": "s", "answer": "one\u2028two\x0bthree\x1cfour\rfive"},
        {"qid": "b", "strategy": "s", "answer": "x"},
    ]
    append_records(path, records)
    assert read_records(path, required=("qid", "strategy")) == records


@pytest.mark.parametrize(
    ("content", "says"), [(b'{"dataset": ', "not valid JSON"), (b"[]", "a JSON list, not the object a run writes")]
)
def test_a_damaged_run_file_is_a_clear_error(files, clean, capsys, content, says):
    (clean / "run.json").write_bytes(content)
    capsys.readouterr()
    assert cli(*bench_args(files, "clean")) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"nlqo: error: {clean / 'run.json'}: ")
        and says in err
        and "delete it to resume the records" in err
    )
    (clean / "run.json").unlink()
    assert cli(*bench_args(files, "clean")) == 0 and sorted(runs(clean)) == ALL_RUNS


# --- a full disk -----------------------------------------------------------------------------------------


class FullDisk:
    """``open`` for one module: files opened for writing take ``room`` bytes in all; the write that
    crosses it writes what fits and raises ENOSPC, as a buffered file does on a full disk."""

    def __init__(self, room: int):
        self.room = room

    def __call__(self, file, mode="r", *args, **kwargs):
        fh = open(file, mode, *args, **kwargs)
        if not any(c in mode for c in "wax+"):
            return fh
        disk, write = self, fh.write

        def limited(data) -> int:
            if len(data) <= disk.room:
                disk.room -= len(data)
                return write(data)
            write(data[: disk.room])
            disk.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        fh.write = limited
        return fh


def test_a_full_disk_during_a_bench_keeps_whole_records_and_a_resume_completes(files, clean, capsys, monkeypatch):
    import nlqo.eval.records as records_module

    out = files / "run"
    record_size = len((clean / "records.jsonl").read_bytes().splitlines()[0])
    monkeypatch.setattr(records_module, "open", FullDisk(room=4 * record_size), raising=False)
    assert cli(*bench_args(files, "run")) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"nlqo: error: disk full while writing {out / 'records.jsonl'}: No space left on device; every record finished before is kept"
    )
    assert "(free some space and run the same command again)" in err and "Traceback" not in err
    data = (out / "records.jsonl").read_bytes()
    assert data.endswith(b"}\n") and 1 <= len(runs(out)) <= 4 and len(set(runs(out))) == len(runs(out))

    monkeypatch.undo()
    assert cli(*bench_args(files, "run")) == 0
    assert "torn" not in capsys.readouterr().err
    assert (out / "records.jsonl").read_bytes().startswith(data)
    assert sorted(runs(out)) == ALL_RUNS and statistics(out) == statistics(clean)


def enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def sqlite_full(*args, **kwargs):
    raise sqlite3.OperationalError("database or disk is full")


@pytest.mark.parametrize(
    ("target", "fault", "file"),
    [
        ("nlqo.index.store.write_store", lambda: sqlite_full, "passages.sqlite"),
        ("nlqo.index.dense.open", lambda: FullDisk(room=1000), "dense.faiss"),
        ("nlqo.index.bm25.write_bm25", lambda: enospc, "bm25"),
        ("pathlib.Path.write_text", lambda: enospc, "manifest.json"),
    ],
)
def test_a_full_disk_during_an_index_build_keeps_the_old_index(files, capsys, monkeypatch, target, fault, file):
    idx = files / "idx"
    assert cli("index", files / "old.jsonl", "--out", idx, "--quiet") == 0
    before = {p.relative_to(idx): p.read_bytes() for p in sorted(idx.rglob("*")) if p.is_file()}
    capsys.readouterr()

    monkeypatch.setattr(target, fault(), raising=False)
    assert cli("index", files / "new.jsonl", "--out", idx, "--quiet") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nlqo: error: disk full while writing {files}/.idx.tmp-") and f"/{file}: " in err
    assert f"; the old index in {idx} is kept (free some space and run the same command again)" in err
    assert {p.relative_to(idx): p.read_bytes() for p in sorted(idx.rglob("*")) if p.is_file()} == before
    assert atomic.leftovers(idx, "tmp") == [] and passage_ids(idx) == [i for i, _, _ in OLD]
    monkeypatch.undo()
    Index.open(idx).close()  # every checksum holds


def test_the_faiss_file_is_written_by_python_so_a_failed_write_is_seen(tmp_path, monkeypatch):
    import faiss
    import numpy as np

    index = faiss.IndexFlatIP(4)
    index.add(np.eye(4, dtype="float32"))
    dense_module.write_dense(index, tmp_path / "whole.faiss")
    assert faiss.read_index(str(tmp_path / "whole.faiss")).ntotal == 4
    monkeypatch.setattr(dense_module, "open", FullDisk(room=50), raising=False)
    with pytest.raises(OSError, match="No space left on device"):
        dense_module.write_dense(index, tmp_path / "cut.faiss")


# --- a real full disk: a small tmpfs in a user and mount namespace -------------------------------------------

TMPFS_SCRIPT = r"""
import json, os, sys
from pathlib import Path
sys.path[:0] = [sys.argv[2]]
from faultproc import fake_models
from nlqo.cli import main
from nlqo.eval.records import read_records

disk, files = Path(sys.argv[1]), Path(sys.argv[3])
report = {}
def run(key, *argv):
    import io, contextlib
    err = io.StringIO()
    with fake_models(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse
            code = exc.code
    report[key] = (code, err.getvalue())

run("old", "index", files / "old.jsonl", "--out", disk / "idx", "--quiet")
free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
(disk / "filler").write_bytes(bytes(free - 24 * 1024))  # 24 kB left: the old index fits, not a new one
old = {str(p.relative_to(disk / "idx")): p.read_bytes().hex() for p in sorted((disk / "idx").rglob("*")) if p.is_file()}
run("new", "index", files / "big.jsonl", "--out", disk / "idx", "--quiet")
report["old_kept"] = old == {str(p.relative_to(disk / "idx")): p.read_bytes().hex() for p in sorted((disk / "idx").rglob("*")) if p.is_file()}
report["leftovers"] = sorted(p.name for p in disk.iterdir() if p.name.startswith(".idx"))
run("open", "retrieve", "--index", disk / "idx", "Salzburg", "--mode", "bm25", "--format", "json")

bench = ["bench", "--questions", files / "many.jsonl", "--index", disk / "idx", "--out", disk / "run", "--model", "scripted", "--strategies", "no-rag", "--quiet"]
run("bench", *bench)
report["after_full"] = [(r["qid"], r["strategy"]) for r in read_records(disk / "run" / "records.jsonl", repair=False)]
report["ends_whole"] = (disk / "run" / "records.jsonl").read_bytes().endswith(b"\n")
(disk / "filler").unlink()
run("resume", *bench)
report["after_resume"] = [(r["qid"], r["strategy"]) for r in read_records(disk / "run" / "records.jsonl", repair=False)]
print(json.dumps(report))
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_really_full_disk_keeps_the_old_index_and_the_records(files, tmp_path):
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("user and mount namespaces are not allowed here")
    write_corpus(
        files / "big.jsonl", [(f"big-{i}", f"Big {i}", f"Passage {i} " + "filler words " * 40) for i in range(400)]
    )
    many = [{"id": f"m{i}", "question": f"Question number {i} about Paris?", "answers": ["Paris"]} for i in range(60)]
    (files / "many.jsonl").write_text("".join(json.dumps(q) + "\n" for q in many), encoding="utf-8")
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "script.py"
    script.write_text(TMPFS_SCRIPT)
    shell = (
        f"mount -t tmpfs -o size=512k tmpfs {disk} && "
        f"exec {shlex.quote(sys.executable)} {script} {disk} {REPO / 'tests'} {files}"
    )
    done = subprocess.run(["unshare", "-rm", "sh", "-c", shell], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])

    assert report["old"][0] == 0
    code, err = report["new"]
    assert (
        code == 2
        and err.startswith(f"nlqo: error: disk full while writing {disk}/.idx.tmp-")
        and "Traceback" not in err
    )
    assert f"the old index in {disk / 'idx'} is kept" in err
    assert report["old_kept"] and report["leftovers"] == [] and report["open"][0] == 0

    code, err = report["bench"]
    assert (
        code == 2 and err.startswith(f"nlqo: error: disk full while writing {disk / 'run'}/") and "Traceback" not in err
    )
    assert report["ends_whole"] and len(set(map(tuple, report["after_full"]))) == len(report["after_full"]) < 60
    assert report["resume"][0] == 0, report["resume"][1]
    after = [tuple(r) for r in report["after_resume"]]
    assert after[: len(report["after_full"])] == [tuple(r) for r in report["after_full"]]
    assert sorted(after) == sorted((f"m{i}", "no-rag") for i in range(60))


# --- the real model: killed at whatever point it has reached after its first record ----------------------------


@pytest.mark.real_model
def test_a_real_bench_killed_after_its_first_record_resumes_with_every_record_once(files):
    from nlqo.runtime.llm.backends import load_llm
    from realmodels import load_or_skip

    load_or_skip(lambda: load_llm("smollm2-135m"))
    out = files / "real"
    argv = ["bench", "--questions", files / "q.jsonl", "--corpus", files / "old.jsonl", "--out", out, "--limit", "3",
            "--model", "smollm2-135m", "--strategies", "no-rag,standard-rag", "--quiet"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "nlqo", *map(str, argv)], cwd=files, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    records = out / "records.jsonl"
    try:
        deadline = time.monotonic() + 600
        while not (records.exists() and records.read_bytes().count(b"\n") >= 1):
            if proc.poll() is not None:
                pytest.fail(
                    f"nlqo bench exited with {proc.returncode} before its first record: {proc.stderr.read().decode()[-2000:]}"
                )  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "nlqo bench wrote no record"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    before = runs(out)
    assert len(before) >= 1

    assert main([str(a) for a in argv]) == 0
    after = runs(out)
    assert after[: len(before)] == before and len(after) == len(set(after)) == 6
    assert sorted(after) == sorted((q, s) for q, _, _ in QUESTIONS[:3] for s in ("no-rag", "standard-rag"))
    assert json.loads((out / "summary.json").read_text())["n"] == 3
