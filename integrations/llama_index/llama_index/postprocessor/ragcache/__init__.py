"""ragcache node postprocessor for LlamaIndex: stable (canonical) node order and de-duplication."""

from llama_index.postprocessor.ragcache.base import (
    StableOrderPostprocessor,
    node_key,
    node_segment,
)

__all__ = ["StableOrderPostprocessor", "node_key", "node_segment"]
