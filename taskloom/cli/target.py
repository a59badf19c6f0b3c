"""``taskloom target show|probe``: what taskloom knows of a target, and the CPU's probe
(:mod:`taskloom.tune.probe_cpu`), which measures the rates the analytic model reads."""
from __future__ import annotations

import argparse
from typing import Sequence

from taskloom.cli.text import format_bytes
from taskloom.errors import TargetError
from taskloom.target import Target, get_target
from taskloom.tune.probe_cpu import FIELDS, override, probe, profile_for, profile_path, save_profile, stored_profile


def _print_cpu(target: Target) -> None:
    """A CPU target, then the profile :func:`profile_for` gives it, one number per line."""
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


def _print_fields(target: Target) -> None:
    """Any other target: its description, sizes in bytes written as such."""
    print(f"key:      {target.key()}")
    for name, value in target.to_dict().items():
        if name in ("kind", "name"):
            continue
        is_size = name.endswith("_bytes") or name.startswith("shared_memory")
        print(f"{name}: {format_bytes(value) if is_size else value}")


def print_target(target: Target) -> None:
    """The target, one fact per line."""
    print(f"target:   {target.name}")
    if target.kind == "cpu":
        _print_cpu(target)
    else:
        _print_fields(target)


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
    print_target(get_target(args.target))
    return 0


def _target_probe(args: argparse.Namespace) -> int:
    target = get_target(args.target)
    if target.kind != "cpu":
        raise TargetError(f"only CPU targets are probed; {target.key()} is described by its architecture "
                          f"(and by its driver where the GPU is present): `taskloom target show --target "
                          f"{args.target}` prints it")
    settings = _parse_settings(args.settings)
    if args.no_measure:
        profile = profile_for(target)
    elif not target.runs_on_host():
        missing = ", ".join(sorted(target.isa - get_target("cpu").isa))
        raise TargetError(f"this machine cannot run target {target.key()} (it lacks {missing}), so "
                          f"it cannot be measured here; give --no-measure with --set KEY=VALUE to "
                          f"store numbers for it")
    else:
        profile = probe(target, progress=True)
    profile = override(profile, settings)
    path = save_profile(target, profile)
    print(f"saved the profile of {target.key()} to {path}")
    print_target(target)
    return 0


def add_target_commands(commands: argparse._SubParsersAction) -> None:
    """Register ``target show`` and ``target probe``."""
    target = commands.add_parser("target", help="show a target, or measure the CPU's hardware profile "
                                 "(FMA rates and bandwidths the performance model reads)")
    actions = target.add_subparsers(dest="action", metavar="ACTION", required=True)
    spec_help = ("the target: 'cpu [-isa=sse4_2|avx2|avx512] [-cores=N]' (default: this machine), "
                 "'cuda' or 'cuda:<arch>' (show only)")
    show = actions.add_parser("show", help="print the target and, for a CPU, its profile (stored, else estimated)")
    show.add_argument("--target", default="cpu", metavar="SPEC", help=spec_help)
    show.set_defaults(func=_target_show)
    measure = actions.add_parser("probe", help="measure the CPU's profile (a few seconds), apply "
                                 "--set values and store it beside the build cache")
    measure.add_argument("--target", default="cpu", metavar="SPEC", help=spec_help)
    measure.add_argument("--set", dest="settings", action="extend", nargs="+", default=[],
                         metavar="KEY=VALUE", help=f"replace a number; keys: {', '.join(FIELDS)}")
    measure.add_argument("--no-measure", action="store_true", help="start from the stored or estimated "
                         "profile instead of measuring (the only way for a target this machine cannot run)")
    measure.set_defaults(func=_target_probe)
