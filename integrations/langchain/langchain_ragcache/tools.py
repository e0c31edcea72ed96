"""Prompted tool calling for local models: tools rendered into the system text, calls parsed from the answer.

A local model has no tool-calling API or constrained decoding. :func:`tools_system_text`
describes the bound tools in the system prompt in the ``<tools>`` / ``<tool_call>``
format SmolLM2-Instruct and other ChatML models are trained on, and
:func:`parse_tool_calls` reads ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
(or a bare JSON object / list of them) back into LangChain tool calls. Small models
(135M parameters) follow the format unreliably; the parser reports what it cannot read
as ``invalid_tool_calls`` instead of guessing.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages.tool import InvalidToolCall, ToolCall, invalid_tool_call, tool_call

_CALL_RX = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def normalize_tool_choice(tool_choice: Any, names: Sequence[str]) -> str | None:
    """``None``/"auto", "none", "any"/"required"/True, or a tool name (or ``{"function": {"name"}}``).

    Raises:
        ValueError: an unknown tool name or an unsupported value.
    """
    if tool_choice in (None, "auto", False):
        return None
    if tool_choice in ("any", "required", True):
        return "any"
    if tool_choice == "none":
        return "none"
    if isinstance(tool_choice, Mapping):
        tool_choice = (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
    if isinstance(tool_choice, str) and tool_choice in names:
        return tool_choice
    raise ValueError(
        f"tool_choice {tool_choice!r} is not 'auto', 'any', 'none' or one of the bound tools {list(names)}")


def tools_system_text(tools: Sequence[Mapping[str, Any]], tool_choice: str | None) -> str:
    """System-prompt text that offers ``tools`` (OpenAI function format) to the model."""
    if tool_choice == "none" or not tools:
        return ""
    fns = [t.get("function", t) for t in tools]
    lines = [
        "You can call functions. To call one, answer with only <tool_call>{\"name\": <function name>, "
        "\"arguments\": <JSON object of arguments>}</tool_call>. Otherwise answer normally.",
        "<tools>" + json.dumps(fns, sort_keys=True, ensure_ascii=False) + "</tools>",
    ]
    if tool_choice == "any":
        lines.append("You must call one of these functions.")
    elif tool_choice:
        lines.append(f"You must call the function {tool_choice}.")
    return "\n".join(lines)


def _json_objects(text: str) -> list[Any]:
    dec = json.JSONDecoder()
    out, i = [], 0
    while i < len(text):
        j = min((k for k in (text.find("{", i), text.find("[", i)) if k >= 0), default=-1)
        if j < 0:
            break
        try:
            obj, end = dec.raw_decode(text, j)
        except ValueError:
            i = j + 1
            continue
        out.append(obj)
        i = end
    return out


def parse_tool_calls(text: str, names: Sequence[str]) -> tuple[str, list[ToolCall], list[InvalidToolCall]]:
    """(remaining text, tool calls, invalid tool calls) read from a model's answer."""
    blocks = _CALL_RX.findall(text)
    candidates = blocks or ([text] if text.strip().startswith(("{", "[")) else [])
    calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    for raw in candidates:
        objs = _json_objects(raw)
        flat = [o for obj in objs for o in (obj if isinstance(obj, list) else [obj])]
        if not flat:
            invalid.append(invalid_tool_call(name=None, args=raw, id=_id(), error="no JSON object in the tool call"))
        for o in flat:
            name = o.get("name") if isinstance(o, Mapping) else None
            args = o.get("arguments", o.get("parameters", {})) if isinstance(o, Mapping) else None
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    args = None
            if name in names and isinstance(args, Mapping):
                calls.append(tool_call(name=name, args=dict(args), id=_id()))
            else:
                error = f"not a call of a bound tool {list(names)} with object arguments"
                invalid.append(invalid_tool_call(name=name if isinstance(name, str) else None,
                                                 args=json.dumps(o, default=str), id=_id(), error=error))
    remaining = _CALL_RX.sub("", text).strip() if blocks else ("" if candidates and (calls or invalid) else text)
    return remaining, calls, invalid


def _id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _entry_text(content: Any) -> str:
    """A history entry's text as LangChain's ``message.text`` reads it: a string as it is, else its text
    blocks joined (other blocks, a ``tool_use`` or an image, left out)."""
    if isinstance(content, str):
        return content
    return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content or []
                   if isinstance(b, str) or (isinstance(b, Mapping) and b.get("type") == "text"
                                             and isinstance(b.get("text"), str)))


def tool_history_text(entry: Mapping[str, Any]) -> str | None:
    """Text for a tool call or tool result in the history (the local chat template has no tool role), from the
    message as :func:`langchain_ragcache._keys.to_dicts` maps it: an ai entry's ``tool_calls`` (name and args)
    after its text, a tool entry's ``name``, ``status`` and text; ``None`` for any other entry."""
    if entry.get("role") == "assistant" and "type" not in entry and entry.get("tool_calls"):
        text = _entry_text(entry.get("content"))
        calls = "".join("<tool_call>" + json.dumps({"name": c["name"], "arguments": c["args"]}, sort_keys=True)
                        + "</tool_call>" for c in entry["tool_calls"])
        return (text + "\n" if text else "") + calls
    if entry.get("type") == "tool":
        status = " (error)" if entry.get("status") == "error" else ""
        name, text = entry.get("name") or "", _entry_text(entry.get("content"))
        return f"<tool_response name=\"{name}\"{status}>{text}</tool_response>"
    return None
