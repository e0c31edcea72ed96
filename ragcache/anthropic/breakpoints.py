"""Where to put ``cache_control`` breakpoints, and building a cached request from a layout.

Rules (Anthropic prompt caching): at most 4 breakpoints per request, counting
the caller's own; a breakpoint caches the prefix tools -> system -> messages up
to its block; a later request finds an entry only within 20 blocks before its
own breakpoint; a prefix shorter than the model's minimum is not cached at all
(silently); ``ttl="1h"`` breakpoints must precede ``ttl="5m"`` ones.

Placement, by priority until 4 markers are spent: the last stable block (the
last document, else the last history block, else system or tools), the last
system block, the last history block, a marker every 20 blocks inside long
stable runs (so a changed tail still finds an earlier entry within the
lookback), the last tool. A candidate whose prefix is below the minimum is not
spent; the plan records it as skipped with the reason. Functions here copy
their inputs and never mutate the caller's objects.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ragcache.layout import PromptLayout, render_document
from ragcache.anthropic.blocks import LOOKBACK_BLOCKS, MAX_BREAKPOINTS, FlatBlock, flatten_request, prefix_hashes
from ragcache.anthropic.pricing import min_cacheable_tokens

TTL = Literal["5m", "1h"]
TokenCounter = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    """Rough token count for Claude models without a tokenizer: one token per 3.5
    UTF-8 bytes, rounded up. Pass an exact ``token_counter`` where one exists."""
    return math.ceil(len(text.encode("utf-8")) / 3.5)


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """A breakpoint: block ``index``, ``where`` in the request, ``ttl``, the prefix
    length in tokens up to and including its block, ``origin`` ("ragcache" or
    "caller") and ``role`` (last-stable, system, history, lookback, tools, caller)."""

    index: int
    where: str
    ttl: str
    prefix_tokens: int
    origin: str
    role: str


@dataclass(frozen=True, slots=True)
class SkippedBreakpoint:
    """A candidate breakpoint that was not spent and why (``below-minimum``, ``budget``)."""

    index: int
    where: str
    role: str
    prefix_tokens: int
    reason: str
    detail: str


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


def add_breakpoints(
    request: Mapping[str, Any],
    *,
    model: str | None = None,
    stable_end: int | None = None,
    ttl: TTL = "5m",
    prefix_ttl: TTL | None = None,
    min_tokens: Mapping[str, int] | int | None = None,
    token_counter: TokenCounter | None = None,
) -> CachedRequest:
    """Place breakpoints on a copy of a ``messages.create`` body.

    Args:
        request: the body (``model``, ``system``, ``tools``, ``messages``, ...). Not mutated.
        stable_end: flat index of the last block that repeats across requests;
            default: the block before the last block of the final message.
        ttl: TTL of the markers placed; ``prefix_ttl`` for tools / system markers
            (for example "1h" for a system prompt shared all day).
        min_tokens: overrides of the per-model minimum cacheable length.
        token_counter: tokens of a block's text; default :func:`estimate_tokens`.

    Raises:
        ValueError: malformed request (see :func:`ragcache.anthropic.blocks.flatten_request`)
            or a TTL other than "5m" / "1h".
    """
    for t in (ttl, prefix_ttl):
        if t not in ("5m", "1h", None):
            raise ValueError(f"ttl must be '5m' or '1h', got {t!r}")
    kwargs = copy.deepcopy(dict(request))
    model = model or kwargs.get("model") or ""
    count = token_counter or estimate_tokens
    blocks = flatten_request(kwargs)
    toks = [int(count(b.text)) for b in blocks]
    cum, total = [], 0
    for n in toks:
        total += n
        cum.append(total)
    minimum = min_cacheable_tokens(model, min_tokens)
    notes: list[str] = []
    if stable_end is None:
        last_msg = max((b.path[1] for b in blocks if b.section == "messages"), default=None)
        final = [b.index for b in blocks if b.section == "messages" and b.path[1] == last_msg]
        stable_end = final[-1] - 1 if final else len(blocks) - 1
    caller = [b.index for b in blocks if b.cache_control is not None]
    if len(caller) > MAX_BREAKPOINTS:
        drop = caller[: len(caller) - MAX_BREAKPOINTS]
        for i in drop:
            _set_marker(kwargs, blocks[i].path, None)
        notes.append(f"caller set {len(caller)} breakpoints; kept the last {MAX_BREAKPOINTS}, "
                     f"removed {', '.join(blocks[i].where for i in drop)}")
        caller = caller[-MAX_BREAKPOINTS:]
    chosen: dict[int, str] = {i: "caller" for i in caller}
    skipped: list[SkippedBreakpoint] = []

    def last_of(pred: Callable[[FlatBlock], bool]) -> int | None:
        return max((b.index for b in blocks if b.index <= stable_end and pred(b)), default=None)

    final_msg = blocks[-1].path[1] if blocks and blocks[-1].section == "messages" else None
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
        if idx is None or idx in chosen or idx in seen:
            continue
        seen.add(idx)
        b = blocks[idx]
        if cum[idx] < minimum:
            skipped.append(SkippedBreakpoint(idx, b.where, role, cum[idx], "below-minimum",
                                             f"prefix up to {b.where} is {cum[idx]} tokens, below the minimum "
                                             f"{minimum} for {model or 'this model'}: not cached, marker not spent"))
        elif len(chosen) >= MAX_BREAKPOINTS:
            skipped.append(SkippedBreakpoint(idx, b.where, role, cum[idx], "budget",
                                             f"no breakpoint left for {b.where} (at most {MAX_BREAKPOINTS})"))
        else:
            chosen[idx] = role
    placed: list[Breakpoint] = []
    for idx in sorted(chosen):
        b = blocks[idx]
        if chosen[idx] == "caller":
            t = b.ttl or "5m"
        else:
            t = prefix_ttl if (prefix_ttl and b.section in ("tools", "system")) else ttl
        placed.append(Breakpoint(idx, b.where, t, cum[idx], "caller" if chosen[idx] == "caller" else "ragcache",
                                 chosen[idx]))
    last_1h = max((i for i, p in enumerate(placed) if p.ttl == "1h"), default=-1)
    for i in range(last_1h):
        if placed[i].ttl == "5m":
            notes.append(f"{placed[i].where}: ttl raised to '1h' (a '1h' breakpoint may not follow a '5m' one)")
            placed[i] = Breakpoint(placed[i].index, placed[i].where, "1h", placed[i].prefix_tokens,
                                   placed[i].origin, placed[i].role)
    for p in placed:
        _set_marker(kwargs, blocks[p.index].path, {"type": "ephemeral", "ttl": p.ttl} if p.ttl == "1h"
                    else {"type": "ephemeral"})
    notes += [s.detail for s in skipped if s.reason == "below-minimum"]
    blocks = flatten_request(kwargs)
    tool_choice = kwargs.get("tool_choice")
    return CachedRequest(kwargs, placed, skipped, notes, blocks, toks, prefix_hashes(model, blocks, tool_choice),
                         minimum, model)


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
                          min_tokens=min_tokens, token_counter=token_counter)
    req.meta["documents"] = [n_before + i for i in range(len(layout.documents))]
    return req
