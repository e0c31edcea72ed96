"""Checks on untrusted text before it reaches a tokenizer, an embedder or a store.

A Python ``str`` may hold code points that have no UTF-8 encoding (lone surrogates such as
``"\\ud800"``, left by a bad decode with ``errors="surrogateescape"``): tokenizers and SQLite then
fail deep inside with a message about their own types. A question made only of control characters
(``"\\0\\0\\0"``) is as empty as a blank one. These checks name the problem and the fix instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

_SURROGATE = re.compile("[\ud800-\udfff]")
_INVISIBLE = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202f\u2060\ufeff]+")


@runtime_checkable
class TextBlock(Protocol):
    """A block of a message that carries its text (:class:`ragcache.prompt.segments.Segment`)."""

    text: str


def check_encodable(value: Any, what: str) -> None:
    """Raise ``ValueError`` when a str (or the text of nested blocks / dicts) holds a lone surrogate.

    Args:
        value: a str, a mapping with a ``"text"`` entry, a :class:`TextBlock` (a Segment), a sequence of those,
            or anything else (ignored).
        what: the argument's name, for the message.

    Raises:
        ValueError: names the position of the first lone surrogate and how to fix the decode.
    """
    if isinstance(value, str):
        m = _SURROGATE.search(value)
        if m is not None:
            raise ValueError(f"{what} holds a lone surrogate (U+{ord(m.group()):04X}) at character {m.start()}: it has "
                             "no UTF-8 encoding; decode the text with errors='replace' (or fix its source)")
    elif isinstance(value, Mapping):
        check_encodable(value.get("text"), what)
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        for j, block in enumerate(value):
            check_encodable(block, f"{what}[{j}]")
    elif isinstance(value, TextBlock):  # a Segment
        check_encodable(value.text, what)


def is_blank(text: str) -> bool:
    """True when ``text`` holds nothing visible: whitespace, control or zero-width characters only."""
    return not _INVISIBLE.sub("", text)


def checked_question(question: Any, *, hint: str = "ask something") -> str:
    """``question`` itself when it is a str with visible text and a UTF-8 encoding.

    Raises:
        TypeError: not a str. ValueError: blank (whitespace / control characters only), or a lone surrogate.
    """
    if not isinstance(question, str):
        raise TypeError(f"question must be a str, got {type(question).__name__}")
    if is_blank(question):
        raise ValueError(f"question is empty (only whitespace or control characters): {hint}")
    check_encodable(question, "question")
    return question
