"""``nlqo retrieve``: search an index built by ``nlqo index``."""

from __future__ import annotations

import argparse
import json
import textwrap

from nlqo.index.retriever import MODES

EPILOG = """\
modes:
  dense    cosine similarity of embeddings (the embedder recorded in the index's manifest)
  bm25     BM25 term matching
  hybrid   reciprocal rank fusion of the dense and BM25 rankings (default)

examples:
  nlqo retrieve --index idx/ "Who directed Free Guy?"
  nlqo retrieve --index idx/ "Free Guy director" -k 5 --mode bm25 --format json
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "retrieve",
        help="search an index for the passages that best match a query",
        description="Print the top-k passages of an index for a query.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("query", metavar="QUERY", help="the query text")
    p.add_argument("--index", "-i", required=True, metavar="DIR", help="index folder built by 'nlqo index'")
    p.add_argument("-k", type=int, default=3, metavar="K", help="number of passages (default: 3)")
    p.add_argument("--mode", choices=tuple(MODES), default="hybrid", help="retrieval mode (default: hybrid)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    p.add_argument(
        "--embedder",
        metavar="NAME",
        help="embedder to load (default: the one in the index's manifest; another is an error)",
    )
    p.add_argument(
        "--chars",
        type=int,
        default=300,
        metavar="N",
        help="text characters shown per passage in text format, 0 for all (default: 300)",
    )
    p.add_argument(
        "--no-verify", action="store_true", help="skip the SHA-256 check of the index files (sizes are still checked)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nlqo.index.search import Index
    from nlqo.parser.questions import check_question

    check_question(args.query, what="query")
    index = Index.open(args.index, embedder=args.embedder, verify=not args.no_verify)
    hits = index.retriever(args.mode).search(args.query, args.k)
    if args.format == "json":
        out = {
            "query": args.query,
            "mode": args.mode,
            "k": args.k,
            "index": str(index.path),
            "hits": [
                {"rank": h.rank, "score": h.score, "id": h.passage.id, "title": h.passage.title, "text": h.passage.text}
                for h in hits
            ],
        }
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return 0
    if not hits:
        print("no matching passages")
    for h in hits:
        text = " ".join(h.passage.text.split())
        if args.chars and len(text) > args.chars:
            text = text[: args.chars].rstrip() + "..."
        print(f"{h.rank}. {h.passage.title or '(untitled)'}  [id {h.passage.id}, score {h.score:.4f}]")
        print(textwrap.fill(text, width=100, initial_indent="   ", subsequent_indent="   "))
    return 0
