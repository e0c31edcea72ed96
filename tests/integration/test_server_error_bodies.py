"""Server error bodies: a wrong method or path gets the API's own error body
(never a plain-text page), a non-list ``messages`` is a type error (not "Field required"), and a
``max_tokens`` over the model's limit is named as such, through the real SDKs where they apply."""

import pytest
from starlette.testclient import TestClient

from ragcache import LocalEngine
from ragcache.server.app import create_local_app


@pytest.fixture(scope="module")
def client(tiny_seed1):
    return TestClient(create_local_app(LocalEngine(tiny_seed1, calibration=False)))


@pytest.mark.parametrize("method,path,allow", [("GET", "/v1/messages", "POST"), ("PUT", "/v1/messages/count_tokens", "POST"),
                                               ("DELETE", "/v1/messages", "POST")])
def test_wrong_method_anthropic_body(client, method, path, allow):
    r = client.request(method, path)
    assert r.status_code == 405
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert f"use {allow}" in body["error"]["message"]


@pytest.mark.parametrize("method,path,allow", [("GET", "/v1/chat/completions", "POST"), ("POST", "/v1/models", "GET")])
def test_wrong_method_openai_body(client, method, path, allow):
    r = client.request(method, path, json={})
    assert r.status_code == 405
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and "use " in err["message"] and allow in err["message"]


@pytest.mark.parametrize("path", ["/v1/nope", "/v2/messages", "/"])
def test_unknown_path_is_a_not_found_error(client, path):
    r = client.post(path, json={})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize("messages,words", [("hi", "Input should be a valid list"), ({"role": "user"}, "valid list"),
                                            (5, "valid list"), ([], "at least 1 item")])
def test_messages_of_the_wrong_type(client, messages, words):
    r = client.post("/v1/messages", json={"model": "tiny-llama", "max_tokens": 5, "messages": messages})
    assert r.status_code == 400 and words in r.json()["error"]["message"]
    assert "Field required" not in r.json()["error"]["message"]


def test_missing_messages_is_field_required(client):
    r = client.post("/v1/messages", json={"model": "tiny-llama", "max_tokens": 5})
    assert r.status_code == 400 and r.json()["error"]["message"] == "messages: Field required"


def test_max_tokens_over_the_limit_names_it(tiny_seed1):
    import anthropic

    from ragcache.server.app import running_server

    with running_server(LocalEngine(tiny_seed1, calibration=False)) as url, \
            anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as sdk:
        for max_tokens in (2049, 4096, 20_000):  # the tiny model: 2048 tokens; the SDK itself refuses far larger
            with pytest.raises(anthropic.BadRequestError, match=rf"max_tokens: {max_tokens} > \d+, which is the maximum"):
                sdk.messages.create(model="tiny-llama", max_tokens=max_tokens, messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("content", ["\u0000\u001b", "\u0007\u0000", " \u200b "])
def test_control_only_questions_are_refused_by_both_apis(client, content):
    r = client.post("/v1/chat/completions", json={"model": "tiny-llama", "messages": [{"role": "user", "content": content}]})
    assert r.status_code == 400 and "empty" in r.json()["error"]["message"]
    r = client.post("/v1/chat/completions", json={"model": "tiny-llama", "messages": [
        {"role": "user", "content": [{"type": "text", "text": content}]}]})
    assert r.status_code == 400
    r = client.post("/v1/messages", json={"model": "tiny-llama", "max_tokens": 5,
                                          "messages": [{"role": "user", "content": content}]})
    assert r.status_code == 400 and "non-whitespace" in r.json()["error"]["message"]
