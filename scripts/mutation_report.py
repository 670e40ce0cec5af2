#!/usr/bin/env python3
"""The mutation report docs/testing.md quotes: mutmut's verdicts per group of modules and per module,
with the equivalent mutants of tests/mutation_equivalent.txt set apart, the command and its wall time.

    python scripts/mutation_report.py [--mutants mutants] [--seconds N] [--docs docs/testing.md]
    python scripts/mutation_report.py --restore          # before mutmut: resume from the committed verdicts
    python scripts/mutation_report.py --save --seconds N # after it: commit-able verdicts, and the report
    python scripts/mutation_report.py --survivors        # what is left to triage, with each change
    python scripts/mutation_report.py --change NAME...   # 'NAME | fingerprint | change' lines

Reads mutmut's result files (``mutants/<path>.meta``, one per mutated source file). The score is
killed (timeouts count as killed, as mutmut counts them) over the mutants checked that are not
equivalent; a run still going (or stopped) shows how many are not checked yet. The headline is the
engine's score; the testing kit's own modules (nlqo/testing/) are reported apart.

A full run takes longer than one sitting on 2 cores, and ``mutants/`` does not outlive the machine;
so the verdicts are kept in ``benchmarks/results/mutation/verdicts.json``, each with a key: a hash of
what decides it - the mutated function's source, the test files mutmut selected for that function
(its stats: every test that reached it, doctests included), tests/conftest.py and the pytest options
(``pytest_add_cli_args`` and ``[tool.pytest.ini_options]``). ``--restore`` puts back only the verdicts
whose key still holds; the others are dropped, so mutmut runs those mutants again. A verdict carried
over whose function the run's own stats now reach from other test files is dropped by ``--save``
(and run by the next ``make mutation``).

Listed equivalents are run like every mutant. One that survives counts as equivalent; one that is
killed is a bug in the list (a test tells it apart), named by the report. A mutant's name holds its
number within its function, and mutmut numbers again when the function changes; so each entry
carries a fingerprint of the change it was judged on, and an entry whose mutant now makes another
change is stale: it counts by its verdict until re-triaged.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import difflib
import hashlib
import json
import sys
import time
import tomllib
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from nlqo.common.docblocks import write_block  # noqa: E402

VERDICTS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 36: "timeout", 24: "timeout",
            -24: "timeout", 152: "timeout", 255: "timeout", None: "not checked", 37: "caught by type check",
            34: "not checked"}  # fmt: skip
"""mutmut 3.8's exit codes, as its ``stats.status_by_exit_code`` reads them (other codes: suspicious).
34 is mutmut's "skipped", which earlier versions of this script set for listed equivalents: run again."""
COMMAND = "make mutation"
SAVED = REPO / "benchmarks" / "results" / "mutation" / "verdicts.json"
EQUIVALENT = REPO / "tests" / "mutation_equivalent.txt"
CARRIED = "verdict-keys.json"
"""In mutmut's folder: the verdicts ``--restore`` carried over, with their keys (``--save`` reads it)."""
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cost", ("nlqo/optimizer/cost/",)),
    ("optimizer", ("nlqo/optimizer/",)),
    ("parser and IR", ("nlqo/parser/", "nlqo/ir/")),
    ("physical planning", ("nlqo/planner/lower.py", "nlqo/execution/choice.py", "nlqo/execution/fallback.py",
                           "nlqo/execution/terminator.py", "nlqo/explain/")),
    ("statistics and operators", ("nlqo/planner/statistics/", "nlqo/execution/operators/")),
    ("testing kit", ("nlqo/testing/",)),
)  # fmt: skip
"""Module groups of the report, by path prefix (the first that matches); the testing kit is apart."""
APART = ("testing kit",)


def group_of(module: str) -> str:
    """The report's group of a mutated module's path.

    >>> group_of("nlqo/optimizer/cost/expr.py"), group_of("nlqo/optimizer/dp.py"), group_of("nlqo/kinds.py")
    ('cost', 'optimizer', 'other')
    """
    return next((name for name, prefixes in GROUPS if module.startswith(prefixes)), "other")


def equivalent(path: Path = EQUIVALENT) -> dict[str, tuple[str, str]]:
    """Mutant name -> (fingerprint of its change, why the change cannot alter behaviour), from
    ``name | fingerprint | why`` lines."""
    out = {}
    if path.exists():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip() and not line.startswith("#"):
                fields = [f.strip() for f in line.split(" | ", 2)]
                if len(fields) < 3 or not all(fields):
                    raise SystemExit(f"{path}:{n}: write 'mutant name | fingerprint | why it is equivalent'")
                out[fields[0]] = (fields[1], fields[2])
    return out


def change(mutants: Path, name: str) -> str | None:
    """The lines mutant ``name`` changes in its function (``-`` old, ``+`` new), read from mutmut's
    mutated copy of the source; None if the mutant is not there.

    >>> change(Path("/nowhere"), "pkg.mod.x_f__mutmut_1") is None
    True
    """
    parts = name.split(".")
    at = next((i for i, p in enumerate(parts) if p.startswith(("x_", "xǁ"))), None)
    if at is None:
        return None
    base = Path(mutants, *parts[:at])
    path = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
    if path is None:
        return None
    source = path.read_text(encoding="utf-8")
    function, original = parts[at], parts[at].rsplit("__mutmut_", 1)[0] + "__mutmut_orig"
    bodies = {
        node.name: (ast.get_source_segment(source, node) or "").replace(node.name, "F", 1).splitlines()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in (function, original)
    }
    if len(bodies) < 2:
        return None
    diff = difflib.unified_diff(bodies[original], bodies[function], lineterm="", n=0)
    return "\n".join(line.rstrip() for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---"))


def fingerprint(text: str) -> str:
    r"""A short digest of a mutant's change (whitespace inside lines ignored).

    >>> fingerprint("- a  +  b\n+ a + c") == fingerprint("- a + b\n+ a + c")
    True
    """
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()[:10]


def function_hashes(source: str) -> dict[str, str]:
    """mutmut's key of each function (``x_name``, ``xǁClassǁname``) -> a digest of its syntax tree, as
    mutmut 3.8 computes it (``compute_function_hashes``): comments and formatting do not count.

    >>> function_hashes("def f(a):\\n    return a  # one\\nclass C:\\n    def g(self): pass\\n").keys()
    dict_keys(['x_f', 'xǁCǁg'])
    """
    hashes: dict[str, str] = {}

    def visit(body: list[ast.stmt], owner: str = "") -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"xǁ{owner}ǁ{node.name}" if owner else f"x_{node.name}"
                hashes[key] = hashlib.sha256(ast.dump(node, annotate_fields=False).encode()).hexdigest()[:12]
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{owner}.{node.name}" if owner else node.name)

    try:
        visit(ast.parse(source).body)
    except SyntaxError:
        pass
    return hashes


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.is_file() else "missing"


def pytest_options(root: Path = REPO) -> str:
    """The pytest options every mutant's tests run with: ``[tool.mutmut] pytest_add_cli_args`` and
    ``[tool.pytest.ini_options]`` of ``root``'s pyproject.toml, as one text."""
    path = root / "pyproject.toml"
    tool = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}) if path.is_file() else {}
    options = {
        "pytest_add_cli_args": tool.get("mutmut", {}).get("pytest_add_cli_args", []),
        "ini_options": tool.get("pytest", {}).get("ini_options", {}),
    }
    return json.dumps(options, sort_keys=True)


class Keys:
    """The key of a verdict, computed from the files under ``root`` (read once each)."""

    def __init__(self, root: Path = REPO):
        self.root = root
        self.options = pytest_options(root)
        self.conftest = _file_digest(root / "tests" / "conftest.py")
        self._files: dict[str, str] = {}
        self._functions: dict[str, dict[str, str]] = {}

    def file(self, name: str) -> str:
        if name not in self._files:
            self._files[name] = _file_digest(self.root / name)
        return self._files[name]

    def function(self, module: str, function: str) -> str:
        if module not in self._functions:
            path = self.root / module
            self._functions[module] = function_hashes(path.read_text(encoding="utf-8")) if path.is_file() else {}
        return self._functions[module].get(function, "missing")

    def key(self, module: str, function: str, tests: list[str]) -> str:
        """What decides the verdicts of ``function``'s mutants in ``module``, as one digest."""
        parts = {
            "function": self.function(module, function),
            "tests": [(name, self.file(name)) for name in sorted(tests)],
            "conftest": self.conftest,
            "options": self.options,
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _function(mutant: str) -> str:
    """The mangled function of a mutant's name (``pkg.mod.x_f__mutmut_3`` -> ``x_f``)."""
    return mutant.partition("__mutmut_")[0].rsplit(".", 1)[-1]


def selected_tests(mutants: Path) -> dict[str, list[str]] | None:
    """Mangled function name (``pkg.mod.x_f``) -> the files of the tests mutmut selected for it (its
    stats: the tests that reached it; a doctest's file is the module it is in); None without stats."""
    try:
        stats = json.loads((mutants / "mutmut-stats.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return {
        name: sorted({test.split("::", 1)[0] for test in tests})
        for name, tests in stats.get("tests_by_mangled_function_name", {}).items()
    }


def verdicts(mutants: Path) -> dict[str, dict[str, str]]:
    """Module -> mutant name -> verdict."""
    out: dict[str, dict[str, str]] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        module = meta.relative_to(mutants).as_posix().removesuffix(".meta")
        codes = _read(meta)["exit_code_by_key"]
        out[module] = {name: VERDICTS.get(code, "suspicious") for name, code in codes.items()}
    return out


def judged(mutants: Path, found: dict[str, dict[str, str]], listed: Path = EQUIVALENT) -> tuple[set[str], list[str]]:
    """The equivalent entries of ``listed`` that hold for the mutants as they are now, and the stale
    ones (their mutant is gone or makes another change than the one judged)."""
    entries, names = equivalent(listed), {name for by_name in found.values() for name in by_name}
    held, stale = set(), []
    for name, (digest, _) in entries.items():
        now = change(mutants, name) if name in names else None
        if now is not None and fingerprint(now) == digest:
            held.add(name)
        else:
            stale.append(name)
    return held, sorted(stale)


def _counts(by_name: dict[str, str], known: set[str]) -> Counter[str]:
    """Verdicts of one module, a listed equivalent that survived counted as equivalent."""
    counts = Counter("equivalent" if name in known and v == "survived" else v for name, v in by_name.items())
    counts["mutants"] = len(by_name)
    return counts


def report(mutants: Path, seconds: float | None, listed: Path = EQUIVALENT) -> str:
    found = verdicts(mutants)
    known, stale = judged(mutants, found, listed)
    header = "| mutants | not checked | killed | timeout | survived | no tests | equivalent | score |"
    by_group: dict[str, Counter[str]] = {name: Counter() for name, _ in GROUPS}
    modules = []
    for module, by_name in found.items():
        counts = _counts(by_name, known)
        by_group.setdefault(group_of(module), Counter()).update(counts)
        modules.append(_row(f"`{module}`", counts))
    headline: Counter[str] = Counter()
    groups = []
    for name, counts in by_group.items():
        if name not in APART:
            headline.update(counts)
            groups.append(_row(name, counts))
    groups.append(_row("**the engine (headline)**", headline))
    groups += [_row(f"{name} (apart)", by_group[name]) for name in APART]
    wall = f", {seconds / 60:.0f} minutes wall time on this machine" if seconds else ""
    survivors = headline["survived"] + headline["no tests"]
    partial = f" **Partial**: {headline['not checked']} mutants not checked yet." if headline["not checked"] else ""
    total = headline + sum((by_group[name] for name in APART), Counter())
    if total["suspicious"]:  # another exit code (a crash, a kill by hand): in no column, so said here
        partial += f" {total['suspicious']} mutants ended otherwise (mutmut: suspicious), counted in no column."
    told_apart = sorted(
        name for by_name in found.values() for name, v in by_name.items() if name in known and v in ("killed", "timeout")
    )  # fmt: skip
    return "\n".join(
        [
            f"`{COMMAND}` (mutmut 3.8.1{wall}); score = (killed + timeout) / (mutants checked - equivalent); "
            f"the headline is the engine's, the testing kit's own modules are counted apart.{partial}",
            "",
            f"| group {header}",
            "|---|---|---|---|---|---|---|---|---|",
            *groups,
            "",
            f"| module {header}",
            "|---|---|---|---|---|---|---|---|---|",
            *modules,
            "",
            f"{survivors} of the engine's mutants survived (or had no test) when last checked; "
            f"{total['equivalent']} survivors are recorded as equivalent in tests/mutation_equivalent.txt, each "
            "with its reason"
            + (f"; {len(stale)} stale entries there (their mutant changed), counted by verdict: " if stale else ".")
            + ", ".join(f"`{n}`" for n in stale)
            + (
                f" **Bugs in the list**: {len(told_apart)} listed as equivalent but killed (a test tells them "
                "apart: take them off the list): " + ", ".join(f"`{n}`" for n in told_apart)
                if told_apart
                else ""
            ),
        ]
    )


def survivors(mutants: Path, listed: Path = EQUIVALENT) -> list[str]:
    """The survivors (and mutants with no test) not recorded as equivalent, each with its change."""
    found = verdicts(mutants)
    known, _ = judged(mutants, found, listed)
    left = [
        n for by_name in found.values() for n, v in by_name.items() if v in ("survived", "no tests") and n not in known
    ]
    return [f"{n}\n{change(mutants, n)}" for n in left]


def _row(name: str, c: Counter[str]) -> str:
    live = c["mutants"] - c["not checked"] - c["equivalent"]
    score = f"{100 * (c['killed'] + c['timeout']) / live:.1f}%" if live else "-"
    return (
        f"| {name} | {c['mutants']} | {c['not checked']} | {c['killed']} | {c['timeout']} | {c['survived']} | "
        f"{c['no tests']} | {c['equivalent']} | {score} |"
    )


def _read(meta: Path) -> dict:
    """A .meta file, read again if mutmut was writing it (it writes in place)."""
    for _ in range(20):
        try:
            return json.loads(meta.read_text(encoding="utf-8"))
        except ValueError:
            time.sleep(0.1)
    return json.loads(meta.read_text(encoding="utf-8"))


def _decided(code: int | None) -> bool:
    return code is not None and VERDICTS.get(code) != "not checked"


def save(mutants: Path, seconds: float | None, path: Path = SAVED, root: Path = REPO) -> dict:
    """Keep mutmut's verdicts, each with its key, and the test files mutmut selected for each function in
    ``path``, adding this run's wall time to the runs recorded there if it changed a verdict. A verdict
    ``--restore`` carried over whose key no longer holds under the run's stats (other test files reach its
    function now) is dropped, here and in mutmut's folder, so that the next run tests it."""
    kept = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"runs": []}
    before = {name: data["exit_code_by_key"] for name, data in kept.get("files", {}).items()}
    carried = _carried(mutants)
    selection = selected_tests(mutants)
    keys = Keys(root)
    kept["files"], dropped, ran = {}, 0, 0
    for meta in sorted(mutants.rglob("*.py.meta")):
        module = meta.relative_to(mutants).as_posix().removesuffix(".meta")
        data = _read(meta)
        dotted = module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        saved_tests = kept.get("files", {}).get(module, {}).get("tests_by_function_name", {})
        tests, codes, key_by_key = {}, dict(data["exit_code_by_key"]), {}
        for mutant, code in data["exit_code_by_key"].items():
            function = _function(mutant)
            if function not in tests:
                found = selection.get(f"{dotted}.{function}") if selection is not None else None
                tests[function] = found if found is not None else saved_tests.get(function, [])
            if not _decided(code):
                codes[mutant] = None
                continue
            key = keys.key(module, function, tests[function])
            old, duration = carried.get(mutant), data.get("durations_by_key", {}).get(mutant)
            if old is not None and duration == old[1] and old[0] != key:
                codes[mutant] = None  # carried over, and the run's stats select other tests for it now
                dropped += 1
                continue
            ran += duration is not None and (old is None or duration != old[1])  # mutmut ran it since --restore
            key_by_key[mutant] = key
        if codes != data["exit_code_by_key"]:
            meta.write_text(json.dumps({**data, "exit_code_by_key": codes}), encoding="utf-8")
        kept["files"][module] = {
            "hash_by_function_name": data.get("hash_by_function_name", {}),
            "exit_code_by_key": codes,
            "key_by_key": key_by_key,
            "tests_by_function_name": dict(sorted(tests.items())),
        }
    tested = ran or {name: data["exit_code_by_key"] for name, data in kept["files"].items()} != before
    if seconds and tested:  # a run that tested nothing (all verdicts kept) adds no time to the report
        kept["runs"].append({"ended": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                             "seconds": round(seconds)})  # fmt: skip
    kept["dropped"], kept["ran"] = dropped, ran
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {k: v for k, v in kept.items() if k not in ("dropped", "ran")}, indent=1, sort_keys=True, ensure_ascii=False
        )
        + "\n",
        encoding="utf-8",
    )
    return kept


def _carried(mutants: Path) -> dict[str, tuple[str, float | None]]:
    try:
        return {k: (v[0], v[1]) for k, v in json.loads((mutants / CARRIED).read_text(encoding="utf-8")).items()}
    except (OSError, ValueError):
        return {}


def restore(mutants: Path, path: Path = SAVED, root: Path = REPO) -> tuple[int, int, int]:
    """Before mutmut runs: give every mutant its saved verdict if the verdict's key still holds (the
    function's source, its selected test files, tests/conftest.py and the pytest options unchanged),
    else none, so that mutmut runs it; a ``.meta`` mutmut has not written yet is written from the saved
    file. Returns (files written, verdicts carried over, verdicts dropped)."""
    saved = json.loads(path.read_text(encoding="utf-8"))["files"] if path.exists() else {}
    keys = Keys(root)
    written = carried_count = dropped = 0
    carried: dict[str, tuple[str, float | None]] = {}
    for module, data in saved.items():
        meta = mutants / f"{module}.meta"
        tests = data.get("tests_by_function_name", {})
        key_by_key = data.get("key_by_key", {})
        codes: dict[str, int | None] = {}
        for mutant, code in data["exit_code_by_key"].items():
            function = _function(mutant)
            key = key_by_key.get(mutant)
            if _decided(code) and key is not None and key == keys.key(module, function, tests.get(function, [])):
                codes[mutant] = code
            else:
                codes[mutant] = None
                dropped += _decided(code)
        if meta.exists():  # mutmut's own folder, kept: the saved verdicts are the ones with a key
            current = _read(meta)
            durations = current.get("durations_by_key", {})
            current["exit_code_by_key"] = {m: codes.get(m) for m in current["exit_code_by_key"]}
        else:  # mutmut's .meta layout, which it checks key by key
            meta.parent.mkdir(parents=True, exist_ok=True)
            durations = {}
            current = {
                "exit_code_by_key": codes,
                "hash_by_function_name": data.get("hash_by_function_name", {}),
                "type_check_error_by_key": {},
                "durations_by_key": durations,
                "estimated_durations_by_key": {},
            }
            written += 1
        meta.write_text(json.dumps(current), encoding="utf-8")
        for mutant, code in current["exit_code_by_key"].items():
            if code is not None:
                carried[mutant] = (key_by_key[mutant], durations.get(mutant))
                carried_count += 1
    for meta in sorted(mutants.rglob("*.py.meta")) if mutants.is_dir() else ():  # modules the saved file lacks
        if meta.relative_to(mutants).as_posix().removesuffix(".meta") not in saved:
            current = _read(meta)
            if any(code is not None for code in current["exit_code_by_key"].values()):
                current["exit_code_by_key"] = dict.fromkeys(current["exit_code_by_key"])
                meta.write_text(json.dumps(current), encoding="utf-8")
    if mutants.is_dir():
        (mutants / CARRIED).write_text(json.dumps(carried), encoding="utf-8")
    return written, carried_count, dropped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=Path, default=REPO / "mutants", help="mutmut's work folder")
    parser.add_argument("--seconds", type=float, help="wall time of the run, for the report")
    parser.add_argument("--docs", type=Path, help="write the report between the mutation-report markers of this file")
    parser.add_argument("--survivors", action="store_true", help="list what is left to triage, with each change")
    parser.add_argument("--survivor-names", action="store_true", help="only their names (for mutmut run NAME...)")
    parser.add_argument("--change", nargs="+", metavar="NAME", help="print 'NAME | fingerprint | change' for mutants")
    parser.add_argument("--restore", action="store_true", help="resume from the saved verdicts (run before mutmut)")
    parser.add_argument("--save", action="store_true", help=f"keep the verdicts in {SAVED.relative_to(REPO)}")
    parser.add_argument("--saved", type=Path, default=SAVED, help="the saved verdicts (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.restore:
        written, carried, dropped = restore(args.mutants, args.saved)
        print(
            f"restored {carried} verdicts ({written} files written); dropped {dropped} whose function, selected "
            "tests, tests/conftest.py or pytest options changed: mutmut runs those mutants again",
            file=sys.stderr,
        )
        return 0
    if not args.mutants.is_dir():
        print(f"{args.mutants}: no mutmut results here; run make mutation", file=sys.stderr)
        return 2
    if args.survivor_names:
        print(" ".join(entry.split("\n", 1)[0] for entry in survivors(args.mutants)))
        return 0
    if args.change or args.survivors:
        for name in args.change or []:
            text = change(args.mutants, name)
            print(f"{name} | {fingerprint(text) if text is not None else '?'} | {text}")
        print("\n\n".join(survivors(args.mutants)) if args.survivors else "", end="")
        return 0
    seconds = args.seconds
    if args.save:
        kept = save(args.mutants, args.seconds, args.saved)
        seconds = sum(run["seconds"] for run in kept["runs"]) or None
        if kept["dropped"]:
            print(
                f"dropped {kept['dropped']} carried-over verdicts: other test files reach their functions now "
                f"(this run's stats); `{COMMAND}` runs them",
                file=sys.stderr,
            )
    text = report(args.mutants, seconds)
    if args.docs:
        write_block(args.docs, "mutation-report", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
