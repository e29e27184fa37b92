"""Benchmarks for dshtools: dispatch overhead, signal operations, peers,
cancellation latency, leak figures and batch throughput.

Run from the repository root::

    python -m benchmarks            # full run (< 60 s on 2 cores), writes benchmarks/results.json
    python -m benchmarks --quick    # a few rounds of everything, for smoke use

Every figure is a **median over repeated rounds**; every ratio is taken
against a baseline measured in the same run, in alternating rounds, so a
slower or busier machine moves both sides together. Ratios are always
``dshtools / baseline``: below 1 means dshtools is faster.
"""
