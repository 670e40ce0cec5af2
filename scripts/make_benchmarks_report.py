"""Regenerate docs/benchmarks.md from bench result folders (the same as ``nlqo bench --report``).

python scripts/make_benchmarks_report.py results/hotpotqa results/2wiki results/musique
"""

from __future__ import annotations

import sys
from pathlib import Path

from nlqo.eval.report import write_report

REPO = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    print(f"wrote {write_report(sys.argv[1:], REPO / 'docs' / 'benchmarks.md')}")
