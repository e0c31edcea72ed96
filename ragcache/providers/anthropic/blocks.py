"""A Messages API request as a flat list of cacheable blocks, in prefix order.

Anthropic builds the cache prefix in the order tools -> system -> messages, and a
``cache_control`` breakpoint caches everything up to and including its block.
:func:`flatten_request` turns a ``messages.create`` body into that block list
(each tool is one block; a string ``system`` or string message content is one
text block), validating its shape; :func:`prefix_hashes` chains a sha256 over
the blocks so that ``hashes[i]`` identifies the exact prefix ``blocks[:i + 1]``.
The client adapter and the local server share this module, so both sides agree
on block positions (for the 20-block lookback) and prefix identity.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ragcache.hashing import canonical_json

MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
"""A breakpoint at block b checks for cache entries at blocks b, b-1, ..., b-20."""
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}

Section = Literal["tools", "system", "messages"]


MARKER_TYPES = frozenset({"text", "image", "document", "search_result", "tool_use", "tool_result"})
"""Message content block types that may carry ``cache_control``: the ones Anthropic's prompt-caching
guide lists as cacheable ("What can be cached": text in user and assistant turns, images and
documents, tool use and tool results; search results with their ``cache_control`` field). ragcache
places a marker on no other message block (an unknown or future type included: when in doubt the
marker moves to the nearest earlier block that may carry one, which caches a slightly shorter prefix
and never makes the API refuse the request)."""

NOT_CACHEABLE_TYPES = frozenset({
    "thinking", "redacted_thinking",  # "Thinking blocks cannot be cached directly with cache_control"
    "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
    "bash_code_execution_tool_result", "text_editor_code_execution_tool_result", "tool_search_tool_result",
    "mcp_tool_use", "mcp_tool_result", "container_upload",  # server-side tool turns: the API refuses a marker
})
"""Message block types the API refuses ``cache_control`` on (a 400, which ragcache's local server
answers too): thinking blocks and the blocks of server-run tools. Empty text blocks and the
code-execution tool blocks of :func:`carries_marker` are refused as well."""


class RequestError(ValueError):
    """A malformed request (the server answers it with a 400 invalid_request_error)."""


class PromptCacheWarning(UserWarning):
    """A request paid for a cache write (or nothing) where a cache read was expected, or
    breakpoints asked for could not all be kept."""


@dataclass(frozen=True, slots=True)
class FlatBlock:
    """One cacheable block: ``index`` in prefix order, its ``section``, ``path``
    into the request (``("tools", i)``, ``("system", i)``, ``("messages", m, j)``),
    the message ``role``, block ``type``, the ``text`` whose tokens it costs, its
    canonical ``key`` (the block without ``cache_control``) and the marker."""

    index: int
    section: Section
    path: tuple[Any, ...]
    role: str | None
    type: str
    text: str
    key: str
    cache_control: Mapping[str, Any] | None
    markable: bool = True

    @property
    def where(self) -> str:
        """Human-readable location, e.g. ``messages[2].content[0]``."""
        if self.section == "messages":
            return f"messages[{self.path[1]}].content[{self.path[2]}]"
        return f"{self.section}[{self.path[1]}]"

    @property
    def ttl(self) -> str | None:
        return None if self.cache_control is None else str(self.cache_control.get("ttl", "5m"))


def is_empty_text(block: Mapping[str, Any]) -> bool:
    """A text block with no visible text (empty or whitespace only): never given a marker."""
    return block.get("type") == "text" and not str(block.get("text", "")).strip()


def code_execution_tool_ids(messages: Any) -> frozenset[str]:
    """Ids of the ``tool_use`` blocks called by code execution (programmatic tool calling: a
    ``caller`` whose ``type`` starts with ``code_execution``). ``messages``: Messages API message
    dicts, or any objects with a ``content`` attribute (LangChain messages)."""
    ids = set()
    for m in messages or []:
        content = m.get("content") if isinstance(m, Mapping) else getattr(m, "content", None)
        for b in content if isinstance(content, list) else []:
            caller = b.get("caller") if isinstance(b, Mapping) and b.get("type") == "tool_use" else None
            if isinstance(caller, Mapping) and str(caller.get("type", "")).startswith("code_execution") and b.get("id"):
                ids.add(str(b["id"]))
    return frozenset(ids)


def carries_marker(block: Mapping[str, Any], code_execution_ids: frozenset[str] = frozenset()) -> bool:
    """Whether a ``cache_control`` marker may go on this message content block: one of
    :data:`MARKER_TYPES` (so never a thinking block, a ``server_tool_use`` block or a server tool's
    result), not an empty text block, and not a ``tool_use`` / ``tool_result`` block of a tool
    called by code execution (the API answers 400: "Tool use result ... called by code execution
    cannot have cache_control. These blocks are not rendered in Claude's context"; Anthropic's
    programmatic tool calling docs, and langchain-anthropic's fix for the same error)."""
    kind = block.get("type")
    if kind not in MARKER_TYPES or is_empty_text(block):
        return False
    if kind == "tool_use":
        return str(block.get("id")) not in code_execution_ids
    if kind == "tool_result":
        return str(block.get("tool_use_id")) not in code_execution_ids
    return True


def cacheable(block: FlatBlock) -> bool:
    """Whether a ``cache_control`` marker may go on this block: a tool definition, a non-empty
    system text block, or a message block that :func:`carries_marker` accepts."""
    if block.section == "tools":
        return True
    return block.markable and block.type in MARKER_TYPES and not (block.type == "text" and not block.text.strip())


def nearest_cacheable(blocks: list[FlatBlock], index: int | None) -> int | None:
    """The nearest block at or before ``index`` that may carry a marker (a marker there caches
    the same prefix minus the skipped blocks), or ``None`` when there is none."""
    if index is None:
        return None
    i = min(index, len(blocks) - 1)
    while i >= 0 and not cacheable(blocks[i]):
        i -= 1
    return i if i >= 0 else None


def check_cache_control(cc: Any, where: str) -> Mapping[str, Any] | None:
    """Validate a ``cache_control`` object (``{"type": "ephemeral", "ttl"?: "5m"|"1h"}``); None passes.

    Raises:
        RequestError: another type, an unknown TTL or an extra key.
    """
    if cc is None:
        return None
    if not isinstance(cc, Mapping) or cc.get("type") != "ephemeral":
        raise RequestError(f"{where}.cache_control: type must be 'ephemeral'")
    ttl = cc.get("ttl", "5m")
    if ttl not in TTL_SECONDS:
        raise RequestError(f"{where}.cache_control.ttl: must be '5m' or '1h', got {ttl!r}")
    extra = set(cc) - {"type", "ttl"}
    if extra:
        raise RequestError(f"{where}.cache_control.{sorted(extra)[0]}: Extra inputs are not permitted")
    return dict(cc)


def block_text(block: Mapping[str, Any]) -> str:
    """The text a block costs in tokens: its text, a tool's or tool call's JSON, a
    tool result's content; other blocks (images, documents) as canonical JSON."""
    t = block.get("type")
    if t == "text":
        return block["text"]
    if t == "tool_result":
        c = block.get("content", "")
        if isinstance(c, str):
            return c
        return "\n".join(b.get("text", "") if isinstance(b, Mapping) else str(b) for b in c)
    return canonical_json({k: v for k, v in block.items() if k != "cache_control"})


def _content_blocks(content: Any, where: str) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise RequestError(f"{where}: content must be a non-empty string or a non-empty list of blocks")
    for j, b in enumerate(content):
        if not isinstance(b, Mapping) or not isinstance(b.get("type"), str):
            raise RequestError(f"{where}.{j}: each content block must be an object with a 'type'")
        if b["type"] == "text" and not isinstance(b.get("text"), str):
            raise RequestError(f"{where}.{j}.text: Field required")
        if b["type"] == "text" and b.get("cache_control") is not None and not b["text"]:
            raise RequestError(f"{where}.{j}: cache_control cannot be set for empty text blocks")
    return content


def flatten_request(body: Mapping[str, Any]) -> list[FlatBlock]:
    """Validate the prompt part of a ``messages.create`` body and flatten it.

    Raises:
        RequestError: missing or malformed ``messages`` / ``system`` / ``tools``,
            or a malformed ``cache_control``.
    """
    blocks: list[FlatBlock] = []
    code_ids = code_execution_tool_ids(body.get("messages") if isinstance(body.get("messages"), list) else [])

    def add(section: Section, path: tuple[Any, ...], role: str | None, b: Mapping[str, Any], where: str) -> None:
        cc = check_cache_control(b.get("cache_control"), where)
        bare = {k: v for k, v in b.items() if k != "cache_control"}
        key = canonical_json({"s": section, "r": role, "b": bare})
        text = block_text(b) if section != "tools" else canonical_json(bare)
        markable = section == "tools" or carries_marker(b, code_ids)
        if cc is not None and section == "messages" and b.get("type") in ("tool_use", "tool_result") and not markable:
            tool_id = b.get("id") or b.get("tool_use_id")
            raise RequestError(f"{where}: Tool use result for {tool_id} called by code execution cannot have "
                               "cache_control. These blocks are not rendered in Claude's context.")
        if cc is not None and b.get("type") in NOT_CACHEABLE_TYPES:
            raise RequestError(f"{where}: cache_control cannot be set on a {b['type']} block; put it on an "
                               "earlier text, image, document, tool_use or tool_result block")
        blocks.append(FlatBlock(len(blocks), section, path, role, str(b.get("type", "tool")), text, key, cc, markable))

    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise RequestError("tools: Input should be a valid list")
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping) or not isinstance(t.get("name"), str):
            raise RequestError(f"tools.{i}.name: Field required")
        if t.get("type") in (None, "custom") and not isinstance(t.get("input_schema"), Mapping):
            raise RequestError(f"tools.{i}.input_schema: Field required")
        add("tools", ("tools", i), None, t, f"tools.{i}")
    system = body.get("system")
    if system is not None:
        sys_blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system
        if not isinstance(sys_blocks, list):
            raise RequestError("system: Input should be a valid string or list of text blocks")
        for i, b in enumerate(sys_blocks):
            if not isinstance(b, Mapping) or b.get("type") != "text" or not isinstance(b.get("text"), str):
                raise RequestError(f"system.{i}: system blocks must be text blocks")
            if b.get("cache_control") is not None and not b["text"]:
                raise RequestError(f"system.{i}: cache_control cannot be set for empty text blocks")
            if isinstance(system, str) and not system:
                continue
            add("system", ("system", i), None, b, f"system.{i}")
    messages = body.get("messages")
    if "messages" not in body:
        raise RequestError("messages: Field required")
    if not isinstance(messages, list):
        raise RequestError(f"messages: Input should be a valid list, got {type(messages).__name__}")
    if not messages:
        raise RequestError("messages: List should have at least 1 item after validation, not 0")
    for m, msg in enumerate(messages):
        if not isinstance(msg, Mapping) or msg.get("role") not in ("user", "assistant"):
            raise RequestError(f"messages.{m}.role: Input should be 'user' or 'assistant'")
        if "content" not in msg:
            raise RequestError(f"messages.{m}.content: Field required")
        for j, b in enumerate(_content_blocks(msg["content"], f"messages.{m}.content")):
            add("messages", ("messages", m, j), msg["role"], b, f"messages.{m}.content.{j}")
    return blocks


def check_breakpoints(blocks: list[FlatBlock]) -> None:
    """Enforce the API's breakpoint limits.

    Raises:
        RequestError: more than 4 blocks carry ``cache_control``, or a ``ttl='1h'``
            breakpoint comes after a ``ttl='5m'`` one (longer TTLs must come first).
    """
    marked = [b for b in blocks if b.cache_control is not None]
    if len(marked) > MAX_BREAKPOINTS:
        raise RequestError(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                           f"Found {len(marked)}.")
    seen_5m = None
    for b in marked:
        if b.ttl == "5m" and seen_5m is None:
            seen_5m = b
        elif b.ttl == "1h" and seen_5m is not None:
            raise RequestError(
                f"a ttl='1h' cache_control block ({b.where}) must not come after a ttl='5m' one ({seen_5m.where})"
            )


def thinking_setting(request: Mapping[str, Any]) -> dict[str, Any] | None:
    """The part of a request's ``thinking`` that the prompt cache depends on: ``None`` when thinking is
    off (absent or ``{"type": "disabled"}``), else its ``type`` and ``budget_tokens``. Per Anthropic's
    prompt-caching docs ("What invalidates the cache"), turning thinking on or off or changing its
    budget invalidates the cached messages; tools and system stay cached."""
    t = request.get("thinking")
    if not isinstance(t, Mapping) or t.get("type") in (None, "disabled"):
        return None
    return {k: t[k] for k in ("type", "budget_tokens") if k in t}


def prefix_hashes(model: str, blocks: list[FlatBlock], tool_choice: Any = None) -> list[str]:
    """Chained sha256 per block: ``hashes[i]`` identifies model + ``blocks[:i + 1]``.

    ``tool_choice`` is folded in where the messages start (changing it
    invalidates the cached messages but not tools or system).
    """
    h = hashlib.sha256(b"anthropic-prefix-v1\x00" + model.encode()).hexdigest()
    out = []
    entered_messages = False
    for b in blocks:
        if b.section == "messages" and not entered_messages:
            entered_messages = True
            h = hashlib.sha256(f"{h}|tool_choice|{json.dumps(tool_choice, sort_keys=True)}".encode()).hexdigest()
        key = b.key.encode()
        h = hashlib.sha256(h.encode() + len(key).to_bytes(8, "little") + key).hexdigest()
        out.append(h)
    return out
