"""An Anthropic message as server-sent events, both ways: :class:`SSEParser` reads a Messages API
event stream (text, content blocks with their citations, stop reason, usage) and
:func:`message_events` writes a message as the events the API would send.

The proxy (:mod:`ragcache.server.proxy`) parses upstream's stream with the first and replays a
stored answer with the second; the local server's metrics read streams with the first. The two
agree on the event grammar of the Messages API streaming guide: ``message_start``, per block
``content_block_start`` / ``content_block_delta`` (``text_delta``, ``citations_delta``: one citation
added to the block's ``citations``) / ``content_block_stop``, ``message_delta``, ``message_stop``.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

from ragcache.providers.anthropic.usage import MessageRead, finish_reason

class SSEParser:
    """Incremental parser of an Anthropic event stream: collects the text, the content blocks (text
    blocks with their citations), stop reason and usage. ``feed`` takes decoded bytes in any split."""

    def __init__(self) -> None:
        self._buf = b""
        self.text = ""
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.kinds: list[str] = []  # content block types, in order
        self.blocks: list[dict[str, Any]] = []  # content blocks as the final message holds them
        self.model: str | None = None
        self.error = False
        self.unreplayable = False  # a text block changed by a delta this parser does not rebuild
        self.first_token_at: float | None = None

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk
        while b"\n\n" in self._buf:
            raw, self._buf = self._buf.split(b"\n\n", 1)
            data = b"".join(line[5:].strip() for line in raw.split(b"\n") if line.startswith(b"data:"))
            if data:
                try:
                    self._event(json.loads(data))
                except ValueError:
                    self.error = True

    def _event(self, ev: Mapping[str, Any]) -> None:
        kind = ev.get("type")
        if kind == "message_start":
            self.usage.update(ev.get("message", {}).get("usage") or {})
            self.model = ev.get("message", {}).get("model") or self.model
        elif kind == "content_block_start":
            block = ev.get("content_block") or {}
            self.kinds.append(str(block.get("type")))
            self.blocks.append(copy.deepcopy(dict(block)))
        elif kind == "content_block_delta":
            self._delta(ev.get("index"), ev.get("delta") or {})
        elif kind == "message_delta":
            self.stop_reason = ev.get("delta", {}).get("stop_reason") or self.stop_reason
            self.stop_sequence = ev.get("delta", {}).get("stop_sequence") or self.stop_sequence
            self.usage.update({k: v for k, v in (ev.get("usage") or {}).items() if v is not None})
        elif kind == "error":
            self.error = True

    def _delta(self, index: Any, d: Mapping[str, Any]) -> None:
        i = index if isinstance(index, int) and 0 <= index < len(self.blocks) else len(self.blocks) - 1
        block = self.blocks[i] if i >= 0 else None
        if d.get("type") == "text_delta":
            self.first_token_at = self.first_token_at or time.perf_counter()
            self.text += d.get("text", "")
            if block is not None and block.get("type") == "text":
                block["text"] = block.get("text", "") + d.get("text", "")
        elif d.get("type") == "citations_delta" and block is not None and block.get("type") == "text":
            block["citations"] = [*(block.get("citations") or []), d.get("citation")]
        elif block is not None and block.get("type") == "text":
            self.unreplayable = True

    def read(self) -> MessageRead:
        """What the stream said so far, as :func:`ragcache.providers.anthropic.usage.read_message` reads a
        message: a stream cut before its ``message_delta`` has no stop reason (``incomplete``); an error
        event makes it ``error``; a text block changed by a delta not rebuilt here is not only text."""
        return MessageRead(self.text, "error" if self.error else finish_reason(self.stop_reason), self.stop_reason,
                           self.stop_sequence, not self.unreplayable and all(k == "text" for k in self.kinds),
                           self.model)


def replay_blocks(blocks: Any, text: str) -> list[dict[str, Any]] | None:
    """The content blocks worth storing to replay an answer, or ``None`` when its text is all there
    is (one text block without anything else but empty fields). Only text blocks are ever stored
    (an answer with other blocks is not a text answer)."""
    out = [copy.deepcopy(dict(b)) for b in blocks or [] if isinstance(b, Mapping)]
    if not out or any(b.get("type") != "text" for b in out):
        return None
    plain = len(out) == 1 and all(v in (None, [], "") for k, v in out[0].items() if k not in ("type", "text"))
    return None if plain and out[0].get("text") == text else out


def message_events(message: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(event name, data)`` of a complete message as the Messages API streams it: each text block
    opened empty, its citations as ``citations_delta`` events, its text as one ``text_delta``; the
    stop reason and usage in ``message_delta``. Blocks other than text are sent whole in their
    ``content_block_start``."""
    blocks = list(message.get("content") or [])
    yield "message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                                 "stop_sequence": None}}
    for i, b in enumerate(blocks):
        if b.get("type") != "text":
            yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": dict(b)}
        else:
            start = {k: v for k, v in b.items() if k not in ("text", "citations")}
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {**start, "text": ""}}
            for c in b.get("citations") or []:
                yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "citations_delta", "citation": c}}
            yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                          "delta": {"type": "text_delta", "text": b.get("text", "")}}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": message.get("stop_reason"),
                                                               "stop_sequence": message.get("stop_sequence")},
                            "usage": {"output_tokens": (message.get("usage") or {}).get("output_tokens", 0)}}
    yield "message_stop", {"type": "message_stop"}


__all__ = ["SSEParser", "message_events", "replay_blocks"]
