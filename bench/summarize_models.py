"""One markdown table of ``taskloom bench model --json`` files: per model and batch, each
system's median latency and taskloom's speed-up over it (above 1: taskloom is faster), the
compile times, and the geometric mean of the speed-ups per peer.

    python bench/summarize_models.py bench/results/<run>/*.json [--plot FILE]

``--plot`` also draws every model's latencies, relative to taskloom's, as one bar chart.
The same as ``python -m taskloom.bench.summarize models FILE... [--plot FILE]``
(:mod:`taskloom.bench.summarize`); this script stays so that the commands on the results
pages keep working.
"""
import sys

from taskloom.bench.summarize import main

if __name__ == "__main__":
    sys.exit(main(["models", *sys.argv[1:]]))
