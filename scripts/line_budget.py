"""Lines of nlqo/**/*.py added by each commit since a base, summed by the issue its subject names.

Issue 51 asks that the restructuring add no lines: ``python scripts/line_budget.py`` prints the count at
the base and now, each commit's net lines, and the totals per issue (a commit naming no issue counts as
"none"). The restructuring's own commits are those RESTRUCTURE lists; the trims that paid for them name
issue 51 too.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections import defaultdict

BASE = "2594b53"
"""The last commit before issue 51's restructuring (21,831 lines)."""
RESTRUCTURE = ("68ea044", "d2e1883", "3a1643b", "a3d1d23", "75e39f9", "e57e364", "1c139db", "fa8a07a", "0ac553b")
"""Issue 51's moves: packages, layers, the core install, operators alone, operator plugins, and the
clean-ups of what they moved (one parse path, request values, one atomic write, a read-only dim)."""


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def lines_at(commit: str) -> int:
    files = [f for f in git("ls-tree", "-r", "--name-only", commit, "nlqo").split() if f.endswith(".py")]
    return sum(git("show", f"{commit}:{f}").count("\n") for f in files)


def net(commit: str) -> int:
    total = 0
    for row in git("diff", "--numstat", f"{commit}^", commit, "--", "nlqo").splitlines():
        added, removed, path = row.split("\t")
        if path.endswith(".py") and added != "-":
            total += int(added) - int(removed)
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default=BASE)
    args = p.parse_args()
    by_issue: dict[str, int] = defaultdict(int)
    restructure = 0
    for commit in git("rev-list", "--reverse", f"{args.base}..HEAD").split():
        subject = git("log", "-1", "--format=%s", commit)
        lines = net(commit)
        issue = m.group(1) if (m := re.search(r"\(issue (\d+)", subject)) else "none"
        by_issue[issue] += lines
        moved = commit.startswith(RESTRUCTURE)
        restructure += lines if moved else 0
        print(f"{lines:+6d}  {commit[:7]}  {'R ' if moved else '  '}{subject[:90]}")
    print(f"\nnlqo/**/*.py: {lines_at(args.base)} lines at {args.base}, {lines_at('HEAD')} now")
    for issue, lines in sorted(by_issue.items()):
        print(f"  issue {issue}: {lines:+d}")
    print(f"the restructuring's commits (R): {restructure:+d}; with issue 51's trims and features: {by_issue['51']:+d}")


if __name__ == "__main__":
    main()
