"""Volatile-text lint: text that changes per request (dates, times, weekdays, UUIDs, request ids,
counters, epoch and compact timestamps) found in the stable part of a prompt,
where it breaks every prefix cache; moving it out; and the first divergence between two renders.

Dates and times are found by explicit patterns (ISO ``2024-07-26``, ``2024/07/26``,
``26.07.2024``, ``07/26/24``, ``Jul 26``, ``26th of July 2024``, compact ``20240726100000``,
``10:00``, ``10.00``, ``10h30``, ``10am``) and each match is checked: a real calendar date
(python-dateutil parses the month-name and compact forms), a real time of day, and for the
ambiguous ``10.00`` form a cue that it is a time (``at 10.00``, ``10.00 am``, ``10.00 UTC``,
``10.00-12.00``). Version numbers (``Python 3.10``, ``3.10.12``), prices (``$10.00``), pages
(``page 10.5``), addresses (``10.0.0.1``) and quantities with units are not flagged. General
date searchers were measured and not used as the finder: ``dateparser.search.search_dates``
took 0.69 s per sentence and read "$10", "See", "May" and "3 to 5" as dates; dateutil's fuzzy
parse reads "Python 3.10", "$10.00" and "page 10.5" as dates.

Each finding is *certain* or only *possible*. Moving text changes what the model reads, so
:func:`move_volatile` (``lint="move"``) moves only sentences with certain findings and warns
(:class:`VolatileTextMoved`) for each; a line with a date left in place (no per-request cue) is named in a
:class:`PossiblyVolatileDate` warning. Certain by form: UUIDs, labelled request / trace / session ids,
prefixed ids (``req_...``), timestamps to the second. Certain by context: a date, time, weekday or
epoch right after a per-request cue ("Current date:", "The time is", "Today is", "Today Date:" as
Llama 3.1's chat template writes it, "Date today:", "Now:", "as of", "timestamp:", a ``Date:`` line), unless an example cue ("e.g.", "for example", "format") comes
first. Everything else is possible: a date in a rule, "Office hours 09:00-17:00", "Friday", a
counter with an explicit marker ("turn #12"). Ordinals in instructions ("step 12", "attempt 2",
"request 42") are not findings. Measured on 113 real agent-framework prompts by
``ragcache bench lint`` (``benchmarks/lint.py`` in a checkout).

It imports only :mod:`ragcache.hashing`: the layout, the Anthropic client side and the
``ragcache lint`` command all call down into it.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any


from ragcache.hashing import normalize_text

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
          r"|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?|JAN|FEB|MAR|APR|MAY|JUNE?|JULY?|AUG|SEPT?|OCT|NOV|DEC)")
_DAY = r"(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?"
_ZONE = r"(?:UTC|GMT|Z|CES?T|EES?T|WES?T|[ECMP][SD]T|BST|IST|JST|AES?T)"
_NOT_A_TIME_BEFORE = re.compile(
    r"(?:[$€£¥₹]|\b(?:usd|eur|gbp|chf|jpy|version|ver|v|python|release|rev|page|pages|p|pp|section|sec|chapter|ch"
    r"|figure|fig|table|tab|no|item|rule|step|level|score|rating|grade|price|cost|costs|total|rate)\.?)\s*$",
    re.IGNORECASE)
_NOT_A_TIME_AFTER = re.compile(
    r"^\s*(?:%|percent|[$€£¥]|(?:usd|eur|gbp|chf|jpy|per|each|times|x|degrees|°|kg|g|km|m|cm|mm|mi|lb|lbs|mb|gb|kb"
    r"|tb|ms|s|sec|seconds|min|minutes|points|pts|stars|mg|ml|l|euros?|dollars?|pounds?)\b)", re.IGNORECASE)
_TIME_CUE_BEFORE = re.compile(
    r"\b(?:at|um|from|until|till|by|before|after|since|time|clock|open|opens|opened|close|closes|closed|start|starts"
    r"|started|end|ends|ended|between|ab|bis|gegen|as of|deadline|due|noon|now|meeting|appointment)\b\W{0,3}$",
    re.IGNORECASE)
_TIME_CUE_AFTER = re.compile(r"^\s*(?:[ap](?:\.m\.|m)\b|h\b|hrs\b|uhr\b|o'clock\b|" + _ZONE + r"\b|[-–—]\s*\d{1,2}[.:h]\d{2})",
                             re.IGNORECASE)


_RANGE_BEFORE = re.compile(r"\d{1,2}[.:h]\d{2}\s*(?:[-–—]|and|to|until|till|bis)\s*$", re.IGNORECASE)


def _real_date(year: int, month: int, day: int) -> bool:
    if not 1900 <= year <= 2099:
        return False
    try:
        date(year, month, day)
    except ValueError:
        return False
    return True


def _two_digit_year(y: str) -> int:
    return int(y) + (2000 if len(y) == 2 else 0)


def _numeric_date(m: re.Match[str], text: str) -> bool:
    """``26.07.2024`` / ``07/26/24`` / ``26-7-2024``: a real calendar date read day-first or
    month-first, not a version (``3.10.12``) or an address (``10.0.0.1``)."""
    a, sep, b, y = m.group("a"), m.group("sep"), m.group("b"), m.group("y")
    if sep == "." and len(y) == 2 and (len(a) != 2 or len(b) != 2):
        return False  # 3.10.12 is a version; 26.07.24 a date
    if sep == "." and _NOT_A_TIME_BEFORE.search(text[: m.start()]):
        return False
    year = _two_digit_year(y)
    return _real_date(year, int(b), int(a)) or _real_date(year, int(a), int(b))


def _ymd_date(m: re.Match[str], text: str) -> bool:
    return _real_date(int(m.group("y")), int(m.group("mo")), int(m.group("d")))


def _compact_timestamp(m: re.Match[str], text: str) -> bool:
    """``20240726``, ``202407261000``, ``20240726100000``, ``20240726T100000Z``: parsed by
    python-dateutil (a real date and time, not any run of digits)."""
    digits = m.group(0).rstrip("Zz").replace("T", "").replace("t", "")
    iso = digits[:8] + ("T" + digits[8:14] if len(digits) > 8 else "") + ("." + digits[14:] if len(digits) > 14 else "")
    from dateutil import parser as dateutil_parser  # here: most text has no date-like run to check

    try:
        parsed = dateutil_parser.isoparse(iso)
    except (ValueError, OverflowError):
        return False
    return 1970 <= parsed.year <= 2099


def _month_name_date(m: re.Match[str], text: str) -> bool:
    """``Jul 26`` / ``26 July 2024`` / ``July 26th, 2024``: python-dateutil must read it as a real
    day of that month (``Feb 30`` is not)."""
    from dateutil import parser as dateutil_parser

    words = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", m.group(0)).replace(" of ", " ")
    try:
        dateutil_parser.parse(words, default=datetime(2000, 1, 1))  # 2000 is a leap year: Feb 29 passes
    except (ValueError, OverflowError):
        return False
    return True


def _colon_time(m: re.Match[str], text: str) -> bool:
    hour, minute = int(m.group("h")), int(m.group("mi"))
    return hour <= 23 and minute <= 59


def _dot_time(m: re.Match[str], text: str) -> bool:
    """``10.00`` / ``9.30 pm`` / ``10h30``: a time only with something that says so (a cue word
    before such as "at" or "until", am/pm, a time zone, "h", a range ``10.00-12.00``), and
    never after a currency, "version", "Python", "page", "section"... nor before a unit or %."""
    before, after = text[: m.start()], text[m.end():]
    if m.group("sep").lower() == "h":
        return not _NOT_A_TIME_AFTER.match(after)
    if _NOT_A_TIME_BEFORE.search(before) or _NOT_A_TIME_AFTER.match(after):
        return False
    if m.group("ampm"):
        return True
    if _TIME_CUE_AFTER.match(after) or _RANGE_BEFORE.search(before):
        return True
    return bool(_TIME_CUE_BEFORE.search(before))


_Validator = Callable[[re.Match[str], str], bool]
# (kind, pattern, flags, validator, certain by form). A match that is not certain by its form becomes
# certain only after a "now" cue (see _NOW_CUE). Counters need an explicit counter marker ("turn #12",
# "attempt number 3"): "step 12" / "attempt 2" / "request 42" in an instruction are ordinals, not state.
_VOLATILE_PATTERNS: tuple[tuple[str, re.Pattern[str], _Validator | None, bool], ...] = tuple(
    (kind, re.compile(rx, flags), check, certain)
    for kind, rx, flags, check, certain in (
        ("uuid", r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE, None, True),
        ("datetime", r"\b(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[T ]\d{1,2}:\d{2}:\d{2}(?:\.\d+)?"
                     r"(?:Z|[+-]\d{2}:?\d{2})?\b", re.IGNORECASE, _ymd_date, True),
        ("datetime", r"\b(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[T ]\d{1,2}:\d{2}(?:Z|[+-]\d{2}:?\d{2})?\b",
         re.IGNORECASE, _ymd_date, False),  # minutes only: may be a scheduled event
        ("date", r"\b(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})\b", 0, _ymd_date, False),
        ("date", r"(?<![\w.])(?P<y>\d{4})(?P<sep>[/.])(?P<mo>\d{1,2})(?P=sep)(?P<d>\d{1,2})(?![\w]|\.\d)", 0, _ymd_date,
         False),
        ("timestamp", r"(?<![\w.])(?:19|20)\d{6}T?\d{6}(?:\d{1,6})?Z?(?!\w|\.\d)", re.IGNORECASE,
         _compact_timestamp, True),
        ("timestamp", r"(?<![\w.])(?:19|20)\d{6}T?\d{4}Z?(?!\w|\.\d)", re.IGNORECASE, _compact_timestamp, False),
        ("timestamp", r"(?<![\w.])(?:19|20)\d{6}(?!\w|\.\d)", 0, _compact_timestamp, False),
        ("date", r"(?<![\w.])(?P<a>\d{1,2})(?P<sep>[./-])(?P<b>\d{1,2})(?P=sep)(?P<y>\d{4}|\d{2})(?![\w]|[./-]\d)", 0,
         _numeric_date, False),
        ("date", r"\b" + _MONTH + r"\.? " + _DAY + r"(?:,? \d{4})?(?![\w:.]\d|\w)", 0, _month_name_date, False),
        ("date", r"\b" + _DAY + r"(?: of)? " + _MONTH + r"(?:,? \d{4})?(?!\w)", 0, _month_name_date, False),
        ("time", r"(?<![\w.:])(?P<h>\d{1,2}):(?P<mi>\d{2}):\d{2}(?:\s?[ap](?:\.m\.|m))?(?![\d:])", re.IGNORECASE,
         _colon_time, True),
        ("time", r"(?<![\w.:])(?P<h>\d{1,2}):(?P<mi>\d{2})(?:\s?[ap](?:\.m\.|m))?(?![\d:])", re.IGNORECASE,
         _colon_time, False),
        ("time", r"(?<![\w.,:])(?P<h>[01]?\d|2[0-3])(?P<sep>[.h])(?P<mi>[0-5]\d)(?P<ampm>\s?[ap](?:\.m\.|m)(?!\w))?"
                 r"(?![\w]|[.,]\d)", re.IGNORECASE, _dot_time, False),
        ("time", r"(?<![\w.])(?:1[0-2]|0?[1-9])\s?[ap](?:\.m\.|m)(?!\w)", re.IGNORECASE, None, False),
        ("weekday", r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b", re.IGNORECASE, None, False),
        ("weekday", r"\b(?:Mon|Tue|Tues|Wed|Thu|Thur|Thurs|Fri|Sat|Sun)\.?,?(?=\s+(?:\d{1,2}\s+)?" + _MONTH + r"\b)", 0,
         None, False),  # strftime's %a ("Tue Dec 1, 2026", "Mon, 07 Jul 2025"): only before a month
        ("request-id", r"\b(?:request|req|trace|span|session|correlation|run|message|conversation|thread)[-_ ]?id\b"
                       r"\s*[:=#]?\s*(?=[\w-]*\d)[\w-]{4,}", re.IGNORECASE, None, True),
        ("request-id", r"\b(?:req|msg|run|sess|trace|span|chatcmpl|toolu)_[A-Za-z0-9]{8,}\b", 0, None, True),
        ("hex-id", r"\b[0-9a-f]{24,}\b", re.IGNORECASE, None, False),
        ("counter", r"\b(?:request|turn|attempt|call|iteration|step|visit|retry|round)\s*(?:#|no\.|number|count)"
                    r"\s*[:=]?\s*\d+\b", re.IGNORECASE, None, False),
        ("epoch", r"\b1[5-9]\d{8}(?:\d{3})?\b", re.IGNORECASE, None, False),
    )
)
# A per-request cue right before a match makes it certain: "Current date: ...", "The time is ...",
# "Today is ...", "Today Date: ..." (Llama 3.1's chat template), "Date today:", "Today: ...", "Now: ...",
# "as of ...", "Date: ..." at the start of a line, "timestamp=...". Not "updated on", "valid from",
# "last revised": those name a fixed revision date as often as the current one.
_NOW_CUE = re.compile(
    r"(?:\b(?:current|today(?:'?s)?|the|local|server|system)\s+(?:local\s+)?(?:date|time|datetime|date\s+and\s+time"
    r"|timestamp|day)(?:\s+(?:is|now))?|\b(?:today|now|it)\s+is(?:\s+now)?|\bnow|\btoday|\bas\s+of"
    r"|\b(?:date|time|datetime|day)\s+(?:today|now)(?:\s+is)?"
    r"|\b(?:timestamp|ts|epoch|unix\s+time)"
    r"|(?:^|[.!?]\s+)[ \t>*-]*(?:date|time|datetime|day))\s*(?:\([\w ]{1,12}\))?\s*[:=]?\s*$",
    re.IGNORECASE | re.MULTILINE)
# An example or a format description before a match makes it not certain, whatever its form
# ("for example 2024-07-26T10:00:00Z", "e.g. 123e4567-...", "in the format 20240726100000").
_EXAMPLE_CUE = re.compile(r"(?:\be\.g\.?|\bi\.e\.?|\bfor (?:example|instance)\b|\bsuch as\b|\blike\b|\bexamples?\b"
                          r"|\bformat(?:s|ted)?\b|\bsample\b|\bpattern\b|\bsyntax\b)", re.IGNORECASE)
# Between two volatile spans that belong together ("Friday, 2024-07-26 at 10:00").
_JOINED = re.compile(r"^[\s,]*(?:at|on|the)?[\s,]*$", re.IGNORECASE)
VOLATILE_METADATA_KEYS = frozenset(
    {"score", "relevance", "relevance_score", "similarity", "distance", "rank", "retrieved_at",
     "fetched_at", "timestamp", "request_id", "query", "query_time"}
)
"""Document metadata keys whose values change per request (dropped by ``lint="move"``)."""


class VolatileTextMoved(UserWarning):
    """Warned by :func:`move_volatile` (and so by ``lint="move"``) for each sentence it moved out of the
    stable text: moving text changes what the model reads, so it is never silent."""


class PossiblyVolatileDate(UserWarning):
    """Warned by :func:`move_volatile` (``lint="move"``) and ``lint="raise"`` for each line of the stable
    text that holds a date without a per-request cue ("today", "current date", "now", "as of"): left
    in place (it may be a fixed date, "Released 2024-07-26"), but named with its line, since a date
    that does change per request rewrites the cached prefix every day."""


_DATE_KINDS = frozenset({"date", "datetime", "timestamp"})


def kept_date_lines(text: str, findings: Sequence[VolatileFinding]) -> list[tuple[str, list[VolatileFinding]]]:
    """``(line, findings)`` for each line of ``text`` holding a possible (not certain) date, datetime or
    timestamp that was not moved and is not an example ("e.g. 2024-07-26", "in the format ...")."""
    out: dict[int, tuple[str, list[VolatileFinding]]] = {}
    for f in findings:
        if f.certain or f.moved is not None or f.kind not in _DATE_KINDS or f.segment != "system":
            continue
        start = text.rfind("\n", 0, f.start) + 1
        if _EXAMPLE_CUE.search(text[max(start, f.start - 80):f.start]):
            continue
        end = text.find("\n", f.end)
        line = text[start:] if end < 0 else text[start:end]
        out.setdefault(start, (line.strip(), []))[1].append(f)
    return list(out.values())


def warn_kept_dates(text: str, findings: Sequence[VolatileFinding]) -> None:
    """One :class:`PossiblyVolatileDate` warning per line of :func:`kept_date_lines`."""
    for line, group in kept_date_lines(text, findings):
        warn_at_caller(f"ragcache lint: left {line!r} in the stable prompt: "
                       f"{', '.join(f'{f.kind} {f.text!r}' for f in group)} has no per-request cue (\"today\", "
                       "\"current date\", \"now\", \"as of\"); if it changes per request, pass it as volatile=... "
                       "or write it after such a cue", PossiblyVolatileDate)


@dataclass(frozen=True, slots=True)
class VolatileFinding:
    """Volatile text found in a stable segment: ``segment`` kind, its index among
    the segments of that kind, the pattern ``kind``, the matched text and its
    character offsets ``[start, end)`` in the segment text.

    ``certain``: True when the text is certainly per-request (a UUID, a request / trace id, a
    timestamp with a time of day, or a date / time / weekday right after a "now" cue such as
    "Current date:", "Today is", "as of"); only certain findings are moved or raised on. False for
    text that may be fixed (a date in a rule or an example, "at 10:00", "Friday", "turn #3").
    ``moved``: the sentence holding this finding when :func:`move_volatile` moved it out of the
    stable text (because of a certain finding in it), else None."""

    segment: str
    index: int
    kind: str
    text: str
    start: int
    end: int
    certain: bool = True
    moved: str | None = None

    def describe(self) -> str:
        label = self.kind if self.certain else f"possible {self.kind}"
        return f"{label} {self.text!r} in {self.segment}[{self.index}] at char {self.start}"


def find_volatile(text: str, *, segment: str = "system", index: int = 0) -> list[VolatileFinding]:
    """Find text that changes per request (dates, times, weekdays, UUIDs,
    request ids, counters, epoch timestamps), each marked ``certain`` or not (see
    :class:`VolatileFinding`). Overlapping matches keep the first pattern's; sorted by offset."""
    found: list[tuple[int, int, str, bool]] = []
    for kind, rx, check, certain in _VOLATILE_PATTERNS:
        for m in rx.finditer(text):
            if any(s < m.end() and m.start() < e for s, e, _, _ in found):
                continue
            if check is not None and not check(m, text):
                continue
            found.append((m.start(), m.end(), kind, certain))
    found.sort()
    out: list[VolatileFinding] = []
    for start, end, kind, certain in found:
        line_start = text.rfind("\n", 0, start) + 1
        if _EXAMPLE_CUE.search(text[max(line_start, start - 80):start]):
            certain = False
        elif not certain and kind != "counter":
            prev = out[-1] if out else None
            before = text[line_start:start] if start - line_start <= 300 else "x " + text[start - 300:start]  # no false ^
            certain = bool(_NOW_CUE.search(before)) or (
                prev is not None and prev.certain and _JOINED.match(text[prev.end:start]) is not None)
        out.append(VolatileFinding(segment, index, kind, text[start:end], start, end, certain))
    return out


_PASS_THROUGH = ("ragcache", "langchain_ragcache", "llama_index_ragcache", "langchain_core", "langchain",
                 "langchain_anthropic", "langchain_openai", "langgraph", "langsmith", "llama_index", "pydantic",
                 "anthropic", "openai")
"""Packages whose frames a lint warning passes through to reach the caller's line (the adapters
call ragcache from inside LangChain's, LangGraph's, LangSmith's or LlamaIndex's own code)."""
_SKIP_DIRS: tuple[str, ...] | None = None


def _skip_dirs() -> tuple[str, ...]:
    """Folders of :data:`_PASS_THROUGH` (found without importing them) and of the standard library's
    wrappers, each ending in a separator."""
    global _SKIP_DIRS
    if _SKIP_DIRS is None:
        import importlib.util
        import os
        import threading

        stdlib = os.path.dirname(threading.__file__)  # threading, asyncio, contextlib, concurrent; first
        dirs: set[str] = set()
        for name in _PASS_THROUGH:
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                continue
            dirs.update(spec.submodule_search_locations or [] if spec else [])
        _SKIP_DIRS = tuple(os.path.join(os.path.realpath(d), "") for d in [stdlib, *sorted(dirs)])
    return _SKIP_DIRS


def passes_through(real: str, skip: tuple[str, ...]) -> bool:
    """Whether a frame in file ``real`` belongs to ragcache's pass-through frames: a framework folder of
    :data:`_PASS_THROUGH`, or the standard library, whose folder can hold ``site-packages`` (a
    system or pyenv install): an installed package there is not the standard library."""
    if not real.startswith(skip):
        return False
    stdlib = skip[0]
    if real.startswith(stdlib) and not any(real.startswith(d) for d in skip[1:]):
        rest = real[len(stdlib):]
        return not rest.startswith(("site-packages", "dist-packages"))
    return True


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn(message, category)`` attributed to the first frame outside ragcache, its
    adapters and the frameworks they run inside (:data:`_PASS_THROUGH`, the standard library), so
    the warning names the user's line (``chain.invoke(...)``, ``PromptLayout.build(...)``), not
    ``langsmith/run_helpers.py``. The stack is walked on every Python version (``warnings.warn``'s
    ``skip_file_prefixes`` needs 3.12). With no such frame (the caller's line is not on this stack:
    LangChain runs each step of an async chain in its own task) the first frame outside ragcache's own
    package is named, i.e. the adapter step that built the prompt."""
    import os
    import sys

    skip = _skip_dirs()
    own = os.path.join(os.path.dirname(os.path.realpath(__file__)), "")
    frame, level, fallback = sys._getframe(1), 2, None
    while frame is not None:
        path = frame.f_code.co_filename
        real = os.path.realpath(path) if not path.startswith("<") else path
        if fallback is None and not real.startswith(own):
            fallback = level
        if not path.startswith("<") and not passes_through(real, skip):
            break
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level if frame is not None else (fallback or 2))


_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


def move_volatile(text: str, *, warn: bool = True) -> tuple[str, str, list[VolatileFinding]]:
    """Split ``text`` into (stable, moved, findings). Only a sentence holding a *certain* finding
    is cut out of its line and returned in ``moved`` (sentences joined by spaces); possible ones
    stay where they are. ``findings`` lists every finding, certain or not; each one inside a
    moved sentence carries that sentence in ``moved``. With ``warn`` each moved sentence is reported as
    a :class:`VolatileTextMoved` warning, naming what made it volatile."""
    findings = find_volatile(text)
    if not any(f.certain for f in findings):
        if warn:
            warn_kept_dates(text, findings)
        return text, "", findings
    kept_lines: list[str] = []
    moved: list[tuple[int, int]] = []
    line_start = 0
    for line in text.split("\n"):
        keep, pos = [], 0
        for m in [*_SENTENCE_END.finditer(line), None]:
            s, e = line_start + pos, line_start + (m.start() if m is not None else len(line))
            if any(f.certain and s <= f.start < e for f in findings):
                moved.append((s, e))
            else:
                keep.append(text[s:e])
            pos = m.end() if m is not None else len(line)
        if any(k.strip() for k in keep) or not line.strip():
            kept_lines.append(" ".join(keep))
        line_start += len(line) + 1
    marked = []
    for f in findings:
        span = next(((s, e) for s, e in moved if s <= f.start < e), None)
        marked.append(f if span is None else _replace(f, text[span[0]:span[1]].strip()))
    if warn:
        for sentence, group in _by_sentence(marked):
            warn_at_caller(f"ragcache lint: moved {sentence!r} out of the stable prompt into the volatile text "
                           f"(certainly per-request: {', '.join(f'{f.kind} {f.text!r}' for f in group)})",
                           VolatileTextMoved)
        warn_kept_dates(text, marked)
    return normalize_text("\n".join(kept_lines)), " ".join(text[s:e].strip() for s, e in moved), marked


def _replace(f: VolatileFinding, moved: str) -> VolatileFinding:
    return VolatileFinding(f.segment, f.index, f.kind, f.text, f.start, f.end, f.certain, moved)


def _by_sentence(findings: list[VolatileFinding]) -> list[tuple[str, list[VolatileFinding]]]:
    groups: dict[str, list[VolatileFinding]] = {}
    for f in findings:
        if f.moved is not None and f.certain:
            groups.setdefault(f.moved, []).append(f)
    return list(groups.items())


_TOKEN_RX = re.compile(r"\s+|\w+|[^\w\s]")


def word_tokens(text: str) -> list[str]:
    """Split text into word, punctuation and whitespace tokens (a tokenizer-free proxy)."""
    return _TOKEN_RX.findall(text)


def first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Index of the first position where two token sequences differ (the shorter
    length when one is a prefix of the other); None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


__all__ = [
    "VOLATILE_METADATA_KEYS",
    "PossiblyVolatileDate",
    "VolatileFinding",
    "VolatileTextMoved",
    "find_volatile",
    "first_divergence",
    "kept_date_lines",
    "move_volatile",
    "normalize_text",
    "warn_at_caller",
    "warn_kept_dates",
    "word_tokens",
]
