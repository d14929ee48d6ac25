"""rlstack's benchmarks, each a module run from the repository root: ``python -m bench.<name>``.

Every claim of speed in docs/ is one of these, printing its ratio against a baseline measured in the
same run. They share their plumbing (``bench.common``): the command line (``bench.common.cli``), one
result format (``bench.common.result``), servers on loopback, a lean HTTP client and Prometheus scrapes.
"""
