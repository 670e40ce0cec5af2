"""Issue 54's side-by-side table: each reuse or compression setting against today's configuration.

Reads `make bench-seconds`' records (benchmarks/results/seconds/SET: every strategy interleaved on
the same questions in one run) and runs no model. A variant is compared with the strategy it
changes: `standard-rag[...]` and `retrieve[...]` with `standard-rag`, `iterate[...]` with
`iter-retgen` (the same rounds and prompts with the settings off), `NAME[...]` with `NAME`
otherwise. Per set and variant: the questions both answered, EM of each, the paired difference with
a bootstrap interval, the answers left unchanged, mean seconds and their ratio, and the prompt
tokens computed (not served from the KV cache) and their ratio. Writes the block `seconds` of
docs/models.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nlqo.eval.metrics import bootstrap_diff
from nlqo.eval.records import read_records
from nlqo.eval.strategy import parse_spec

from nlqo.common.docblocks import write_block

RUNS = Path("benchmarks/results/seconds")
BASELINE_OF = {"retrieve": "standard-rag", "iterate": "iter-retgen"}
SEED = 20261207


def baseline(strategy: str) -> str | None:
    """The strategy a variant changes (None for a strategy without options)."""
    base, options = parse_spec(strategy)
    if not options:
        return None
    return BASELINE_OF.get(base, base)


def computed(record: dict) -> float:
    return float(record.get("prompt_tokens") or 0) - float(record.get("cached_prompt_tokens") or 0)


def rows_of(folder: Path) -> list[dict]:
    by: dict[str, dict[str, dict]] = {}
    for r in read_records(folder / "records.jsonl", repair=False):
        if not r.get("error"):
            by.setdefault(r["strategy"], {})[r["qid"]] = r
    out = []
    for variant, answers in sorted(by.items()):
        base = baseline(variant)
        if base is None or base not in by:
            continue
        qids = sorted(q for q in answers if q in by[base])
        if not qids:
            continue
        a, b = [answers[q] for q in qids], [by[base][q] for q in qids]
        diff = bootstrap_diff([r["em"] for r in a], [r["em"] for r in b], resamples=10000, seed=SEED)
        out.append(
            {
                "set": folder.name,
                "variant": variant,
                "baseline": base,
                "n": len(qids),
                "em": 100 * sum(r["em"] for r in a) / len(qids),
                "em_base": 100 * sum(r["em"] for r in b) / len(qids),
                "diff": diff,
                "same": sum(x["answer"] == y["answer"] for x, y in zip(a, b)),
                "seconds": sum(r["seconds"] for r in a) / len(qids),
                "seconds_base": sum(r["seconds"] for r in b) / len(qids),
                "computed": sum(map(computed, a)) / len(qids),
                "computed_base": sum(map(computed, b)) / len(qids),
                "machine": json.loads((folder / "run.json").read_text(encoding="utf-8")).get("machine", {}),
            }
        )
    return out


def table(rows: list[dict]) -> str:
    cpus = sorted({f"{r['machine'].get('cpu', r['machine'].get('processor', '?'))}" for r in rows})
    flags = sorted(
        {f for r in rows for f in r["machine"].get("cpu_flags", []) if f.startswith(("avx512f", "amx", "avx2"))}
    )
    out = [
        f"Measured on {', '.join(cpus) or '?'} ({', '.join(flags) or 'flags not recorded'}), 2 cores, llama.cpp, the "
        "default model; every strategy interleaved on the same questions in one run (`make bench-seconds`, "
        "`python scripts/seconds_report.py`). EM difference: paired bootstrap 95% interval; computed = prompt "
        "tokens not served from the KV cache, per question.",
        "",
        "| set | variant | against | n | EM % | against | difference, points [95%] | same answer | s | against s "
        "| ratio | computed tokens | against | ratio |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        d = r["diff"]
        out.append(
            f"| {r['set']} | `{r['variant']}` | `{r['baseline']}` | {r['n']} | {r['em']:.1f} | {r['em_base']:.1f} "
            f"| {100 * d.mean:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}] | {r['same']}/{r['n']} "
            f"| {r['seconds']:.1f} | {r['seconds_base']:.1f} | {r['seconds'] / r['seconds_base']:.2f} "
            f"| {r['computed']:.0f} | {r['computed_base']:.0f} | {r['computed'] / max(r['computed_base'], 1):.2f} |"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "runs", nargs="*", type=Path, help="result folders (default: every folder of " + str(RUNS) + ")"
    )
    parser.add_argument("--docs", type=Path, default=Path("docs/models.md"))
    args = parser.parse_args()
    folders = args.runs or sorted(p for p in RUNS.iterdir() if (p / "records.jsonl").is_file())
    text = table([row for f in folders for row in rows_of(f)])
    print(text)
    write_block(args.docs, "seconds", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
