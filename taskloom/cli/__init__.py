"""The ``taskloom`` command line: ``taskloom cache info|clear``, ``taskloom bench op|model``,
``taskloom records export|import|list`` (:mod:`taskloom.tune.records_cli`),
``taskloom target show|probe`` (:mod:`taskloom.cli.target`), ``taskloom tune report``
(:mod:`taskloom.cli.tune_report`), ``taskloom ops onnx|torch`` (:mod:`taskloom.cli.ops`).

Each command group registers itself with :func:`build_parser` through an ``add_*``
function and sets ``func`` on its parser; :func:`main` calls it.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from taskloom.backend.cache import BuildCache
from taskloom.bench.model import add_model_command
from taskloom.bench.op import add_op_command
from taskloom.cli.ops import add_ops_command
from taskloom.cli.target import add_target_commands
from taskloom.cli.text import format_bytes
from taskloom.cli.tune_report import add_tune_commands
from taskloom.errors import TaskloomError
from taskloom.tune.records_cli import add_records_commands


def _cache_info(args: argparse.Namespace) -> int:
    info = BuildCache.default().info()
    print(f"root:    {info['root']}")
    print(f"entries: {info['entries']}"
          + (f" (+{info['failed_sources']} failed sources)" if info["failed_sources"] else ""))
    print(f"size:    {format_bytes(info['total_bytes'])} ({info['total_bytes']} bytes)")
    print(f"bound:   {format_bytes(info['max_bytes'])} ({info['max_bytes']} bytes)")
    return 0


def _cache_clear(args: argparse.Namespace) -> int:
    cache = BuildCache.default()
    freed = cache.clear()
    print(f"cleared {cache.root}: freed {format_bytes(freed)} ({freed} bytes)")
    return 0


def add_cache_commands(commands: argparse._SubParsersAction) -> None:
    """Register ``cache info`` and ``cache clear``."""
    cache = commands.add_parser("cache", help="inspect or clear the build cache "
                                "(TASKLOOM_CACHE_DIR, default ~/.cache/taskloom)")
    actions = cache.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("info", help="print the cache's location, entries, size and bound") \
        .set_defaults(func=_cache_info)
    actions.add_parser("clear", help="remove every cached build") \
        .set_defaults(func=_cache_clear)


def add_bench_commands(commands: argparse._SubParsersAction) -> None:
    """Register ``bench op matmul|conv2d`` and ``bench model NAME`` (see :mod:`taskloom.bench`)."""
    bench = commands.add_parser("bench", help="time operators and models compiled by taskloom against "
                                "their peers")
    kinds = bench.add_subparsers(dest="bench", metavar="KIND", required=True)
    add_op_command(kinds)
    add_model_command(kinds)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every ``taskloom`` command."""
    parser = argparse.ArgumentParser(prog="taskloom", description="taskloom deep-learning compiler")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_cache_commands(commands)
    add_bench_commands(commands)
    add_records_commands(commands)
    add_target_commands(commands)
    add_tune_commands(commands)
    add_ops_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a ``taskloom`` command; return its exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except TaskloomError as exc:
        print(f"taskloom: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
