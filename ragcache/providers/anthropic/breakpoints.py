"""Where to put ``cache_control`` breakpoints, and building a cached request from a layout.

Rules (Anthropic prompt caching): at most 4 breakpoints per request, counting
the caller's own; a breakpoint caches the prefix tools -> system -> messages up
to its block; a later request finds an entry only within 20 blocks before its
own breakpoint; a prefix shorter than the model's minimum is not cached at all
(silently); ``ttl="1h"`` breakpoints must precede ``ttl="5m"`` ones.

Candidates: the last stable block (the last document, else the last history
block, else system or tools), the last system block, the last history block, a
marker every 20 blocks inside long stable runs (so a changed tail still finds an
earlier entry within the lookback), the last tool, plus the caller's own
markers. A request-level ``cache_control`` (automatic caching: the API puts it on
the last cacheable block) takes one of the 4 slots, so 3 are left for block markers.
A candidate whose prefix is below the minimum is not spent; the plan records it as
skipped with the reason. Empty (or whitespace-only) text blocks
and thinking blocks never carry a marker: it goes on the nearest cacheable
block before them. When more than 4 remain, the ones that pay are kept: the last
marker of each class first (system, tools, stable history, the stable part of the
final message, lookback, then anything after the stable part such as the
question), then second markers of a class in the same order; a caller's marker
taken off is reported (``CachedRequest.dropped``, a note and a warning). Functions here
copy their inputs and never mutate the caller's objects.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ragcache.prompt.layout import PromptLayout, render_document
from ragcache.providers.anthropic.blocks import (LOOKBACK_BLOCKS, MAX_BREAKPOINTS, FlatBlock, PromptCacheWarning, carries_marker,
                                                 check_cache_control, code_execution_tool_ids, flatten_request,
                                                 is_empty_text, nearest_cacheable, prefix_hashes)
from ragcache.providers.anthropic.pricing import min_cacheable_tokens

TTL = Literal["5m", "1h"]
TokenCounter = Callable[[str], int]
PlacementPolicy = Callable[[str, str, str], "str | None"]
"""``(position class, prefix hash, ttl) -> reason or None``: whether a ragcache breakpoint candidate is
placed (``None``) or skipped with a reason (:meth:`ragcache.providers.anthropic.ledger.WriteLedger.skip`)."""


def estimate_tokens(text: str) -> int:
    """Rough token count for Claude models without a tokenizer: one token per 3.5
    UTF-8 bytes, rounded up. Pass an exact ``token_counter`` where one exists."""
    return math.ceil(len(text.encode("utf-8")) / 3.5)


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """A breakpoint: block ``index``, ``where`` in the request, ``ttl``, the prefix
    length in tokens up to and including its block, ``origin`` ("ragcache" or
    "caller"), ``role`` (last-stable, system, history, lookback, tools, caller) and
    ``position``, the class of its place (system, tools, history, last-stable,
    lookback, volatile: how the budget ranks it and the write ledger tracks it)."""

    index: int
    where: str
    ttl: str
    prefix_tokens: int
    origin: str
    role: str
    position: str = ""


@dataclass(frozen=True, slots=True)
class SkippedBreakpoint:
    """A candidate breakpoint that was not spent and why (``below-minimum``, ``budget``,
    ``write-only``: its class's cache writes were not read, :mod:`ragcache.providers.anthropic.ledger`);
    ``origin`` "caller" for a marker the caller set and ragcache took off (over the limit)."""

    index: int
    where: str
    role: str
    prefix_tokens: int
    reason: str
    detail: str
    origin: str = "ragcache"


@dataclass(slots=True)
class CachedRequest:
    """``messages.create`` keyword arguments plus what the adapter decided:
    ``placed`` / ``skipped`` breakpoints, ``notes``, the flat ``blocks``, each
    block's token count (as counted by the adapter) and chained prefix ``hashes``."""

    kwargs: dict[str, Any]
    placed: list[Breakpoint]
    skipped: list[SkippedBreakpoint]
    notes: list[str]
    blocks: list[FlatBlock]
    block_tokens: list[int]
    hashes: list[str]
    minimum: int
    model: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def dropped(self) -> list[SkippedBreakpoint]:
        """The caller's own markers taken off to stay within 4 breakpoints."""
        return [s for s in self.skipped if s.origin == "caller"]

    @property
    def cacheable(self) -> bool:
        """Whether any breakpoint was placed (caching can happen at all)."""
        return bool(self.placed)


def _set_marker(kwargs: dict[str, Any], path: tuple[Any, ...], cc: dict[str, str] | None) -> None:
    if path[0] == "tools":
        target = kwargs["tools"][path[1]]
    elif path[0] == "system":
        if isinstance(kwargs["system"], str):
            kwargs["system"] = [{"type": "text", "text": kwargs["system"]}]
        target = kwargs["system"][path[1]]
    else:
        msg = kwargs["messages"][path[1]]
        if isinstance(msg["content"], str):
            msg["content"] = [{"type": "text", "text": msg["content"]}]
        target = msg["content"][path[2]]
    if cc is None:
        target.pop("cache_control", None)
    else:
        target["cache_control"] = cc


_RANK = {"system": 0, "tools": 1, "history": 2, "last-stable": 3, "lookback": 4, "volatile": 5}
"""What a marker is worth, by where it sits (lower first): system and tools repeat on every
request, stable history on every later turn of the conversation, the last document when the
same documents come again, lookback markers only for long stable runs, and a marker after
the stable part (the question) only for an identical request."""


def _move_empty_markers(kwargs: dict[str, Any]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Take caller markers off blocks that cannot carry them (empty text, thinking, server tool and
    code-execution tool blocks: the API rejects them, :func:`~ragcache.providers.anthropic.blocks.carries_marker`);
    return (path, marker)."""
    moved: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    code_ids = code_execution_tool_ids(kwargs.get("messages") or [])
    system = kwargs.get("system")
    if isinstance(system, list):
        for i, b in enumerate(system):
            if isinstance(b, dict) and b.get("cache_control") is not None and is_empty_text(b):
                moved.append((("system", i), b.pop("cache_control")))
    for m, msg in enumerate(kwargs.get("messages") or []):
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list):
            for j, b in enumerate(content):
                if isinstance(b, dict) and b.get("cache_control") is not None and not carries_marker(b, code_ids):
                    moved.append((("messages", m, j), b.pop("cache_control")))
    return moved


def _what(block: Any) -> str:
    if block.type == "text":
        return "empty text block"
    return f"code-execution {block.type} block" if block.type in ("tool_use", "tool_result") else f"{block.type} block"


def add_breakpoints(
    request: Mapping[str, Any],
    *,
    model: str | None = None,
    stable_end: int | None = None,
    ttl: TTL = "5m",
    prefix_ttl: TTL | None = None,
    min_tokens: Mapping[str, int] | int | None = None,
    token_counter: TokenCounter | None = None,
    warn: bool = True,
    policy: PlacementPolicy | None = None,
) -> CachedRequest:
    """Place breakpoints on a copy of a ``messages.create`` body.

    Markers never go on empty (or whitespace-only) text blocks or thinking blocks: each
    goes on the nearest cacheable block before it, and a caller's marker on an empty block
    is moved the same way. When the caller's markers and ragcache's exceed 4, the ones that
    pay are kept: the last marker of each class (system, tools, stable history, the stable
    part of the final message, lookback, anything after it such as the question) before a
    second marker of any class; the caller's markers taken off are listed in :attr:`CachedRequest.dropped`, in ``notes``, and (``warn=True``)
    in a :class:`~ragcache.providers.anthropic.blocks.PromptCacheWarning`. Every marker the
    request will carry is counted: the caller's on tools, system and message blocks, and a
    request-level ``cache_control`` (Anthropic's automatic caching), which the API places on the
    last cacheable block and which takes one slot (a note says so; a "1h" one raises the TTL of
    every marker before it, as the API orders TTLs).

    Args:
        request: the body (``model``, ``system``, ``tools``, ``messages``, ...). Not mutated.
        stable_end: flat index of the last block that repeats across requests;
            default: the block before the last block of the final message.
        ttl: TTL of the markers placed; ``prefix_ttl`` for tools / system markers
            (for example "1h" for a system prompt shared all day).
        min_tokens: overrides of the per-model minimum cacheable length.
        token_counter: tokens of a block's text; default :func:`estimate_tokens`.
        policy: asked for each of ragcache's candidates that would be placed (:data:`PlacementPolicy`;
            :class:`~ragcache.providers.anthropic.ledger.WriteLedger` skips a class whose writes go
            unread); a skipped candidate is in ``skipped`` (reason ``write-only``) and ``notes``.

    Raises:
        ValueError: malformed request (see :func:`ragcache.providers.anthropic.blocks.flatten_request`;
            a malformed request-level ``cache_control`` too) or a TTL other than "5m" / "1h".

    Why one function: the placement is one pass over the flattened blocks that keeps the running
    candidate set, the 4-marker budget and the 20-block lookback together (the rules above, in order).
    """
    for t in (ttl, prefix_ttl):
        if t not in ("5m", "1h", None):
            raise ValueError(f"ttl must be '5m' or '1h', got {t!r}")
    kwargs = copy.deepcopy(dict(request))
    model = model or kwargs.get("model") or ""
    count = token_counter or estimate_tokens
    notes: list[str] = []
    auto = check_cache_control(kwargs.get("cache_control"), "cache_control")  # automatic caching: one slot
    budget = MAX_BREAKPOINTS - (auto is not None)
    moved = _move_empty_markers(kwargs)
    blocks = flatten_request(kwargs)
    if moved:
        by_path = {b.path: b.index for b in blocks}
        for path, cc in moved:
            where = blocks[by_path[path]].where
            j = nearest_cacheable(blocks, by_path[path])
            if j is None:
                notes.append(f"caller breakpoint on the {_what(blocks[by_path[path]])} {where} removed (no earlier "
                             "block to carry it)")
                continue
            if blocks[j].cache_control is None:
                _set_marker(kwargs, blocks[j].path, dict(cc))
            notes.append(f"caller breakpoint on the {_what(blocks[by_path[path]])} {where} moved to {blocks[j].where}")
        blocks = flatten_request(kwargs)
    toks = [int(count(b.text)) for b in blocks]
    hashes = prefix_hashes(model, blocks, kwargs.get("tool_choice"))  # markers are no part of a prefix's identity
    cum, total = [], 0
    for n in toks:
        total += n
        cum.append(total)
    minimum = min_cacheable_tokens(model, min_tokens)
    last_msg = max((b.path[1] for b in blocks if b.section == "messages"), default=None)
    if stable_end is None:
        final = [b.index for b in blocks if b.section == "messages" and b.path[1] == last_msg]
        stable_end = final[-1] - 1 if final else len(blocks) - 1
    final_msg = blocks[-1].path[1] if blocks and blocks[-1].section == "messages" else None

    def position_class(i: int) -> str:
        b = blocks[i]
        if b.section != "messages":
            return b.section
        if b.path[1] != final_msg:
            return "history"
        return "last-stable" if i <= stable_end else "volatile"

    def last_of(pred: Callable[[FlatBlock], bool]) -> int | None:
        return max((b.index for b in blocks if b.index <= stable_end and pred(b)), default=None)

    caller = [b.index for b in blocks if b.cache_control is not None]
    entries: dict[int, tuple[str, str]] = {i: ("caller", position_class(i)) for i in caller}  # idx -> (role, class)
    skipped: list[SkippedBreakpoint] = []
    candidates: list[tuple[int | None, str]] = [
        (stable_end if stable_end >= 0 else None, "last-stable"),
        (last_of(lambda b: b.section == "system"), "system"),
        (last_of(lambda b: b.section == "messages" and b.path[1] != final_msg), "history"),
    ]
    anchors = sorted({i for i, _ in candidates if i is not None} | set(caller))
    prev = -1
    for a in anchors:
        while a - prev > LOOKBACK_BLOCKS:
            prev += LOOKBACK_BLOCKS
            candidates.append((prev, "lookback"))
        prev = a
    candidates.append((last_of(lambda b: b.section == "tools"), "tools"))
    seen: set[int] = set()
    for idx, role in candidates:
        idx = nearest_cacheable(blocks, idx)  # empty / thinking blocks never carry a marker
        if idx is None or idx in entries or idx in seen:
            continue
        seen.add(idx)
        b = blocks[idx]
        klass = role if role != "last-stable" else position_class(idx)
        t = prefix_ttl if (prefix_ttl and b.section in ("tools", "system")) else ttl
        if cum[idx] < minimum:
            skipped.append(SkippedBreakpoint(idx, b.where, role, cum[idx], "below-minimum",
                                             f"prefix up to {b.where} is {cum[idx]} tokens, below the minimum "
                                             f"{minimum} for {model or 'this model'}: not cached, marker not spent"))
        elif policy is not None and (why := policy(klass, hashes[idx], t)) is not None:
            skipped.append(SkippedBreakpoint(idx, b.where, role, cum[idx], "write-only", f"{b.where}: {why}"))
        else:
            entries[idx] = (role, klass)
    # Keep the markers that pay: one per class first (a second marker in the same class mostly
    # caches what the first does), by class rank, the later block first; below-minimum ones last.
    occurrence: dict[int, int] = {}
    for klass in {k for _, k in entries.values()}:
        for n, i in enumerate(sorted((i for i in entries if entries[i][1] == klass), reverse=True)):
            occurrence[i] = n
    ranked = sorted(entries, key=lambda i: (cum[i] < minimum, occurrence[i], _RANK[entries[i][1]], -i))
    chosen = {i: entries[i][0] for i in ranked[:budget]}
    limit = f"at most {MAX_BREAKPOINTS}" + (", one of them the request-level cache_control" if auto else "")
    dropped: list[SkippedBreakpoint] = []
    for i in sorted(ranked[budget:]):
        role, klass = entries[i]
        b = blocks[i]
        if role == "caller":
            _set_marker(kwargs, b.path, None)
            dropped.append(SkippedBreakpoint(i, b.where, "caller", cum[i], "budget",
                                             f"caller breakpoint on {b.where} ({klass}) dropped: {limit} "
                                             "breakpoints, and the ones kept pay more",
                                             origin="caller"))
        else:
            skipped.append(SkippedBreakpoint(i, b.where, role, cum[i], "budget",
                                             f"no breakpoint left for {b.where} ({limit})"))
    placed: list[Breakpoint] = []
    for idx in sorted(chosen):
        b = blocks[idx]
        if chosen[idx] == "caller":
            t = b.ttl or "5m"
        else:
            t = prefix_ttl if (prefix_ttl and b.section in ("tools", "system")) else ttl
        placed.append(Breakpoint(idx, b.where, t, cum[idx], "caller" if chosen[idx] == "caller" else "ragcache",
                                 chosen[idx], entries[idx][1]))
    last_1h = len(placed) if auto is not None and auto.get("ttl") == "1h" else \
        max((i for i, p in enumerate(placed) if p.ttl == "1h"), default=-1)
    for i in range(last_1h):
        if placed[i].ttl == "5m":
            notes.append(f"{placed[i].where}: ttl raised to '1h' (a '1h' breakpoint may not follow a '5m' one)")
            placed[i] = Breakpoint(placed[i].index, placed[i].where, "1h", placed[i].prefix_tokens,
                                   placed[i].origin, placed[i].role, placed[i].position)
    for p in placed:
        _set_marker(kwargs, blocks[p.index].path, {"type": "ephemeral", "ttl": p.ttl} if p.ttl == "1h"
                    else {"type": "ephemeral"})
    if auto is not None:
        notes.insert(0, f"the request-level cache_control (automatic caching, ttl {auto.get('ttl', '5m')}) takes one "
                        f"of the {MAX_BREAKPOINTS} breakpoint slots (the API puts it on the last cacheable block): "
                        f"{len(placed)} block marker(s) kept, {budget} at most")
    if dropped:
        msg = (f"{len(dropped)} caller breakpoint(s) dropped to stay within {MAX_BREAKPOINTS}"
               + (" (one is the request-level cache_control)" if auto is not None else "") + ": "
               + ", ".join(d.where for d in dropped) + "; kept " + ", ".join(f"{p.where} ({p.role})" for p in placed))
        notes.append(msg)
        if warn:
            warnings.warn(msg, PromptCacheWarning, stacklevel=3)
    notes += [s.detail for s in skipped if s.reason in ("below-minimum", "write-only")]
    blocks = flatten_request(kwargs)
    tool_choice = kwargs.get("tool_choice")
    return CachedRequest(kwargs, placed, skipped + dropped, notes, blocks, toks,
                         prefix_hashes(model, blocks, tool_choice), minimum, model)


def layout_request(
    layout: PromptLayout,
    *,
    model: str,
    max_tokens: int,
    temperature: float | None = None,
    ttl: TTL = "5m",
    prefix_ttl: TTL | None = None,
    min_tokens: Mapping[str, int] | int | None = None,
    token_counter: TokenCounter | None = None,
    extra: Mapping[str, Any] | None = None,
    warn: bool = True,
    policy: PlacementPolicy | None = None,
) -> CachedRequest:
    """``messages.create`` keyword arguments for a layout, with breakpoints.

    Shape: ``tools`` (canonical key order), ``system`` as one text block, the
    history messages, then one user message holding one text block per
    document, the volatile text and the question last. ``extra`` adds other
    keyword arguments (``stop_sequences``, ``metadata``, ...), copied.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    kwargs: dict[str, Any] = {"model": model, "max_tokens": int(max_tokens)}
    if layout.tools:
        kwargs["tools"] = layout.tools
    if layout.system_text:
        kwargs["system"] = [{"type": "text", "text": layout.system_text}]
    messages = layout.history
    content = [{"type": "text", "text": render_document(d)} for d in layout.documents]
    if layout.volatile:
        content.append({"type": "text", "text": layout.volatile})
    content.append({"type": "text", "text": layout.question})
    messages.append({"role": "user", "content": content})
    kwargs["messages"] = messages
    if temperature is not None:
        kwargs["temperature"] = float(temperature)
    kwargs.update(copy.deepcopy(dict(extra or {})))
    n_before = len(flatten_request(kwargs)) - len(content)
    stable_end = n_before + len(layout.documents) - 1
    req = add_breakpoints(kwargs, model=model, stable_end=stable_end, ttl=ttl, prefix_ttl=prefix_ttl,
                          min_tokens=min_tokens, token_counter=token_counter, warn=warn, policy=policy)
    req.meta["documents"] = [n_before + i for i in range(len(layout.documents))]
    return req
