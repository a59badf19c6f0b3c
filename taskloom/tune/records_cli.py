"""``taskloom records export|import|list``: move tuning records between machines and runs.

Tuning on one machine fills its record database (:class:`~taskloom.tune.records.Records`,
``tune.sqlite`` beside the build cache). ``export`` writes some or all of those records to
a JSON Lines file, ``import`` merges such a file into a database here, so that a compile
at tuning level 0 uses configs measured elsewhere and a cost model can train on them,
``list`` shows what a database holds: one line per workload and target with the number of
records and the best time, and ``transfer FROM TO`` how FROM's best configs do on TO
(:mod:`taskloom.tune.transfer`).

``--target`` takes a target key as recorded (the target's ``key()``) or the short name
``list`` prints for it (``x86_64-avx512+bf16+vnni+fp16+amx_tile``).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from taskloom.errors import LoadError, TaskloomError
from taskloom.target.cpu import ISA_LEVELS
from taskloom.tune.records import Records

# the named ISA levels, widest first: a key is shortened to the widest level it includes
_LEVELS = sorted(((name, guaranteed) for name, (_, guaranteed) in ISA_LEVELS.items()),
                 key=lambda item: -len(item[1]))


def short_target(key: str) -> str:
    """A target key shortened to its widest ISA level plus the flags beyond it:
    ``x86_64-sse4_2-avx-avx2-fma`` -> ``x86_64-avx2``. Keys that do not read as an
    architecture followed by a known level's flags are returned as they are."""
    arch, _, rest = key.partition("-")
    flags = rest.split("-") if rest else []
    for level, guaranteed in _LEVELS:
        if guaranteed <= set(flags):
            extra = [f.removeprefix("avx512_") for f in flags if f not in guaranteed]
            return f"{arch}-{level}" + "".join(f"+{f}" for f in extra)
    return key


def _open(args: argparse.Namespace, *, must_exist: bool) -> Records:
    """The database ``--records`` names, or the default one beside the build cache. A
    database to read from must exist: opening a mistyped path would create an empty one."""
    if args.records is None:
        return Records.default()
    path = Path(args.records).expanduser()
    if must_exist and not path.is_file():
        raise LoadError(f"no tuning records at {path}: --records takes an existing database file "
                        f"(default: {Records.default().path})")
    return Records(path)


def _target(records: Records, given: str | None) -> str | None:
    """The recorded target key ``given`` names, as a key or as its short name."""
    if given is None:
        return None
    keys = sorted({target for _, target, _ in records.workloads()})
    if given in keys:
        return given
    named = [key for key in keys if short_target(key) == given]
    if len(named) == 1:
        return named[0]
    known = ", ".join(f"{short_target(k)} ({k})" if short_target(k) != k else k for k in keys)
    raise TaskloomError(f"no records for target {given!r} in {records.path}; "
                        + (f"the targets recorded are: {known}" if keys else "the database is empty"))


def _export(args: argparse.Namespace) -> int:
    records = _open(args, must_exist=True)
    target = _target(records, args.target)
    if (args.workload or target) and not records.count(args.workload, target):
        raise TaskloomError(f"no records of workload {args.workload or '*'!r} on target {args.target or '*'!r} "
                            f"in {records.path}; 'taskloom records list' shows what is recorded")
    n = records.export(args.file, workload=args.workload, target=target)
    print(f"exported {n} records to {args.file}")
    return 0


def _import(args: argparse.Namespace) -> int:
    records = _open(args, must_exist=False)
    added, skipped = records.import_file(args.file, replace=args.replace)
    print(f"imported {added} records ({skipped} already present) from {args.file} into {records.path}")
    return 0


def _list(args: argparse.Namespace) -> int:
    records = _open(args, must_exist=True)
    target = _target(records, args.target)
    rows = [(workload, short_target(key), str(n), _ms(records.best_seconds(workload, key)))
            for workload, key, n in records.workloads(target)]
    if not rows:
        print(f"no tuning records in {records.path}")
        return 0
    table = [("workload", "target", "records", "best")] + rows
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    for w, t, n, best in table:
        print(f"{w:<{widths[0]}}  {t:<{widths[1]}}  {n:>{widths[2]}}  {best:>{widths[3]}}")
    total = sum(int(n) for _, _, n, _ in rows)
    print(f"{total} records of {len(rows)} workload(s) in {records.path}")
    return 0


def _transfer(args: argparse.Namespace) -> int:
    from taskloom.tune.transfer import summary, transfer
    records = _open(args, must_exist=True)
    source, target = _target(records, args.source), _target(records, args.to)
    rows = transfer(records, source, target, args.workload)  # type: ignore[arg-type]
    if not rows:
        print(f"no workload has successful records on both {short_target(source)} and {short_target(target)} "
              f"in {records.path}")
        return 0
    table = [("workload", "best here", "best there", "pick there", "configs both", "spearman")]
    table += [(r.workload, _ms(r.source_best_s), _ms(r.target_best_s),
               "not timed" if r.ratio is None else f"{r.ratio:.3f}x", str(r.common),
               "-" if r.spearman is None else f"{r.spearman:.2f}") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(f"{x:<{w}}" if i == 0 else f"{x:>{w}}" for i, (x, w) in enumerate(zip(row, widths))))
    print(summary(rows))
    return 0


def _ms(seconds: float | None) -> str:
    """A best time in milliseconds, or ``failed`` when no config of the workload ran."""
    return "failed" if seconds is None else f"{seconds * 1e3:.4g} ms"


def add_records_commands(commands: argparse._SubParsersAction) -> None:
    """Register ``records export``, ``records import``, ``records transfer`` and ``records list``."""
    group = commands.add_parser("records", help="export, import or list the tuning records "
                                "(tune.sqlite beside the build cache)",
                                description="Move tuning records between machines and runs: export "
                                "writes them to a JSON Lines file, import merges such a file into a "
                                "database here (a level-0 compile then uses configs measured "
                                "elsewhere), list shows what a database holds.")
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)

    def records_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--records", default=None, metavar="DB",
                            help="the record database (default: tune.sqlite under TASKLOOM_CACHE_DIR, "
                                 "~/.cache/taskloom when unset)")

    target_help = "only this target: a key as recorded or the short name 'records list' prints"
    export = actions.add_parser("export", help="write records to a JSON Lines file (.gz: gzip)")
    export.add_argument("file", metavar="FILE", help="the file to write; gzip when it ends in .gz")
    export.add_argument("--workload", default=None, metavar="W",
                        help="only this workload; a trailing * selects a prefix, e.g. 'matmul_cpu/*'")
    export.add_argument("--target", default=None, metavar="KEY", help=target_help)
    records_option(export)
    export.set_defaults(func=_export)

    imp = actions.add_parser("import", help="merge an exported file into the record database")
    imp.add_argument("file", metavar="FILE", help="a file 'records export' wrote (gzip or not)")
    imp.add_argument("--replace", action="store_true",
                     help="imported records replace those already present (default: keep what is "
                          "here, except that a success replaces a failure)")
    records_option(imp)
    imp.set_defaults(func=_import)

    move = actions.add_parser("transfer", help="how one target's best configs do on another: each workload "
                              "both tuned, the first's pick timed on the second against its own best")
    named = "a target key as recorded, or the short name 'records list' prints"
    move.add_argument("source", metavar="FROM", help=f"the target whose picks are tried: {named}")
    move.add_argument("to", metavar="TO", help=f"the target they are tried on: {named}")
    move.add_argument("--workload", default=None, metavar="W",
                      help="only this workload; a trailing * selects a prefix, e.g. 'matmul_mma/*'")
    records_option(move)
    move.set_defaults(func=_transfer)

    lst = actions.add_parser("list", help="one line per workload and target: records and best time")
    lst.add_argument("--target", default=None, metavar="KEY", help=target_help)
    records_option(lst)
    lst.set_defaults(func=_list)
