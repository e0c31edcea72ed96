"""The model behind the name (issue 47, item 4): an answer records the model the response named (the
snapshot behind an alias), and once a backend reports a new snapshot for the alias, the answers of the
old snapshot are misses; the proxy never replays a hit under a stale snapshot, and replays a hit under
the snapshot that wrote it. Through the real ``anthropic`` SDK against the proxy and a local upstream."""

from __future__ import annotations

import pytest

anthropic = pytest.importorskip("anthropic")

from anthropic_doubles import message, message_events, running_upstream  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, StreamingResponse  # noqa: E402

from ragcache.backend import BackendResult, CacheUsage  # noqa: E402
from ragcache.provenance import PROVENANCE_KEY, Provenance, SnapshotBook  # noqa: E402
from ragcache.semantic import SemanticCache  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402
from ragcache.server.proxy import AnthropicProxy  # noqa: E402
from ragcache.testing import HashingEmbedder  # noqa: E402

ALIAS = "claude-sonnet-4-6"
OLD, NEW = "claude-sonnet-4-6-20260101", "claude-sonnet-4-6-20260301"


class Upstream:
    """A Messages API whose alias answers as ``self.snapshot``, and says so in ``model``."""

    def __init__(self):
        self.snapshot = OLD
        self.calls = 0

    async def messages(self, request: Request):
        body = await request.json()
        self.calls += 1
        msg = message(f"answer {self.calls} by {self.snapshot}", model=self.snapshot, msg_id=f"msg_{self.calls}",
                      usage={"input_tokens": 20, "output_tokens": 4})
        if not body.get("stream"):
            return JSONResponse(msg)

        async def events():
            for e in message_events(msg):
                yield e
        return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture()
def proxied():
    up = Upstream()
    with running_upstream(up.messages) as url:
        p = AnthropicProxy(url, semantic=SemanticCache(None, embedder=HashingEmbedder()), api_key="k")
        with running_server(None, app=p.app) as purl:
            yield up, anthropic.Anthropic(base_url=purl, api_key="k", max_retries=0)


def _ask(client, q, stream):
    req = {"model": ALIAS, "max_tokens": 16, "temperature": 0, "messages": [{"role": "user", "content": q}]}
    if stream:
        with client.messages.stream(**{k: v for k, v in req.items() if k != "temperature"},
                                    extra_body={"temperature": 0}) as s:
            m = s.get_final_message()
            return m, s.response.headers["x-ragcache-layer"]
    raw = client.messages.with_raw_response.create(**req)
    return raw.parse(), raw.headers["x-ragcache-layer"]


@pytest.mark.parametrize("stream", [False, True])
def test_answers_of_an_old_snapshot_are_misses_once_the_alias_moves(proxied, stream):
    up, client = proxied
    first, layer = _ask(client, "How long do refunds take?", stream)
    assert layer == "provider" and first.model == OLD and up.calls == 1
    hit, layer = _ask(client, "How long do refunds take?", stream)
    assert layer == "semantic" and hit.model == OLD  # replayed as the snapshot that wrote it
    assert hit.content[0].text == first.content[0].text and up.calls == 1
    up.snapshot = NEW  # the alias moved upstream; the proxy learns it from its next fresh call
    other, _ = _ask(client, "Which cards are accepted?", stream)
    assert other.model == NEW and up.calls == 2
    again, layer = _ask(client, "How long do refunds take?", stream)  # the old snapshot's answer: a miss
    assert layer == "provider" and again.model == NEW and up.calls == 3
    last, layer = _ask(client, "How long do refunds take?", stream)  # the new answer replaced it
    assert layer == "semantic" and last.model == NEW and last.content[0].text == again.content[0].text
    assert up.calls == 3


# ---------------------------------------------------------------- the record
@pytest.mark.parametrize("named,want", [("gpt-4o-2024-08-06", "gpt-4o-2024-08-06"), (None, None), ("", None), (7, None)])
def test_the_provenance_records_the_model_the_response_named(named, want):
    details = {} if named is None else {"model": named}
    prov = Provenance.of(BackendResult("a", "provider", CacheUsage(), details=details), model="openai:gpt-4o")
    assert prov.model == "openai:gpt-4o" and prov.snapshot == want
    assert Provenance.from_metadata({PROVENANCE_KEY: prov.to_json()}) == prov
    assert Provenance.from_metadata({PROVENANCE_KEY: {**prov.to_json(), "snapshot": None}}).snapshot is None


@pytest.mark.parametrize("stored,seen,stale", [
    ("s1", None, False),      # no response named a snapshot yet
    ("s1", "s1", False),      # the same snapshot
    ("s1", "s2", True),       # the alias moved
    (None, "s2", False),      # an answer stored before snapshots were recorded
])
def test_snapshot_book(stored, seen, stale):
    book = SnapshotBook()
    book.observe("openai:gpt-4o", seen)
    book.observe("openai:gpt-4o-mini", "other")  # another alias does not matter
    assert book.stale(Provenance("provider", snapshot=stored), "openai:gpt-4o") is stale
