"""``taskloom bench``: taskloom timed against its peers in one run.

:mod:`~taskloom.bench.op` times one operator (``bench op matmul|conv2d``),
:mod:`~taskloom.bench.model` whole models (``bench model NAME``) built by
:mod:`~taskloom.bench.zoo` and run by each peer through :mod:`~taskloom.bench.peers`;
:mod:`~taskloom.bench.timing` holds the medians and the machine and version facts;
:mod:`~taskloom.bench.summarize` turns recorded JSON results into tables and plots.
"""
