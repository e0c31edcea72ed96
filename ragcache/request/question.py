"""Which text of a chat turn is the question: the one rule every entry point keys by.

The semantic cache embeds the question alone, never its context (:mod:`ragcache.request`). In a
turn that holds more than the question, the question is:

1. a caller's ``extractor(text) -> str | None`` (the returned question must occur in the text);
2. a labelled question (``Question: ...`` / ``Query: ...`` / a ``Q:`` line; the text after the last
   label, up to a ``Context:`` / ``Answer:`` label);
3. the whole text when it is question-sized: one paragraph, at most :data:`MAX_QUESTION_CHARS`
   characters, no ``<document>`` markup.

Otherwise the question cannot be told from its context and the whole prompt is matched exactly
(:data:`EXACT_QUESTION`: nothing is embedded, the prompt's sha256 is in the partition). When a question
is cut out of a longer turn, the rest of the turn (its template) goes into the partition.
"""

from __future__ import annotations

import re
from collections.abc import Callable

MAX_QUESTION_CHARS = 500
"""Longest unlabelled turn taken as a question as a whole (characters)."""

EXACT_QUESTION = "(whole prompt, exact match)"
"""The stored question of whole-prompt entries (their partition holds the prompt's sha256)."""

QuestionExtractor = Callable[[str], "str | None"]
"""``text -> question`` (a substring of ``text``) or ``None`` (no question: match the prompt exactly)."""

TEMPLATE_MARK = "\x00question\x00"
"""What stands for the question in the template of a turn it was cut out of."""

_Q_LABEL = re.compile(r"(?i)(?:^|(?<=[\s>*#]))(?:user[ \t]+question|question|query)[ \t]*[:：]")
_Q_LINE_LABEL = re.compile(r"(?im)^[ \t]*(?:#+[ \t]*)?q[ \t]*[:：]")
_END_LABEL = re.compile(r"(?i)(?:^|(?<=[\s>*#]))(?:context|documents?|sources?|passages?|answer|response|"
                        r"helpful[ \t]+answer)[ \t]*[:：]")
_DOC_MARKUP = re.compile(r"(?i)<document[\s>]")


def labelled_question(text: str) -> str | None:
    """The question after the last ``Question:`` / ``Query:`` label (or a ``Q:`` line), up to
    the next ``Context:`` / ``Answer:`` label; ``None`` without a label or with an empty,
    multi-paragraph or over-long question."""
    labels = list(_Q_LABEL.finditer(text)) + list(_Q_LINE_LABEL.finditer(text))
    if not labels:
        return None
    start = max(m.end() for m in labels)
    end = _END_LABEL.search(text, start)
    q = text[start:end.start() if end else len(text)].strip().strip("*").strip()
    return q if question_sized(q) else None


def question_sized(text: str) -> bool:
    """One non-empty paragraph of at most :data:`MAX_QUESTION_CHARS` characters without document markup."""
    t = text.strip()
    return bool(t) and len(t) <= MAX_QUESTION_CHARS and "\n\n" not in t and not _DOC_MARKUP.search(t)


def split_turn(text: str, extractor: QuestionExtractor | None = None) -> tuple[str, str] | None:
    """``(question, template)`` of a turn's text, or ``None`` when the question cannot be told from the
    rest. ``template`` is the text with the question replaced by :data:`TEMPLATE_MARK` (it goes into
    the partition; the question is embedded).

    Raises:
        ValueError: ``extractor`` returned text that is not in the turn.
    """
    if extractor is not None:
        q = extractor(text)
        if q is None or not str(q).strip():
            return None
        q = str(q)
        if q not in text:
            raise ValueError("question_extractor must return a substring of the prompt text (the question as "
                             f"written), got {q[:80]!r}")
    else:
        q = labelled_question(text)
        if q is None:
            if not question_sized(text):
                return None
            q = text.strip()
    i = text.rfind(q)
    return q.strip(), text[:i] + TEMPLATE_MARK + text[i + len(q):]


__all__ = [
    "EXACT_QUESTION",
    "MAX_QUESTION_CHARS",
    "TEMPLATE_MARK",
    "QuestionExtractor",
    "labelled_question",
    "question_sized",
    "split_turn",
]
