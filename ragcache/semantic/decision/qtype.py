"""Question type: what kind of answer a question asks for (a person, a time, a place, a reason ...).

"Who founded X?" and "When was X founded?" share every content word and embed at cosine
0.85-0.93; they want different answers. :func:`question_type` reads the type from the
interrogative that opens the question's main clause (after a leading clause such as "Using
pandas," or a courtesy such as "could you tell me"), and :class:`QuestionTypeGuard` rejects a
candidate whose type differs. Paraphrases that keep the type map to one class:

=============  =====================================================================
class          examples
=============  =====================================================================
``who``        who / whom / whose; what or which person, company, team ...
``when``       when; what time / year / date / day / month; how long ago; since when
``where``      where; what place / city / country ... + do / can ...
``where_acc..`` "where can / do I ..." (where to get at something): compatible with ``where`` and ``how``
``why``        why; how come; what is the reason / cause / purpose; for what reason
``how``        how (manner); what is the best way / are the steps; what should I do
``how_many``   how many; what number of; how many + unit of time is ``how_long`` (the counted noun
               of the phrase decides: "how many unused days of leave" as "how many unused leave days")
``how_much``   how much; what is the price / cost of; what does X cost
``how_long``   how long; how much time; what is the duration / time difference; how many days / hours ...
``how_often``  how often / frequently; how many times a day / week ...
``amount``     what is the entitlement / allowance / quota: compatible with ``what``, ``how_many``, ``how_much``, ``how_long``
``how_<adj>``  how far / old / big / tall / fast ... (each its own class)
``what``       what / which (a thing, an entity); compatible with ``how``
``yesno``      is / are / can / do / does / should / will ... (a yes-no question)
``possible``   "is it possible to ...": compatible with ``yesno`` and ``how``
``choice``     "is X or Y ...?" (an alternative question): picks one of two
``None``       no interrogative found (a keyword query): compatible with every class
=============  =====================================================================

"Can you tell me when ...", "Do you know where ..." and "Is there a way to ..." are read as the
embedded question (``when`` / ``where`` / ``how``). Types are compared by :func:`compatible`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragcache.limits import THRESHOLD_FLOOR
from ragcache.semantic.decision.guard_protocol import Guard

_WH = frozenset({"who", "whom", "whose", "what", "whats", "which", "when", "where", "wheres", "why", "how", "hows",
                 "whos", "whens", "whys"})
_AUX = frozenset({"is", "are", "am", "was", "were", "do", "does", "did", "can", "could", "will", "would", "should",
                  "shall", "may", "might", "must", "has", "have", "had", "isnt", "arent", "wasnt", "werent", "dont",
                  "doesnt", "didnt", "cant", "cannot", "couldnt", "wont", "wouldnt", "shouldnt", "hasnt", "havent"})
_FILLERS = frozenset({"but", "and", "so", "ok", "okay", "please", "then", "well", "also", "now", "hey", "hi", "quick",
                      "question", "just", "or", "sorry", "thanks", "basically", "actually", "honestly", "seriously",
                      "anyway", "like", "um", "uh", "yes", "no", "in", "short", "i", "wonder", "wondering", "was",
                      "am", "curious", "tell", "me", "explain", "know", "to", "want", "would", "need"})
_ASKERS = frozenset({"you", "anyone", "anybody", "someone", "somebody", "u", "one", "we", "quora", "people"})
_ASK_VERBS = frozenset({"tell", "know", "explain", "show", "help", "say", "advise", "recommend", "suggest", "let",
                        "describe", "guide", "clarify", "share", "please", "kindly", "pls"})

_PERSON = frozenset({"person", "people", "man", "men", "woman", "women", "guy", "girl", "boy", "actor", "actress",
                     "president", "ceo", "founder", "inventor", "author", "writer", "singer", "player", "leader",
                     "politician", "company", "companies", "team", "teams", "celebrity", "scientist", "king",
                     "queen", "emperor", "minister", "director", "owner", "artist", "band", "brand", "organization",
                     "organisation", "firm", "individual", "individuals"})
_TIME = frozenset({"time", "times", "year", "years", "date", "dates", "day", "days", "month", "months", "hour",
                   "century", "decade", "age", "era", "period", "season", "week", "moment", "point", "o'clock"})
_PLACE = frozenset({"place", "places", "city", "cities", "country", "countries", "location", "locations", "address",
                    "state", "states", "town", "area", "region", "site", "spot", "continent", "street", "venue",
                    "destination", "where"})
_REASON = frozenset({"reason", "reasons", "cause", "causes", "purpose", "motive", "rationale", "point"})
_WAY = frozenset({"way", "ways", "steps", "step", "procedure", "process", "method", "methods", "approach", "tips",
                  "strategy", "strategies", "technique", "techniques", "instructions", "means"})
_PRICE = frozenset({"price", "prices", "cost", "costs", "fee", "fees", "charge", "charges", "rate", "rates", "salary",
                    "pay", "amount"})
_DURATION = frozenset({"duration", "length"})
_AMOUNT = frozenset({"entitlement", "entitlements", "allowance", "allowances", "quota", "quotas", "allotment"})
"""Nouns of an allowed amount: "what is the leave entitlement" asks how many days, "the data allowance" how much."""
_COMPARATIVE = {"older": "how_old", "younger": "how_old", "taller": "how_tall", "shorter": "how_tall",
                "longer": "how_long", "farther": "how_far", "further": "how_far", "bigger": "how_big",
                "larger": "how_big", "heavier": "how_heavy", "faster": "how_fast", "slower": "how_fast"}
""""How much <comparative>" asks the measure of that adjective ("how much older" is an age)."""
_NOT_NOUN = frozenset({"per", "each", "every", "a", "an", "the", "in", "of", "for", "this", "that", "do", "does",
                       "can", "will", "should", "left", "ago", "until", "before", "after"})
_GAPS = frozenset({"difference", "gap", "offset"})
_GAP_CLASS = {"time": "how_long", "age": "how_old", "price": "how_much", "cost": "how_much", "height": "how_tall"}
"""A measured difference: "what is the time difference" asks "how many hours" (``how_long``)."""
_FREQ = frozenset({"frequency"})
_TIME_UNITS = frozenset({"seconds", "minutes", "hours", "days", "weeks", "months", "years", "decades", "nights",
                         "second", "minute", "hour", "day", "week", "month", "year"})
_HOW_ADJ = frozenset({"far", "old", "big", "tall", "fast", "deep", "large", "high", "heavy", "wide", "hot", "cold",
                      "close", "early", "late", "safe", "good", "bad", "accurate", "reliable", "hard", "difficult",
                      "easy", "important", "effective", "strong", "expensive", "cheap", "small", "long-term",
                      "healthy", "dangerous", "common", "rare", "likely", "useful", "secure", "loud", "bright",
                      "fat", "thick", "soon", "quickly", "much", "many"})
# adjectives whose "how X" asks for a yes/no-like degree rather than a measurement
_DEGREE_ADJ = frozenset({"safe", "good", "bad", "accurate", "reliable", "hard", "difficult", "easy", "important",
                         "effective", "strong", "healthy", "dangerous", "common", "rare", "likely", "useful",
                         "secure", "expensive", "cheap"})
_CLAUSE = re.compile(r"[,;:()\[\]]|\s-\s|\s--\s")
_SENT = re.compile(r"(?<=[.?!])\s+")
_TOKEN = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*")


def _tokens(text: str) -> list[str]:
    return [t.replace("'", "") for t in _TOKEN.findall(text.lower().replace("\u2019", "'"))]


_IRREGULAR_PLURALS = frozenset({"people", "men", "women", "children", "staff", "personnel", "police", "feet", "teeth",
                                "mice", "geese", "sheep", "fish", "deer", "crew", "folks", "data", "media", "criteria"})
_NOT_PLURAL_ENDINGS = ("ss", "us", "is", "ous", "ics")
_COUNTED_MODIFIERS = 3
"""Words read before the counted noun of "how many ...": "how many unused paid leave days"."""


def _plural_noun(word: str) -> bool:
    """A word that reads as a plural noun: an irregular plural, or one ending in -s but not -ss / -us /
    -is / -ous / -ics ("bonus", "class", "various" are not)."""
    return word in _IRREGULAR_PLURALS or (len(word) > 2 and word.endswith("s") and not word.endswith(_NOT_PLURAL_ENDINGS))


def _counted_head(toks: list[str], j: int) -> str:
    """The noun that "how many" counts, read from ``toks[j]`` (the word after "many") on: the first
    plural noun or time unit, passing over up to :data:`_COUNTED_MODIFIERS` modifiers ("how many
    unused leave days", "how many unused days of leave": ``days``); the phrase ends at an auxiliary,
    a preposition or determiner, a number or an interrogative, and a plural noun that is not a time
    unit ("how many students miss days of school": ``students``) is the head. ``""``: none found."""
    for t in toks[j : j + _COUNTED_MODIFIERS + 1]:
        if t in _AUX or t in _NOT_NOUN or t in _WH or t.isdigit():
            return ""
        if t in _TIME_UNITS or t == "times" or _plural_noun(t):
            return t
    return ""


def _wh_class(toks: list[str], i: int) -> str:
    """Class of the interrogative at ``toks[i]`` given the words after it."""
    w = toks[i]
    nxt = toks[i + 1] if i + 1 < len(toks) else ""
    nxt2 = toks[i + 2] if i + 2 < len(toks) else ""
    if w in ("who", "whom", "whos", "whose"):
        return "who"
    if w in ("when", "whens"):
        return "when"
    if w in ("where", "wheres"):
        if nxt in ("can", "do", "should", "could", "would", "may") and nxt2 in ("i", "we", "you", "one", "u"):
            return "where_access"  # "where can I see my order status" ~ "how do I track my order"
        return "where"
    if w in ("why", "whys"):
        return "why"
    if w in ("how", "hows"):
        if nxt == "come":
            return "why"
        if nxt == "many":
            head = _counted_head(toks, i + 2)
            if head == "times":
                return "how_often"
            return "how_long" if head in _TIME_UNITS else "how_many"  # "how many vacation days" counts days
        if nxt == "much":
            if nxt2 in _COMPARATIVE:
                return _COMPARATIVE[nxt2]  # "how much older" ~ "how old ... compared to" ~ "the age gap"
            return "how_long" if nxt2 == "time" else "how_much"
        if nxt == "long":
            return "when" if nxt2 == "ago" else "how_long"
        if nxt in ("often", "frequently"):
            return "how_often"
        if nxt in _HOW_ADJ:
            return f"how_{nxt}"
        return "how"
    # what / which (+ noun)
    rest = toks[i + 1 : i + 5]
    if nxt in ("is", "are", "was", "were", "s") or w == "whats":
        rest = toks[i + 1 : i + 6]
    if w in ("what", "whats", "which"):
        if any(r in _REASON for r in rest[:4]) and not ("point" in rest[:4] and "what" != w):
            return "why"
        if nxt == "if" or "happens" in rest[:2] or "happen" in rest[:3]:
            return "what"
        if nxt in ("makes", "made", "causes", "caused", "make", "cause"):
            return "why"  # "what makes the sky blue" ~ "why is the sky blue"
        if any(r in _WAY for r in rest[:4]) or (nxt in ("should", "can", "could", "do", "must")
                                                and "do" in toks[i + 2 : i + 6]):
            return "how"
        if nxt in _PERSON or nxt2 in _PERSON and nxt in ("kind", "sort", "type"):
            return "who"
        if nxt in _TIME or (nxt in ("day", "time") and nxt2 in ("of",)):
            return "when"
        if nxt in _PLACE and nxt2 in ("do", "does", "did", "should", "can", "could", "would", "will"):
            return "where"  # "what city do you live in" (not "which city is the capital": an entity)
        if nxt in ("number", "amount") and nxt2 == "of":
            return "how_many" if nxt == "number" else "how_much"
        if any(r in _PRICE for r in rest[:3]) or (len(toks) > i + 2 and toks[-1] in ("cost", "costs")):
            return "how_much"
        if any(r in _DURATION for r in rest[:3]):
            return "how_long"
        if any(r in _AMOUNT for r in rest):
            return "amount"  # "what is the leave entitlement" ~ "how many days of leave"
        gap = next((rest[k - 1] for k in range(1, min(len(rest), 4)) if rest[k] in _GAPS), None)
        if gap in _GAP_CLASS:
            return _GAP_CLASS[gap]  # "what is the time difference" asks how long; "the age gap" how old
        if any(r in _FREQ for r in rest[:3]):
            return "how_often"
        return "what"
    return "what"


def _clause_type(toks: list[str]) -> str | None:
    """Type of one clause when it opens with an interrogative or an auxiliary, else None."""
    return _clause_read(toks)[0]


def _clause_read(toks: list[str]) -> tuple[str | None, str | None]:
    """``(type, opener)`` of one clause: its type (:func:`_clause_type`) and the interrogative or auxiliary word
    it was read from; ``(None, None)`` when it opens with neither."""
    j = 0
    while j < len(toks) and toks[j] in _FILLERS and toks[j] not in _AUX:
        j += 1
    if j >= len(toks):
        return None, None
    w = toks[j]
    # prepositions before an interrogative: "in which city", "at what time", "for what reason", "since when"
    if w in ("in", "at", "on", "for", "since", "from", "to", "by", "with", "of", "until", "till") and j + 1 < len(toks) \
            and toks[j + 1] in _WH:
        c = _wh_class(toks, j + 1)
        if w == "since" and toks[j + 1] == "when":
            return "when", "when"
        return c, toks[j + 1]
    if w in _WH:
        return _wh_class(toks, j), w
    if w in _AUX:
        rest = toks[j + 1 :]
        # indirect question: "can you tell me when ...", "do you know where ...", "is there a way to ..."
        if rest[:1] and rest[0] in _ASKERS and len(rest) > 1 and rest[1] in _ASK_VERBS:
            for k in range(2, min(len(rest), 7)):
                if rest[k] in _WH:
                    return _wh_class(rest, k), rest[k]
            if rest[1] in ("recommend", "suggest"):
                return "what", "what"
        if rest[:2] in (["there", "a"], ["there", "any"]) and any(r in _WAY for r in rest[2:4]):
            return "how", w
        if rest[:3] in (["it", "possible", "to"], ["it", "possible", "for"]):
            return "possible", w  # "is it possible to recover X": compatible with yes-no and with "how can I"
        if "or" in rest[1:]:
            return "choice", w  # an alternative question ("is it fact or fiction?") picks one of two
        return "yesno", w
    return None, None


def question_type(text: str) -> str | None:
    """The answer type ``text`` asks for (see the module table), or ``None`` when it has no interrogative.

    The first sentence ending in ``?`` is read (a follow-up "Why?" does not change the main
    ask), else the whole text; within it, the first clause (split at commas, colons,
    parentheses) that opens with an interrogative or an auxiliary decides, except that a leading
    "When ..., what ..." / "If ..., how ..." clause is subordinate and the next clause decides;
    failing that, the first interrogative word anywhere ("dark mode app how").
    """
    return _read(text)[0]


def question_opener(text: str) -> str | None:
    """The interrogative or auxiliary word :func:`question_type` read the type from ("what" for "What is the
    deadline for X?", "when" for "When is X due?", "is" for "Is X open?"), or ``None`` with no interrogative."""
    return _read(text)[1]


def _read(text: str) -> tuple[str | None, str | None]:
    """``(question_type(text), question_opener(text))``, read once."""
    sents = [s for s in _SENT.split(text.strip()) if s]
    asks = [s for s in sents if s.rstrip().endswith("?")]
    order = asks + [s for s in sents if s not in asks]
    for sent in order:
        typed = [(toks, c) for toks in (_tokens(cl) for cl in _CLAUSE.split(sent)) if toks
                 for c in [_clause_read(toks)] if c[0] is not None]
        if typed:
            (toks0, c0), later = typed[0], typed[1:]
            if later and toks0[0] in ("when", "where", "if", "while", "once", "whenever") and \
                    later[0][0][0] in _WH | _AUX:
                return later[0][1]
            return c0
    toks = _tokens(text)
    for i, t in enumerate(toks):
        if t in _WH:
            return _wh_class(toks, i), t
    return None, None


_COMPATIBLE = {frozenset({"amount", "what"}), frozenset({"amount", "how_many"}), frozenset({"amount", "how_much"}), frozenset({"amount", "how_long"}),
               frozenset({"what", "how"}), frozenset({"possible", "yesno"}), frozenset({"possible", "how"}), frozenset({"where_access", "where"}), frozenset({"where_access", "how"})}


def compatible(a: str | None, b: str | None, *, loose: bool = True) -> bool:
    """Whether answers to questions of types ``a`` and ``b`` can be the same answer.

    Equal types are; ``None`` (no interrogative) is compatible with anything; with ``loose`` (the
    default), also the pairs of paraphrases that change the interrogative: ``what`` is compatible
    with ``how`` ("what is the way to" / "how do I"); ``where_access`` ("where can I see ...") with
    ``where`` and ``how``; ``possible`` with ``yesno`` and ``how``; ``amount`` ("what is the leave
    entitlement") with ``what``, ``how_many``, ``how_much`` and ``how_long``. Any other pair is not.
    """
    if a is None or b is None or a == b:
        return True
    return loose and frozenset({a, b}) in _COMPATIBLE


@dataclass(slots=True)
class QuestionTypeGuard(Guard):
    """Rejects a candidate that asks for another kind of answer (who / when / where / why / how
    many / yes-no ...); see :func:`question_type` and :func:`compatible`.

    The loose pairs of :func:`compatible` ("where can I see my order status" / "how do I track my
    order") are paraphrases only when the two questions are near: at a cosine similarity below
    ``loose_from`` (default :data:`~ragcache.limits.THRESHOLD_FLOOR`, 0.5; reached
    only with a threshold below that floor) the types must be the same, so "Where do I find the
    on-call calendar?" is never served "How do I rotate an API key?"'s answer (cosine 0.11), whatever
    the threshold. Without a similarity (``check(query, candidate)``) the loose pairs are accepted.
    """

    name: str = "question_type"
    loose_from: float = THRESHOLD_FLOOR
    reads_similarity: bool = True
    """:meth:`~ragcache.semantic.decision.guards.GuardSet.check` passes the pair's similarity."""

    def check(self, query: str, candidate: str, similarity: float | None = None) -> str | None:
        a, b = question_type(query), question_type(candidate)
        loose = similarity is None or similarity >= self.loose_from
        if compatible(a, b, loose=loose):
            return None
        if compatible(a, b):
            return f"question type {a} vs {b} (at cosine {similarity:.2f} < {self.loose_from:g} only the same type)"
        return f"question type {a} vs {b}"


_COPULA = frozenset({"is", "are", "was", "were", "s"})
_CONTAINER = frozenset({"in", "inside", "on", "under", "behind", "within", "at", "into"})
_TAIL_PREPS = frozenset({"of", "from", "for", "with", "like", "about", "made"})
_AS_BE = frozenset({"mean", "means", "stand"})  # "what does API mean / stand for" asks what API is
_FOCUS_VERBS = frozenset(
    ["contain", "contains", "include", "includes", "hold", "holds", "have", "has", "need", "needs", "require", "requires", "eat", "eats", "do", "does", "use", "uses", "cover", "covers", "involve", "involves", "offer", "offers", "provide", "provides", "return", "returns", "cause", "causes", "say", "says", "look", "looks", "consist", "consists", "support", "supports", "show", "shows", "want", "wants", "measure", "measures", "produce", "produces", "make", "makes", "sell", "sells", "feed", "feeds", "store", "stores", "carry", "carries", "cost", "costs"])


def question_focus(text: str) -> str | None:
    """What a "what" question asks about the thing it names: ``"be"`` for "what is X" (and "what does
    X mean"), ``"be_in"`` for "what is in X", ``"be_<prep>"`` for "what is X made of / used for /
    like", ``"do_<verb>"`` for "what does X contain / include / need"; ``None`` for any other question
    or when no such verb is found (then nothing is compared)."""
    sents = [s for s in _SENT.split(text.strip()) if s]
    asks = [s for s in sents if s.rstrip().endswith("?")] or sents
    toks = _tokens(asks[0]) if asks else []
    j = next((i for i, t in enumerate(toks[:4]) if t in ("what", "whats")), None)
    if j is None:
        return None
    after = (["is"] if toks[j] == "whats" else []) + toks[j + 1:]
    if not after:
        return None
    if after[0] in _COPULA:
        rest = after[1:]
        if rest and rest[0] in _CONTAINER:
            return "be_in"
        if len(rest) > 1 and rest[-1] in _TAIL_PREPS:
            return "be_of" if rest[-1] in ("of", "from", "made") else f"be_{rest[-1]}"
        return "be"
    if after[0] in ("do", "does", "did"):
        verb = next((t for t in after[2:] if t in _FOCUS_VERBS | _AS_BE), None)
        if verb is None:
            return None
        return "be" if verb in _AS_BE else "do_" + verb.removesuffix("s")
    return None


@dataclass(slots=True)
class QuestionFocusGuard(Guard):
    """Rejects "what does X contain" against "what is X" (and "what is in X", "what is X made of"):
    the same thing named, another question about it (:func:`question_focus`). Two "what does X
    <verb>" questions with different verbs are left to the other guards."""

    name: str = "focus"

    def check(self, query: str, candidate: str) -> str | None:
        a, b = question_focus(query), question_focus(candidate)
        if a is None or b is None or a == b or not (a.startswith("be") or b.startswith("be")):
            return None
        return f"question focus {a} vs {b}"
