#!/usr/bin/env bash
# Run the same `nlqo bench` with the code of several commits, one after the other, to tell a change
# in the code's speed from the machine's (its speed drifts by tens of percent over hours here).
#
#   scripts/compare_commits.sh OUT_DIR COMMIT [COMMIT ...] -- NLQO_BENCH_ARGS ...
#
# Each COMMIT runs from a detached worktree (its own nlqo package on PYTHONPATH, this checkout's
# .venv for everything else) into OUT_DIR/<n>-<commit>; give commits alternating (A B A B) so drift
# shows as a difference between a commit's two runs. Pass --index so no run builds its own index.
# Prints each run's EM, seconds and retrievals per strategy (benchmarks/record_findings.py, which left
# the repository: this runs its version at commit 197ff87).
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
out=${1:-}; shift || true
commits=()
while [[ $# -gt 0 && $1 != -- ]]; do commits+=("$1"); shift; done
[[ $# -gt 0 ]] && shift
if [[ -z $out || ${#commits[@]} -eq 0 || $# -eq 0 ]]; then
    sed -n 5p "$0" >&2; exit 2
fi
mkdir -p "$out"
trees=$(mktemp -d)
trap 'for t in "$trees"/*; do git worktree remove --force "$t"; done; rmdir "$trees"' EXIT
n=0
for c in "${commits[@]}"; do
    n=$((n + 1))
    tree="$trees/$n"
    git worktree add --quiet --detach "$tree" "$c"
    echo "== $(date -u +%T) run $n: $c" >&2
    PYTHONPATH="$tree" .venv/bin/nlqo bench "$@" --out "$out/$n-$c" > "$out/$n-$c.log" 2>&1
done
for run in "$out"/*/; do
    echo "$(basename "$run"):"; .venv/bin/python <(git show 197ff87:benchmarks/record_findings.py) "$run" | grep "every strategy finished"
done
