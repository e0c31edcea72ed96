"""ragcache's benchmarks and studies: run by ``ragcache bench NAME`` from a checkout of the repository.

They are not in the wheel (they need the benchmark data in ``$RAGCACHE_DATA_DIR`` and the ``bench``
extra). Each module ``NAME`` has a ``main(**options) -> dict`` that prints a table, writes JSON under
``bench/results/`` and draws a PNG through :func:`benchmarks.plotting.draw`.
"""
