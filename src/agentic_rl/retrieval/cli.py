"""Command-line parts for retrieval: `index build`, `index builtin-corpus`, `serve-retriever`.

`add_index_commands(subparsers)` adds them to the `agentic-rl` parser; each command sets
`fn(args) -> int` like the other commands. Also runnable alone:
`python -m agentic_rl.retrieval.cli index build corpus.jsonl --kind bm25 --out idx/`.
Nothing heavy is imported until a command runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from agentic_rl.tools.http_guard import add_guard_arguments

_PARAM_FLAGS = {  # flag dest -> build_index parameter name
    "hnsw_m": "hnsw_m",
    "ef_construction": "ef_construction",
    "ef_search": "ef_search",
    "nlist": "nlist",
    "nprobe": "nprobe",
    "fusion": "method",
    "alpha": "alpha",
    "candidates": "candidates",
}


def _user_errors() -> tuple[type[BaseException], ...]:
    from agentic_rl.retrieval.corpus import CorpusError
    from agentic_rl.retrieval.index import IndexFormatError

    return (CorpusError, IndexFormatError, FileExistsError, FileNotFoundError, ValueError)


def cmd_index_build(args: argparse.Namespace) -> int:
    """Build an index directory from a Search-R1 JSONL corpus."""
    from agentic_rl.retrieval.index import build_index, read_meta

    params: dict[str, Any] = {
        name: getattr(args, dest)
        for dest, name in _PARAM_FLAGS.items()
        if getattr(args, dest, None) is not None
    }
    start = time.perf_counter()
    try:
        out = build_index(
            args.corpus,
            args.kind,
            args.out,
            model_path=args.model_path,
            batch_size=args.batch_size,
            overwrite=args.overwrite,
            strict=args.strict,
            **params,
        )
    except _user_errors() as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    meta = read_meta(out)
    report = meta.get("corpus_report") or {}
    readings = ", ".join(f"{n:,} {name}" for name, n in report.get("readings", {}).items())
    print(f"read {args.corpus}: {readings}")
    if report.get("skipped_lines"):
        print(
            f"skipped {report['skipped_lines']:,} line(s) that could not be read "
            "(--strict fails on the first one instead); the first:",
            *report.get("first_problems", []),
            sep="\n  ",
        )
    print(
        f"built {meta['kind']} index of {meta['num_docs']} documents in {out} "
        f"({time.perf_counter() - start:.1f} s)"
    )
    return 0


def cmd_builtin_corpus(args: argparse.Namespace) -> int:
    """Write the generated search-QA corpus as Search-R1 JSONL."""
    from agentic_rl.retrieval.corpus import write_builtin_corpus

    try:
        count = write_builtin_corpus(args.out, args.num_entities, args.seed)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {count} documents to {args.out}")
    return 0


def cmd_serve_retriever(args: argparse.Namespace) -> int:
    """Serve an index directory over HTTP (Search-R1 API) until interrupted."""
    from agentic_rl.retrieval.server import serve

    try:
        serve(
            args.index,
            host=args.host,
            port=args.port,
            default_topk=args.topk,
            rerank=args.rerank,
            batch_wait_ms=args.batch_wait_ms,
            token=args.auth_token,
            max_inflight=args.max_inflight,
        )
    except _user_errors() as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _add_build(index_sub: Any) -> None:
    build = index_sub.add_parser("build", help="build an index from a JSONL corpus")
    build.add_argument(
        "corpus",
        help='JSONL file, one document per line: Search-R1\'s {"id", "contents"} with the '
        'title in double quotes on the first line of contents ("\\"Title\\"\\ntext"); also '
        "accepted: an unquoted first line as the title, one-line contents (no title), and "
        '{"id" or "_id", "title", "text" or "contents"} rows (DPR psgs_w100, BEIR). Lines '
        "that cannot be read are skipped and counted (--strict: fail)",
    )
    build.add_argument(
        "--strict",
        action="store_true",
        help="fail on the first line that cannot be read instead of skipping and counting it",
    )
    build.add_argument("--kind", required=True, choices=["bm25", "dense", "hnsw", "ivf", "hybrid"])
    build.add_argument("--out", required=True, help="index directory to create")
    build.add_argument("--overwrite", action="store_true", help="replace an existing index")
    build.add_argument("--model-path", default=None, help="local embedding model folder")
    build.add_argument("--batch-size", type=int, default=64, help="embedding batch size")
    build.add_argument("--hnsw-m", type=int, help="hnsw: links per node (32)")
    build.add_argument("--ef-construction", type=int, help="hnsw: build beam width (200)")
    build.add_argument("--ef-search", type=int, help="hnsw: search beam width (64)")
    build.add_argument("--nlist", type=int, help="ivf: number of clusters (from corpus size)")
    build.add_argument("--nprobe", type=int, help="ivf: clusters searched per query (nlist/4)")
    build.add_argument("--fusion", choices=["score", "rrf"], help="hybrid: fusion rule (score)")
    build.add_argument("--alpha", type=float, help="hybrid: dense weight in [0, 1] (0.5)")
    build.add_argument("--candidates", type=int, help="hybrid: candidates per run (50)")
    build.set_defaults(fn=cmd_index_build)


def add_index_commands(subparsers: Any) -> None:
    """Add `index {build,builtin-corpus}` and `serve-retriever` to an argparse subparsers."""
    index = subparsers.add_parser("index", help="build retrieval indexes (BM25, dense, ANN)")
    index_sub = index.add_subparsers(dest="index_command", required=True)
    _add_build(index_sub)

    corpus = index_sub.add_parser(
        "builtin-corpus", help="write the generated search-QA corpus as Search-R1 JSONL"
    )
    corpus.add_argument("out", help="output JSONL path")
    corpus.add_argument("--num-entities", type=int, default=500)
    corpus.add_argument("--seed", type=int, default=0)
    corpus.set_defaults(fn=cmd_builtin_corpus)

    serve = subparsers.add_parser(
        "serve-retriever", help="serve an index over HTTP with Search-R1's /retrieve API"
    )
    serve.add_argument("index", help="index directory (from `index build`)")
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)",
    )
    serve.add_argument(
        "--port", type=int, default=8000, help="TCP port; POST /retrieve on it (8000)"
    )
    serve.add_argument("--topk", type=int, default=3, help="topk when a request omits it")
    serve.add_argument("--rerank", type=int, default=0, help="rerank this many candidates")
    serve.add_argument(
        "--batch-wait-ms", type=float, default=2.0, help="merge requests arriving within this"
    )
    add_guard_arguments(serve, default_inflight=256)
    serve.set_defaults(fn=cmd_serve_retriever)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentic_rl.retrieval.cli")
    add_index_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
