"""The rule for sharing KV across tenants, written once (``ragcache.engine.keys.kv_tenant``) and read by
both the engine's KV salt and the local servers' tenant: the two agree on every input."""

from __future__ import annotations

import pytest

from ragcache.engine.keys import DEFAULT_NAMESPACE, kv_salt, kv_tenant
from ragcache.server.auth import ANONYMOUS, kv_namespace, tenant_of

TENANTS = ["acme", "globex", "Acme", "acme ", "", "k:0123456789abcdef", "h:team-1", "default ", "anonymous"]


@pytest.mark.parametrize("tenant", TENANTS)
@pytest.mark.parametrize("share", [False, True])
def test_a_named_tenant_keeps_its_own_kv_unless_shared(tenant, share):
    assert kv_tenant(tenant, share=share) == (None if share else tenant)
    # the engine's salt: the engine's own when shared, the tenant's (never in clear) otherwise
    salt = kv_salt("eng", tenant, share=share)
    assert (salt == "eng") is share
    if not share:
        assert salt.startswith("tenant:") and salt != kv_salt("other", tenant)
        assert not tenant.strip() or tenant.strip() not in salt.removeprefix("tenant:")  # never in clear


@pytest.mark.parametrize("tenant", [None, DEFAULT_NAMESPACE])
@pytest.mark.parametrize("share", [False, True])
def test_the_default_tenant_uses_the_engines_own_kv(tenant, share):
    assert kv_tenant(tenant, share=share) is None
    assert kv_salt("eng", tenant, share=share) == "eng" and kv_salt(None, tenant, share=share) is None


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "secret-one"}, {"authorization": "Bearer secret-two"},
                                     {"authorization": "Basic abc"}])
@pytest.mark.parametrize("share", [False, True])
def test_the_servers_tenant_follows_the_same_rule(headers, share):
    tenant = tenant_of(headers)
    engine_tenant = kv_namespace(tenant, share=share)
    # anonymous callers are the engine's default tenant; everyone else is themselves unless shared
    assert engine_tenant == kv_tenant(DEFAULT_NAMESPACE if tenant == ANONYMOUS else tenant, share=share)
    assert (engine_tenant is None) == (share or tenant == ANONYMOUS)
    # and what the server hands the engine salts the KV as the engine itself would decide
    assert kv_salt("eng", engine_tenant) == ("eng" if engine_tenant is None else kv_salt("eng", tenant))


@pytest.mark.parametrize("bad", [1, b"acme", ["acme"], 2.5])
def test_a_tenant_that_is_not_text_is_refused(bad):
    for call in (lambda: kv_tenant(bad), lambda: kv_salt(None, bad), lambda: kv_tenant(bad, share=True)):
        with pytest.raises(TypeError, match="tenant .*must be a string or None"):
            call()
