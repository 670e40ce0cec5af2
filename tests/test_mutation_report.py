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


def test_saved_verdicts_restore_on_a_new_machine_and_equivalents_are_skipped_not_run(tmp_path):
    codes = {"pkg.mod.x_f__mutmut_1": 1, "pkg.mod.x_f__mutmut_2": None}
    folder = mutants(tmp_path, {"pkg.mod.x_f__mutmut_1": None, "pkg.mod.x_f__mutmut_2": None})
    meta = folder / "pkg" / "mod.py.meta"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "hash_by_function_name": {"x_f": "abc"}}))
    saved = tmp_path / "verdicts.json"
    mr.save(folder, 60, saved)
    assert [run["seconds"] for run in mr.save(folder, 45, saved)["runs"]] == [60]  # nothing tested: no time added
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "exit_code_by_key": codes}))
    kept = mr.save(folder, 30, saved)
    assert kept["files"] == {
        "pkg/mod.py": {
            "hash_by_function_name": {"x_f": "abc"},
            "exit_code_by_key": {"pkg.mod.x_f__mutmut_1": 1, "pkg.mod.x_f__mutmut_2": None},
        }
    }
    assert [run["seconds"] for run in kept["runs"]] == [60, 30]
    # a new machine: no mutants/ yet; the verdicts and hashes go back where mutmut reads them
    fresh = tmp_path / "fresh"
    listed = tmp_path / "equivalent.txt"
    listed.write_text("")
    assert mr.restore(fresh, saved, listed) == (1, 0)
    restored = json.loads((fresh / "pkg" / "mod.py.meta").read_text())
    assert restored == {
        **kept["files"]["pkg/mod.py"],
        "type_check_error_by_key": {},
        "durations_by_key": {},
        "estimated_durations_by_key": {},
    }
    assert mr.restore(fresh, saved, listed) == (0, 0)  # what is there is kept
    # where the mutated source is there, a listed equivalent not yet tested is marked skipped (34)
    digest = mr.fingerprint(mr.change(folder, "pkg.mod.x_f__mutmut_2"))
    listed.write_text(f"pkg.mod.x_f__mutmut_2 | {digest} | why\n")
    assert mr.restore(folder, tmp_path / "none.json", listed) == (0, 1)
    assert json.loads(meta.read_text())["exit_code_by_key"] == {"pkg.mod.x_f__mutmut_1": 1, "pkg.mod.x_f__mutmut_2": 34}
    assert "| `pkg/mod.py` | 2 | 0 | 1 | 0 | 0 | 0 | 1 | 100.0% |" in mr.report(folder, None, listed)
    # an entry taken back (or gone stale) makes its mutant untested again
    listed.write_text("")
    mr.restore(folder, tmp_path / "none.json", listed)
    assert json.loads(meta.read_text())["exit_code_by_key"] == {
        "pkg.mod.x_f__mutmut_1": 1,
        "pkg.mod.x_f__mutmut_2": None,
    }


def test_a_new_machine_keeps_the_skipped_equivalents_until_their_mutants_exist(tmp_path):
    """On a new machine restore runs before mutmut has written the mutated sources, so no entry can be
    checked yet: a mutant saved as skipped stays skipped (it is not run again)."""
    folder = mutants(tmp_path, {"pkg.mod.x_f__mutmut_1": 1, "pkg.mod.x_f__mutmut_2": 34})
    saved = tmp_path / "verdicts.json"
    mr.save(folder, 60, saved)
    fresh = tmp_path / "fresh"
    assert mr.restore(fresh, saved, tmp_path / "none.txt") == (1, 0)
    assert json.loads((fresh / "pkg" / "mod.py.meta").read_text())["exit_code_by_key"]["pkg.mod.x_f__mutmut_2"] == 34
