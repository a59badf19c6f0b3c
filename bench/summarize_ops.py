"""Markdown tables of ``taskloom bench op --json`` files: per shape, each system's GFLOP/s
and taskloom's ratio to each peer; per file, the geometric mean of the ratios.

    python bench/summarize_ops.py bench/results/<run>/*.json

The same as ``python -m taskloom.bench.summarize ops FILE...`` (:mod:`taskloom.bench.summarize`);
this script stays so that the commands on the results pages keep working.
"""
import sys

from taskloom.bench.summarize import main

if __name__ == "__main__":
    sys.exit(main(["ops", *sys.argv[1:]]))
