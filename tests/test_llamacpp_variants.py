"""llama.cpp's CPU variants (issue 54): the dispatch chooses the best variant that runs here, falls back
by itself when one crashes, and a variant forced down to AVX2 answers like the default one.

The choice and the kept probes are checked with fake probes; the rest runs the real SmolLM2-135M GGUF
in child processes (a process keeps the CPU variant it started with), and needs llama-cpp-python built
with its CPU variants (``sh scripts/install-llama-cpp-variants.sh``): with the older build, whose CPU backend
is linked in, those tests skip and say so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from realmodels import load_or_skip

from nlqo.errors import ConfigError, ModelNotAvailable
from nlqo.runtime.llm.llamacpp import variants
from nlqo.runtime.llm.llamacpp.variants import Probe, Variant, cached_probe, choose, requested

RAN = Probe(True, True, "ran")
CRASHED = Probe(False, True, "killed by SIGSEGV")


def found(tmp_path: Path) -> list[Variant]:
    """Three variants, best first, as :func:`variants.variants` orders them (files that exist, for the keys)."""
    out = []
    for name, score in (("sapphirerapids", 4000), ("zen4", 2000), ("haswell", 60), ("x64", 1)):
        path = tmp_path / f"libggml-cpu-{name}.so"
        path.write_bytes(name.encode())
        out.append(Variant(name, path, score))
    return out


# --- choosing, with fake probes -------------------------------------------------------------------


def test_the_best_variant_that_runs_is_chosen(tmp_path):
    probed = []
    chosen = choose(found(tmp_path), None, lambda v: probed.append(v.name) or RAN)
    assert chosen.name == "sapphirerapids" and probed == ["sapphirerapids"]


def test_a_variant_whose_probe_crashes_falls_back_to_the_next(tmp_path):
    """A CPU that lists AMX it cannot run: the AMX variant's probe dies, the next one is used."""
    probed = []

    def probe(v: Variant) -> Probe:
        probed.append(v.name)
        return CRASHED if v.name == "sapphirerapids" else RAN

    assert choose(found(tmp_path), None, probe).name == "zen4"
    assert probed == ["sapphirerapids", "zen4"]


def test_variants_the_cpu_lacks_are_never_probed(tmp_path):
    vs = [Variant(v.name, v.path, 0 if v.name in ("sapphirerapids", "zen4") else v.score) for v in found(tmp_path)]
    probed = []
    assert choose(vs, None, lambda v: probed.append(v.name) or RAN).name == "haswell"
    assert probed == ["haswell"]


def test_when_no_variant_runs_the_error_says_what_each_probe_showed(tmp_path):
    with pytest.raises(ModelNotAvailable, match="no llama.cpp CPU variant runs.*zen4 killed by SIGSEGV"):
        choose(found(tmp_path), None, lambda v: CRASHED)


def test_a_forced_variant_is_used_as_asked(tmp_path):
    assert choose(found(tmp_path), "haswell", lambda v: RAN).name == "haswell"


def test_a_forced_variant_is_never_silently_replaced(tmp_path):
    vs = found(tmp_path)
    with pytest.raises(ConfigError, match="no such llama.cpp CPU variant; this build has sapphirerapids, zen4"):
        choose(vs, "avx9", lambda v: RAN)
    lacking = [Variant(v.name, v.path, 0) if v.name == "zen4" else v for v in vs]
    with pytest.raises(ModelNotAvailable, match="zen4 needs instruction sets this CPU lacks; it can run"):
        choose(lacking, "zen4", lambda v: RAN)
    with pytest.raises(ModelNotAvailable, match="haswell crashed in a probe on this machine: killed by SIGSEGV"):
        choose(vs, "haswell", lambda v: CRASHED)


def test_the_setting_is_the_argument_else_the_environment():
    env = {variants.VARIANT_ENV: "Haswell"}
    assert requested(None, env) == "haswell" and requested("zen4", env) == "zen4"
    assert requested(None, {}) is None and requested("auto", env) is None


def fake_llama_cpp(lib: Path, registered: int) -> SimpleNamespace:
    """A stand-in for the llama_cpp package: its library folder and libllama's registry calls."""
    calls = SimpleNamespace(ggml_backend_reg_count=lambda: registered, ggml_backend_load=lambda path: None)
    return SimpleNamespace(llama_cpp=SimpleNamespace(_lib=calls, _base_path=str(lib)), __file__=str(lib / "x.py"))


def test_the_build_with_its_cpu_backend_linked_in_has_nothing_to_choose(tmp_path, monkeypatch):
    monkeypatch.delenv(variants.VARIANT_ENV, raising=False)
    built_in = fake_llama_cpp(tmp_path, registered=1)
    assert variants.load_cpu_backend(built_in) is None
    with pytest.raises(ConfigError, match="CPU backend built in, with no variants.*install-llama-cpp-variants.sh"):
        variants.load_cpu_backend(built_in, cpu_variant="haswell")
    monkeypatch.setenv(variants.VARIANT_ENV, "auto")
    assert variants.load_cpu_backend(built_in) is None


def test_a_dispatching_build_without_its_variant_libraries_says_how_to_reinstall(tmp_path):
    with pytest.raises(ModelNotAvailable, match="has no libggml-cpu libraries: reinstall"):
        variants.load_cpu_backend(fake_llama_cpp(tmp_path, registered=0))


# --- probes kept: once per variant library, CPU and model ----------------------------------------------


def test_a_conclusive_probe_is_kept_and_an_inconclusive_one_is_not(tmp_path):
    amx, zen4, *_ = found(tmp_path)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    runs = []

    def run(v: Variant, m: Path | None) -> Probe:
        runs.append(v.name)
        return {"sapphirerapids": CRASHED, "zen4": Probe(True, False, "the probe failed without crashing")}[v.name]

    for _ in range(2):
        assert cached_probe(amx, model, root=tmp_path / "kept", run=run) == CRASHED
        assert cached_probe(zen4, model, root=tmp_path / "kept", run=run).ok
    assert runs == ["sapphirerapids", "zen4", "zen4"]  # the crash was kept, the inconclusive probe ran again
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF and more")
    cached_probe(amx, other, root=tmp_path / "kept", run=run)
    assert runs[-1] == "sapphirerapids"  # another model is probed again
    amx.path.write_bytes(b"a rebuilt library")
    cached_probe(amx, model, root=tmp_path / "kept", run=run)
    assert runs.count("sapphirerapids") == 3  # so is a rebuilt library


# --- the real build ---------------------------------------------------------------------------------------


def dispatched_lib() -> Path:
    """llama-cpp-python's library folder when it has CPU variants; else the test skips."""
    llama_cpp = pytest.importorskip(
        "llama_cpp", reason="llama-cpp-python is not installed (sh scripts/install-llama-cpp.sh)"
    )
    lib = variants.lib_dir(llama_cpp)
    if not any(variants.variant_name(p) != variants.SINGLE for p in variants.variant_files(lib)):
        pytest.skip(
            "the installed llama-cpp-python has its CPU backend built in (the AVX2-only build), no CPU variants: "
            "install the dispatched build with sh scripts/install-llama-cpp-variants.sh to test the dispatch"
        )
    return lib


@pytest.fixture(scope="module")
def gguf() -> Path:
    from nlqo.runtime.models.gguf import find_gguf

    return load_or_skip(lambda: find_gguf("smollm2-135m", progress=False))


ANSWER = textwrap.dedent(
    """
    import json, sys
    from nlqo.runtime.llm.base import ChatMessage
    from nlqo.runtime.llm.llamacpp import LlamaCppLLM, cpu_variant

    llm = LlamaCppLLM.load(sys.argv[1], threads=1)
    system = "You answer geography questions with one short sentence."
    out = llm.chat([ChatMessage("system", system), ChatMessage("user", "What is the capital of France?")], max_tokens=24)
    print(json.dumps({"variant": cpu_variant(), "text": out.text, "identity": llm.cache_identity()}))
    """
)


def answer(gguf: Path, cache: Path, **env: str) -> dict:
    """The question answered in a child process (its own CPU variant), with ``env`` and probes kept in ``cache``."""
    environ = {k: v for k, v in os.environ.items() if k not in (variants.VARIANT_ENV, "LLAMA_CPP_LIB_PATH")}
    environ.update(NLQO_CACHE=str(cache), **env)
    done = subprocess.run(
        [sys.executable, "-c", ANSWER, str(gguf)], capture_output=True, text=True, timeout=600, env=environ
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.real_model
def test_forced_down_to_avx2_the_question_gets_the_default_variants_answer(gguf, tmp_path):
    scores = {v.name: v.score for v in variants.variants(dispatched_lib(), root=tmp_path / "scores")}
    if not scores.get("haswell"):
        pytest.skip("this CPU (or build) has no AVX2 variant to force")
    auto = answer(gguf, tmp_path / "cache")
    avx2 = answer(gguf, tmp_path / "cache", **{variants.VARIANT_ENV: "haswell"})
    assert avx2["variant"] == "haswell" and avx2["identity"]["cpu_variant"] == "haswell"
    assert scores[auto["variant"]] >= scores["haswell"]  # the default is at least AVX2 on a CPU that has it
    assert "Paris" in auto["text"]
    assert avx2["text"] == auto["text"]


FAKE = """
#include <signal.h>
int ggml_backend_score(void) { return 1 << 24; }  /* claims more than any real variant */
void *ggml_backend_init(void) { raise(SIGILL); return 0; }  /* and dies as an instruction this CPU lacks would */
"""
BOOM = """
#include <signal.h>
__attribute__((constructor)) static void boom(void) { raise(SIGILL); }  /* dies as soon as it is loaded */
int ggml_backend_score(void) { return 1 << 25; }
"""


@pytest.mark.real_model
def test_a_variant_that_crashes_here_is_passed_over_by_itself(gguf, tmp_path):
    """A library scoring above every real variant that dies of SIGILL when its backend starts, and
    one that dies as soon as it is loaded (before it can be scored): the process answers anyway, on
    the best real variant, and keeps the crash for next time."""
    lib = dispatched_lib()
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the crashing fake variant")
    fake_lib = tmp_path / "lib"
    fake_lib.mkdir()
    for path in [*lib.iterdir(), *variants.variant_files(lib)]:
        if path.is_file() and not (fake_lib / path.name).exists():
            (fake_lib / path.name).symlink_to(path.resolve())
    for name, source in (("zzfake", FAKE), ("zzboom", BOOM)):
        (tmp_path / f"{name}.c").write_text(source)
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(fake_lib / f"libggml-cpu-{name}.so"), str(tmp_path / f"{name}.c")], check=True)  # fmt: skip
    best = variants.variants(lib, root=tmp_path / "scores")[0]
    out = answer(gguf, tmp_path / "cache", LLAMA_CPP_LIB_PATH=str(fake_lib))
    assert out["variant"] == best.name and "Paris" in out["text"]
    folder = tmp_path / "cache" / "llama-cpu-variants"
    kept = {p.name.split("-")[0]: json.loads(p.read_text()) for p in folder.iterdir()}
    assert kept["zzfake"]["probe"]["ok"] is False and "SIGILL" in kept["zzfake"]["probe"]["why"]
    assert kept[best.name]["probe"]["ok"] is True
    scored = {Path(path).name: n for path, n in kept["scores"]["scores"].items()}
    assert scored["libggml-cpu-zzboom.so"] == 0 and scored["libggml-cpu-zzfake.so"] == 1 << 24
    assert "zzboom" not in kept  # never probed: it cannot even be loaded
