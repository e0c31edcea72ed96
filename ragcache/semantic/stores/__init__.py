"""Vector-answer stores: where a semantic cache keeps its entries.

The protocol every store meets (:mod:`~ragcache.semantic.stores.protocol`); the embedded store, FAISS
indexes over one SQLite file (:mod:`.faiss_store`, with :mod:`.store`, :mod:`.index`, :mod:`.registry`,
:mod:`.persistence`, :mod:`.locks`); the shared store in PostgreSQL + pgvector (:mod:`.pg_store`,
:mod:`.pg_schema`, :mod:`.pg_flight`). No store decides a hit: that is :mod:`ragcache.semantic.decision`.
"""
