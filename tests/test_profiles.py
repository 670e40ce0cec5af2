"""The backend profile is measured once per model, runtime, threads and machine (nlqo/planner/profiles.py)."""

from __future__ import annotations

import attrs

from nlqo.execution.physical import BackendProfile
from nlqo.planner import profiles
from nlqo.planner.profiles import cached_profile
from nlqo.runtime.llm.base import Capabilities


@attrs.define
class Backend:
    identity: dict
    threads: int = 2
    capabilities: Capabilities = Capabilities(cache_identity=True)

    def cache_identity(self):
        return self.identity


LLAMA = {"model": "m", "runtime": "llama-cpp", "file": "m.gguf"}


class Meter:
    def __init__(self):
        self.calls = 0

    def __call__(self, llm, base):
        self.calls += 1
        return attrs.evolve(base, prefill_ms_per_token=float(self.calls), source="measured")


def test_a_kept_profile_is_used_until_something_it_depends_on_changes(tmp_path, monkeypatch):
    meter, said = Meter(), []
    run = lambda llm: cached_profile(
        llm, BackendProfile(), root=tmp_path, measure=meter, before_measuring=lambda: said.append(1)
    )  # noqa: E731
    assert run(Backend(LLAMA)) == (attrs.evolve(BackendProfile(), prefill_ms_per_token=1.0, source="measured"), False)
    assert run(Backend(LLAMA))[0].prefill_ms_per_token == 1.0 and meter.calls == 1 and said == [1]
    assert run(Backend(LLAMA, threads=1))[0].prefill_ms_per_token == 2.0  # another thread count
    assert run(Backend({**LLAMA, "file": "other.gguf"}))[0].prefill_ms_per_token == 3.0  # another model file
    monkeypatch.setattr(profiles, "cpu_signature", lambda: "another machine")
    assert run(Backend(LLAMA))[0].prefill_ms_per_token == 4.0
    assert meter.calls == 4 and len(said) == 4


def test_a_server_is_measured_every_time_and_nothing_is_kept(tmp_path):
    meter = Meter()
    server = Backend({"model": "m", "temperature": 0.0})
    for n in (1, 2):
        assert cached_profile(server, BackendProfile(), root=tmp_path, measure=meter) == (
            attrs.evolve(BackendProfile(), prefill_ms_per_token=float(n), source="measured"),
            False,
        )
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_or_unmeasured_profile_is_measured_again(tmp_path):
    meter = Meter()
    cached_profile(Backend(LLAMA), BackendProfile(), root=tmp_path, measure=meter)
    (kept,) = tmp_path.iterdir()
    kept.write_text("{not json")
    profile, was_kept = cached_profile(Backend(LLAMA), BackendProfile(), root=tmp_path, measure=meter)
    assert (profile.prefill_ms_per_token, was_kept, meter.calls) == (2.0, False, 2)
    assumed = lambda llm, base: base  # noqa: E731 - a backend that reports no timings: nothing to keep
    kept.unlink()
    assert cached_profile(Backend(LLAMA), BackendProfile(), root=tmp_path, measure=assumed) == (BackendProfile(), False)
    assert list(tmp_path.iterdir()) == []


def test_a_runs_machine_names_the_cpu_and_the_instruction_sets_that_decide_its_kernels(monkeypatch, tmp_path):
    from nlqo.common import machine as m
    from nlqo.eval.host import machine

    cpuinfo = (
        "processor\t: 0\nmodel name\t: Some CPU 9000\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512_vnni amx_int8 ht\n\n"
        "processor\t: 1\nmodel name\t: Some CPU 9000\nflags\t\t: fpu\n"
    )
    real = m.Path

    def fake(path, *rest):
        return tmp_path / "cpuinfo" if str(path) == "/proc/cpuinfo" else real(path, *rest)

    (tmp_path / "cpuinfo").write_text(cpuinfo)
    monkeypatch.setattr(m, "Path", fake)
    described = machine()
    assert described["cpu"] == "Some CPU 9000"
    assert described["cpu_flags"] == ["amx_int8", "avx", "avx2", "avx512_vnni", "avx512f", "fma"]
    assert (
        "flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_vnni amx_int8 ht" in m.cpu_signature()
    )  # the key's text as before
