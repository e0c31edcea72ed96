"""Who is calling: the serve key check and the tenant a request's cached answers belong to.

One module decides, for the local server and the caching proxy alike:

- **credential**: what the caller sent, ``x-api-key`` (the anthropic SDK) or
  ``Authorization: Bearer ...`` (the openai SDK, and anthropic's ``auth_token``);
- **access** (:class:`ServeKeyMiddleware`): with serve keys configured
  (``RAGCACHE_SERVE_KEY``, one or more comma-separated keys), a request whose credential is
  none of them gets 401 in its API's error shape; keys are compared in constant time
  (:func:`hmac.compare_digest` on their sha256 digests, so the length is not leaked either);
- **tenant** (:func:`tenant_of`): a digest of the credential (never the secret itself), or the
  value of a header the operator names (``RAGCACHE_TENANT_HEADER``, for a gateway that
  authenticates callers and sets it). Everything the servers cache for a caller (semantic answers
  in the proxy, prompt-cache entries and the engine's prefix and chunk KV in the local server,
  :func:`kv_namespace`) is keyed by it, whatever the bind address;
- **bind** (:func:`check_bind`): a server on an address other than loopback refuses to start
  without a serve key unless the operator passes ``--insecure``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from collections.abc import Iterable, Mapping
from typing import Any

from ragcache.engine.keys import DEFAULT_NAMESPACE, kv_tenant

ANONYMOUS = "anonymous"
"""The tenant of callers that send no credential (they share one identity: nobody)."""


def credential(headers: Mapping[str, str]) -> str | None:
    """The caller's credential: the ``x-api-key`` header, else the token of ``Authorization: Bearer``
    (else the whole ``Authorization`` value), else ``None``. ``headers`` is case-insensitive
    (Starlette's ``Headers``) or lower-case keyed."""
    key = headers.get("x-api-key")
    if key:
        return key
    auth = headers.get("authorization") or ""
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return auth or None


def digest(secret: str) -> str:
    """A 16-hex-character sha256 digest of a secret: names a tenant in keys and logs, never reveals it."""
    return hashlib.sha256(secret.encode()).hexdigest()[:16]


def tenant_of(headers: Mapping[str, str], *, tenant_header: str | None = None) -> str:
    """The tenant of a request: ``h:<value>`` of the operator's ``tenant_header`` when one is
    configured, else ``k:<digest of the credential>``, else :data:`ANONYMOUS`.

    Raises:
        PermissionError: ``tenant_header`` is configured and the request does not carry it (a
            request without a tenant is refused rather than pooled with others).
    """
    if tenant_header:
        value = headers.get(tenant_header.lower())
        if not value:
            raise PermissionError(f"missing header {tenant_header!r}: this server keys cached answers by it "
                                  "(RAGCACHE_TENANT_HEADER); send it with every request")
        return "h:" + value
    cred = credential(headers)
    return "k:" + digest(cred) if cred else ANONYMOUS


def kv_namespace(tenant: str, *, share: bool = False) -> str | None:
    """The namespace a local server passes to the engine for a request of ``tenant``
    (:func:`tenant_of`): the tenant itself, which the engine hashes into the request's prefix and
    chunk KV keys (:func:`ragcache.engine.keys.kv_salt`), so one caller's cached tokens and
    time-to-first-token say nothing about what another sent; ``None`` (the engine's own KV) for
    :data:`ANONYMOUS` callers or when the operator opted into ``share``
    (``share_kv_across_namespaces``, which gives that side channel back). The sharing rule is the
    engine's (:func:`ragcache.engine.keys.kv_tenant`); anonymous callers are its default tenant."""
    return kv_tenant(DEFAULT_NAMESPACE if tenant == ANONYMOUS else tenant, share=share)


def parse_keys(raw: str | Iterable[str] | None) -> tuple[str, ...]:
    """Serve keys from ``RAGCACHE_SERVE_KEY`` / ``--key`` (comma-separated) or a list; empty parts dropped.

    Raises:
        ValueError: a key shorter than 16 characters (too easy to guess for a network service).
    """
    if raw is None:
        return ()
    parts = raw.split(",") if isinstance(raw, str) else list(raw)
    keys = tuple(k.strip() for k in parts if k and k.strip())
    short = [k for k in keys if len(k) < 16]
    if short:
        raise ValueError(f"{len(short)} serve key(s) shorter than 16 characters: use long random keys, e.g. "
                         "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`")
    return keys


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.0/8``, ``::1``) or ``localhost``."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keys: tuple[str, ...], *, insecure: bool = False) -> None:
    """Refuse to serve on a non-loopback ``host`` without a serve key.

    Raises:
        ValueError: ``host`` is not loopback, ``keys`` is empty and ``insecure`` is False.
    """
    if keys or insecure or is_loopback(host):
        return
    raise ValueError(f"refusing to serve on {host} without a key: anyone who can reach it could use the model and "
                     "read cached answers. Set RAGCACHE_SERVE_KEY (or --key) to keys callers must send as "
                     "x-api-key or 'Authorization: Bearer', bind to 127.0.0.1, or pass --insecure")


class ServeKeyMiddleware:
    """ASGI middleware: 401 unless the request's :func:`credential` is one of ``keys``.

    ``GET /health`` stays open (liveness probes carry no key). The 401 body is OpenAI's error shape
    under ``/v1/chat/completions`` and ``/v1/models`` when the caller used ``Authorization``, else
    Anthropic's.

    Args:
        app: the ASGI app to guard.
        keys: accepted keys (non-empty).
    Raises:
        ValueError: ``keys`` is empty.
    """

    def __init__(self, app: Any, keys: Iterable[str]) -> None:
        self.app = app
        self._digests = tuple(hashlib.sha256(k.encode()).digest() for k in keys)
        if not self._digests:
            raise ValueError("ServeKeyMiddleware needs at least one key")

    def allowed(self, headers: Mapping[str, str]) -> bool:
        """Constant-time check of the request's credential against every key."""
        cred = credential(headers)
        got = hashlib.sha256((cred or "").encode()).digest()
        ok = False
        for d in self._digests:  # no early exit: the time does not say which key matched
            ok |= hmac.compare_digest(got, d)
        return ok and cred is not None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") == "/health":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        if self.allowed(headers):
            await self.app(scope, receive, send)
            return
        what = "invalid serve key" if credential(headers) else "missing serve key"
        message = (f"{what}: this server requires one of its keys (RAGCACHE_SERVE_KEY) as x-api-key or "
                   "'Authorization: Bearer <key>'")
        openai_shape = str(scope.get("path", "")).startswith("/v1/chat") or (
            "authorization" in headers and "x-api-key" not in headers and "anthropic-version" not in headers)
        body = ({"error": {"message": message, "type": "invalid_request_error", "param": None,
                           "code": "invalid_api_key"}} if openai_shape
                else {"type": "error", "error": {"type": "authentication_error", "message": message}})
        raw = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode()),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": raw})


__all__ = ["ANONYMOUS", "ServeKeyMiddleware", "check_bind", "credential", "digest", "is_loopback", "kv_namespace",
           "parse_keys",
           "tenant_of"]
