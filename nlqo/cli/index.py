"""``nlqo index``: build a passage index (dense + BM25) from a corpus."""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings

from nlqo.main.builder import set_threads
from nlqo.cli.repairs import shown_repairs
from nlqo.runtime.embed import DEFAULT_EMBEDDER
from nlqo.index.chunking import Chunking
from nlqo.index.corpus import ON_ERROR, Fields
from nlqo.index.dense import KINDS

EPILOG = """\
corpus formats:
  .jsonl / .jsonl.gz   one JSON object a line with id, title and text (rename the fields with
                       --id-field, --title-field, --text-field; title is optional)
  folder, .txt, .md    every .txt/.md file (recursively) split at paragraphs into windows of
                       --max-tokens words sharing --overlap words; title = first Markdown
                       heading or the file name, id = relative path + '#' + chunk number

The index is built in a temporary folder beside DIR and moved into place when complete, so an
interrupted build leaves the previous index in DIR intact.

examples:
  nlqo index corpus.jsonl.gz --out idx/
  nlqo index notes/ --out idx/ --max-tokens 150 --overlap 30 --kind hnsw
  nlqo index dump.jsonl --out idx/ --id-field doc_id --text-field body --on-error skip
  nlqo index big.jsonl.gz --out idx/ --index-type hnsw --cluster local:2
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "index",
        help="build a passage index (dense + BM25) from a corpus",
        description="Embed every passage of a corpus and write a FAISS index, a BM25 index, a passage "
        "store and a manifest into DIR (replacing an index already there only once the new one is complete).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", metavar="SOURCE", help="a .jsonl or .jsonl.gz file, a .txt/.md file, or a folder of them")
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="index folder to create or replace")
    p.add_argument(
        "--embedder",
        default=DEFAULT_EMBEDDER,
        metavar="NAME",
        help=f"bundled name, local sentence-transformers folder, or cached hub id (default: {DEFAULT_EMBEDDER})",
    )
    p.add_argument(
        "--kind",
        "--index-type",
        dest="kind",
        choices=KINDS,
        default="flat",
        help="FAISS index: exact 'flat' (default), graph 'hnsw', or clustered 'ivf' for large corpora (recall and speed: docs/scale-out.md)",
    )
    p.add_argument(
        "--on-error",
        choices=ON_ERROR,
        default="fail",
        help="bad corpus records: stop at the first ('fail', default) or skip them and report them ('skip')",
    )
    fields = p.add_argument_group("JSON Lines fields")
    fields.add_argument("--id-field", default="id", metavar="NAME", help="field holding the passage id (default: id)")
    fields.add_argument(
        "--title-field", default="title", metavar="NAME", help="field holding the title (default: title)"
    )
    fields.add_argument("--text-field", default="text", metavar="NAME", help="field holding the text (default: text)")
    chunks = p.add_argument_group("text files")
    chunks.add_argument(
        "--max-tokens",
        type=int,
        default=Chunking().max_tokens,
        metavar="N",
        help="words per chunk (default: %(default)s)",
    )
    chunks.add_argument(
        "--overlap",
        type=int,
        default=Chunking().overlap,
        metavar="N",
        help="words shared by consecutive chunks (default: %(default)s)",
    )
    p.add_argument("--no-title", action="store_true", help="embed and BM25-index the text alone, without the title")
    p.add_argument("--batch-size", type=int, default=64, metavar="N", help="texts per embedding batch (default: 64)")
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="CPU threads for embedding (default: one per core); 1 is faster on a busy machine",
    )
    p.add_argument(
        "--cluster",
        metavar="local:N|tcp://HOST:PORT",
        help="embed on Dask workers (N local worker processes, or a running scheduler); the index is still assembled and swapped in here (docs/scale-out.md)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nlqo.runtime.embed import SentenceEmbedder
    from nlqo.index.build import build_index

    try:
        chunking = Chunking(max_tokens=args.max_tokens, overlap=args.overlap)
    except ValueError as exc:
        print(f"nlqo index: error: {exc}", file=sys.stderr)
        return 2
    set_threads(args.threads)
    cluster = contextlib.ExitStack()
    embedder = (
        _cluster_embedder(args, cluster)
        if args.cluster
        else SentenceEmbedder.load(args.embedder, batch_size=args.batch_size)
    )
    with cluster, warnings.catch_warnings(), shown_repairs():
        warnings.filterwarnings("ignore", message="skipped .* bad corpus record")
        report = build_index(
            args.source,
            args.out,
            embedder,
            kind=args.kind,
            fields=Fields(id=args.id_field, title=args.title_field, text=args.text_field),
            chunking=chunking,
            on_error=args.on_error,
            embed_title=not args.no_title,
            progress=False if args.quiet else True,
        )
    for error in report.skipped[:5]:
        print(f"nlqo index: skipped {error}", file=sys.stderr)
    if len(report.skipped) > 5:
        print(f"nlqo index: ... and {len(report.skipped) - 5} more", file=sys.stderr)
    m = report.manifest
    print(
        f"indexed {m.count} passages in {report.seconds:.1f} s ({report.passages_per_second:.1f} passages/s) "
        f"into {report.path} [{m.kind}, {m.embedder}, dim {m.dim}]; skipped {len(report.skipped)} bad records"
    )
    return 0


def _cluster_embedder(args: argparse.Namespace, stack: contextlib.ExitStack):
    """An embedder on the cluster ``--cluster`` names, connected for as long as ``stack`` is open."""
    from nlqo.runtime.cluster import ClusterSpec, connect
    from nlqo.index.distributed import ClusterEmbedder

    with contextlib.ExitStack() as opening:  # closes the connection if loading the model fails
        connection = opening.enter_context(connect(ClusterSpec.parse(args.cluster)))
        embedder = ClusterEmbedder.start(connection, args.embedder, batch_size=args.batch_size, threads=args.threads)
        stack.push(opening.pop_all())
    return embedder
