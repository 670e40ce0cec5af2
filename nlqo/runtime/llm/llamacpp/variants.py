"""Which of llama.cpp's CPU backends this process runs: the best one the CPU can actually run, or the one asked for.

``scripts/install-llama-cpp-variants.sh`` (opt-in; the default install builds for AVX2) builds
llama-cpp-python with ``GGML_BACKEND_DL`` and ``GGML_CPU_ALL_VARIANTS``: the CPU backend is compiled once per x86 instruction-set level
(``libggml-cpu-x64.so`` ... ``libggml-cpu-haswell.so`` for AVX2, ``-skylakex`` for AVX-512, ``-zen4`` for
AVX-512 VBMI/VNNI/BF16, ``-sapphirerapids`` for AMX) and none is linked in. llama.cpp's own
``ggml_backend_load_all`` looks for them only beside the executable and in the working directory, not
in the Python package, so :func:`load_cpu_backend` loads one before ``llama_backend_init``:

* the variants are the ``libggml-cpu-*.so`` files in llama-cpp-python's library folder or in
  ``site-packages/bin`` (where its wheel installs them);
* each says what it scores on this CPU (its ``ggml_backend_score``, as llama.cpp's
  ``ggml_backend_load_best`` asks): 0 when cpuid lacks an instruction set it was compiled for, else
  more the more it uses;
* cpuid is not proof that an instruction set works: in a virtual machine a CPU that lists AMX
  crashed with SIGSEGV at model load (issue 54). So the best-scoring variant is first run in a child
  process (:func:`run_probe`: the variant, the model, a short prompt prefilled and one token decoded);
  if the child dies of a signal, the next variant is tried. The outcome is kept per variant library,
  CPU and model file under ``$NLQO_CACHE/llama-cpu-variants`` (:func:`cached_probe`), so each is
  probed once; a probe that fails for another reason (the model does not load) decides nothing and
  is not kept.

``NLQO_LLAMA_CPU_VARIANT=haswell`` (or ``LlamaCppLLM.load(..., cpu_variant="haswell")``) forces a
variant; ``auto`` (the default) chooses. A forced variant is probed too, and one the CPU lacks or whose
probe crashes is an error, never a silent substitute. The backend is loaded once per process, so a
process keeps the variant it started with.

A build with the CPU backend linked in (the AVX2-only build of earlier install scripts) has nothing to
choose: its backend registers itself when the library loads, and only ``auto`` is accepted.

``python -m nlqo.runtime.llm.llamacpp.variants [--model GGUF]`` lists the variants, their scores and
probes, and prints the chosen library's path last (for ``GGML_BACKEND_PATH``, which makes
``python -m llama_cpp.server`` load that variant).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import attrs

from nlqo.common.machine import cpu_key, cpu_signature
from nlqo.common.paths import cache_root
from nlqo.common.storage import replace_atomically
from nlqo.errors import ConfigError, ModelNotAvailable

LOG = logging.getLogger("nlqo.llama_cpp")

VARIANT_ENV = "NLQO_LLAMA_CPU_VARIANT"
"""The environment variable that forces a CPU variant (``haswell``, ``zen4``, ...); ``auto`` or unset: choose."""
PREFIX = "libggml-cpu-"
SUFFIX = ".so"
SINGLE = "cpu"
"""The name of a dynamically loaded CPU backend built for one target (``libggml-cpu.so``), not per variant."""
PROBE_TIMEOUT_S = 900.0
"""A probe loads the model and decodes once; a slower one decides nothing (the variant is used, not kept)."""
PROBE_TEXT = (
    "The probe prefills this prompt with the matrix kernels and decodes one token with the vector kernels: "
    "Barcelona hosted the 1992 Summer Olympics, and Madrid is the capital of Spain."
)
MODULE = "nlqo.runtime.llm.llamacpp.variants"
KEPT = "llama-cpu-variants"
"""The folder of ``$NLQO_CACHE`` where scores and probes are kept."""


@attrs.frozen
class Variant:
    """One CPU backend library and what it scores on this CPU (0: it cannot run here)."""

    name: str
    path: Path
    score: int


@attrs.frozen
class Probe:
    """What running a variant in a child process showed: ``ok`` (it ran, or the probe could not tell),
    ``conclusive`` (worth keeping: it ran, or it crashed), and ``why`` in words."""

    ok: bool
    conclusive: bool
    why: str


# --- the libraries ----------------------------------------------------------------------------------


def lib_dir(ll: Any) -> Path:
    """llama-cpp-python's library folder (``LLAMA_CPP_LIB_PATH`` when set, as llama_cpp itself reads it)."""
    base = getattr(getattr(ll, "llama_cpp", None), "_base_path", None)
    return Path(base) if base else Path(ll.__file__).parent / "lib"


def _ggml(ll: Any) -> Any:
    """libggml's calls used here, looked up through libllama's handle: the libggml instance libllama
    itself uses (the wheel holds copies, not symlinks, so ``lib/libggml.so`` opened by path would be a
    second instance with a registry of its own)."""
    g = getattr(ll.llama_cpp, "_lib", None)
    if g is None or not hasattr(g, "ggml_backend_load"):
        raise ModelNotAvailable("this llama-cpp-python does not expose libggml's backend registry")
    g.ggml_backend_reg_count.restype = ctypes.c_size_t
    g.ggml_backend_reg_count.argtypes = []
    g.ggml_backend_load.restype = ctypes.c_void_p
    g.ggml_backend_load.argtypes = [ctypes.c_char_p]
    return g


def variant_files(lib: Path) -> list[Path]:
    """The CPU backend libraries of a dynamically loading build: per variant, else the single one."""
    folders = dict.fromkeys([lib, lib.parent.parent / "bin"])  # the wheel puts MODULE libraries in site-packages/bin
    files = sorted({p.name: p for d in folders if d.is_dir() for p in d.glob(f"{PREFIX}*{SUFFIX}")}.values())
    if not files:
        files = [p for d in folders if (p := d / f"libggml-{SINGLE}{SUFFIX}").is_file()][:1]
    return files


def variant_name(path: Path) -> str:
    """``haswell`` for ``libggml-cpu-haswell.so``; ``cpu`` for the single ``libggml-cpu.so``."""
    stem = path.name.removesuffix(SUFFIX)
    return stem.removeprefix(PREFIX) if stem.startswith(PREFIX) else SINGLE


def score(path: Path) -> int:
    """The library's ``ggml_backend_score`` on this CPU (cpuid only, nothing run), as
    ``ggml_backend_load_best`` asks it; a library without one scores 1 (it claims no instruction set)."""
    import _ctypes

    handle = ctypes.CDLL(str(path), mode=getattr(os, "RTLD_LOCAL", 0))
    try:
        fn = getattr(handle, "ggml_backend_score", None)
        if fn is None:
            return 1
        fn.restype, fn.argtypes = ctypes.c_int, []
        return int(fn())
    finally:
        _ctypes.dlclose(handle._handle)


def variants(lib: Path, *, root: Path | None = None) -> list[Variant]:
    """The variants of the build in ``lib``, best-scoring first (empty: the CPU backend is linked in).

    A library runs its initialisers when it is loaded, and a variant's are compiled for its
    instruction sets, so the scores are asked in a child process (:func:`scores`), once per set of
    libraries and CPU, kept beside the probes."""
    files = variant_files(lib)
    if not files:
        return []
    by_path = scores(files, root=root)
    found = [Variant(variant_name(p), p, by_path.get(str(p), 0)) for p in files]
    return sorted(found, key=lambda v: (-v.score, v.name))


def scores(files: Sequence[Path], *, root: Path | None = None) -> dict[str, int]:
    """Each library's score on this CPU, asked in a child process; a library whose loading kills its
    child scores 0. A child that cannot run at all leaves the asking to this process, as llama.cpp's
    own ``ggml_backend_load_best`` does; only what the children said is kept."""
    stats = [p.stat() for p in files]
    key = {
        "libraries": [[str(p.resolve()), st.st_size, st.st_mtime_ns] for p, st in zip(files, stats)],
        "cpu": cpu_key(cpu_signature()),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    path = (root or cache_root() / KEPT) / f"scores-{digest}.json"
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept.get("key") == key:
            return {str(k): int(v) for k, v in kept["scores"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    done = _child(["scores", *map(str, files)], timeout=120)
    if done is not None and done.returncode == 0:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    elif done is not None and done.returncode < 0:  # one of them killed it: ask each alone
        result = {}
        for p in files:
            alone = _child(["scores", str(p)], timeout=120)
            if alone is None or alone.returncode > 0:
                return {str(q): score(q) for q in files}
            if alone.returncode < 0:
                LOG.warning("llama.cpp CPU variant %s kills the process that loads it: not used", p.name)
                result[str(p)] = 0
            else:
                result[str(p)] = int(json.loads(alone.stdout.strip().splitlines()[-1])[str(p)])
    else:
        return {str(p): score(p) for p in files}
    try:
        replace_atomically(path, json.dumps({"key": key, "scores": result}, indent=1, sort_keys=True))
    except OSError:
        pass
    return result


# --- choosing ---------------------------------------------------------------------------------------


def requested(cpu_variant: str | None, env: dict[str, str] | None = None) -> str | None:
    """The variant asked for: ``cpu_variant``, else ``$NLQO_LLAMA_CPU_VARIANT``; None for ``auto`` or nothing."""
    value = (cpu_variant or (os.environ if env is None else env).get(VARIANT_ENV, "")).strip().lower()
    return None if value in ("", "auto") else value


def choose(found: Sequence[Variant], forced: str | None, probe: Callable[[Variant], Probe]) -> Variant:
    """The variant to load: ``forced`` if it can run here, else the best-scoring one whose probe did not crash.

    >>> vs = [Variant("zen4", Path("z"), 40), Variant("haswell", Path("h"), 20), Variant("x64", Path("x"), 1)]
    >>> crashes = {"zen4": Probe(False, True, "killed by SIGILL")}
    >>> choose(vs, None, lambda v: crashes.get(v.name, Probe(True, True, "ran"))).name
    'haswell'
    >>> choose(vs, "x64", lambda v: Probe(True, True, "ran")).name
    'x64'
    """
    if forced is not None:
        chosen = next((v for v in found if v.name == forced), None)
        names = ", ".join(v.name for v in found)
        if chosen is None:
            raise ConfigError(
                f"{VARIANT_ENV}={forced}: no such llama.cpp CPU variant; this build has {names} (or auto)"
            )
        if chosen.score <= 0:
            runnable = ", ".join(v.name for v in found if v.score > 0)
            raise ModelNotAvailable(
                f"llama.cpp CPU variant {forced} needs instruction sets this CPU lacks; it can run {runnable}"
            )
        outcome = probe(chosen)
        if not outcome.ok:
            raise ModelNotAvailable(f"llama.cpp CPU variant {forced} crashed in a probe on this machine: {outcome.why}")
        return chosen
    failed: list[tuple[str, str]] = []
    for v in (v for v in found if v.score > 0):
        outcome = probe(v)
        if outcome.ok:
            if failed:
                LOG.warning("llama.cpp CPU variant %s chosen: %s", v.name, "; ".join(f"{n} {why}" for n, why in failed))
            return v
        LOG.warning("llama.cpp CPU variant %s crashed in its probe (%s); trying the next one", v.name, outcome.why)
        failed.append((v.name, outcome.why))
    raise ModelNotAvailable(
        "no llama.cpp CPU variant runs on this machine"
        + (": " + "; ".join(f"{n} {why}" for n, why in failed) if failed else " (none scores above 0)")
    )


# --- probing, in a child process, kept ---------------------------------------------------------------


def probe_key(variant: Variant, model: Path | None) -> dict[str, Any]:
    """What a kept probe must match: the library file, the CPU, the model file."""
    lib = variant.path.stat()
    key: dict[str, Any] = {
        "library": str(variant.path.resolve()),
        "size": lib.st_size,
        "mtime_ns": lib.st_mtime_ns,
        "cpu": cpu_key(cpu_signature()),
        "model": None,
    }
    if model is not None:
        info = Path(model).stat()
        key["model"] = {"name": Path(model).name, "size": info.st_size}
    return key


def _child(args: Sequence[str], *, timeout: float) -> subprocess.CompletedProcess | None:
    """``python -m`` this module with ``args`` in a child process (None: it did not start or finish)."""
    env = {k: v for k, v in os.environ.items() if k != VARIANT_ENV}
    package_root = str(Path(__file__).resolve().parents[4])  # where ``import nlqo`` finds this package
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    try:
        return subprocess.run(
            [sys.executable, "-m", MODULE, *args], capture_output=True, text=True, timeout=timeout, env=env
        )
    except (subprocess.TimeoutExpired, OSError) as exc:
        LOG.warning("a llama.cpp CPU variant check did not run: %s", exc)
        return None


def run_probe(variant: Variant, model: Path | None, *, timeout: float = PROBE_TIMEOUT_S) -> Probe:
    """Run ``variant`` in a child process: load it, load ``model``, prefill a short prompt, decode a token."""
    done = _child(["probe", str(variant.path)] + ([str(model)] if model else []), timeout=timeout)
    if done is None:
        return Probe(True, False, "the probe did not run or did not finish")
    tail = " | ".join(line.strip() for line in done.stderr.strip().splitlines()[-3:])
    if done.returncode == 0:
        return Probe(True, True, "ran")
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return Probe(False, True, f"killed by {name}" + (f" after: {tail}" if tail else ""))
    return Probe(True, False, f"the probe failed without crashing (exit {done.returncode}): {tail}")


def _kept_path(variant: Variant, model: Path | None, root: Path | None) -> tuple[dict[str, Any], Path]:
    key = probe_key(variant, model)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return key, (root or cache_root() / KEPT) / f"{variant.name}-{digest}.json"


def kept_probe(variant: Variant, model: Path | None, *, root: Path | None = None) -> Probe | None:
    """The probe of ``variant`` with ``model`` kept from an earlier run, or None."""
    key, path = _kept_path(variant, model, root)
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept.get("key") == key:
            return Probe(**kept["probe"])
    except (OSError, ValueError, TypeError, KeyError):
        pass  # nothing kept, or a file from another version: probe again
    return None


def cached_probe(
    variant: Variant,
    model: Path | None,
    *,
    root: Path | None = None,
    run: Callable[[Variant, Path | None], Probe] = run_probe,
) -> Probe:
    """The probe of ``variant`` with ``model`` kept from an earlier run when its key matches, else run now
    (and kept when it is conclusive)."""
    key, path = _kept_path(variant, model, root)
    kept = kept_probe(variant, model, root=root)
    if kept is not None:
        return kept
    LOG.info("probing llama.cpp CPU variant %s in a child process (once per machine and model)", variant.name)
    outcome = run(variant, model)
    if outcome.conclusive:
        try:
            replace_atomically(path, json.dumps({"key": key, "probe": attrs.asdict(outcome)}, indent=1, sort_keys=True))
        except OSError:
            pass  # a probe that cannot be kept runs again next time
    return outcome


# --- loading -----------------------------------------------------------------------------------------


def load_cpu_backend(
    ll: Any,
    *,
    model: Path | None = None,
    cpu_variant: str | None = None,
    probe: Callable[[Variant, Path | None], Probe] = cached_probe,
) -> str | None:
    """Register the CPU backend llama.cpp will run (call before ``llama_backend_init``, once per process):
    the variant's name, or None when the build has its CPU backend linked in (nothing to choose)."""
    forced = requested(cpu_variant)
    lib = lib_dir(ll)
    g = _ggml(ll)
    if g.ggml_backend_reg_count() > 0:  # linked in (or loaded by someone else before): nothing to choose
        if forced is not None:
            raise ConfigError(
                f"{VARIANT_ENV}={forced}: this llama-cpp-python has its CPU backend built in, with no variants to "
                "choose from; build the variants with `sh scripts/install-llama-cpp-variants.sh`, or use auto"
            )
        return None
    found = variants(lib)
    if not found:
        raise ModelNotAvailable(
            f"llama-cpp-python loads its CPU backend at run time, but {lib} has no libggml-cpu libraries: "
            "reinstall it with `sh scripts/install-llama-cpp-variants.sh`"
        )
    chosen = choose(found, forced, lambda v: probe(v, model))
    if not g.ggml_backend_load(str(chosen.path).encode()):
        raise ModelNotAvailable(f"llama.cpp did not load its CPU backend {chosen.path}")
    scores = ", ".join(f"{v.name} {v.score}" for v in found)
    LOG.info("llama.cpp CPU backend: %s (score %d; the variants score %s)", chosen.name, chosen.score, scores)
    return chosen.name


# --- the child process ----------------------------------------------------------------------------------


def _probe_child(variant: str, model: str | None) -> int:
    """Load ``variant`` and ``model``, prefill :data:`PROBE_TEXT`, decode one token; print what ran."""
    import llama_cpp as ll

    g = _ggml(ll)
    if g.ggml_backend_reg_count() == 0 and not g.ggml_backend_load(variant.encode()):
        print(f"llama.cpp refused the backend {variant}", file=sys.stderr)
        return 3
    ll.llama_backend_init()
    token = None
    if model:
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = 0
        m = ll.llama_model_load_from_file(model.encode(), mparams)
        if not m:
            print(f"llama.cpp could not load {model}", file=sys.stderr)
            return 4
        cparams = ll.llama_context_default_params()
        cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = 256, 128, 128
        cparams.n_threads = cparams.n_threads_batch = 1  # the kernels are the same on any number of threads
        ctx = ll.llama_init_from_model(m, cparams)
        vocab = ll.llama_model_get_vocab(m)
        data = PROBE_TEXT.encode()
        buf = (ll.llama_token * 256)()
        n = ll.llama_tokenize(vocab, data, len(data), buf, 256, True, True)
        if not ctx or n <= 0 or ll.llama_decode(ctx, ll.llama_batch_get_one(buf, n)) != 0:
            print("llama.cpp could not prefill the probe's prompt", file=sys.stderr)
            return 5
        n_vocab = ll.llama_vocab_n_tokens(vocab)
        logits = ll.llama_get_logits_ith(ctx, -1)
        token = max(range(n_vocab), key=lambda i: logits[i])
        one = (ll.llama_token * 1)(token)
        if ll.llama_decode(ctx, ll.llama_batch_get_one(one, 1)) != 0:
            print("llama.cpp could not decode a token", file=sys.stderr)
            return 5
    print(json.dumps({"ok": True, "variant": variant, "model": model, "token": token}))
    return 0


def _main(argv: Sequence[str]) -> int:
    import argparse

    if argv[:1] == ["probe"]:
        return _probe_child(argv[1], argv[2] if len(argv) > 2 else None)
    if argv[:1] == ["scores"]:
        import llama_cpp  # noqa: F401 - loads libggml-base, which the variants link to

        print(json.dumps({path: score(Path(path)) for path in argv[1:]}))
        return 0
    p = argparse.ArgumentParser(
        prog=f"python -m {MODULE}", description="List llama.cpp's CPU variants here and print the chosen one's path."
    )
    p.add_argument("--model", type=Path, help="the GGUF file the probe runs (default: the backend alone)")
    p.add_argument("--variant", help=f"force one (default: ${VARIANT_ENV}, else auto)")
    args = p.parse_args(argv)
    import llama_cpp as ll

    lib = lib_dir(ll)
    if _ggml(ll).ggml_backend_reg_count() > 0:
        print("this llama-cpp-python has its CPU backend built in: no variants", file=sys.stderr)
        return 1
    found = variants(lib)
    chosen = choose(found, requested(args.variant), lambda v: cached_probe(v, args.model))
    for v in found:
        kept = kept_probe(v, args.model) if v.score > 0 else Probe(False, True, "needs instruction sets this CPU lacks")
        mark = "*" if v == chosen else " "
        print(f"{mark} {v.name:16} score {v.score:5}  {kept.why if kept else 'not probed'}", file=sys.stderr)
    print(chosen.path)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
