"""The local servers hand the engine one ``EngineRequest`` per call (the messages, budget, temperature,
stop strings and the caller's tenant), through the real openai and anthropic SDKs."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

from engine_doubles import RequestRecordingEngine  # noqa: E402

from ragcache.engine.request import EngineRequest  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402
from ragcache.server.auth import kv_namespace, tenant_of  # noqa: E402

KEYS = ["serve-key-of-tenant-0000", "serve-key-of-tenant-1111"]


pytestmark = pytest.mark.engine("tiny", cls=RequestRecordingEngine, calibration=False)


@pytest.mark.parametrize("share", [False, True])
def test_each_server_call_is_one_engine_request_with_the_callers_tenant(fresh_engine, share):
    with running_server(fresh_engine, keys=KEYS, share_kv_across_namespaces=share) as url:
        for key in KEYS:
            openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0).chat.completions.create(
                model="tiny-llama", max_tokens=3, temperature=0.5, seed=4, stop=["zz"],
                messages=[{"role": "user", "content": "hi"}])
            anthropic.Anthropic(base_url=url, api_key=key, max_retries=0).messages.create(
                model="tiny-llama", max_tokens=2, temperature=0.0, stop_sequences=["yy"],
                messages=[{"role": "user", "content": "hello"}])
    assert len(fresh_engine.handed) == 4 and all(options == {} for _, options in fresh_engine.handed)
    requests = [r for r, _ in fresh_engine.handed]
    assert all(isinstance(r, EngineRequest) for r in requests)
    tenants = [kv_namespace(tenant_of({"x-api-key": k}), share=share) for k in KEYS]
    assert [r.tenant for r in requests] == [tenants[0], tenants[0], tenants[1], tenants[1]]
    assert (tenants[0] is None) is share and (share or tenants[0] != tenants[1])
    oa, an = requests[0], requests[1]
    assert (oa.max_new_tokens, oa.temperature, oa.seed, list(oa.stop)) == (3, 0.5, 4, ["zz"])
    assert (an.max_new_tokens, an.temperature, list(an.stop)) == (2, 0.0, ["yy"])
