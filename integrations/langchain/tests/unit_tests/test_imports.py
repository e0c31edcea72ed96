import langchain_ragcache

EXPECTED_ALL = [
    "CallRecord",
    "ChatRagCache",
    "RagCacheCallbackHandler", "RagCacheEmbeddings", "RagCacheSemanticCache", "RagPrompt", "__version__",
    "RagCacheMiddleware", "RagPromptLayoutMiddleware", "RagCacheGraphCache", "cache_info", "with_cache_info"]


def test_all_imports() -> None:
    assert sorted(langchain_ragcache.__all__) == sorted(EXPECTED_ALL)
    for name in EXPECTED_ALL:
        assert hasattr(langchain_ragcache, name)


def test_agent_classes_load_lazily() -> None:
    from langchain_ragcache.graph_cache import RagCacheGraphCache
    from langchain_ragcache.middleware import RagCacheMiddleware, RagPromptLayoutMiddleware

    assert langchain_ragcache.RagCacheMiddleware is RagCacheMiddleware
    assert langchain_ragcache.RagPromptLayoutMiddleware is RagPromptLayoutMiddleware
    assert langchain_ragcache.RagCacheGraphCache is RagCacheGraphCache
