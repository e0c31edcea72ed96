"""Bad values given to the public API: NaN temperature, NaN TTLs and a non-str
``invalidate`` argument must be refused with a clear ValueError (not a torch RuntimeError, an
AttributeError, or silently accepted)."""

import math

import pytest

from ragcache import LocalBackend, LocalEngine, SemanticCache
from ragcache.semantic import partition_key


@pytest.mark.parametrize("temperature", [math.nan, -1.0])
def test_generate_refuses_bad_temperature(engine, temperature):
    with pytest.raises(ValueError, match="temperature >= 0"):
        engine.generate("How do I read a CSV file?", max_new_tokens=2, temperature=temperature)


def test_generate_still_accepts_a_good_temperature(engine):
    g = engine.generate("How do I read a CSV file?", max_new_tokens=2, temperature=0.7)
    assert g.stats is not None


def test_semantic_cache_refuses_nan_ttl():
    with pytest.raises(ValueError, match="ttl_s must be > 0"):
        SemanticCache(None, ttl_s=math.nan)
    with SemanticCache(None) as c:
        with pytest.raises(ValueError, match="ttl_s must be > 0"):
            c.store("How do I read a CSV file?", "Use csv.reader.", ttl_s=math.nan)
        assert c.lookup("How do I read a CSV file?") is None


@pytest.mark.parametrize("bad", [None, 5, "", "   "])
def test_invalidate_refuses_non_text(bad):
    with SemanticCache(None) as c:
        pk = partition_key(namespace="t", model="m", documents=[{"id": "csv", "text": "csv.reader reads rows."}])
        c.store("How do I read a CSV file?", "Use csv.reader.", partition=pk)
        with pytest.raises(ValueError if isinstance(bad, str) else TypeError, match="invalidate needs a document id"):
            c.invalidate(bad)
        assert c.lookup("How do I read a CSV file?", partition=pk) is not None  # nothing lost


def test_partition_must_be_a_partition_key():
    with SemanticCache(None) as c:
        with pytest.raises(TypeError, match="partition must be a PartitionKey"):
            c.store("How do I read a CSV file?", "Use csv.reader.", partition="p")
        with pytest.raises(TypeError, match="partition must be a PartitionKey"):
            c.lookup("How do I read a CSV file?", partition="p")
        c.store("How do I read a CSV file?", "Use csv.reader.")  # None: the default partition
        assert c.lookup("How do I read a CSV file?") is not None


def test_too_long_question_names_the_question(engine):
    from ragcache.engine.engine import ContextWindowError

    with pytest.raises(ContextWindowError, match="a shorter question"):
        engine.generate("why is the sky blue? " * 3000, max_new_tokens=2)


def _lc_doc(text, id):
    from langchain_core.documents import Document

    return Document(page_content=text, id=id)


@pytest.mark.parametrize("make", [
    lambda t, i: {"id": i, "text": t},
    lambda t, i: {"doc_id": i, "page_content": t},
    _lc_doc,
])
def test_two_documents_with_one_id_and_different_text_are_refused(tiny_seed1, make):
    from ragcache import RagCache
    from ragcache.prompt.layout import PromptLayout
    from ragcache.testing import HashingEmbedder

    docs = [make("Backups run at 02:00 UTC.", "ops#1"), make("Deploys go out on Tuesdays.", "ops#2"),
            make("Backups run at 03:00 UTC.", "ops#1")]
    with pytest.raises(ValueError, match=r"documents\[0\] and documents\[2\] both have id 'ops#1' but different "
                                         r"text: give each document its own id"):
        PromptLayout.build(question="When do backups run?", documents=docs)
    same = [make("Backups run at 02:00 UTC.", "ops#1"), make("Backups run at 02:00 UTC.\r\n", "ops#1")]
    assert PromptLayout.build(question="When do backups run?", documents=same).documents  # same text: accepted
    with SemanticCache(None, embedder=HashingEmbedder()) as answers:
        rag = RagCache(LocalBackend(LocalEngine(tiny_seed1, calibration=False)), semantic=answers)
        with pytest.raises(ValueError, match="both have id 'ops#1'"):
            rag.prepare("When do backups run?", docs)
