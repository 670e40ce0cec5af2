"""The shared experiment runner (nlqo.eval.experiment), and every benchmark's table regenerated from its records."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import types
from pathlib import Path

import attrs
import pytest

from nlqo.common.docblocks import read_block, write_block
from nlqo.eval import experiment as ex

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted((REPO / "benchmarks").glob("*.py"))


def toy(calls: list, doc: str = "") -> ex.Experiment:
    def measure(context, case, config):
        calls.append((case["n"], config))
        return {"value": case["n"] * (10 if config == "b" else 1), "seen": context}

    def table(records, run):
        return "\n".join(f"{r['n']} {r['config']} {r['value']}" for r in records)

    return ex.Experiment(
        name="toy",
        blocks=(ex.Block(doc, "toy", table),),
        cases=lambda args: [{"n": n} for n in range(args.limit)],
        configs=lambda args: ["a", "b"],
        setup=lambda args: "context",
        measure=measure,
        options=(ex.Option.of("--limit", type=int, default=3),),
    )


def test_runner_measures_each_pair_once_rotating_the_configurations_and_resumes(tmp_path, capsys):
    calls: list = []
    assert ex.main(toy(calls), ["--out", str(tmp_path), "--limit", "2", "--no-docs"]) == 0
    assert calls == [(0, "a"), (0, "b"), (1, "b"), (1, "a")]
    records, run = ex.load(tmp_path)
    assert [(r["n"], r["config"], r["value"], r["seen"]) for r in records] == [
        (0, "a", 0, "context"),
        (0, "b", 0, "context"),
        (1, "b", 10, "context"),
        (1, "a", 1, "context"),
    ]
    assert run["limit"] == 2 and run["experiment"] == "toy" and "out" not in run
    assert run["cpus"] == os.cpu_count() and len(run["load_average"]) == 3  # the machine, as the bench loop records it
    assert all(r["measured_at"] >= run["started"] for r in records)
    calls.clear()
    ex.main(toy(calls), ["--out", str(tmp_path), "--limit", "3", "--no-docs"])
    assert calls == [(2, "a"), (2, "b")]
    assert len(ex.load(tmp_path)[0]) == 6


def test_runner_sets_up_nothing_when_every_pair_has_a_record(tmp_path):
    calls: list = []
    ex.main(toy(calls), ["--out", str(tmp_path), "--limit", "1", "--no-docs"])
    broken = attrs.evolve(toy(calls), setup=lambda args: pytest.fail("set up although nothing was left to measure"))
    ex.main(broken, ["--out", str(tmp_path), "--limit", "1", "--no-docs"])


def test_force_measures_again_and_render_measures_nothing(tmp_path):
    calls: list = []
    ex.main(toy(calls), ["--out", str(tmp_path), "--limit", "1", "--no-docs"])
    ex.main(toy(calls), ["--out", str(tmp_path), "--limit", "1", "--no-docs", "--force"])
    assert calls == [(0, "a"), (0, "b")] * 2
    assert len(ex.load(tmp_path)[0]) == 2
    ex.main(toy(calls), ["--out", str(tmp_path), "--limit", "5", "--render", "--no-docs"])
    assert len(calls) == 4


def test_a_torn_last_record_is_measured_again(tmp_path):
    calls: list = []
    ex.main(toy(calls), ["--out", str(tmp_path), "--limit", "1", "--no-docs"])
    path = tmp_path / ex.RECORDS
    path.write_text(path.read_text(encoding="utf-8")[:-5], encoding="utf-8")
    calls.clear()
    ex.main(toy(calls), ["--out", str(tmp_path), "--limit", "1", "--no-docs"])
    assert calls == [(0, "b")]


def test_the_table_goes_between_the_docs_markers(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("# Page\n\ntext\n\n<!-- BEGIN toy -->\nold\n<!-- END toy -->\n\nafter\n", encoding="utf-8")
    monkeypatch.setattr(ex, "REPO", tmp_path)
    ex.main(toy([], doc="page.md"), ["--out", str(tmp_path / "out"), "--limit", "1"])
    assert (
        page.read_text(encoding="utf-8")
        == "# Page\n\ntext\n\n<!-- BEGIN toy -->\n0 a 0\n0 b 0\n<!-- END toy -->\n\nafter\n"
    )
    assert read_block(page, "toy") == "0 a 0\n0 b 0"
    assert read_block(page, "other") is None


def test_a_case_is_measured_only_in_the_configurations_it_applies_to(tmp_path):
    calls: list = []
    only_a_after_the_first = attrs.evolve(toy(calls), applies=lambda case, config: config == "a" or case["n"] == 0)
    ex.main(only_a_after_the_first, ["--out", str(tmp_path), "--limit", "3", "--no-docs"])
    assert calls == [(0, "a"), (0, "b"), (1, "a"), (2, "a")]
    calls.clear()
    ex.main(only_a_after_the_first, ["--out", str(tmp_path), "--limit", "3", "--no-docs"])
    assert calls == []


def test_one_experiment_writes_each_of_its_blocks_from_the_same_records(tmp_path, monkeypatch):
    for page, name in (("a.md", "toy"), ("b.md", "x")):
        (tmp_path / page).write_text(f"<!-- BEGIN {name} -->\n<!-- END {name} -->\n", encoding="utf-8")
    monkeypatch.setattr(ex, "REPO", tmp_path)
    total = ex.Block("b.md", "x", lambda records, run: f"total {sum(r['value'] for r in records)}")
    both = attrs.evolve(toy([], doc="a.md"), blocks=(*toy([], doc="a.md").blocks, total))
    ex.main(both, ["--out", str(tmp_path / "out"), "--limit", "2"])
    assert read_block(tmp_path / "a.md", "toy") == "0 a 0\n0 b 0\n1 b 10\n1 a 1"
    assert read_block(tmp_path / "b.md", "x") == "total 11"
    assert ex.render(both, tmp_path / "out") == {"toy": "0 a 0\n0 b 0\n1 b 10\n1 a 1", "x": "total 11"}
    assert "Tables: a.md (toy), b.md (x)." in ex.parser(both).format_help()


def test_run_nlqo_returns_the_output_and_stops_the_experiment_on_a_failure(tmp_path):
    out, seconds, appeared = ex.run_nlqo("--help", wait_for=tmp_path)
    assert "usage" in out and 0 <= appeared <= seconds
    assert ex.run_nlqo("--help")[2] is None
    with pytest.raises(SystemExit, match="nlqo no-such-command failed"):
        ex.run_nlqo("no-such-command")


def test_serving_runs_a_server_while_the_block_runs_and_reports_one_that_does_not_start(tmp_path):
    port = ex.free_port()
    url = f"http://127.0.0.1:{port}/"
    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)]
    with ex.serving(command, url, tmp_path / "server.log"):
        assert ex.answers(url)
    assert not ex.answers(url)
    with pytest.raises(SystemExit, match="did not start: gone"):
        with ex.serving([sys.executable, "-c", "print('gone')"], url, tmp_path / "failed.log"):
            pytest.fail("a server that exited was taken as running")


def test_torch_threads_sets_the_count_only_when_given(monkeypatch):
    calls: list = []
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(set_num_threads=calls.append))
    ex.torch_threads(argparse.Namespace(threads=None))
    ex.torch_threads(argparse.Namespace(threads=3))
    assert calls == [3]
    assert len(ex.load_average()) == 3


def test_a_block_of_a_part_renders_that_part_s_records_only(tmp_path):
    def table(records, run):
        return " ".join(f"{r['part']}{r['n']}" for r in records)

    parts = attrs.evolve(
        toy([]),
        cases=lambda args: [{"part": p, "n": n} for p in "ab" for n in range(args.limit)],
        blocks=(ex.Block("", "all", table), ex.Block("", "a", table, part="a"), ex.Block("", "b", table, part="b")),
        configs=lambda args: ["a"],
    )
    ex.main(parts, ["--out", str(tmp_path), "--limit", "2", "--no-docs"])
    assert ex.render(parts, tmp_path) == {"all": "a0 a1 b0 b1", "a": "a0 a1", "b": "b0 b1"}


def test_read_block_returns_what_write_block_wrote(tmp_path):
    page = tmp_path / "p.md"
    write_block(page, "x", "a\n\nb\n", title="T")
    assert read_block(page, "x") == "a\n\nb"


def _experiment(path: Path):
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, "EXPERIMENT", None)


@pytest.mark.parametrize(
    "path", [p for p in BENCHMARKS if "EXPERIMENT = " in p.read_text(encoding="utf-8")], ids=lambda p: p.stem
)
def test_every_benchmark_table_in_the_docs_is_regenerated_from_its_records(path):
    experiment = _experiment(path)
    assert (experiment.out / ex.RECORDS).exists(), f"{path.name}: no records in {experiment.out}"
    assert experiment.blocks, f"{path.name} renders no docs block"
    tables = ex.render(experiment)
    for block in experiment.blocks:
        shown = read_block(REPO / block.doc, block.name)
        assert shown is not None, f"{block.doc} has no block {block.name}"
        assert tables[block.name].rstrip() == shown, f"{path.name}: {block.doc}'s block {block.name} differs"


def test_every_remaining_benchmark_runs_through_the_shared_runner():
    scripts = [p.name for p in BENCHMARKS if not p.name.startswith("_")]
    plain = [
        name for name in scripts if "EXPERIMENT = " not in (REPO / "benchmarks" / name).read_text(encoding="utf-8")
    ]
    assert not plain, f"benchmarks that do not declare an EXPERIMENT for nlqo.eval.experiment: {plain}"
