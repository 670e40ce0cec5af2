"""Fault injection for the model cache (``$NLQO_CACHE``, here a temporary directory).

Two real processes assemble, or convert, the same fake model at once, and a builder is killed
midway: one builds while the other waits and reuses its result, and no torn file is ever in place.
Cached files are damaged (bytes flipped, cut short, removed): the damage is found by size and
SHA-256 and the entry is built again with a ``RepairWarning``, or refused with the command that
fixes it. Fake parts are a few bytes; the builders pause at a hook until the test lets them go.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

import pytest

from nlqo.errors import ModelNotAvailable, RepairWarning
from nlqo.runtime.models import convert as convert_module
from nlqo.runtime.models import gguf as gguf_module
from nlqo.runtime.models import resolve_model
from nlqo.runtime.models.convert import MARKER, read_marker
from nlqo.runtime.models.gguf import bundled_gguf, gguf_root
from nlqo.runtime.models.lock import lock_path
from nlqo.runtime.models.registry import BundledModel
from nlqo.runtime.models.resolve import bundled_dir

PAYLOAD = (b"GGUF-part-one|", b"part-two|", b"end")
WEIGHTS = b"float32 weights " * 64

REGISTRY = f'''
"""The fake models of tests/test_faults_models.py (imported by the test and by its builder processes)."""
import hashlib
from nlqo.runtime.models.registry import BundledModel, Part

PAYLOAD = {PAYLOAD!r}
BLOB = b"".join(PAYLOAD)
MODEL = BundledModel(
    name="fake-model", description="three fake parts",
    parts=tuple(Part(f"nlqofault-part{{i}}", "1.0", f"nlqofault_part{{i}}", "data/*.bin") for i in (1, 2, 3)),
    filename="fake.gguf", sha256=hashlib.sha256(BLOB).hexdigest(), size=len(BLOB), license="none",
)
SINGLE = BundledModel(
    name="fake-single", description="one fake part shipped whole",
    parts=(Part("nlqofault-part1", "1.0", "nlqofault_part1", "data/*.bin"),),
    filename="part01.bin", sha256=hashlib.sha256(PAYLOAD[0]).hexdigest(), size=len(PAYLOAD[0]), license="none",
)
'''

BUILDER = '''
"""A builder process: assembles (``assemble``) or converts (``convert``) the fake model into
$NLQO_CACHE, logging each build to ``events`` and pausing in the middle of it until ``go`` exists."""
import hashlib, json, os, sys, time
from pathlib import Path

from nlqo.runtime.models import convert, gguf, parts, resolve
from nlqofault_registry import MODEL

mode, work = sys.argv[1], Path(sys.argv[2])


def midway():
    with open(work / "events", "a") as log:
        log.write(f"{mode} {os.getpid()}\\n")
    while not (work / "go").exists():
        time.sleep(0.01)


def slow_stream(paths, out=None, progress=None):
    """parts.stream_sha256 that stops after the first part: a half-written file in staging."""
    digest = hashlib.sha256()
    for i, path in enumerate(paths):
        data = Path(path).read_bytes()
        digest.update(data)
        if out is not None:
            out.write(data)
            if i == 0:
                out.flush()
                midway()
    return digest.hexdigest()


def slow_load(path):
    assert path.is_file()
    midway()
    return "model", "tokenizer"


def save(model, tokenizer, folder):
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(%(weights)r)


if mode == "assemble":
    parts.stream_sha256 = slow_stream
    print(json.dumps({"path": str(gguf.bundled_gguf(MODEL, progress=True))}))
else:
    convert.load_gguf, convert.save_converted = slow_load, save
    resolved = resolve.resolve_model(MODEL.name, registry=(MODEL,), progress=True)
    print(json.dumps({"path": str(resolved.path), "converted_now": resolved.converted_now}))
''' % {"weights": WEIGHTS}


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    """Three installed fake part packages and the fake registry, on sys.path here and in children."""
    site = tmp_path / "site"
    for i, data in enumerate(PAYLOAD, start=1):
        pkg = site / f"nlqofault_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise ImportError('fake parts must never be imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
    (site / "nlqofault_registry.py").write_text(REGISTRY)
    (site / "builder.py").write_text(BUILDER)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    sys.modules.pop("nlqofault_registry", None)
    return site


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("NLQO_CACHE", str(root))
    return root


def fake() -> tuple[BundledModel, BundledModel]:
    registry = importlib.import_module("nlqofault_registry")
    return registry.MODEL, registry.SINGLE


# --- two builders at once ------------------------------------------------------------------------


class Builders:
    """Builder processes of one test, sharing a work folder (their ``events`` log and ``go`` file)."""

    def __init__(self, site: Path, cache: Path, work: Path, mode: str):
        self.site, self.work, self.mode = site, work, mode
        self.env = {
            **os.environ,
            "NLQO_CACHE": str(cache),
            "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        }
        self.procs: list[subprocess.Popen] = []
        work.mkdir()

    def start(self) -> subprocess.Popen:
        err = open(self.work / f"err-{len(self.procs)}", "w")
        proc = subprocess.Popen(
            [sys.executable, str(self.site / "builder.py"), self.mode, str(self.work)],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        err.close()
        self.procs.append(proc)
        return proc

    def events(self) -> list[str]:
        log = self.work / "events"
        return log.read_text().splitlines() if log.exists() else []

    def stderr(self, i: int) -> str:
        return (self.work / f"err-{i}").read_text()

    def go(self) -> None:
        (self.work / "go").touch()

    def results(self) -> list[dict]:
        outs = []
        for proc in self.procs:
            out, _ = proc.communicate()
            outs.append(json.loads(out) if proc.returncode == 0 else {"returncode": proc.returncode})
        return outs

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def until(condition: Callable[[], bool], what: str) -> None:
    """Poll for ``condition``; the bound only keeps a broken build from hanging the suite."""
    for _ in range(30_000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture(params=["assemble", "convert"])
def builders(request, site, cache, tmp_path):
    b = Builders(site, cache, tmp_path / "work", request.param)
    yield b
    b.go()
    b.kill_all()


def built_path(cache: Path, mode: str) -> Path:
    model, _ = fake()
    return (
        gguf_root(cache) / f"{model.name}-{model.sha256[:12]}.gguf" if mode == "assemble" else bundled_dir(model, cache)
    )


def check_built(cache: Path, mode: str) -> None:
    """The entry is whole and nothing else (no staging) is beside it."""
    model, _ = fake()
    path = built_path(cache, mode)
    if mode == "assemble":
        assert path.read_bytes() == b"".join(PAYLOAD)
        expected = {path.name, f"{model.name}-{model.sha256[:12]}.verified.json"}
    else:
        assert (path / "model.safetensors").read_bytes() == WEIGHTS
        assert read_marker(path)["files"]["model.safetensors"]["sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
        expected = {path.name}
    assert {p.name for p in path.parent.iterdir()} == expected
    assert lock_path(path).is_file() and not any(p.name.startswith(".tmp-") for p in cache.rglob("*"))


def test_two_processes_build_one_entry_once_and_the_second_reuses_it(builders, cache):
    first = builders.start()
    until(lambda: len(builders.events()) == 1, "the first builder started building")
    second = builders.start()
    until(
        lambda: "waiting for another process to finish" in builders.stderr(1) or len(builders.events()) > 1,
        "the second builder waited or built",
    )
    assert not built_path(cache, builders.mode).exists()  # nothing in place while the first is midway
    builders.go()
    one, two = builders.results()
    assert builders.events() == [f"{builders.mode} {first.pid}"]  # built once, by the first
    assert f"waiting for another process to finish {built_path(cache, builders.mode)}" in builders.stderr(1)
    assert one["path"] == two["path"] == str(built_path(cache, builders.mode))
    if builders.mode == "convert":
        assert (one["converted_now"], two["converted_now"]) == (True, False)
    check_built(cache, builders.mode)
    assert second.returncode == 0


def test_a_builder_killed_midway_leaves_no_torn_entry_and_the_next_one_builds(builders, cache):
    first = builders.start()
    until(lambda: len(builders.events()) == 1, "the first builder started building")
    staging = [p for p in built_path(cache, builders.mode).parent.iterdir() if p.name.startswith(".tmp-")]
    assert len(staging) == 1 and any(f.is_file() for f in staging[0].iterdir())  # half-written, beside the entry
    second = builders.start()
    until(
        lambda: "waiting for another process" in builders.stderr(1) or len(builders.events()) > 1,
        "the second builder waited or built",
    )
    first.send_signal(signal.SIGKILL)
    first.wait()
    until(lambda: len(builders.events()) == 2, "the second builder took over")  # the kernel dropped the lock
    assert not built_path(cache, builders.mode).exists()
    builders.go()
    out = second.communicate()[0]
    assert second.returncode == 0 and json.loads(out)["path"] == str(built_path(cache, builders.mode))
    assert builders.events() == [f"{builders.mode} {first.pid}", f"{builders.mode} {second.pid}"]
    check_built(cache, builders.mode)  # the killed builder's staging is gone too


# --- damaged cache entries -----------------------------------------------------------------------


def flip(path: Path) -> None:
    """Flip one byte in place; a write moves the modification time, as here."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    stat = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-3])


def touch(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


@pytest.fixture
def assembled(monkeypatch) -> list[str]:
    """Count assemblies (in this process)."""
    calls: list[str] = []
    real = gguf_module.assemble

    def counting(model, folder, *, progress=True):
        calls.append(model.name)
        return real(model, folder, progress=progress)

    monkeypatch.setattr(gguf_module, "assemble", counting)
    return calls


@pytest.mark.parametrize(
    ("damage", "shown"),
    [(flip, "SHA-256 is [0-9a-f]{64}, expected"), (truncate, "SHA-256 is [0-9a-f]{64}, expected")],
    ids=["flipped", "truncated"],
)
def test_a_damaged_assembled_file_is_found_and_assembled_again(site, cache, assembled, damage, shown):
    model, _ = fake()
    path = bundled_gguf(model, progress=False)
    damage(path)
    with pytest.warns(
        RepairWarning,
        match=f"{re.escape(str(path))}: {shown} {model.sha256} \\(the cached file is damaged\\); assembling it again from the installed packages",
    ):
        assert bundled_gguf(model, progress=False) == path
    assert path.read_bytes() == b"".join(PAYLOAD)
    assert assembled == [model.name, model.name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bundled_gguf(model, progress=False) == path  # verified again: no third assembly
    assert assembled == [model.name, model.name]


def test_an_assembled_file_with_a_new_time_only_is_hashed_not_rebuilt(site, cache, assembled):
    model, _ = fake()
    path = bundled_gguf(model, progress=False)
    touch(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bundled_gguf(model, progress=False) == path
    assert assembled == [model.name]


def test_a_damaged_file_shipped_whole_in_a_wheel_is_refused_with_the_fix(site, cache):
    _, single = fake()
    part = site / "nlqofault_part1" / "data" / "part01.bin"
    flip(part)
    with pytest.raises(ModelNotAvailable) as err:
        bundled_gguf(single, progress=False)
    assert str(err.value).startswith(f"model 'fake-single': SHA-256 of {part} is ")
    assert str(err.value).endswith("reinstall with: nlqo models install fake-single --force-reinstall")
    assert not any(gguf_root(cache).glob("*.verified.json"))  # nothing vouches for the bad bytes


def test_damaged_wheel_parts_are_refused_with_the_fix_and_leave_nothing(site, cache):
    model, _ = fake()
    flip(site / "nlqofault_part2" / "data" / "part02.bin")
    with pytest.raises(ModelNotAvailable, match="reinstall with: nlqo models install fake-model --force-reinstall"):
        bundled_gguf(model, progress=False)
    assert list(gguf_root(cache).iterdir()) == []


@pytest.fixture
def converter(monkeypatch) -> list[Path]:
    """Cheap stand-ins for GGUF loading and saving (in this process); records what was loaded."""
    loaded: list[Path] = []

    def load(path: Path):
        loaded.append(path)
        return "model", "tokenizer"

    def save(model, tokenizer, folder: Path) -> None:
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(WEIGHTS)

    monkeypatch.setattr(convert_module, "load_gguf", load)
    monkeypatch.setattr(convert_module, "save_converted", save)
    return loaded


def _remove(path: Path) -> None:
    path.unlink()


def _garble(path: Path) -> None:
    path.write_text('{"source": "assembled fr')


@pytest.mark.parametrize(
    ("name", "damage", "shown"),
    [
        (
            "model.safetensors",
            flip,
            "SHA-256 of model.safetensors is [0-9a-f]{64}, expected " + hashlib.sha256(WEIGHTS).hexdigest(),
        ),
        ("model.safetensors", truncate, f"model.safetensors is {len(WEIGHTS) - 3} bytes, expected {len(WEIGHTS)}"),
        ("config.json", _remove, "config.json is missing"),
        (MARKER, _garble, f"its {MARKER} is unreadable"),
        (MARKER, _remove, f"it has no {MARKER} \\(an unfinished conversion\\)"),
    ],
    ids=["flipped", "truncated", "file-removed", "marker-garbled", "marker-removed"],
)
def test_a_damaged_conversion_is_found_and_converted_again(site, cache, converter, name, damage, shown):
    model, _ = fake()
    dest = resolve_model(model.name, registry=(model,), progress=False).path
    damage(dest / name)
    with pytest.warns(RepairWarning, match=f"{re.escape(str(dest))}: {shown}; converting fake-model again"):
        again = resolve_model(model.name, registry=(model,), progress=False)
    assert again.path == dest and again.converted_now
    assert (dest / "model.safetensors").read_bytes() == WEIGHTS and (dest / "config.json").is_file()
    assert read_marker(dest)["sha256"] == model.sha256
    assert len(converter) == 2
    assert [p.name for p in dest.parent.iterdir()] == [dest.name]  # the damaged copy is gone
    assert not resolve_model(model.name, registry=(model,), progress=False).converted_now


def test_a_conversion_with_new_times_only_is_hashed_and_kept(site, cache, converter):
    model, _ = fake()
    dest = resolve_model(model.name, registry=(model,), progress=False).path
    touch(dest / "model.safetensors")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not resolve_model(model.name, registry=(model,), progress=False).converted_now
    assert (
        read_marker(dest)["files"]["model.safetensors"]["mtime_ns"] == (dest / "model.safetensors").stat().st_mtime_ns
    )
    assert len(converter) == 1


def test_a_damaged_conversion_without_its_wheels_is_refused_with_the_install_command(
    site, cache, converter, monkeypatch
):
    model, _ = fake()
    dest = resolve_model(model.name, registry=(model,), progress=False).path
    flip(dest / "model.safetensors")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(site)])
    importlib.invalidate_caches()
    with pytest.raises(
        ModelNotAvailable,
        match=r"missing package\(s\) nlqofault-part1==1.0, .*; install it with: nlqo models install fake-model",
    ):
        resolve_model(model.name, registry=(model,), progress=False)
    assert len(converter) == 1
