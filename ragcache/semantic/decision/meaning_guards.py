"""Guards for differences that words alone miss: symbols and case, bounds, complements, relative times, modality,
text in other scripts.

Part of :mod:`ragcache.semantic.decision.guards` (which re-exports them and documents the guard order).
Each names a reason when the two questions ask different things:

- ``bound``: a quantifier or bound ("at most", "at least", "up to", "no more than", "minimum",
  "maximum", "largest", "on average", "in total", "per day" ...) added, removed or exchanged for
  another kind ("a month" after "for", "in", "within" ... is a duration, not a rate).
  Phrasings of one kind are equal ("at most" = "maximum" = "up to" = "no more than"; "per day" =
  "a day" = "daily").
- ``complement``: a spatial or set complement ("outside", "beyond", "without", "excluding",
  "except", "other than" ...) on one side more often than on the other ("in Europe" / "outside Europe").
- ``relative_time``: a time relative to now ("this" / "next" / "last" week, month, quarter, year;
  "today" / "tomorrow" / "yesterday"; "tonight") that points elsewhere or is on one side only.
- ``modality``: permission or possibility ("can", "may", "allowed to", "is it possible to"), obligation
  or advice ("must", "have to", "need to", "required", "should") and prediction ("will", "would",
  "going to"), read from the question's first modal: "Can I return a bike within 30 days?" asks what
  is allowed, "Must I ...?" what is required, "Will I get a refund?" what is going to happen. Only when
  both questions carry a modal; the modal of "how can I X", "where can I X", "what can I do", "what
  will happen" and of a wh-question about whom to contact or when to expect something ("Who can /
  should I contact?") is a way of asking, "should I be able to" asks "can I", a prediction followed by
  another modal takes that one's kind ("Will I be able to ...?" asks "Can I ...?", "Will I have to
  ...?" asks "Must I ...?"), "a will" and "Will" inside a sentence are no modal, and a request to the
  assistant ("can you tell me", "could you help", "will you send") is politeness, not permission.
- ``symbol``: code-like spans (format codes ``%Y``, flags ``-v``, ``$HOME``, operators ``10 / 2``,
  slices ``a[1:]``) must be equal, case and symbols included; and a word written in both questions
  in two cases differs when case carries meaning: a single letter (a constant ``G`` / ``g``), a
  word of one or two letters (units ``MB`` / ``mb``, ``IT`` / ``it``) or two forms that both use
  capitals (``MB`` / ``Mb``, ``mW`` / ``MW``). A lower-cased rewording of a longer word ("api" /
  "API", "paris" / "Paris"), a capital that only starts a sentence, and a question written wholly
  in capitals (no case information) pass.
- ``script``: what the word guards cannot read must be the same text (:func:`unread_text`): symbols
  outside ASCII ("€" / "£", "→" / "←", "≤" / "≥"), lone letters and letterlike symbols ("π" / "λ", "ℓ"),
  words in a script other than the question's own (a Georgian name in an English question, a Latin
  name in a Russian one) and names in another cased script (a capitalised Cyrillic, Greek or
  accented Latin word after a sentence's first). Script-agnostic: it works for a language declared
  with ``languages=`` (:mod:`ragcache.semantic.decision.coverage`) as for English.

All six are lexical rules (tables below), symmetric and pure; like the other guards they prefer a
miss to a wrong answer.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from ragcache.semantic.decision.guard_protocol import Guard
from ragcache.semantic.scripts import script_words


# --------------------------------------------------------------------------- bound

_BOUND_PHRASES: tuple[tuple[str, str], ...] = (
    # (regex over the lower-cased text, kind)
    ((r"\bat\s+(?:the\s+)?most\b|\bup\s+to\b(?!\s+(?:date|speed|scratch|you|me|us|them|him|her))|"
      r"\bno\s+more\s+than\b|\bnot\s+more\s+than\b|\bno\s+later\s+than\b|\bmax(?:imum|imal|imally)?\b|"
      r"\bor\s+(?:less|fewer)\b|\blimits?\b|\bcap(?:ped|s)?\b|\bceiling\b|\bupper\s+bound\b|\b(?:largest|biggest)\b"),
     "upper"),
    ((r"\bat\s+(?:the\s+)?least\b|\bno\s+(?:less|fewer)\s+than\b|\bnot\s+(?:less|fewer)\s+than\b|"
      r"\bmin(?:imum|imal|imally)?\b|\bor\s+more\b|\bor\s+longer\b|\blower\s+bound\b|\bno\s+earlier\s+than\b|\bsmallest\b"),
     "lower"),
    (r"\bon\s+average\b|\baverages?\b|\bavg\b|\b(?:the|a|its|their|arithmetic|geometric)\s+mean\b|\bmedian\b",
     "average"),
    (r"\bin\s+total\b|\btotals?\b|\baltogether\b|\bsum\s+of\b|\bcumulative(?:ly)?\b", "total"),
    (r"\b(?:exactly|precisely)\b(?=\s+\$?\d)", "exact"),
    (r"\b(?:approximately|roughly|about|around|circa|approx)\b(?=\s+\$?\d)", "approximate"),
    # "include dental" / "include only dental", "on weekends" / "only on weekends": a restriction (the
    # additive "also" is left alone: "can I also pay by card" asks what "can I pay by card" asks)
    (r"\b(?:only|solely|exclusively|merely)\b(?!\s+(?:if|when|because)\b)", "restrictive"),
)
_BOUND = [(re.compile(p), k) for p, k in _BOUND_PHRASES]
_RATE_UNITS = ("second", "minute", "hour", "day", "night", "week", "month", "quarter", "year", "user", "seat",
               "request", "call", "person", "head", "customer", "employee", "device", "account", "transaction",
               "order", "item", "gb", "mb", "token", "page", "mile", "km", "kilometer", "kilometre", "unit")
_RATE = re.compile(r"(?<!\bfor )(?<!\bin )(?<!\bwithin )(?<!\bafter )(?<!\bover )(?<!\bthan )(?<!\bof )"
                   r"(?<!\bunder )(?<!\bfrom )(?<!\bto )(?<!\bby )\b(?:per|a|an|each|every)\s+(" + "|".join(_RATE_UNITS) + r")s?\b|/(" + "|".join(_RATE_UNITS)
                   + r")s?\b|\b(hour|dai|week|month|quarter|year|night)ly\b|\bannual(?:ly)?\b|\bper\s+annum\b")
_RATE_ADVERB = {"dai": "day"}


def bounds(text: str) -> Counter[str]:
    """The quantifier and bound kinds in ``text`` (``upper``, ``lower``, ``average``, ``total``,
    ``exact``, ``approximate``, ``restrictive``, ``rate/<unit>``), counted."""
    low = text.lower()
    out: Counter[str] = Counter()
    for rx, kind in _BOUND:
        out[kind] += len(rx.findall(low))
    for m in _RATE.finditer(low):
        unit = m.group(1) or m.group(2) or _RATE_ADVERB.get(m.group(3) or "", m.group(3)) or "year"
        if m.group(0).startswith(("a ", "an ")) and unit not in ("second", "minute", "hour", "day", "night", "week",
                                                                  "month", "quarter", "year"):
            continue  # "a user", "an account": an article, not a rate
        out[f"rate/{unit}"] += 1
    return +out


@dataclass(slots=True)
class BoundGuard(Guard):
    """Quantifier and bound kinds must agree ("how many copies" vs "how many copies at most")."""

    name: str = "bound"

    def check(self, query: str, candidate: str) -> str | None:
        a, b = set(bounds(query)), set(bounds(candidate))
        return None if a == b else f"bounds {sorted(a)} vs {sorted(b)}"


# --------------------------------------------------------------------------- complement

_COMPLEMENT = re.compile(
    r"\b(?:outside(?:\s+of)?|beyond|without(?!\s+(?:any\s+|a\s+|the\s+)?[a-z]+ing\b)|w/o|excluding|exclude[sd]?|exclusive\s+of|except(?:\s+for)?|excepting|"
    r"other\s+than|apart\s+from|aside\s+from|not\s+including|offsite|off-site|"
    r"out\s+of\s+(?:state|network|country|office|region|area|scope|hours))\b")


def complements(text: str) -> int:
    """How many spatial or set complement cues ``text`` holds."""
    return len(_COMPLEMENT.findall(text.lower()))


@dataclass(slots=True)
class ComplementGuard(Guard):
    """Complement cues ("outside", "without", "excluding" ...) must be as many on both sides."""

    name: str = "complement"

    def check(self, query: str, candidate: str) -> str | None:
        a, b = complements(query), complements(candidate)
        return None if a == b else f"complement cues {a} vs {b}"


# --------------------------------------------------------------------------- relative time

_DEIXIS = {"this": "this", "current": "this", "next": "next", "coming": "next", "upcoming": "next",
           "following": "next", "last": "last", "previous": "last", "past": "last", "prior": "last",
           "preceding": "last"}
_TIME_UNITS = ("day", "week", "weekend", "month", "quarter", "year", "sprint", "season", "semester", "term", "night",
               "morning", "afternoon", "evening", "release", "cycle", "monday", "tuesday", "wednesday", "thursday",
               "friday", "saturday", "sunday", "january", "february", "march", "april", "may", "june", "july",
               "august", "september", "october", "november", "december", "spring", "summer", "autumn", "fall",
               "winter", "holiday", "holidays")
_REL = re.compile(r"\b(" + "|".join(_DEIXIS) + r")\s+(?:(?:fiscal|calendar|financial|academic|school|business|"
                  r"billing|tax)\s+)?(" + "|".join(_TIME_UNITS) + r")s?\b")
_REL_WORD = re.compile(r"\b(today|tonight|tomorrow|yesterday|currently|nowadays|ago|"
                       r"this\s+time|right\s+now|at\s+the\s+moment)\b")
_REL_CANON = {"currently": "now", "nowadays": "now", "right now": "now", "at the moment": "now", "this time": "now"}


def relative_times(text: str) -> set[str]:
    """Times relative to now in ``text``: ``"<this|next|last> <unit>"`` and the words (today, tomorrow ...)."""
    low = re.sub(r"\s+", " ", text.lower())
    out = {f"{_DEIXIS[m.group(1)]} {m.group(2)}" for m in _REL.finditer(low)}
    out |= {_REL_CANON.get(m.group(1), m.group(1)) for m in _REL_WORD.finditer(low)}
    return out


@dataclass(slots=True)
class RelativeTimeGuard(Guard):
    """Times relative to now must be the same ("this week" vs "next week"; "today" vs none)."""

    name: str = "relative_time"

    def check(self, query: str, candidate: str) -> str | None:
        a, b = relative_times(query), relative_times(candidate)
        return None if a == b else f"relative time {sorted(a)} vs {sorted(b)}"


# --------------------------------------------------------------------------- modality

_MODALS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(?:can|cannot|can't|cant|could|couldn't|couldnt|may|might|able\s+to|unable\s+to|allowed|"
                r"permitted|permissible|possible|eligible|ok\s+to|okay\s+to|fine\s+to)\b"), "permission"),
    (re.compile(r"\b(?:must|mustn't|mustnt|ha(?:ve|s|d)\s+to|needs?\s+to|(?:do|does|did)\s+\w+\s+need|required|requires?|"
                r"mandatory|compulsory|obliged|obligated|necessary|should|shouldn't|shouldnt|ought\s+to|"
                r"supposed\s+to|expected\s+to)\b"), "obligation"),
    (re.compile(r"\b(?:will|won't|wont|would|wouldn't|wouldnt|going\s+to(?!\s+(?:the|a|an|my|your|our|their|his|her|"
                r"this|that|school|college|university|work|bed|church|jail|prison|court|sleep|class)\b))\b"), "prediction"),
)
_WILL_NOUN = re.compile(r"\b(?:a|the|my|your|his|her|our|their|free|good|ill|last|living)\s+will\b")
""""A will", "free will": the noun, no modal."""
_PREDICTION_THEN_MODAL = re.compile(
    r"\b(?:will|won't|wont|would|wouldn't|wouldnt|going\s+to)\s+(?:[\w']+\s+){0,3}?"
    r"(?=(?:(?:not|still|ever|also)\s+)?(?:(?:be|become)\s+(?:able|unable|allowed|permitted|eligible|possible|ok|okay|fine|"
    r"required|obliged|obligated|necessary|mandatory|compulsory|expected|supposed)\b|(?:have|has|need|needs)\s+to\b))")
"""A prediction whose verb is another modal ("Will I be able to ...", "Would it be possible ...", "Will my
manager have to ..."): the other modal is what is asked, so the prediction is dropped before reading."""
_POLITE = re.compile(r"\b(?:can|could|would|will)\s+(?:you|u)\s+(?:please\s+)?(?:help|tell|explain|show|give|list|"
                     r"describe|summari[sz]e|check|find|walk|point|let|clarify|share|send|provide)\b"
                     r"|\bwould\s+(?:you|u)\s+(?:mind|be\s+(?:able|willing|so\s+kind))\b|\bi\s+would\s+like\b|\bi'?d\s+like\b")
_WAY_OF_ASKING = re.compile(
    r"\s*(?:how|where)\s+(?:can|could|should|do|does|would|will|may|might|must|shall)\b"
    r"|\s*what\s+(?:can|could|should|must|shall|would|do|does|will)\s+(?:i|we|you|one)\s+"
    r"(?:need\s+to\s+|have\s+to\s+)?do\b"
    r"|\s*what\s+(?:will|would|could|can|might|may|should)\s+(?:happen|occur|be\s+the\s+(?:consequences?|effects?|"
    r"impact|outcome|result))\b")
"""Questions whose modal is a way of asking: "how can I / how should I X", "where can I / where should I
learn X", "what can I do / what should I do / what do I need to do", "what will / would / can happen".
Not "how many / how long / how often can I" (a limit) against "... must I" (a requirement)."""
_CONTACT = re.compile(r"^\s*(?:who|whom|when|which|where|what)\b.*?\b(?:can|could|should|may|must)\s+(?:i|we|you)\s+"
                      r"(?:expect|contact|call|ask|email|e-mail|reach|talk|speak|message|ping|see|visit|go|turn|write)\b")
"""A wh-question about whom to contact or when to expect something: "Who can I contact ..." asks what
"Who should I contact ..." asks, "When can I expect ..." what "When should I expect ..." asks."""
_ABLE = re.compile(r"\b(?:should|ought\s+to|supposed\s+to|expected\s+to|meant\s+to)\s+(?:(?:i|we|you|they|he|she|it)\s+)?"
                   r"be\s+able\s+to\b")
_MONTH_MAY = re.compile(r"(?<!^)(?<![.?!]\s)\b(?:May|Will)\b")  # the month, a name ("Will Smith")


def _modal_text(text: str) -> str | None:
    """The lower-cased question the modal patterns read, or ``None`` when its modal is a way of asking
    (:data:`_WAY_OF_ASKING`, :data:`_CONTACT`): "May" the month, "Will" the name and "can you tell me"
    removed, "should I be able to see X" read as "can I see X", "will I have to X" as "have to X"."""
    low = _ABLE.sub("able to", _POLITE.sub(" ", _MONTH_MAY.sub(" ", text.strip()).lower()))
    low = _PREDICTION_THEN_MODAL.sub("", _WILL_NOUN.sub(" testament", low))
    return None if _WAY_OF_ASKING.match(low) or _CONTACT.match(low) else low


def modalities(text: str) -> set[str]:
    """The modal kinds of a question: ``{"permission", "obligation", "prediction"}`` or a part of it (empty when its
    modal is a way of asking, :func:`_modal_text`; "need" is one only as "need to" or "do I need")."""
    low = _modal_text(text)
    return set() if low is None else {kind for pattern, kind in _MODALS if pattern.search(low)}


def first_modality(text: str) -> str | None:
    """The kind of the question's first modal (:func:`modalities`' reading), or ``None``."""
    low = _modal_text(text)
    if low is None:
        return None
    found = [(m.start(), kind) for pattern, kind in _MODALS for m in [pattern.search(low)] if m]
    return min(found)[1] if found else None


@dataclass(slots=True)
class ModalityGuard(Guard):
    """Permission, obligation and prediction ("Can I ...?" / "Must I ...?" / "Will I ...?"), read from each question's first modal
    (a later clause's "can" / "should" is not what is asked), when both questions carry one."""

    name: str = "modality"

    def check(self, query: str, candidate: str) -> str | None:
        a, b = first_modality(query), first_modality(candidate)
        return None if a is None or b is None or a == b else f"modality {a} vs {b}"


# --------------------------------------------------------------------------- symbols and case

_EDGE_L = "\"'(“‘«"
_EDGE_R = "?!.,;:\"'”’»"
_SOFT = re.compile(r"(?<=[^\W\d_])[-'’/](?=[^\W\d_])|(?<=\w)\.(?=\w)|(?<=\d),(?=\d{3})|(?<=\d)%|\$(?=\d)|"
                   r"(?<=\d)-(?=\d)")  # numbers, "%" and "$" amounts and ranges: the number guard's
_OPERATOR_SPACE = re.compile(r"\s*(==|!=|<=|>=|\*\*|[=<>+*/^])\s*")
_CODE = re.compile(r"[^\w\s]|_")
_DASHES = frozenset({"-", "--", "—", "–", "-.", "&"})


def _chunk_core(chunk: str) -> str:
    left = chunk.lstrip(_EDGE_L)
    core = left.rstrip(_EDGE_R)
    tail = left[len(core):]
    if tail.startswith("!") and (core[-1:].isdigit() or core.endswith(")")):
        return core + "!" * (len(tail) - len(tail.lstrip("!")))  # "5!", "5!!", "(3+2)!": factorials
    if core.endswith(")") and "(" not in core:
        core = core.rstrip(")")
    return core


def code_spans(text: str) -> list[str]:
    """Whitespace-separated spans that hold a symbol beyond sentence punctuation, a hyphen inside a
    word, an apostrophe, a dot inside a name or a thousands comma; sorted, case kept."""
    # "10 / 2" = "10/2", "f(x) =sin" = "f(x)=sin", "11 %" = "11%"
    chunks = _OPERATOR_SPACE.sub(r"\1", re.sub(r"(?<=\d)\s+%", "%", text)).split()
    out = []
    for i, ch in enumerate(chunks):
        core = _chunk_core(ch)
        if not core or not _CODE.search(_SOFT.sub("", core)):
            continue
        if core in _DASHES:  # a dash between words is punctuation; between numbers an operator
            near = [_chunk_core(c) for c in chunks[max(i - 1, 0):i] + chunks[i + 1:i + 2]]
            if not (len(near) == 2 and all(re.fullmatch(r"[\d.]+|\w", n) for n in near)):
                continue
        out.append(core)
    return sorted(out)


_TOKEN = re.compile(r"[^\W_]+")


def _case_forms(text: str) -> dict[str, Counter[str]]:
    """``{lower-cased word: forms as written}`` outside code spans; a sentence's first word written
    with a capital first letter alone is lower-cased (such a capital only starts the sentence)."""
    forms: dict[str, Counter[str]] = {}
    initial = True
    for ch in text.split():
        core = _chunk_core(ch)
        code = bool(_CODE.search(_SOFT.sub("", core)))
        for tok in [] if code else _TOKEN.findall(core):
            forms.setdefault(tok.lower(), Counter())[tok.lower() if initial and tok[1:] == tok[1:].lower() else tok] += 1
            initial = False
        if code:
            initial = False
        if ch.rstrip("\"')”’»").endswith((".", "?", "!", ":")):
            initial = True
    return forms


def _case_matters(x: str, y: str) -> bool:
    if x.lower() == "i":
        return False
    if len(x) == 1:
        return True
    if len(x) >= 3 and {_shape(x), _shape(y)} == {"title", "upper"}:
        return False  # "Seo" / "SEO": a title-cased acronym
    up_x, up_y = x != x.lower(), y != y.lower()
    return (up_x and up_y) or len(x) <= 2


def _shape(w: str) -> str:
    return "upper" if w.isupper() else "title" if w[:1].isupper() and w[1:].islower() else "other"


@dataclass(slots=True)
class SymbolGuard(Guard):
    """Code-like spans must be equal (case and symbols kept); a word in two cases differs where case
    carries meaning (see the module)."""

    name: str = "symbol"

    def check(self, query: str, candidate: str) -> str | None:
        a, b = code_spans(query), code_spans(candidate)
        if a != b:
            return f"code or operators {a} vs {b}"
        if not re.search(r"[a-z]", query) or not re.search(r"[a-z]", candidate):
            return None  # written in capitals: no case information
        fa, fb = _case_forms(query), _case_forms(candidate)
        for w in sorted(fa.keys() & fb.keys()):  # sorted: one reason in every process
            xa, xb = fa[w] - fb[w], fb[w] - fa[w]  # forms written more often on one side
            if not xa or not xb:
                continue
            x, y = min(xa), min(xb)
            if _case_matters(x, y):
                return f"case {x!r} vs {y!r}"
        return None


_GROUP = {"Kana": "Han"}  # Japanese writes one sentence in both
_SENTENCE_END = frozenset(".?!:;¿¡。？！…")


def _starts_sentence(text: str, pos: int) -> bool:
    """Whether the word at ``pos`` is the first of a sentence (after spaces, quotes and brackets)."""
    i = pos - 1
    while i >= 0 and (text[i].isspace() or unicodedata.category(text[i]) in ("Pi", "Pf", "Ps") or text[i] in "\"'"):
        i -= 1
    return i < 0 or text[i] in _SENTENCE_END


def unread_text(text: str) -> list[str]:
    """What of ``text`` the word guards cannot read, as case-folded text to compare (sorted): each
    non-ASCII symbol, each letterlike symbol or lone letter of a script that is not the question's own,
    each word in a script other than the question's own (the script with the most letters, Han and
    Kana counted as one; Latin on a tie), and each capitalised word of the question's own script, if that is cased and not plain
    English (Cyrillic, Greek, accented Latin), that does not start a sentence (a name)."""
    if text.isascii():
        return []
    ws = script_words(text)
    letters: Counter[str] = Counter()
    for w in ws:
        if w.script != "symbol":
            letters[_GROUP.get(w.script, w.script)] += len(w.text)
    own = max(letters, key=lambda s: (letters[s], s == "Latin")) if letters else "Latin"
    out = [ch for ch in text if not ch.isascii() and unicodedata.category(ch)[0] == "S"]
    for w in ws:
        if _GROUP.get(w.script, w.script) != own:
            out.append(w.text.casefold())
        elif not w.text.isascii() and w.text[:1].isupper() and not _starts_sentence(text, w.start):
            out.append(w.text.casefold())
    return sorted(out)


@dataclass(slots=True)
class ScriptGuard(Guard):
    """What the word guards cannot read (:func:`unread_text`: symbols, names in other scripts) must be
    the same text; digits of every script are the number guard's."""

    name: str = "script"

    def check(self, query: str, candidate: str) -> str | None:
        a, b = unread_text(query), unread_text(candidate)
        if a == b:
            return None
        ca, cb = Counter(a), Counter(b)
        return f"text the word guards cannot read {sorted((ca - cb).elements())} vs {sorted((cb - ca).elements())}"


__all__ = ["BoundGuard", "ComplementGuard", "ModalityGuard", "RelativeTimeGuard", "ScriptGuard", "SymbolGuard", "bounds", "code_spans", "complements",
           "first_modality", "modalities", "relative_times", "unread_text"]
