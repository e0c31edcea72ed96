"""Bad inputs to the public API: wrong types given to the constructors, message content of
the wrong type, lone surrogates and control-character-only questions. Each is refused at once with
a ValueError that names the problem and the fix, and nothing already cached is touched."""

import pytest

from ragcache import ChunkCache, LocalBackend, LocalEngine, RagCache, SemanticCache
from ragcache.prompt.chat_turns import split_messages
from ragcache.prompt.segments import Segment
from ragcache.semantic.text import normalize_question
from ragcache.text_checks import check_encodable, checked_question, is_blank


@pytest.mark.parametrize("backend", [None, 42, "local", object()])
def test_ragcache_refuses_a_non_backend(backend):
    with pytest.raises(TypeError, match="backend must be a ragcache Backend"):
        RagCache(backend)


@pytest.mark.parametrize("semantic", ["x", 5, object()])
def test_ragcache_refuses_a_non_semantic_cache(engine, semantic):
    with pytest.raises(TypeError, match="semantic must be a SemanticCache"):
        RagCache(LocalBackend(engine), semantic=semantic)


@pytest.mark.parametrize("eng", [None, "engine", 3])
def test_local_backend_refuses_a_non_engine(eng):
    with pytest.raises(TypeError, match="LocalBackend needs a LocalEngine"):
        LocalBackend(eng)


@pytest.mark.parametrize("store", ["abc", 1, object()])
def test_chunk_cache_refuses_a_non_store(store):
    with pytest.raises(TypeError, match="store must be a ChunkStore"):
        ChunkCache(store)


@pytest.mark.parametrize("loaded", [None, "not a model", 7])
def test_local_engine_refuses_a_non_loaded_model(loaded):
    with pytest.raises(TypeError, match="LocalEngine takes a LoadedModel.*from_pretrained"):
        LocalEngine(loaded)


@pytest.mark.parametrize("content", [5, 2.5, b"bytes", object()])
def test_message_content_of_the_wrong_type(engine, content):
    with pytest.raises(TypeError, match=r"messages\[0\]\['content'\] has type"):
        engine.generate([{"role": "user", "content": content}], max_new_tokens=1)


@pytest.mark.parametrize("content", ["How \ud800 do?", [{"type": "text", "text": "a\udc80b"}], "\udfff"])
def test_lone_surrogates_in_messages(engine, content):
    with pytest.raises(ValueError, match="lone surrogate"):
        engine.generate([{"role": "user", "content": content}], max_new_tokens=1)


@pytest.mark.parametrize("q", ["\0\0\0", "\x1b\x07", " \u200b\t", "\ufeff"])
def test_control_only_questions_are_empty(engine, q):
    assert is_blank(q)
    with pytest.raises(ValueError, match="question is empty"):
        normalize_question(q)
    with pytest.raises(ValueError, match="question is empty"):
        RagCache(LocalBackend(engine)).answer(q)


@pytest.mark.parametrize("q", ["How \ud800 do?", "\udc00x"])
def test_lone_surrogate_questions_leave_the_cache_intact(q):
    with SemanticCache(None) as c:
        c.store("How do I read a CSV file?", "Use csv.reader.")
        for op in (lambda: c.lookup(q), lambda: c.store(q, "x")):
            with pytest.raises(ValueError, match="lone surrogate"):
                op()
        assert len(c) == 1
        assert c.lookup("How do I read a CSV file?").answer == "Use csv.reader."


@pytest.mark.parametrize("q", ["ok?", "Wie geht's?", "¿Qué?", "x"])
def test_visible_questions_pass(q):
    assert checked_question(q) == q
    check_encodable([{"type": "text", "text": q}], "content")


@pytest.mark.parametrize("content", [Segment("document", "a\ud800b"), [Segment("document", "fine"),
                                                                       Segment("system", "x\udfffy")]])
def test_lone_surrogates_in_segments(content):
    with pytest.raises(ValueError, match="lone surrogate"):
        check_encodable(content, "content")
    check_encodable(Segment("document", "fine"), "content")


def test_mixed_content_names_the_block():
    with pytest.raises(ValueError, match=r"\['content'\]\[1\]"):
        split_messages([{"role": "user",
                         "content": [{"type": "text", "text": "fine"}, {"type": "text", "text": "\ud800"}]}])


@pytest.mark.parametrize("kwargs,words", [({"documents": "abc"}, "wrap a single document"),
                                          ({"documents": b"abc"}, "wrap a single document"),
                                          ({"documents": {"text": "a"}}, "wrap a single document"),
                                          ({"system": 5}, "system must be a str"),
                                          ({"params": [1]}, "params must be a mapping")])
def test_partition_key_refuses_wrong_shapes(kwargs, words):
    from ragcache.semantic import partition_key

    with pytest.raises(TypeError, match=words):
        partition_key(model="m", **kwargs)
    assert partition_key(model="m", documents=["abc"]) != partition_key(model="m", documents=["a", "b", "c"])


class _Named:
    """A backend with generate() whose name / model_id the test sets."""

    def __init__(self, name, model_id):
        if name is not None:
            self.name = name
        if model_id is not None:
            self.model_id = model_id

    def generate(self, layout, **kw):  # pragma: no cover - never reached
        raise AssertionError("not called")


@pytest.mark.parametrize(("name", "model_id", "missing"), [(None, "m", "name"), ("x", None, "model_id"),
                                                            ("", "m", "name"), ("x", 3, "model_id")])
def test_ragcache_refuses_a_backend_without_name_or_model_id(name, model_id, missing):
    with pytest.raises(ValueError if name == "" else TypeError, match=f"non-empty str attribute '{missing}'"):
        RagCache(_Named(name, model_id))


@pytest.mark.parametrize("path", [123, 1.5, b"answers", "", "   "])
def test_semantic_cache_refuses_a_path_of_the_wrong_kind(tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError if isinstance(path, str) else TypeError, match="path must be a folder path"):
        SemanticCache(path)
    assert list(tmp_path.iterdir()) == []  # nothing was made from it
