import langchain_ragcache

EXPECTED_ALL = [
    "CallRecord",
    "ChatRagCache",
    "RagCacheCallbackHandler", "RagCacheEmbeddings", "RagCacheSemanticCache", "RagPrompt", "__version__"]


def test_all_imports() -> None:
    assert sorted(langchain_ragcache.__all__) == sorted(EXPECTED_ALL)
    for name in EXPECTED_ALL:
        assert hasattr(langchain_ragcache, name)
