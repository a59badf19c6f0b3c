"""Timing helpers shared by the benchmarks (medians of many runs in separate blocks, machine
and version facts); they live in :mod:`taskloom.bench.timing`, which ``taskloom bench`` uses too."""
from taskloom.bench.timing import machine, median_ms, versions

__all__ = ["machine", "median_ms", "versions"]
