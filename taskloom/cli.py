"""The ``taskloom`` command line: ``taskloom cache info|clear``, ``taskloom bench op|model``,
``taskloom records export|import|list`` (:mod:`taskloom.tune.records_cli`),
``taskloom target show|probe`` (:mod:`taskloom.target.probe`), ``taskloom tune report``
(:mod:`taskloom.tune.report`).

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
from taskloom.errors import TargetError, TaskloomError
from taskloom.target.cpu import CpuTarget
from taskloom.target.probe import (FIELDS, override, probe, profile_for, profile_path, save_profile,
                                   stored_profile)
from taskloom.tune.records_cli import add_records_commands
from taskloom.tune.report import add_tune_commands


def format_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    size, unit = float(n), 0
    while size >= 1024 and unit < len(units) - 1:
        size, unit = size / 1024, unit + 1
    return f"{n} B" if unit == 0 else f"{size:.1f} {units[unit]}"


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


def _print_target(target: CpuTarget) -> None:
    """The target, then the profile :func:`profile_for` gives it, one number per line."""
    print(f"target:   {target.name}")
    print(f"cores:    {target.num_cores}")
    print(f"isa:      {target.key()}")
    print(f"l1d:      {format_bytes(target.l1d_bytes)} per core")
    print(f"l2:       {format_bytes(target.l2_bytes)} per core")
    print(f"l3:       {format_bytes(target.l3_bytes)} shared")
    path = profile_path()
    stored = stored_profile(target, path)
    profile = profile_for(target)
    print(f"profile:  {profile.source}")
    if stored is None:
        print(f"stored:   nothing for {target.key()} in {path}; `taskloom target probe` measures it")
    else:
        scaled = f", scaled from {stored[1]} cores" if stored[1] != target.num_cores else ""
        print(f"stored:   {path} (for {stored[1]} cores{scaled})")
    width = max(map(len, FIELDS))
    for name, (unit, meaning) in FIELDS.items():
        print(f"  {name + ':':<{width + 1}} {getattr(profile, name):9.1f} {unit:<7}  {meaning}")


def _parse_settings(items: Sequence[str]) -> dict[str, float]:
    """``["mem_gbs=12"]`` -> ``{"mem_gbs": 12.0}``; keys are checked by :func:`override`."""
    settings = {}
    for item in items:
        key, eq, value = item.partition("=")
        try:
            if not eq:
                raise ValueError
            settings[key.strip()] = float(value)
        except ValueError:
            raise TargetError(f"--set expects KEY=VALUE with a number, got {item!r}; valid keys: "
                              f"{', '.join(FIELDS)}") from None
    return settings


def _target_show(args: argparse.Namespace) -> int:
    _print_target(CpuTarget.from_string(args.target))
    return 0


def _target_probe(args: argparse.Namespace) -> int:
    target = CpuTarget.from_string(args.target)
    settings = _parse_settings(args.settings)
    if args.no_measure:
        profile = profile_for(target)
    elif not target.runs_on_host():
        missing = ", ".join(sorted(target.isa - CpuTarget.host().isa))
        raise TargetError(f"this machine cannot run target {target.key()} (it lacks {missing}), so "
                          f"it cannot be measured here; give --no-measure with --set KEY=VALUE to "
                          f"store numbers for it")
    else:
        profile = probe(target, progress=True)
    profile = override(profile, settings)
    path = save_profile(target, profile)
    print(f"saved the profile of {target.key()} to {path}")
    _print_target(target)
    return 0


def add_target_commands(commands: argparse._SubParsersAction) -> None:
    """Register ``target show`` and ``target probe`` (see :mod:`taskloom.target.probe`)."""
    target = commands.add_parser("target", help="show or measure the CPU's hardware profile "
                                 "(FMA rates and bandwidths the performance model reads)")
    actions = target.add_subparsers(dest="action", metavar="ACTION", required=True)
    spec_help = "the target, as 'cpu [-isa=sse4_2|avx2|avx512] [-cores=N]' (default: this machine)"
    show = actions.add_parser("show", help="print the target and its profile (stored, else estimated)")
    show.add_argument("--target", default="cpu", metavar="SPEC", help=spec_help)
    show.set_defaults(func=_target_show)
    measure = actions.add_parser("probe", help="measure the target's profile (a few seconds), apply "
                                 "--set values and store it beside the build cache")
    measure.add_argument("--target", default="cpu", metavar="SPEC", help=spec_help)
    measure.add_argument("--set", dest="settings", action="extend", nargs="+", default=[],
                         metavar="KEY=VALUE", help=f"replace a number; keys: {', '.join(FIELDS)}")
    measure.add_argument("--no-measure", action="store_true", help="start from the stored or estimated "
                         "profile instead of measuring (the only way for a target this machine cannot run)")
    measure.set_defaults(func=_target_probe)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every ``taskloom`` command."""
    parser = argparse.ArgumentParser(prog="taskloom", description="taskloom deep-learning compiler")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_cache_commands(commands)
    add_bench_commands(commands)
    add_records_commands(commands)
    add_target_commands(commands)
    add_tune_commands(commands)
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
