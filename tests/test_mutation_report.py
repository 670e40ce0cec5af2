"""scripts/mutation_report.py: verdicts per module, and equivalent entries that go stale when the mutant changes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mutation_report.py"
spec = importlib.util.spec_from_file_location("mutation_report", SCRIPT)
mr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mr)

SOURCE = """
def x_f__mutmut_orig(a):
    return a + 1
def x_f__mutmut_1(a):
    return a - 1
def x_f__mutmut_2(a):
    return a + 2
"""


def mutants(tmp_path: Path, codes: dict[str, int | None]) -> Path:
    """A mutmut work folder with one mutated module, ``pkg/mod.py``, and its verdicts."""
    folder = tmp_path / "mutants"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "mod.py").write_text(SOURCE)
    (folder / "pkg" / "mod.py.meta").write_text(json.dumps({"exit_code_by_key": codes}))
    return folder


def test_a_mutant_not_in_the_folder_has_no_change():
    folder = Path("/nowhere")
    assert mr.change(folder, "pkg.mod.x_f__mutmut_1") is None


def test_the_report_counts_verdicts_and_sets_equivalents_apart(tmp_path):
    folder = mutants(tmp_path, {"pkg.mod.x_f__mutmut_1": 1, "pkg.mod.x_f__mutmut_2": 0, "pkg.mod.x_f__mutmut_3": None})
    assert mr.change(folder, "pkg.mod.x_f__mutmut_1") == "-    return a + 1\n+    return a - 1"
    digest = mr.fingerprint(mr.change(folder, "pkg.mod.x_f__mutmut_2"))
    listed = tmp_path / "equivalent.txt"
    listed.write_text(f"# a comment\npkg.mod.x_f__mutmut_2 | {digest} | why it cannot matter\n")
    text = mr.report(folder, 600, listed)
    assert "| `pkg/mod.py` | 3 | 1 | 1 | 0 | 0 | 0 | 1 | 100.0% |" in text
    assert "10 minutes wall time" in text and "**Partial**: 1 mutants not checked yet." in text
    assert mr.survivors(folder, listed) == []


def test_an_entry_judged_on_another_change_is_stale_and_counts_by_its_verdict(tmp_path):
    folder = mutants(tmp_path, {"pkg.mod.x_f__mutmut_1": 1, "pkg.mod.x_f__mutmut_2": 0})
    listed = tmp_path / "equivalent.txt"
    wrong = mr.fingerprint(mr.change(folder, "pkg.mod.x_f__mutmut_1"))  # the function was renumbered
    listed.write_text(f"pkg.mod.x_f__mutmut_2 | {wrong} | judged on the old mutant 2\n")
    text = mr.report(folder, None, listed)
    assert "| `pkg/mod.py` | 2 | 0 | 1 | 0 | 1 | 0 | 0 | 50.0% |" in text
    assert "1 stale entries there (their mutant changed), counted by verdict: `pkg.mod.x_f__mutmut_2`" in text
    assert mr.survivors(folder, listed) == ["pkg.mod.x_f__mutmut_2\n-    return a + 1\n+    return a + 2"]


def test_an_entry_without_a_fingerprint_or_reason_names_its_line(tmp_path):
    listed = tmp_path / "equivalent.txt"
    listed.write_text("# header\npkg.mod.x_f__mutmut_2 | because\n")
    with pytest.raises(SystemExit, match=r"equivalent.txt:2: write 'mutant name \| fingerprint \| why"):
        mr.equivalent(listed)


def test_the_committed_equivalent_list_is_well_formed_and_within_the_issues_bound():
    entries = mr.equivalent()
    assert entries and all(len(digest) == 10 and why for digest, why in entries.values())
    # the issue's bound: no more than 10% of all mutants (3,832 when the list was written)
    assert len(entries) <= 383


def test_a_listed_equivalent_is_run_and_one_that_is_killed_is_a_bug_in_the_list(tmp_path):
    folder = mutants(tmp_path, {"pkg.mod.x_f__mutmut_1": 1, "pkg.mod.x_f__mutmut_2": 0})
    listed = tmp_path / "equivalent.txt"
    entries = [
        f"{name} | {mr.fingerprint(mr.change(folder, name))} | why"
        for name in ("pkg.mod.x_f__mutmut_1", "pkg.mod.x_f__mutmut_2")
    ]
    listed.write_text("\n".join(entries) + "\n")
    text = mr.report(folder, None, listed)
    assert (
        "| `pkg/mod.py` | 2 | 0 | 1 | 0 | 0 | 0 | 1 | 100.0% |" in text
    )  # the survivor is equivalent, the kill a kill
    assert "**Bugs in the list**: 1 listed as equivalent but killed" in text and "`pkg.mod.x_f__mutmut_1`" in text
    assert mr.survivors(folder, listed) == []


def test_the_report_groups_modules_and_keeps_the_testing_kit_apart(tmp_path):
    folder = tmp_path / "mutants"
    for module, codes in {
        "nlqo/optimizer/dp.py": {"nlqo.optimizer.dp.x_f__mutmut_1": 1, "nlqo.optimizer.dp.x_f__mutmut_2": 0},
        "nlqo/optimizer/cost/expr.py": {"nlqo.optimizer.cost.expr.x_f__mutmut_1": 1},
        "nlqo/testing/oracles.py": {"nlqo.testing.oracles.x_f__mutmut_1": 0},
    }.items():
        (folder / module).parent.mkdir(parents=True, exist_ok=True)
        (folder / f"{module}.meta").write_text(json.dumps({"exit_code_by_key": codes}))
    text = mr.report(folder, None, tmp_path / "none.txt")
    assert "| optimizer | 2 | 0 | 1 | 0 | 1 | 0 | 0 | 50.0% |" in text
    assert "| cost | 1 | 0 | 1 | 0 | 0 | 0 | 0 | 100.0% |" in text
    assert "| parser and IR | 0 | 0 | 0 | 0 | 0 | 0 | 0 | - |" in text
    assert "| **the engine (headline)** | 3 | 0 | 2 | 0 | 1 | 0 | 0 | 66.7% |" in text  # not the kit's survivor
    assert "| testing kit (apart) | 1 | 0 | 0 | 0 | 1 | 0 | 0 | 0.0% |" in text
    assert "| `nlqo/testing/oracles.py` | 1 | 0 | 0 | 0 | 1 | 0 | 0 | 0.0% |" in text
    assert text.count("\n| group ") == 1 and [
        mr.group_of(m) for m in ("nlqo/parser/parse.py", "nlqo/ir/syntax.py")
    ] == [
        "parser and IR",
        "parser and IR",
    ]


MODULE = "def f(a):\n    return a + 1\n\n\ndef g(a):\n    return a * 2\n"
TESTS = {
    "tests/test_f.py": "from pkg.mod import f\n\ndef test_f():\n    assert f(1) == 2\n",
    "tests/test_g.py": "from pkg.mod import g\n\ndef test_g():\n    assert g(2) == 4\n",
    "tests/test_both.py": "from pkg.mod import f, g\n\ndef test_both():\n    assert f(g(1)) == 3\n",
    "tests/conftest.py": "",
}
CODES = {"pkg.mod.x_f__mutmut_1": 1, "pkg.mod.x_f__mutmut_2": 0, "pkg.mod.x_g__mutmut_1": 1, "pkg.mod.x_g__mutmut_2": 1}
SELECTED = {  # as mutmut's stats record them: the tests that reached each function
    "pkg.mod.x_f": ["tests/test_f.py::test_f", "tests/test_both.py::test_both"],
    "pkg.mod.x_g": ["tests/test_g.py::test_g"],
}


def project(tmp_path: Path) -> Path:
    """A small project: one module of two functions, three test files, mutmut's folder after a run."""
    root = tmp_path / "project"
    for name, text in {"pkg/mod.py": MODULE, **TESTS, "pyproject.toml": PYPROJECT}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    folder = root / "mutants"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "mod.py.meta").write_text(
        json.dumps(
            {"exit_code_by_key": CODES, "hash_by_function_name": {"x_f": "1", "x_g": "2"}, "durations_by_key": {}}
        )
    )
    (folder / "mutmut-stats.json").write_text(json.dumps({"tests_by_mangled_function_name": SELECTED}))
    return root


PYPROJECT = '[tool.mutmut]\npytest_add_cli_args = ["-p", "no:cacheprovider"]\n'


def restored(root: Path, saved: Path) -> dict:
    """The verdicts a new machine gets back from ``saved`` (a fresh mutmut folder)."""
    fresh = root / "fresh"
    mr.restore(fresh, saved, root)
    codes = json.loads((fresh / "pkg" / "mod.py.meta").read_text())["exit_code_by_key"]
    return {name: code for name, code in codes.items() if code is not None}


def test_changing_one_test_file_drops_exactly_the_verdicts_whose_selected_tests_include_it(tmp_path):
    root = project(tmp_path)
    saved = tmp_path / "verdicts.json"
    kept = mr.save(root / "mutants", 60, saved, root)
    entry = kept["files"]["pkg/mod.py"]
    assert entry["tests_by_function_name"] == {
        "x_f": ["tests/test_both.py", "tests/test_f.py"],
        "x_g": ["tests/test_g.py"],
    }
    assert set(entry["key_by_key"]) == set(CODES) and len({entry["key_by_key"][m] for m in CODES}) == 2
    assert restored(root, saved) == CODES
    (root / "tests" / "test_both.py").write_text(TESTS["tests/test_both.py"] + "# reached f, not g\n")
    assert restored(root, saved) == {"pkg.mod.x_g__mutmut_1": 1, "pkg.mod.x_g__mutmut_2": 1}  # f's dropped
    (root / "tests" / "test_both.py").write_text(TESTS["tests/test_both.py"])
    (root / "tests" / "test_g.py").write_text(TESTS["tests/test_g.py"] + "\n\ndef test_more():\n    pass\n")
    assert restored(root, saved) == {"pkg.mod.x_f__mutmut_1": 1, "pkg.mod.x_f__mutmut_2": 0}  # g's dropped


@pytest.mark.parametrize(
    "edit, left",
    [
        (("pkg/mod.py", MODULE.replace("a * 2", "a * 3")), ["pkg.mod.x_f__mutmut_1", "pkg.mod.x_f__mutmut_2"]),
        (("pkg/mod.py", MODULE.replace("a * 2", "a * 2  # a comment")), list(CODES)),  # mutmut's hash: the syntax
        (("tests/conftest.py", "import os\n"), []),
        (("pyproject.toml", PYPROJECT.replace("no:cacheprovider", "no:randomly")), []),
        (("pyproject.toml", PYPROJECT + "[tool.pytest.ini_options]\naddopts = '-q'\n"), []),
        (("README.md", "not a test"), list(CODES)),
    ],
    ids=["function", "comment", "conftest", "mutmut options", "pytest options", "another file"],
)
def test_a_verdict_is_kept_only_while_its_function_conftest_and_options_are_unchanged(tmp_path, edit, left):
    root = project(tmp_path)
    saved = tmp_path / "verdicts.json"
    mr.save(root / "mutants", 60, saved, root)
    (root / edit[0]).write_text(edit[1])
    assert sorted(restored(root, saved)) == left


def test_a_run_that_selects_other_tests_for_a_function_drops_its_carried_verdicts(tmp_path):
    """A verdict carried over was decided under the tests selected then; when this run's stats select
    another test file for its function (a change elsewhere now reaches it), --save drops it, unless the
    run tested the mutant again."""
    root = project(tmp_path)
    saved = tmp_path / "verdicts.json"
    mr.save(root / "mutants", 60, saved, root)
    folder = root / "fresh"
    assert mr.restore(folder, saved, root) == (1, 4, 0)
    meta = folder / "pkg" / "mod.py.meta"
    data = json.loads(meta.read_text())
    data["durations_by_key"] = {"pkg.mod.x_g__mutmut_2": 0.5}  # mutmut ran this one again
    meta.write_text(json.dumps(data))
    grown = {**SELECTED, "pkg.mod.x_g": ["tests/test_g.py::test_g", "tests/test_both.py::test_both"]}
    (folder / "mutmut-stats.json").write_text(json.dumps({"tests_by_mangled_function_name": grown}))
    kept = mr.save(folder, 30, saved, root)
    assert (kept["dropped"], kept["ran"], [run["seconds"] for run in kept["runs"]]) == (1, 1, [60, 30])
    codes = kept["files"]["pkg/mod.py"]["exit_code_by_key"]
    assert codes == {**CODES, "pkg.mod.x_g__mutmut_1": None}
    assert json.loads(meta.read_text())["exit_code_by_key"] == codes  # mutmut runs it next time
    assert kept["files"]["pkg/mod.py"]["tests_by_function_name"]["x_g"] == ["tests/test_both.py", "tests/test_g.py"]
    assert restored(root, saved) == {k: v for k, v in codes.items() if v is not None}  # keyed anew: kept


def test_saved_verdicts_restore_on_a_new_machine_with_mutmuts_layout(tmp_path):
    root = project(tmp_path)
    saved = tmp_path / "verdicts.json"
    kept = mr.save(root / "mutants", 60, saved, root)
    assert [run["seconds"] for run in mr.save(root / "mutants", 45, saved, root)["runs"]] == [60]  # nothing new
    fresh = tmp_path / "fresh"
    assert mr.restore(fresh, saved, root) == (1, 4, 0)
    assert json.loads((fresh / "pkg" / "mod.py.meta").read_text()) == {
        "exit_code_by_key": CODES,
        "hash_by_function_name": kept["files"]["pkg/mod.py"]["hash_by_function_name"],
        "type_check_error_by_key": {},
        "durations_by_key": {},
        "estimated_durations_by_key": {},
    }


def test_verdicts_saved_without_keys_or_marked_skipped_are_run_again(tmp_path):
    """Verdicts saved before they had keys (and the equivalents this script once marked skipped, 34) are
    not reused: a kept mutmut folder gets none of them back either."""
    root = project(tmp_path)
    saved = tmp_path / "verdicts.json"
    old = {
        "files": {
            "pkg/mod.py": {"hash_by_function_name": {}, "exit_code_by_key": {**CODES, "pkg.mod.x_g__mutmut_2": 34}}
        }
    }
    saved.write_text(json.dumps(old))
    assert mr.restore(root / "mutants", saved, root) == (0, 0, 3)
    assert set(json.loads((root / "mutants" / "pkg" / "mod.py.meta").read_text())["exit_code_by_key"].values()) == {
        None
    }
