"""Chat-template rendering into separately tokenised prompt pieces.

The engine renders messages with the tokenizer's own chat template, with every content
piece replaced by a sentinel; the rendered string is then split at the sentinels so that
each piece (template text, system text, each document, the question) is tokenised once on
its own, and the joined ids are what the forward pass sees. Control tokens come only from the
template: every content piece is encoded as text (:mod:`ragcache.engine.text_ids`), so a document
that spells ``<|im_end|>`` is those characters, not an end of turn. A document therefore has the
same token ids wherever it lands, which is what makes position-independent chunk keys work.

Chat templates that read the clock (Llama 3.2+ ``strftime_now("%d %b %Y")`` behind "Today
Date:", Granite's "Today's Date:") would write a new date into the system header every day,
and every cached prefix would end there. The template's date is therefore pinned
(:data:`DEFAULT_TEMPLATE_DATE` unless the caller chooses another, see
:func:`resolve_template_date`): ``strftime_now`` and ``date_string`` are passed to the
template as that date. A template that reads the clock is reported once per template.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import logging
import re
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Literal

from ragcache.engine.text_ids import text_ids

if TYPE_CHECKING:
    from ragcache.prompt.layout import Block

log = logging.getLogger(__name__)

DOC_SEPARATOR = "\n\n"
DEFAULT_TEMPLATE_DATE = datetime(2024, 7, 26)
"""The date a clock-reading chat template sees by default: 26 Jul 2024, the date Llama 3.1's
own template falls back to when no ``date_string`` is given (so those renders are unchanged)."""
TemplateDate = datetime | date | str | Literal["live"]
_CLOCK_RX = re.compile(r"\bstrftime_now\b")
_DATE_VAR_RX = re.compile(r"\bdate_string\b")
_warned: set[str] = set()
_warned_lock = threading.Lock()


def resolve_template_date(value: TemplateDate | None) -> datetime | None:
    """The pinned date as a ``datetime`` (midnight for a ``date`` or a date-only string), or
    ``None`` for ``"live"`` (the template reads the real clock). ``None`` means the default.

    Raises:
        ValueError: a string that is neither ``"live"`` nor an ISO date / datetime.
    """
    if value is None:
        return DEFAULT_TEMPLATE_DATE
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if value == "live":
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        raise ValueError(f"template_date must be a date, a datetime, an ISO date such as '2024-07-26', or 'live' "
                         f"(let the template read the clock); got {value!r}") from None


def template_reads_clock(template: Any) -> bool:
    """Whether a chat template (a string, or a dict of named templates) calls ``strftime_now``."""
    text = "\n".join(map(str, template.values())) if isinstance(template, dict) else str(template or "")
    return bool(_CLOCK_RX.search(text))


_LITERAL_CALL_RX = re.compile(r"""\bstrftime_now\(\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')\s*\)""")


@functools.lru_cache(maxsize=64)
def pin_template_clock(template: str, pinned: datetime) -> tuple[str, bool]:
    """``template`` with every ``strftime_now("<format>")`` call replaced by the string the call
    would return at ``pinned``; and whether no clock read is left (a call with a computed format
    cannot be replaced). transformers renders templates in a sandbox that accepts only plain
    data as variables, so the clock cannot be swapped for a function; the template is rewritten."""

    def literal(m: re.Match[str]) -> str:
        fmt = ast.literal_eval(m.group(1))
        return json.dumps(pinned.strftime(fmt))

    out = _LITERAL_CALL_RX.sub(literal, template)
    return out, not re.search(r"\bstrftime_now\s*\(", out)


def _warn_once(tokenizer: Any, text: str, message: str) -> None:
    key = hashlib.sha256((message[:40] + text).encode()).hexdigest()
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message, getattr(tokenizer, "name_or_path", "") or "this tokenizer")


def _template_with_pinned_date(tokenizer: Any, pinned: datetime | None) -> tuple[str, dict[str, Any]]:
    """The tokenizer's chat template (resolved to one string) with its date pinned, and the
    template variables to pass (``date_string``); warns once per template that reads the clock."""
    template = tokenizer.get_chat_template()
    extra: dict[str, Any] = {}
    if pinned is not None and _DATE_VAR_RX.search(template):
        extra["date_string"] = pinned.strftime("%d %b %Y")
    if not template_reads_clock(template):
        return template, extra
    if pinned is None:
        _warn_once(tokenizer, template, "the chat template of %s reads the clock (strftime_now) and "
                   "template_date='live': the rendered date changes every day, and cached prefixes end at the "
                   "date line on a new day")
        return template, extra
    pinned_template, complete = pin_template_clock(template, pinned)
    if complete:
        _warn_once(tokenizer, template, "the chat template of %s reads the clock (strftime_now); ragcache pins "
                   f"its date to {pinned.date().isoformat()} so prompts rendered on different days share their "
                   "prefix. Choose the date with LocalEngine(template_date=...), or template_date='live' to let "
                   "it change")
    else:
        _warn_once(tokenizer, template, "the chat template of %s calls strftime_now with a computed format, "
                   "which ragcache cannot pin: its prompts change with the clock. Pass a chat template with "
                   "literal formats (tokenizer.chat_template = ...) to keep prefixes across days")
    return pinned_template, extra


@dataclass(slots=True)
class PromptPiece:
    """A separately tokenised piece of a prompt.

    Attributes:
        kind: ``template`` (chat-template and separator text), ``system``, ``tools``,
            ``document``, ``history``, ``volatile``, ``question`` or ``raw``.
        text: the piece's text.
        ids: its token ids (tokenised on its own, no special tokens added; every kind but
            ``template`` and ``raw`` as text, :func:`ragcache.engine.text_ids.text_ids`).
        doc_id: document id for ``document`` pieces, when known.
    """

    kind: str
    text: str
    ids: list[int]
    doc_id: str | None = None


@dataclass(slots=True)
class Prompt:
    """A prompt as a list of pieces; :attr:`input_ids` is their concatenation."""

    pieces: list[PromptPiece] = field(default_factory=list)

    @property
    def input_ids(self) -> list[int]:
        out: list[int] = []
        for p in self.pieces:
            out.extend(p.ids)
        return out

    def __len__(self) -> int:
        return sum(len(p.ids) for p in self.pieces)

    def document_spans(self) -> list[tuple[int, int, PromptPiece]]:
        """``(start, end, piece)`` token spans of the document pieces, in prompt order."""
        spans, pos = [], 0
        for p in self.pieces:
            if p.kind == "document" and p.ids:
                spans.append((pos, pos + len(p.ids), p))
            pos += len(p.ids)
        return spans

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces)


def render_messages(tokenizer: Any, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True,
                    template_date: TemplateDate | None = None) -> Prompt:
    """Render chat ``messages`` with the tokenizer's chat template into tokenised pieces: the
    messages' layout (:meth:`ragcache.prompt.layout.PromptLayout.from_messages`, the one rule for which
    text is system, history, document, volatile or question) rendered by :func:`render_blocks`.

    Raises:
        ValueError: as :meth:`~ragcache.prompt.layout.PromptLayout.from_messages` (empty list, unknown role,
            non-text content, no question).
    """
    from ragcache.prompt.layout import PromptLayout

    return render_blocks(tokenizer, PromptLayout.from_messages(messages).blocks(),
                         add_generation_prompt=add_generation_prompt, template_date=template_date)


def render_blocks(tokenizer: Any, blocks: Sequence[Block], *, add_generation_prompt: bool = True,
                  template_date: TemplateDate | None = None) -> Prompt:
    """Render :meth:`ragcache.prompt.layout.PromptLayout.blocks` with the chat template.

    Consecutive blocks of one role form one message (joined by :data:`DOC_SEPARATOR`; each history
    block is a message of its own); every block becomes a piece of its own kind, tokenised on its
    own (documents keep their ``doc_id``); ``tools`` blocks are dropped (the local engine has no tool
    channel; tools still enter the semantic partition). ``template_date``: the date a template that
    reads the clock sees (default :data:`DEFAULT_TEMPLATE_DATE`; ``"live"`` for the real clock, see
    :func:`resolve_template_date`).

    Raises:
        ValueError: no blocks to render.
    """
    tag = uuid.uuid4().hex[:8]
    sentinel = "\x00RC{}_{}\x00"
    rendered_blocks = [b for b in blocks if b.kind != "tools"]
    if not rendered_blocks:
        raise ValueError("nothing to render: the layout has no blocks")
    templ_msgs: list[dict[str, Any]] = []
    for i, b in enumerate(rendered_blocks):
        piece = sentinel.format(tag, i)
        if templ_msgs and templ_msgs[-1]["role"] == b.role and b.kind != "history" and not templ_msgs[-1]["history"]:
            templ_msgs[-1]["content"] += DOC_SEPARATOR + piece
        else:
            templ_msgs.append({"role": b.role, "content": piece, "history": b.kind == "history"})
    templ_msgs = [{"role": m["role"], "content": m["content"]} for m in templ_msgs]
    if tokenizer.chat_template:
        template, extra = _template_with_pinned_date(tokenizer, resolve_template_date(template_date))
        rendered = tokenizer.apply_chat_template(templ_msgs, chat_template=template, tokenize=False,
                                                 add_generation_prompt=add_generation_prompt, **extra)
    else:  # plain fallback for base models without a chat template
        rendered = "".join(f"{m['role']}: {m['content']}\n" for m in templ_msgs) + ("assistant: " if add_generation_prompt else "")
    pattern = re.compile("\x00RC" + tag + r"_(\d+)\x00")
    pieces: list[PromptPiece] = []
    pos = 0
    for match in pattern.finditer(rendered):
        if match.start() > pos:
            _add(pieces, tokenizer, "template", rendered[pos:match.start()])
        b = rendered_blocks[int(match.group(1))]
        _add(pieces, tokenizer, b.kind, b.text, b.doc_id)
        pos = match.end()
    if pos < len(rendered):
        _add(pieces, tokenizer, "template", rendered[pos:])
    return Prompt(pieces)


def document_token_ids(tokenizer: Any, document: Any) -> list[int]:
    """The token ids a document has in every prompt: its :func:`ragcache.prompt.layout.render_document`
    bytes (``<document ...>`` wrapper included), tokenised on their own as text (:func:`text_ids`: no
    special token added, none parsed), exactly as :func:`render_blocks` tokenises a document piece. ``document``: anything
    :func:`ragcache.prompt.layout.as_document` takes. Chunk-cache keys hash these ids.

    Raises:
        ValueError: a document :func:`~ragcache.prompt.layout.as_document` cannot read.
    """
    from ragcache.prompt.layout import as_document, render_document

    return text_ids(tokenizer, render_document(as_document(document)))


def _add(pieces: list[PromptPiece], tokenizer: Any, kind: str, text: str, doc_id: str | None = None) -> None:
    """Append a piece. Only chat-template text (``template``) and a caller's own raw prompt (``raw``)
    may produce control tokens; every content piece is encoded as text (:func:`text_ids`)."""
    if not text:
        return
    if kind in ("template", "raw"):
        ids = list(tokenizer.encode(text, add_special_tokens=False))
    else:
        ids = text_ids(tokenizer, text)
    pieces.append(PromptPiece(kind, text, ids, doc_id))


def raw_prompt(tokenizer: Any, text: str) -> Prompt:
    """A prompt of plain text, no chat template (special tokens such as BOS are not added). The
    caller writes the whole prompt, template included, so control-token strings in ``text`` are
    parsed as control tokens: never pass untrusted content here (use :func:`build_prompt`)."""
    p: list[PromptPiece] = []
    _add(p, tokenizer, "raw", text)
    return Prompt(p)


def build_prompt(tokenizer: Any, source: Any, *, template_date: TemplateDate | None = None) -> Prompt:
    """Render a :class:`~ragcache.prompt.layout.PromptLayout` (its :meth:`~ragcache.prompt.layout.PromptLayout.blocks`),
    a chat messages list, a plain string (one user turn) or a list of token ids (a :class:`Prompt`
    is returned as it is).

    Raises:
        ValueError: for empty or malformed input.
    """
    from ragcache.prompt.layout import PromptLayout

    if isinstance(source, Prompt):
        return source
    if isinstance(source, str):
        if not source.strip():
            raise ValueError("prompt is empty: give a question or a messages list")
        return render_messages(tokenizer, [{"role": "user", "content": source}], template_date=template_date)
    if isinstance(source, PromptLayout):
        return render_blocks(tokenizer, source.blocks(), template_date=template_date)
    if isinstance(source, Sequence) and source and all(isinstance(t, int) for t in source):
        return Prompt([PromptPiece("raw", "", [int(t) for t in source])])
    if isinstance(source, Sequence):
        return render_messages(tokenizer, list(source), template_date=template_date)
    raise ValueError(f"cannot build a prompt from {type(source).__name__}")
