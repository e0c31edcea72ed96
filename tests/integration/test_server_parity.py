"""The local servers answer bad requests as the real APIs do (issue 22, items 5, 7 and 10), through
the real anthropic and openai SDKs; usage and layer labels come from one mapping (issue 23)."""

import httpx
import pytest

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

from ragcache.backend import CacheUsage, provider_layer  # noqa: E402
from ragcache.providers.table import usage_of  # noqa: E402
from ragcache.engine.engine import LocalEngine  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402

MODEL = "claude-sonnet-4-6"


@pytest.fixture(scope="module")
def url(tiny_wide):
    engine = LocalEngine(tiny_wide)
    with running_server(engine, min_tokens=64) as u:
        yield u


@pytest.fixture()
def ac(url):
    return anthropic.Anthropic(base_url=url, api_key="local", max_retries=0)


@pytest.fixture()
def oc(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="local", max_retries=0)


# ---------------------------------------------------------------- model ids (22.5, 22.7)
@pytest.mark.parametrize("name", ["tiny-llama", "Tiny-Llama", "TINY-LLAMA", "tiny-LLAMA"])
def test_model_ids_are_case_insensitive_and_the_exact_id_is_echoed(oc, ac, name):
    r = oc.chat.completions.create(model=name, max_tokens=2, temperature=0, messages=[{"role": "user", "content": "hi"}])
    assert r.model == "tiny-llama"
    assert ac.messages.create(model=name, max_tokens=2, messages=[{"role": "user", "content": "hi"}]).content


@pytest.mark.parametrize("name", ["gpt-9", "tiny-llama-2", "claude-unknown-1", "llama"])
def test_unknown_models_are_404_on_both_apis(oc, ac, name):
    with pytest.raises(openai.NotFoundError) as e:
        oc.chat.completions.create(model=name, max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    assert e.value.code == "model_not_found" and "tiny-llama" in e.value.message
    with pytest.raises(anthropic.NotFoundError) as e:
        ac.messages.create(model=name, max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["type"] == "not_found_error" and name in e.value.body["error"]["message"]


def test_claude_ids_whose_caching_rules_are_emulated_are_accepted(ac):
    for name in ("claude-sonnet-4-6", "claude-haiku-4-5-20251001", "claude-opus-4-6"):
        assert ac.messages.create(model=name, max_tokens=1, messages=[{"role": "user", "content": "hi"}]).content


# ---------------------------------------------------------------- Anthropic words (22.7)
@pytest.mark.parametrize("value", ["12", 1.5, None, True, [3]])
def test_anthropic_max_tokens_of_the_wrong_type_is_a_type_error(url, value):
    r = httpx.post(f"{url}/v1/messages", json={"model": MODEL, "max_tokens": value,
                                                "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert msg.startswith("max_tokens: Input should be a valid integer") and "Field required" not in msg


def test_anthropic_max_tokens_missing_or_below_one(url):
    base = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(f"{url}/v1/messages", json=base).json()["error"]["message"] == "max_tokens: Field required"
    for v in (0, -3):
        msg = httpx.post(f"{url}/v1/messages", json={**base, "max_tokens": v}).json()["error"]["message"]
        assert "greater than or equal to 1" in msg


@pytest.mark.parametrize("content", ["", [], [{"type": "text", "text": ""}], "  \n", [{"type": "text", "text": " "}]])
def test_anthropic_empty_user_content_is_a_400(ac, content):
    with pytest.raises(anthropic.BadRequestError) as e:
        ac.messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": content}])
    assert "non-empty" in e.value.body["error"]["message"] or "non-whitespace" in e.value.body["error"]["message"]


# ---------------------------------------------------------------- OpenAI words (22.7)
@pytest.mark.parametrize("content", [[], "", "   "])
def test_openai_empty_user_content_is_a_400(oc, content):
    with pytest.raises(openai.BadRequestError) as e:
        oc.chat.completions.create(model="tiny-llama", max_tokens=2, messages=[{"role": "user", "content": content}])
    assert e.value.param == "messages[0].content"


@pytest.mark.parametrize("param", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", [2048, 10 ** 6])
def test_openai_huge_budget_names_the_param_it_came_in(oc, param, value):
    with pytest.raises(openai.BadRequestError) as e:
        oc.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "hi"}], **{param: value})
    assert e.value.param == param and f"{param} is too large: {value}." in e.value.message


@pytest.mark.parametrize("words", [200, 600])
def test_openai_context_overflow_in_openai_words(oc, words):
    with pytest.raises(openai.BadRequestError) as e:
        oc.chat.completions.create(model="tiny-llama", max_tokens=1800,
                                   messages=[{"role": "user", "content": "brake cable adjust " * words}])
    msg = e.value.message
    assert e.value.code == "context_length_exceeded" and "maximum context length is 2048 tokens" in msg
    assert "top-k" not in msg and "max_new_tokens" not in msg and "in the completion" in msg


@pytest.mark.parametrize("bad,param", [({"temperature": 3}, "temperature"), ({"n": 2}, "n"),
                                       ({"max_tokens": "12"}, "max_tokens"), ({"top_p": 2}, "top_p")])
def test_openai_bad_parameters_name_the_param(oc, bad, param):
    with pytest.raises(openai.BadRequestError) as e:
        oc.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "hi"}], **bad)
    assert e.value.param == param


# ---------------------------------------------------------------- SSE framing (22.10)
def test_both_streams_are_framed_by_sse_starlette(url, ac, oc):
    with httpx.stream("POST", f"{url}/v1/messages", json={
            "model": MODEL, "max_tokens": 3, "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as r:
        raw = b"".join(r.iter_raw())
        assert r.headers["content-type"].startswith("text/event-stream") and r.headers["x-accel-buffering"] == "no"
    assert raw.startswith(b"event: message_start\ndata: {") and raw.rstrip().endswith(b'data: {"type": "message_stop"}')
    with ac.messages.stream(model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "hi"}]) as s:
        assert s.get_final_message().usage.output_tokens >= 1
    chunks = list(oc.chat.completions.create(model="tiny-llama", max_tokens=3, stream=True,
                                             stream_options={"include_usage": True},
                                             messages=[{"role": "user", "content": "hi"}]))
    assert chunks[-1].usage.completion_tokens >= 1


# ---------------------------------------------------------------- one usage mapping (23)
class Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.mark.parametrize("usage,expect", [
    ({"input_tokens": 10, "cache_read_input_tokens": 90, "cache_creation_input_tokens": 0, "output_tokens": 5},
     (100, 90, 0, "provider-cache")),
    ({"input_tokens": 7, "cache_creation_input_tokens": 300, "output_tokens": 2}, (307, 0, 300, "provider")),
    (Obj(input_tokens=3, cache_read_input_tokens=None, cache_creation_input_tokens=None, output_tokens=1),
     (3, 0, 0, "provider")),
    (None, (0, 0, 0, "provider")),
])
def test_from_anthropic(usage, expect):
    u = usage_of("anthropic", usage)
    assert (u.prompt_tokens, u.cache_read, u.cache_write, provider_layer(u.cache_read)) == expect
    assert u.reused + u.computed == u.prompt_tokens


@pytest.mark.parametrize("usage,expect", [
    ({"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 64}, "completion_tokens": 3},
     (100, 64, 36, "provider-cache")),
    ({"prompt_tokens": 50, "completion_tokens": 3}, (50, 0, 50, "provider")),
    ({"prompt_tokens": 50, "prompt_tokens_details": None, "completion_tokens": 3}, (50, 0, 50, "provider")),
    (Obj(input_tokens=40, input_tokens_details=Obj(cached_tokens=8), output_tokens=2), (40, 8, 32, "provider-cache")),
    ({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}}, (5, 5, 0, "provider-cache")),
    (None, (0, 0, 0, "provider")),
])
def test_from_openai(usage, expect):
    u = usage_of("openai", usage)
    assert (u.prompt_tokens, u.cache_read, u.computed, provider_layer(u.cache_read)) == expect


def test_an_uncached_openai_compatible_call_is_provider_everywhere(url):
    """The same uncached call through the OpenAI backend, the LangChain callbacks and the
    LlamaIndex backend gets one label: ``provider`` (never ``model``, the local engine's label)."""
    from ragcache.prompt.layout import PromptLayout
    from ragcache.providers.openai.backend import OpenAIBackend

    usage = {"prompt_tokens": 30, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 0}}
    labels = {"openai-backend": OpenAIBackend(openai.OpenAI(base_url=url + "/v1", api_key="x"), "tiny-llama")
              .result("a", usage, "stop", 0.1).layer}
    lc = pytest.importorskip("langchain_ragcache.callbacks")
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, LLMResult

    h = lc.RagCacheCallbackHandler()
    msg = AIMessage("a", usage_metadata={"input_tokens": 30, "output_tokens": 2, "total_tokens": 32,
                                         "input_token_details": {"cache_read": 0}})
    h.on_llm_end(LLMResult(generations=[[ChatGeneration(message=msg)]]), run_id=__import__("uuid").uuid4())
    labels["langchain-callbacks"] = h.last.layer
    li = pytest.importorskip("llama_index.query_engine.ragcache.backend")
    from llama_index.core.llms import MockLLM

    be = li.LlamaIndexBackend(MockLLM(max_tokens=4))
    labels["llamaindex"] = be.result(Obj(raw={"usage": usage}), "a", 0.1).layer
    assert set(labels.values()) == {"provider"}, labels
    assert PromptLayout  # the layout type the backends answer


@pytest.mark.parametrize("name", ["Tiny-Llama", "tiny-llama"])
def test_readme_chatopenai_snippet_runs_at_its_settings(url, name):
    """The README's ChatOpenAI snippet (temperature 0, a token budget, the id in any case) works."""
    ChatOpenAI = pytest.importorskip("langchain_openai").ChatOpenAI
    llm = ChatOpenAI(base_url=url + "/v1", api_key="local", model=name, temperature=0, max_tokens=8,
                     stream_usage=True)
    docs, question = ["The brake cable is adjusted with a 5 mm hex key."], "How do I adjust the brake cable?"
    msg = llm.invoke([("system", "Answer briefly."),
                      ("user", [{"type": "text", "text": d} for d in docs] + [{"type": "text", "text": question}])])
    assert msg.usage_metadata["output_tokens"] <= 8 and msg.response_metadata["model_name"] == "tiny-llama"
    again = llm.invoke([("system", "Answer briefly."),
                        ("user", [{"type": "text", "text": d} for d in docs] + [{"type": "text", "text": question}])])
    assert again.content == msg.content  # temperature 0: the same answer
    assert again.usage_metadata["input_token_details"]["cache_read"] > 0


# ---------------------------------------------------------------- answer-shaping fields in every entry point (24.3)
def test_backend_request_fields_partition_the_pipeline(url):
    """Two RagCache pipelines on one semantic cache whose backends differ only in the request fields
    they add (``extra``) never serve each other's answers."""
    from ragcache import RagCache
    from ragcache.providers.openai.backend import OpenAIBackend
    from ragcache.semantic import SemanticCache
    from ragcache.testing import HashingEmbedder

    sem = SemanticCache(None, embedder=HashingEmbedder())
    client = openai.OpenAI(base_url=url + "/v1", api_key="local", max_retries=0)
    extras = [None, {"stop": ["e"]}, {"response_format": {"type": "text"}}, {"seed": 7}]
    rags = [RagCache(OpenAIBackend(client, "tiny-llama", extra=e, stream=False), semantic=sem, max_new_tokens=4,
                     cache_truncated=True) for e in extras]
    assert len({r.backend.model_id for r in rags}) == len(extras)
    for r in rags:
        assert r.answer("How do I adjust the brake cable?", ["Use a 5 mm hex key."]).layer != "semantic"
    for r in rags:  # each one's repeat is its own hit
        assert r.answer("How do I adjust the brake cable?", ["Use a 5 mm hex key."]).layer == "semantic"


def test_llamaindex_llm_request_fields_are_in_the_partition():
    li = pytest.importorskip("llama_index.query_engine.ragcache.backend")
    OpenAILike = pytest.importorskip("llama_index.llms.openai_like").OpenAILike

    def llm(**kw):
        return OpenAILike(model="tiny-llama", api_base="http://127.0.0.1:9/v1", api_key="x", max_tokens=4, **kw)

    plain = li.LlamaIndexBackend(llm())
    shaped = [li.LlamaIndexBackend(llm(additional_kwargs=kw)) for kw in
              ({"response_format": {"type": "json_object"}}, {"thinking": {"type": "enabled", "budget_tokens": 1024}},
               {"tool_choice": "none"})]
    keys = [repr(b.params) for b in (plain, *shaped)]
    assert len(set(keys)) == 4 and "additional_kwargs" not in plain.params


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_context_overflow_in_the_apis_words(url, ac, stream):
    """A prompt that fits by its blocks' count but not with the chat template's tokens: the engine's
    error comes back in the API's words (no engine knobs such as top-k or max_new_tokens)."""
    text = "brake cable adjust " * 300
    n = ac.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": text}]).input_tokens
    body = {"model": MODEL, "max_tokens": 2048 - n, "messages": [{"role": "user", "content": text}]}
    # streamed or not, the prompt is refused before any event goes out (prefill runs before the headers,
    # which carry its numbers), with the API's 400 as for a prompt over the limit by its blocks' count
    r = httpx.post(f"{url}/v1/messages", json={**body, "stream": stream})
    msg = r.json()["error"]["message"]
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert "prompt is too long" in msg and "top-k" not in msg and "max_new_tokens" not in msg
