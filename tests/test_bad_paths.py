"""An index, corpus or model path that points somewhere unexpected (issue 37, item 5): exit 2 and one
``nlqo: error:`` line naming the path, what was expected and what is there; never a traceback.

Each kind of path is tried where a command takes one: ``--index`` (retrieve, ask), the corpus and
``--out`` of ``nlqo index``, and ``--model`` (parse). Paths that cannot be read: a symlink to
``/proc/self/mem`` (a file whose read fails with EIO) in process, and folders and files without
permission in a subprocess; tests run as root, which permissions do not stop, so that subprocess
runs without the capabilities that let root ignore them (``setpriv``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nlqo.cli import main
from nlqo.testing import HashEmbedder

UNREADABLE = Path("/proc/self/mem")
"""A file that exists and cannot be read (EIO), whoever reads it."""


class NamedHashEmbedder(HashEmbedder):
    name = "all-minilm-l6-v2"


@pytest.fixture
def fake_models(monkeypatch):
    """Every embedder is the hashing one; loading a model is a test failure (errors come first)."""
    import nlqo.main.builder
    from nlqo.runtime.embed import SentenceEmbedder

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(SentenceEmbedder, "load", classmethod(lambda cls, *a, **kw: NamedHashEmbedder()))
    monkeypatch.setattr(nlqo.main.builder, "load_llm", no_model)


def run(capsys, *argv) -> tuple[int, str]:
    """``nlqo ARGV`` in process: exit code and stderr; nothing printed a traceback."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    return code, err


def odd_paths(root: Path) -> dict[str, tuple[Path, str]]:
    """Paths of every odd kind under ``root``, each with the words ``nlqo.common.paths.found`` has for it."""
    root.mkdir(exist_ok=True)
    (root / "notes.txt").write_text("just a file\n")
    (root / "loop").symlink_to(root / "loop")
    (root / "broken").symlink_to(root / "gone")
    os.mkfifo(root / "fifo")
    (root / "empty").mkdir()
    other = root / "other"
    (other / ".git").mkdir(parents=True)
    (other / "README").write_text("another program's data\n")
    (other / "package.json").write_text('{"name": "app"}\n')
    paths = {
        "a file": (root / "notes.txt", "a file"),
        "a symlink loop": (root / "loop", "a symlink loop"),
        "a broken symlink": (root / "broken", f"a broken symlink (to {root / 'gone'})"),
        "a FIFO": (root / "fifo", "a FIFO"),
        "a missing path": (root / "missing", "nothing (no such file or folder)"),
        "a path under a file": (
            root / "notes.txt" / "idx",
            f"nothing: {root / 'notes.txt'} is a file, so nothing can be under it",
        ),
        "an empty folder": (root / "empty", "a folder"),
        "another program's folder": (other, "a folder"),
    }
    if UNREADABLE.exists():
        (root / "unreadable").symlink_to(UNREADABLE)
        paths["an unreadable file"] = (root / "unreadable", "a file that cannot be read (Input/output error)")
    return paths


KINDS = ["a file", "a symlink loop", "a broken symlink", "a FIFO", "a missing path", "a path under a file", "an empty folder",
         "another program's folder", "an unreadable file"]  # fmt: skip


def index_message(path: Path, what: str) -> str:
    if what == "nothing (no such file or folder)":
        return f"{path}: no such index folder; build one with: nlqo index SOURCE --out {path}"
    if what.startswith("nothing: "):
        return f"{path}: no such index folder ({what.removeprefix('nothing: ')}); build one with: nlqo index SOURCE --out {path}"
    if path.name == "empty":
        return f"{path}: not an nlqo index (no manifest.json: the folder is empty); expected a folder written by 'nlqo index SOURCE --out DIR'"
    if path.name == "other":
        return f"{path}: not an nlqo index (no manifest.json: the folder holds .git, README, package.json); expected a folder written by 'nlqo index SOURCE --out DIR'"
    return f"{path}: expected an index folder written by 'nlqo index', found {what}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", ["retrieve", "ask"])
def test_an_index_path_of_the_wrong_kind_is_refused_naming_it(fake_models, capsys, tmp_path, kind, command):
    paths = odd_paths(tmp_path / "odd")
    if kind not in paths:
        pytest.skip(f"{UNREADABLE} is not on this system")
    path, what = paths[kind]
    code, err = run(
        capsys, command, "Who wrote The Hobbit?", "--index", path, *(("--quiet",) if command == "ask" else ())
    )
    assert code == 2 and err == f"nlqo: error: {index_message(path, what)}\n"


@pytest.mark.parametrize(
    "spoil, says",
    [
        pytest.param(
            lambda m: m.mkdir(),
            "manifest.json: expected the index's manifest, a JSON file, found a folder; rebuild it with: nlqo index SOURCE",
            id="manifest.json a folder",
        ),
        pytest.param(
            lambda m: m.symlink_to(m),
            "manifest.json: expected the index's manifest, a JSON file, found a symlink loop; rebuild it with",
            id="manifest.json a symlink loop",
        ),
        pytest.param(
            lambda m: m.symlink_to(UNREADABLE),
            "manifest.json: expected the index's manifest, a JSON file, found a file that cannot be read (Input/output error)",
            id="manifest.json unreadable",
        ),
        pytest.param(
            lambda m: m.write_text('{"name": "My App", "icons": []}'),
            "manifest.json: not an nlqo index manifest; rebuild it with",
            id="a web app's manifest.json",
        ),
        pytest.param(
            lambda m: m.write_text(
                '{"format": "nlqo-index", "format_version": 1, "embedder": "x", "dim": "384", "count": 1, "kind": "flat", '
                '"source": "s", "created": "c", "nlqo_version": "0"}'
            ),
            "manifest.json: malformed manifest (field 'dim' of the manifest is a string, not a number); the index is damaged",
            id="a manifest field of the wrong type",
        ),
    ],
)
def test_a_folder_whose_manifest_is_odd_is_refused_naming_the_manifest(fake_models, capsys, tmp_path, spoil, says):
    if "unreadable" in str(says) and not UNREADABLE.exists():
        pytest.skip(f"{UNREADABLE} is not on this system")
    folder = tmp_path / "idx"
    folder.mkdir()
    spoil(folder / "manifest.json")
    code, err = run(capsys, "retrieve", "Who wrote The Hobbit?", "--index", folder)
    assert code == 2 and err.startswith(f"nlqo: error: {folder}/{says}"), err


@pytest.mark.parametrize("kind", KINDS)
def test_a_corpus_path_of_the_wrong_kind_is_refused_naming_it(fake_models, capsys, tmp_path, kind):
    paths = odd_paths(tmp_path / "odd")
    if kind not in paths:
        pytest.skip(f"{UNREADABLE} is not on this system")
    path, what = paths[kind]
    code, err = run(capsys, "index", path, "--out", tmp_path / "idx", "--quiet")
    if what == "a folder":  # a folder with no .txt or .md file in it
        assert code == 2 and err == f"nlqo: error: {path}: no passages to index\n"
    elif what == "a file":  # notes.txt: a corpus of one text file
        assert code == 0 and (tmp_path / "idx" / "manifest.json").is_file()
        return
    else:
        assert (
            code == 2
            and err == f"nlqo: error: {path}: expected a corpus file or a folder of text files, found {what}\n"
        )
    assert not (tmp_path / "idx").exists()


@pytest.mark.skipif(not UNREADABLE.exists(), reason=f"{UNREADABLE} is not on this system")
def test_an_unreadable_text_file_in_a_corpus_folder_is_refused_or_skipped(fake_models, capsys, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "hobbit.md").write_text("# The Hobbit\n\nTolkien wrote The Hobbit.\n")
    (notes / "broken.txt").symlink_to(UNREADABLE)
    code, err = run(capsys, "index", notes, "--out", tmp_path / "idx", "--quiet")
    assert code == 2 and err == f"nlqo: error: {notes / 'broken.txt'}: cannot be read (Input/output error)\n"
    code, err = run(capsys, "index", notes, "--out", tmp_path / "idx", "--quiet", "--on-error", "skip")
    assert code == 0 and f"nlqo index: skipped {notes / 'broken.txt'}: cannot be read (Input/output error)" in err


def test_a_text_file_that_is_not_utf8_is_named_with_its_line(fake_models, capsys, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "latin1.txt").write_bytes("first line\nZ\u00fcrich\n".encode("latin-1"))
    code, err = run(capsys, "index", notes, "--out", tmp_path / "idx", "--quiet")
    assert (
        code == 2
        and err
        == f"nlqo: error: {notes / 'latin1.txt'}:2: not UTF-8 text (byte 0xfc at column 2); save the file as UTF-8\n"
    )


@pytest.mark.parametrize(
    "kind", ["a file", "a symlink loop", "a broken symlink", "a FIFO", "a path under a file", "an unreadable file"]
)
def test_an_out_path_where_no_index_can_be_written_is_refused_naming_it(fake_models, capsys, tmp_path, kind):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": "Tolkien wrote The Hobbit."}) + "\n")
    paths = odd_paths(tmp_path / "odd")
    if kind not in paths:
        pytest.skip(f"{UNREADABLE} is not on this system")
    path, what = paths[kind]
    code, err = run(capsys, "index", corpus, "--out", path, "--quiet")
    assert code == 2 and err == f"nlqo: error: {path}: expected an index folder to create or replace, found {what}\n"


def test_an_out_folder_of_another_program_is_kept_even_with_a_manifest_json(fake_models, capsys, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": "Tolkien wrote The Hobbit."}) + "\n")
    webapp = tmp_path / "webapp"
    webapp.mkdir()
    (webapp / "manifest.json").write_text('{"name": "My App", "icons": []}')
    (webapp / "index.html").write_text("<html></html>")
    code, err = run(capsys, "index", corpus, "--out", webapp, "--quiet")
    assert (
        code == 2
        and err
        == f"nlqo: error: {webapp}: folder is not empty and holds no nlqo index (the folder holds index.html, manifest.json); refusing to replace it\n"
    )
    assert sorted(p.name for p in webapp.iterdir()) == ["index.html", "manifest.json"]  # it was deleted before


def model_message(path: Path, what: str) -> str:
    if path.name == "notes.txt":
        return f"{path}: not a model directory or a .gguf file"
    if path.name == "empty":
        return f"{path}: not a model directory ({path} holds neither config.json nor a .gguf file)"
    if path.name == "other":
        return f"{path}: not a model directory ({path} holds neither config.json nor a .gguf file)"
    return f"{path}: expected a bundled model name, a model folder or a .gguf file, found {what}"


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "an unreadable file"])
def test_a_model_path_of_the_wrong_kind_is_refused_naming_it(capsys, tmp_path, kind):
    path, what = odd_paths(tmp_path / "odd")[kind]
    code, err = run(capsys, "parse", "Who wrote The Hobbit?", "--model", path)
    assert code == 2 and err == f"nlqo: error: {model_message(path, what)}\n"


@pytest.mark.parametrize(
    "make, says",
    [
        pytest.param(
            lambda f: (f / "config.json").write_text('{"name": "app", "version": 2}'),
            "config.json is not a transformers model's configuration: it names no model_type)",
            id="another program's config.json",
        ),
        pytest.param(
            lambda f: (f / "config.json").write_text("{not json"),
            "config.json is not JSON (",
            id="a config.json that is not JSON",
        ),
        pytest.param(
            lambda f: (f / "config.json").symlink_to(UNREADABLE),
            "config.json is a file that cannot be read (Input/output error))",
            id="an unreadable config.json",
        ),
        pytest.param(
            lambda f: (f / "model.gguf").write_text("not a model"),
            "model.gguf is not a GGUF file (it starts with b'not ', not b'GGUF'): corrupt or the wrong file",
            id="a .gguf of text",
        ),
        pytest.param(
            lambda f: (f / "model.gguf").symlink_to(UNREADABLE), "cannot read the GGUF model", id="an unreadable .gguf"
        ),
    ],
)
def test_a_model_folder_holding_something_else_is_refused_naming_the_file(capsys, tmp_path, make, says):
    if "unreadable" in str(says) + str(make) and not UNREADABLE.exists():
        pytest.skip(f"{UNREADABLE} is not on this system")
    folder = tmp_path / "model"
    folder.mkdir()
    make(folder)
    code, err = run(capsys, "parse", "Who wrote The Hobbit?", "--model", folder)
    assert code == 2 and err.startswith("nlqo: error: ") and says in err and str(folder) in err, err


# --- no permission ------------------------------------------------------------------------------

RUNNER = """
import sys
import nlqo.main.builder
from nlqo.runtime.embed import SentenceEmbedder
from nlqo.testing import HashEmbedder
class Named(HashEmbedder):
    name = "all-minilm-l6-v2"
SentenceEmbedder.load = classmethod(lambda cls, *a, **kw: Named())
from nlqo.cli import main
sys.exit(main(sys.argv[1:]))
"""


def unprivileged(*argv) -> subprocess.CompletedProcess:
    """``nlqo ARGV`` (with the hashing embedder) in a process that permissions stop: as root, one
    without the capabilities that override them (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH)."""
    command = [sys.executable, "-c", RUNNER, *map(str, argv)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv (util-linux): no way to make permissions stop this process")
        command = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_a_folder_without_permission_is_refused_naming_it(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "manifest.json").write_text("{}")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": "Tolkien wrote The Hobbit."}) + "\n")
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"id": "a", "text": "Tolkien wrote The Hobbit."}) + "\n")
    locked.chmod(0)
    secret.chmod(0)
    try:
        cells = {
            "--index": (unprivileged("retrieve", "--index", locked, "Who wrote The Hobbit?"),
                        f"nlqo: error: {locked}: expected an index folder written by 'nlqo index', found a folder that cannot be read (Permission denied)\n"),
            "corpus": (unprivileged("index", secret, "--out", tmp_path / "idx", "--quiet"),
                       f"nlqo: error: {secret}: expected a corpus file or a folder of text files, found a file that cannot be read (Permission denied)\n"),
            "--out": (unprivileged("index", corpus, "--out", locked / "idx", "--quiet"),
                      f"nlqo: error: {locked / 'idx'}: expected an index folder to create or replace, found a path that cannot be read (Permission denied)\n"),
            "--model": (unprivileged("parse", "Who wrote The Hobbit?", "--model", locked),
                        f"nlqo: error: {locked}: expected a bundled model name, a model folder or a .gguf file, found a folder that cannot be read (Permission denied)\n"),
        }  # fmt: skip
    finally:
        locked.chmod(0o755)
        secret.chmod(0o644)
    for name, (done, expected) in cells.items():
        assert (done.returncode, done.stderr) == (2, expected), name


# --- files a command reads: an IR file, --cost-model, --rules (issue 52) ---------------------------

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "older.nlqo"


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in ("a file", "a FIFO", "another program's folder")])
def test_an_ir_path_of_the_wrong_kind_is_refused_naming_it(capsys, tmp_path, kind):
    """Before, a missing IR file was 'internal error: FileNotFoundError' (exit 70), a folder IsADirectoryError.
    (A FIFO is read as a file is, as cat reads one: 'nlqo plan <(nlqo parse ...)' works.)"""
    paths = odd_paths(tmp_path / "odd")
    if kind not in paths:
        pytest.skip(f"{UNREADABLE} is not on this system")
    path, what = paths[kind]
    code, err = run(capsys, "plan", path)
    assert code == 2 and err == f"nlqo: error: {path}: expected an IR file (.nlqo), found {what}\n"


def test_a_missing_ir_file_is_refused_by_the_real_cli_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "nlqo", "plan", "ir/nope.nlqo"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    expected = "nlqo: error: ir/nope.nlqo: expected an IR file (.nlqo), found nothing (no such file or folder)\n"
    assert (done.returncode, done.stderr, done.stdout) == (2, expected, "")


def test_an_ir_file_given_with_ir_is_read_the_same_way(tmp_path):
    from nlqo.cli.common import read_ir
    from nlqo.errors import InputFileError

    with pytest.raises(InputFileError) as caught:
        read_ir(tmp_path)
    assert str(caught.value) == f"{tmp_path}: expected an IR file (.nlqo), found a folder"


DEFINITIONS = {"--cost-model": ("a cost-model file (.cost)", "default, shallow, structural"), "--rules": ("a rule list (.rules)", "default")}  # fmt: skip


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in ("a file", "another program's folder")])
@pytest.mark.parametrize("option", sorted(DEFINITIONS))
def test_a_cost_model_or_rule_list_path_of_the_wrong_kind_is_refused_naming_it(
    capsys, tmp_path, monkeypatch, option, kind
):
    """Before, a missing file or a folder said '<kind> file not found' (a folder is not 'not found'),
    and a file that could not be read was an internal error."""
    monkeypatch.delenv("NLQO_PATH", raising=False)
    paths = odd_paths(tmp_path / "odd")
    if kind not in paths:
        pytest.skip(f"{UNREADABLE} is not on this system")
    path, what = paths[kind]
    expected, known = DEFINITIONS[option]
    hint = f"; or name a known one: {known}" if what.startswith("nothing") else ""
    code, err = run(capsys, "plan", EXAMPLE, option, path)
    assert code == 2 and err == f"nlqo: error: {path}: expected {expected}, found {what}{hint}\n"


@pytest.mark.parametrize("option, suffix", [("--cost-model", ".cost"), ("--rules", ".rules"), ("ir", ".nlqo")])
def test_a_cost_model_rule_list_or_ir_file_that_is_not_utf8_is_named_with_its_line(capsys, tmp_path, option, suffix):
    """Before, a cost model or rule list in Latin-1 was 'internal error: UnicodeDecodeError' (exit 70)."""
    latin = tmp_path / f"latin1{suffix}"
    latin.write_bytes("# first line\n# Z\u00fcrich\n".encode("latin-1"))
    argv = ("plan", latin) if option == "ir" else ("plan", EXAMPLE, option, latin)
    code, err = run(capsys, *argv)
    if option == "ir":  # the IR reader shows the line with a caret, as for its syntax errors
        assert code == 2 and err.startswith(
            f"nlqo: error: {latin}:2:4: not UTF-8 text (byte 0xfc); save the file as UTF-8"
        )
    else:
        assert (
            code == 2
            and err == f"nlqo: error: {latin}:2: not UTF-8 text (byte 0xfc at column 4); save the file as UTF-8\n"
        )


def test_an_ir_cost_model_and_rule_list_without_permission_are_refused_naming_them(tmp_path):
    files = {name: tmp_path / name for name in ("q.nlqo", "m.cost", "r.rules")}
    files["q.nlqo"].write_text(EXAMPLE.read_text())
    files["m.cost"].write_text("cost = depth\n")
    files["r.rules"].write_text("normalize_variables\n")
    for file in files.values():
        file.chmod(0)
    denied = "found a file that cannot be read (Permission denied)"
    cells = {
        "ir": (unprivileged("plan", files["q.nlqo"]), f"{files['q.nlqo']}: expected an IR file (.nlqo), {denied}"),
        "--cost-model": (unprivileged("plan", EXAMPLE, "--cost-model", files["m.cost"]),
                         f"{files['m.cost']}: expected a cost-model file (.cost), {denied}"),
        "--rules": (unprivileged("plan", EXAMPLE, "--rules", files["r.rules"]),
                    f"{files['r.rules']}: expected a rule list (.rules), {denied}"),
    }  # fmt: skip
    for name, (done, expected) in cells.items():
        assert (done.returncode, done.stderr) == (2, f"nlqo: error: {expected}\n"), name
