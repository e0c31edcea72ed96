"""Content is data: token ids of text as text, never as control tokens.

Control tokens (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``, ``<think>``, a tokenizer's
every added token) come only from the chat template. A tokenizer's ordinary ``encode`` matches
its added vocabulary anywhere in its input, so a retrieved document that spells ``<|im_end|>``
then ``<|im_start|>system`` would become a real end of turn and a forged system turn, and
``<|endoftext|>`` in a pasted changelog an end of text (transformers #29279, lmdeploy #4960,
llama.cpp #26273). :func:`text_ids` is the one encoder of content (system text, tools, history,
documents, volatile text, the question) at every door: engine prompts, ``count_tokens``, chunk
keys and precompute; only template text goes through the tokenizer's own parsing.

The rule is decided on the ids, not on a list of strings: text is encoded as before, and only
when the result holds an id of the tokenizer's added vocabulary (special or not, however the
tokenizer matched it: stripped, normalised) is it encoded again by the same tokenizer without its
added vocabulary, so the characters become ordinary tokens. Text that spells no control token
keeps exactly the ids it had (prompts, prefix and chunk keys and calibrations are unchanged).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class _Controls:
    """A tokenizer's control ids, its size when they were read (a tokenizer that gains added tokens
    is read again) and its encoder of text without the added vocabulary (built on first need)."""

    ids: frozenset[int]
    size: int
    plain: Callable[[str], list[int]] | None = None
    built: bool = False


_memo: weakref.WeakKeyDictionary[Any, _Controls] = weakref.WeakKeyDictionary()
_memo_lock = threading.Lock()


def control_ids(tokenizer: Any) -> frozenset[int]:
    """Every id of ``tokenizer``'s added vocabulary (``added_tokens_decoder``) and its special ids:
    the ids only a chat template may produce."""
    return _controls(tokenizer).ids


def text_ids(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` as text: no special token added, no control token parsed.

    Equal to ``tokenizer.encode(text, add_special_tokens=False)`` whenever that holds no id of
    :func:`control_ids`; otherwise the ids of the same characters as ordinary text (a Hugging
    Face fast tokenizer's backend without its added tokens; other tokenizers with
    ``split_special_tokens=True``), each character on its own where even that merges back into a
    control id.

    Raises:
        ValueError: a single character of ``text`` is itself a control token of this tokenizer,
            so no encoding as text exists (use another tokenizer, or drop the character).
    """
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    ctl = _controls(tokenizer)
    if not ctl.ids.intersection(ids):
        return ids
    ids = _plain(tokenizer, ctl, text)
    if not ctl.ids.intersection(ids):
        return ids
    out: list[int] = []
    for ch in text:  # a model vocabulary whose merges rebuild a control token: break every merge
        got = _plain(tokenizer, ctl, ch)
        if ctl.ids.intersection(got):
            raise ValueError(f"the character {ch!r} is a control token of this tokenizer and cannot be encoded as "
                             "text: remove it from the content or use a tokenizer whose added tokens are not "
                             "single characters")
        out.extend(got)
    return out


def _plain(tokenizer: Any, ctl: _Controls, text: str) -> list[int]:
    if not ctl.built:
        ctl.plain, ctl.built = _plain_backend(tokenizer), True
    if ctl.plain is not None:
        return ctl.plain(text)
    return list(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))


def _controls(tokenizer: Any) -> _Controls:
    try:
        with _memo_lock:
            got = _memo.get(tokenizer)
    except TypeError:  # not weak-referenceable: computed each time
        return _build(tokenizer)
    if got is None or got.size != _size(tokenizer):
        got = _build(tokenizer)
        with _memo_lock:
            _memo[tokenizer] = got
    return got


def _size(tokenizer: Any) -> int:
    try:
        return len(tokenizer)
    except TypeError:
        return -1


def _build(tokenizer: Any) -> _Controls:
    ids = {int(i) for i in (getattr(tokenizer, "added_tokens_decoder", None) or {})}
    ids.update(int(i) for i in (getattr(tokenizer, "all_special_ids", None) or ()) if i is not None)
    return _Controls(frozenset(ids), _size(tokenizer))


def _plain_backend(tokenizer: Any) -> Callable[[str], list[int]] | None:
    """The ``tokenizers`` backend of a fast tokenizer rebuilt without its added tokens (same
    normaliser, pre-tokeniser and model), or ``None`` when the tokenizer has no such backend."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        return None
    from tokenizers import Tokenizer

    spec = json.loads(backend.to_str())
    spec["added_tokens"] = []
    spec["post_processor"] = None  # ids of added tokens would dangle; no special tokens are added anyway
    spec["truncation"] = spec["padding"] = None
    plain = Tokenizer.from_str(json.dumps(spec))
    return lambda text: list(plain.encode(text, add_special_tokens=False).ids)
