"""Application code on top of the library: the ``ragcache`` CLI, the demo, the corpus and
retriever the demo and ``ask`` use, and the benchmark scripts. Nothing in the library imports it."""
