"""RagCache's boundary (issue 49, typed seams): the backend and the answer cache a user passes are checked once,
with ``isinstance`` against declared protocols, and read directly afterwards; the blend setting is the declared
``ragcache.backend.Blending`` capability, read only when the answer path asks for it."""

import pytest

from ragcache import RagCache
from ragcache.backend import AsyncBackend, Backend, BackendResult, Blending, CacheUsage
from ragcache.testing import HashingEmbedder
from ragcache.semantic import SemanticCache


def _result(layout):
    return BackendResult("An answer.", "model", CacheUsage.local(prompt_tokens=len(layout.render().split())))


class _Sync:
    name, model_id = "sync", "sync-1"

    def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
        return _result(layout)


class _Async:
    name, model_id = "async", "async-1"

    async def agenerate(self, layout, *, max_new_tokens, temperature, tenant=None):
        return _result(layout)


class _Properties(_Sync):
    """``name`` and ``model_id`` as properties (the LlamaIndex backend's shape)."""

    name = property(lambda self: "props")  # type: ignore[assignment]
    model_id = property(lambda self: "props-1")  # type: ignore[assignment]


class _Blends(_Sync):
    """A backend that declares its blend setting; counts the reads."""

    def __init__(self, setting):
        self.setting, self.reads = setting, 0

    @property
    def blend_setting(self):
        self.reads += 1
        return self.setting


@pytest.mark.parametrize("backend", [_Sync(), _Async(), _Properties(), _Blends("infoflow r=0.15")])
def test_a_backend_with_generate_or_agenerate_and_its_keys_is_taken(backend):
    rag = RagCache(backend, semantic=None)
    assert rag.backend is backend and rag.model == f"{backend.name}:{backend.model_id}"
    assert isinstance(backend, (Backend, AsyncBackend))


@pytest.mark.parametrize("backend", [_Sync(), _Async(), _Properties()])
def test_a_backend_that_declares_no_blend_setting_never_blends(backend):
    assert not isinstance(backend, Blending) and RagCache(backend, semantic=None).blend_setting() is None


@pytest.mark.parametrize("setting", ["infoflow r=0.15", "random r=0.3", None])
def test_the_declared_blend_setting_is_read_only_when_asked(setting):
    backend = _Blends(setting)
    rag = RagCache(backend, semantic=None)
    assert backend.reads == 0  # not at construction: a lazily loaded model stays unloaded on a hit
    assert rag.blend_setting() == setting and backend.reads >= 1


class _LookupAndStore:
    """The string API of a cache (lookup / store) without the answer path's protocol."""

    def lookup(self, *a, **k):
        return None

    def store(self, *a, **k):
        return None


@pytest.mark.parametrize("semantic", [_LookupAndStore(), HashingEmbedder(), {"lookup": None}])
def test_an_object_that_is_no_answer_cache_is_refused_with_the_fix(semantic):
    with pytest.raises(TypeError, match=r"semantic must be a SemanticCache .* e\.g\. semantic=SemanticCache"):
        RagCache(_Sync(), semantic=semantic)


def test_a_semantic_cache_is_an_answer_cache():
    with SemanticCache(None, embedder=HashingEmbedder()) as cache:
        assert RagCache(_Sync(), semantic=cache).semantic is cache


class _NoTenant:
    name, model_id = "old", "old-1"

    def generate(self, layout, *, max_new_tokens, temperature):
        return _result(layout)


class _NoTenantAsync:
    name, model_id = "old", "old-1"

    async def agenerate(self, layout, *, max_new_tokens, temperature):
        return _result(layout)


class _Kwargs:
    name, model_id = "kw", "kw-1"

    def generate(self, layout, **options):
        return _result(layout)


class _ReturnsText(_Sync):
    def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
        return "An answer."


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", [_NoTenant(), _NoTenantAsync()])
async def test_a_backend_without_the_tenant_keyword_fails_on_its_first_call_naming_it(backend):
    """The tenant is part of the Backend protocol, which a type checker holds a backend to; RagCache reads no
    signature (no probe of its collaborator), so such a backend fails on its first call with Python's own
    error naming the keyword."""
    rag = RagCache(backend, semantic=None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tenant'"):
        await rag.aanswer("What is the refund window?", max_new_tokens=4)


def test_a_backend_taking_any_keyword_is_taken():
    rag = RagCache(_Kwargs(), semantic=None)
    assert rag.answer("What is the refund window?", max_new_tokens=4).text == "An answer."


@pytest.mark.parametrize("cls", [_Sync, _Async, _Kwargs])
def test_a_backend_class_is_refused_with_the_instance_to_pass(cls):
    with pytest.raises(TypeError, match=rf"backend is the class {cls.__name__}, not a backend: pass an instance"):
        RagCache(cls, semantic=None)


def test_an_async_only_backend_names_aanswer_when_called_blocking():
    rag = RagCache(_Async(), semantic=None)
    with pytest.raises(TypeError, match=r"has only agenerate\(\): call aanswer\(\)"):
        rag.answer("What is the refund window?", max_new_tokens=4)


@pytest.mark.asyncio
async def test_a_backend_that_returns_no_backend_result_is_named():
    rag = RagCache(_ReturnsText(), semantic=None)
    with pytest.raises(TypeError, match="returned str, not a BackendResult"):
        rag.answer("What is the refund window?", max_new_tokens=4)
    with pytest.raises(TypeError, match="returned str, not a BackendResult"):
        await rag.aanswer("What is the refund window?", max_new_tokens=4)
