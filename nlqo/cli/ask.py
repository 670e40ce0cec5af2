"""``nlqo ask "QUESTION" --index DIR``: answer a question with its supporting passages."""

from __future__ import annotations

import argparse
import json
import sys

from nlqo.cli import common
from nlqo.execution.trace import RunResult, Trace


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "ask",
        help="answer a question over an index",
        description="Parse the question, optimise a plan, lower it to the linear template or the parallel "
        "tree, execute it on the local model and the index, and print a short answer with the passages "
        "it rests on. Progress goes to standard error, one line per step.",
        epilog='Example: nlqo ask "In which city was the director of the film Jaws born?" --index .nlqo/demo-index',
    )
    p.add_argument("question", help="the question, in quotes")
    common.add_engine_options(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: answer, the model's confidence in it, supporting passages, stats and trace",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with common.question_engine(args) as engine:
        trace = Trace(on_step=common.progress_printer(not args.quiet))
        if args.ir is None or args.strategy == "linear":
            result = engine.ask(args.question, strategy=args.strategy, trace=trace)
        else:
            result = engine.execute(
                args.question, common.plan_question(engine, args, trace), strategy=args.strategy, trace=trace
            )
        if not args.json and result.plan is not None:
            for w in result.plan.warnings:
                print(f"nlqo: warning: {w}", file=sys.stderr)
        if args.json:
            print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
            return 0
        print("\n".join(answer_lines(result, args.strategy)))
        return 0


def answer_lines(result: RunResult, strategy: str) -> list[str]:
    """What ``nlqo ask`` prints for a result: the answer, its passages, and one line of totals;
    total over every result a strategy can return (no plan, no physical plan, no answer)."""
    lines = [result.answer if result.answer.strip() else "(no answer: nothing usable in the retrieved passages)"]
    lines += [f"  - {p.title} [{p.id}]" for p in result.supporting]
    s = result.stats()
    operator = result.operator or result.strategy
    lines.append(
        f"({strategy} -> {operator}; {s['hops']} hops, stop: {s['stop_reason'] or 'none'}; {s['llm_calls']} LLM calls, "
        f"{s['generated_tokens']} tokens generated, {s['cached_prompt_tokens']}/{s['prompt_tokens']} prompt tokens from cache; "
        f"planning {s['planning_ms'] / 1000:.1f} s, execution {s['execution_ms'] / 1000:.1f} s)"
    )
    return lines
