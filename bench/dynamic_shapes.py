"""The dynamic-shapes sweep of the results pages before ``taskloom bench model NAME --dynamic``
(:mod:`taskloom.bench.dynamic`) held it; their commands still run here:

    .venv/bin/python bench/dynamic_shapes.py --model bert --batch 1,3 --seq 7,64,128,384 \\
        [--compare static,eager,inductor,ort] [--repeats 10] [--rounds 3] [--json FILE]

``--repeats`` counts runs per round here (the command spreads them over the rounds), and
``eager`` is the command's ``torch``.
"""
from __future__ import annotations

import argparse
import sys

from taskloom.cli import main as taskloom_main


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=("bert", "gpt2"), default="bert")
    p.add_argument("--batch", default="1,3")
    p.add_argument("--seq", default="7,64,128,384")
    p.add_argument("--compare", default="static,eager,inductor,ort")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    compare = ",".join("torch" if c == "eager" else c for c in args.compare.split(","))
    argv = ["bench", "model", args.model, "--dynamic", "--batch", args.batch, "--seq", args.seq, "--compare", compare,
            "--repeats", str(args.repeats * args.rounds), "--rounds", str(args.rounds)]
    return taskloom_main(argv + (["--json", args.json] if args.json else []))


if __name__ == "__main__":
    sys.exit(main())
