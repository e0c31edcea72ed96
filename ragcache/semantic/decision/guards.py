"""Guards against false semantic hits.

A cosine threshold alone cannot separate "Is the API rate limited?" from "Is
the API not rate limited?" (0.93-0.98 with MiniLM) while real paraphrases score
0.4-0.9. Each guard here compares the query with the best cached candidates and
names a reason when they ask different things. A rejected candidate is not
served; the rejection is counted by reason in :class:`SemanticStats`.

The guards are the rows of :data:`GUARDS`, in the order they run (the first failing one names the
reason): each guard's name, its class and what its rejection means, the one table that
:meth:`GuardSet.default`, its validation (``disable=``), :data:`GUARD_REASONS` and
:data:`DIFFERENT_QUESTION` read.

All guards are symmetric and pure. They are lexical rules, so they reject some
true paraphrases ("credit card" vs "card"); the cache prefers a miss to a wrong
answer.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ragcache.semantic.decision.guard_protocol import Guard, declared_guard
from ragcache.semantic.decision.lexicon import lexicon
from ragcache.semantic.decision.meaning_guards import (
    BoundGuard,
    ComplementGuard,
    ModalityGuard,
    RelativeTimeGuard,
    ScriptGuard,
    SymbolGuard,
)
from ragcache.semantic.decision.order_guards import (  # noqa: F401 (re-exported)
    SYNONYMS,
    DirectionGuard,
    SubstitutionGuard,
)
from ragcache.semantic.decision.qtype import QuestionFocusGuard, QuestionTypeGuard
from ragcache.semantic.records import GuardVerdict as GuardVerdict  # re-exported: the verdict of every decider
from ragcache.semantic.text import (
    NEGATIONS,
    contains_fuzzy,
    numbers,
    numbers_in_order,
    request_core,
    split_words,
    stem,
    words,
)


# --------------------------------------------------------------------------- tables

ANTONYM_PAIRS: tuple[tuple[str, str], ...] = tuple(
    tuple(p.split("/"))  # type: ignore[misc]
    for p in ["add/remove", "add/delete", "enable/disable", "on/off", "up/down", "in/out", "increase/decrease", "increase/reduce", "upload/download", "before/after", "min/max", "minimum/maximum", "high/low", "higher/lower", "highest/lowest", "import/export", "push/pull", "encrypt/decrypt", "encode/decode", "start/stop", "start/end", "begin/end", "open/close", "buy/sell", "send/receive", "lock/unlock", "show/hide", "allow/block", "allow/deny", "accept/reject", "approve/deny", "include/exclude", "with/without", "above/below", "over/under", "more/less", "most/least", "more/fewer", "cheap/expensive", "cheapest/priciest", "fast/slow", "faster/slower", "old/new", "oldest/newest", "older/newer", "login/logout", "join/leave", "hot/cold", "gain/lose", "win/lose", "positive/negative", "true/false", "success/failure", "inbound/outbound", "incoming/outgoing", "deposit/withdraw", "credit/debit", "input/output", "upper/lower", "uppercase/lowercase", "left/right", "top/bottom", "front/back", "inside/outside", "public/private", "internal/external", "forward/backward", "ascending/descending", "horizontal/vertical", "expand/collapse", "compress/decompress", "zip/unzip", "serialize/deserialize", "install/uninstall", "mount/unmount", "attach/detach", "connect/disconnect", "merge/split", "grant/revoke", "maximize/minimize", "rise/fall", "light/dark", "day/night", "past/future", "yesterday/tomorrow", "long/short", "large/small", "big/small", "heavy/light", "wide/narrow", "male/female", "arrival/departure", "arrive/depart", "import/export", "hire/fire", "borrow/lend", "lend/borrow", "subscribe/unsubscribe", "follow/unfollow", "mute/unmute", "pin/unpin", "archive/unarchive", "block/unblock", "freeze/unfreeze", "pause/resume", "plus/minus"]
)
"""Word pairs with opposite meaning; a pair split across the two questions is a rejection."""

SCOPE_GROUPS: tuple[frozenset[str], ...] = tuple(
    frozenset(g.split(","))
    for g in ["hourly,daily,weekly,biweekly,monthly,quarterly,yearly,annual,annually", "second,minute,hour,day,week,fortnight,month,quarter,year,decade", "all,one,single,some,none,every,each,both,either,several,many,few,everyone,everybody,everything", "whole,part,partial,entire,half", "first,last,second,third,next,previous,final,initial", "early,late,mid,earliest,latest", "today,tomorrow,yesterday,tonight", "morning,afternoon,evening,night,noon,midnight", "local,remote,global", "adult,adults,child,children,kid,kids,infant,teen,teenager,senior"]
)
"""Groups of mutually exclusive words: two different members across the questions is a rejection."""


_SCOPE_CANON = {"every": "all", "each": "all", "everyone": "all", "everybody": "all", "everything": "all",
                "entire": "whole", "single": "one", "annually": "annual", "yearly": "annual",
                "adults": "adult", "children": "child", "kids": "child", "kid": "child"}
_PREFIX_ANTONYMS = ("un", "dis", "non", "de", "in", "im", "ir", "il", "mis")


def _antonym_prefix(a: str, b: str) -> bool:
    """"archive"/"unarchive", "encrypt"/"decrypt" (en-/de-), "connect"/"disconnect"."""
    if a == b or len(a) < 4 or len(b) < 4:
        return False
    for x, y in ((a, b), (b, a)):
        for p in _PREFIX_ANTONYMS:
            if y == p + x and len(x) >= 4:
                return True
    return a[:2] in ("en", "de") and b[:2] in ("en", "de") and a[:2] != b[:2] and a[2:] == b[2:] and len(a) >= 6


# --------------------------------------------------------------------------- guards


_UNIT = re.compile(r"[a-z]{2,}")


def _number_units(text: str) -> list[tuple[str, str]]:
    """``(number, unit)`` in reading order; the unit is the first word after the number that is
    not itself a number ("2 apples" -> apples; in "1-2 hours" both numbers have the unit hours)."""
    low = text.lower()
    found = numbers_in_order(text)
    out = []
    for pos, v in found:
        m = _UNIT.search(low, pos + 1)
        while m is not None and numbers(m.group(0)):
            m = _UNIT.search(low, m.end())
        out.append((v, m.group(0) if m else ""))
    return out


_MERIDIEM = re.compile(r"\d\s*(?:o['’]?\s?clock\s+)?(?:(a\.?\s?m\b\.?)|(p\.?\s?m\b\.?)|(in\s+the\s+morning\b)|"
                       r"(in\s+the\s+(?:afternoon|evening)\b|at\s+night\b|tonight\b))", re.IGNORECASE)


def meridiems(text: str) -> list[str]:
    """``"am"`` / ``"pm"`` for each clock time that says which half of the day, in order ("10 am", "10pm",
    "9 a.m.", "9 in the morning", "7 in the evening"). "10 am" and "10 pm" share their number, so the
    number check alone would pass them."""
    return ["am" if m.group(1) or m.group(3) else "pm" for m in _MERIDIEM.finditer(text)]


@dataclass(slots=True)
class NumberGuard(Guard):
    """Numbers (and ``$``/``%`` amounts, versions, years) must be equal, in order, and a clock time's
    half of the day with them ("10 am" / "10 pm", :func:`meridiems`).

    Equal as multisets is not enough: "bucket 1-2" and "bucket 2-1" (cosine 0.99) name different
    buckets. The same numbers in another order pass only when each is tied to its own word and
    keeps it ("2 apples and 3 pears" / "3 pears and 2 apples"); numbers sharing one word ("1-2 hours"
    vs "2-1 hours", "from 2 to 5 pm" vs "from 5 to 2 pm") must keep their order.
    """

    name: str = "number"

    def check(self, query: str, candidate: str) -> str | None:
        a, b = _number_units(query), _number_units(candidate)
        ma, mb = meridiems(query), meridiems(candidate)
        if ma != mb:
            return f"times of day {ma} vs {mb}"
        if [v for v, _ in a] == [v for v, _ in b]:
            return None
        if sorted(v for v, _ in a) != sorted(v for v, _ in b):
            return f"numbers {sorted(v for v, _ in a)} != {sorted(v for v, _ in b)}"
        units = [u for _, u in a]
        if len(set(units)) == len(units) and sorted(a) == sorted(b):
            return None
        return f"numbers in another order: {[v for v, _ in a]} vs {[v for v, _ in b]}"


@dataclass(slots=True)
class NegationGuard(Guard):
    """The number of negation cues must be equal ("not", "no", "never", "don't", "cannot" ...)."""

    name: str = "negation"
    cues: frozenset[str] = NEGATIONS

    def check(self, query: str, candidate: str) -> str | None:
        a = [w for w in words(query) if w in self.cues]
        b = [w for w in words(candidate) if w in self.cues]
        return None if len(a) == len(b) else f"negation {a} vs {b}"


@dataclass(slots=True)
class AntonymGuard(Guard):
    """No antonym pair may split across the questions (one side has x, the other y, not both)."""

    name: str = "antonym"
    pairs: Sequence[tuple[str, str]] = ANTONYM_PAIRS
    wordnet: bool = True

    def check(self, query: str, candidate: str) -> str | None:
        a, b = set(split_words(query)), set(split_words(candidate))
        a |= {stem(w) for w in a}
        b |= {stem(w) for w in b}
        for x, y in self.pairs:
            if (x in a and y in b and x not in b and y not in a) or (y in a and x in b and y not in b and x not in a):
                return f"antonyms {x}/{y}"
        only_a, only_b = a - b, b - a
        lex = lexicon() if self.wordnet else None
        for x in sorted(only_a):  # sorted: the reason names the same pair in every process (set order is salted)
            for y in sorted(only_b):
                if _antonym_prefix(x, y) or (lex is not None and x.isalpha() and y.isalpha() and lex.antonyms(x, y)):
                    return f"antonyms {x}/{y}"
        return None


@dataclass(slots=True)
class ScopeGuard(Guard):
    """Words from one exclusive group (daily/monthly, all/one, first/last ...) must agree."""

    name: str = "scope"
    groups: Sequence[frozenset[str]] = SCOPE_GROUPS

    def check(self, query: str, candidate: str) -> str | None:
        a = {_SCOPE_CANON.get(w, stem(w)) for w in split_words(query)}
        b = {_SCOPE_CANON.get(w, stem(w)) for w in split_words(candidate)}
        for g in self.groups:
            ga = {_SCOPE_CANON.get(w, stem(w)) for w in g}
            sa, sb = a & ga, b & ga
            if sa and sb and sa != sb:
                return f"scope {sorted(sa)} vs {sorted(sb)}"
        return None


_QUOTED = re.compile(r'"([^"]{1,80})"|`([^`]{1,80})`|(?<!\w)\'([^\']{1,80})\'(?!\w)')


def _entities(text: str) -> tuple[set[str], set[str]]:
    """(names, exact): names are capitalised non-initial words and acronyms (compared fuzzily);
    exact are quoted strings and code-like identifiers (compared exactly)."""
    names: set[str] = set()
    exact: set[str] = {m.lower() for m in _QUOTED.findall(text) for m in m if m}
    for sent in re.split(r"(?<=[.?!])\s+", text):
        toks = re.findall(r"[A-Za-z0-9][\w.+#/-]*", sent)
        for i, tok in enumerate(toks):
            t = tok.rstrip(".")
            if re.search(r"^[a-z]{2,}[A-Z]|_|/|\(\)|^--?\w|\w\.\w+\(|\.(py|js|ts|json|yaml|yml|md|txt|csv)$", t):
                exact.add(t.lower())
            elif (i > 0 and t[:1].isupper() and t != "I") or (len(t) >= 2 and t.isupper() and t != "I"):
                names.add(t.lower())
    return names, exact


ENTITY_ALIASES: dict[str, str] = {
    **dict.fromkeys(("us", "u.s", "u.s.", "usa", "u.s.a", "u.s.a.", "america", "american", "americans",
                     "united states"), "us"),
    **dict.fromkeys(("uk", "u.k", "u.k.", "britain", "great britain", "british", "britons", "united kingdom"), "uk"),
}
"""Names of one country that a question may use for another of them ("a US citizen" / "American passport
holders"). Only countries whose adjective is not also a language ("French" may ask about the language,
"France" about the country), so no alias changes what is asked."""


def _country_sequence(text: str) -> list[str]:
    """The :data:`ENTITY_ALIASES` canonical forms named in ``text``, in order (word pairs first)."""
    ws, out, i = words(text), [], 0
    while i < len(ws):
        pair = " ".join(ws[i:i + 2])
        if i + 1 < len(ws) and pair in ENTITY_ALIASES:
            out.append(ENTITY_ALIASES[pair])
            i += 2
            continue
        if ws[i] in ENTITY_ALIASES:
            out.append(ENTITY_ALIASES[ws[i]])
        i += 1
    return out


@dataclass(slots=True)
class EntityGuard(Guard):
    """Names, acronyms, quoted strings and identifiers must match.

    A name on each side that the other side lacks (fuzzy, so "Windows" ~ "windwos")
    is a swap ("Gmail" vs "Outlook"); a name on one side only is allowed (a
    lower-cased or generic rewording). Quoted strings and code identifiers must
    be equal sets. Two names of one country (:data:`ENTITY_ALIASES`: "US" / "American") are one name.
    """

    name: str = "entity"

    def check(self, query: str, candidate: str) -> str | None:
        na, xa = _entities(query)
        nb, xb = _entities(candidate)
        if xa != xb:
            return f"identifiers {sorted(xa ^ xb)}"
        wa, wb = words(query), words(candidate)
        sa, sb = _country_sequence(query), _country_sequence(candidate)
        if sa and sb and set(sa) == set(sb) and sa != sb:
            return f"countries in another order {sa} vs {sb}"  # "from the US to the UK" / "from Britain to America"
        ca, cb = set(sa), set(sb)
        miss_a = [e for e in na if not all(contains_fuzzy(p, wb) for p in words(e))
                  and ENTITY_ALIASES.get(e) not in cb]
        miss_b = [e for e in nb if not all(contains_fuzzy(p, wa) for p in words(e))
                  and ENTITY_ALIASES.get(e) not in ca]
        if miss_a and miss_b:
            return f"entities {sorted(miss_a)} vs {sorted(miss_b)}"
        return None


@dataclass(slots=True)
class VerifierGuard(Guard):
    """Wraps a callable ``(query, candidate) -> bool | float``: False or a score below ``min_score`` rejects.

    Use it for a cross-encoder or NLI model (e.g. both directions entailed).
    """

    verifier: Callable[[str, str], bool | float]
    min_score: float = 0.5
    name: str = "verifier"

    def check(self, query: str, candidate: str) -> str | None:
        out = self.verifier(query, candidate)
        if isinstance(out, bool):
            return None if out else "verifier said no"
        score = float(out)
        return None if score >= self.min_score else f"verifier score {score:.3f} < {self.min_score}"


@dataclass(frozen=True, slots=True)
class GuardKind:
    """One guard of the default set (a row of :data:`GUARDS`).

    Attributes:
        name: the guard's name, the reason its rejections are counted under (``stats.rejections``).
        guard: its class (the ``verifier`` row's takes the verifier callable; the others take nothing).
        rejects: what differs between the two questions when it rejects.
        different_question: its finding marks a different question (a number, a negation, a bound ...
            that changes what a correct answer is): the learned verifier refuses outright on it.
    """

    name: str
    guard: Callable[..., Guard]
    rejects: str
    different_question: bool = True


GUARDS: tuple[GuardKind, ...] = (
    GuardKind("number", NumberGuard, "the numbers (with $ / %, versions, years; digits of any script by value; "
              "superscripts, subscripts, fractions and circled digits as written), in order, or a clock time's half "
              "of the day"),
    GuardKind("negation", NegationGuard, "the count of negation cues (not, no, never, n't ...)"),
    GuardKind("question_type", QuestionTypeGuard, "the kind of answer asked for (who / when / where / why / how / "
              "how many / how much / how long / how often / yes-no ...; ragcache.semantic.decision.qtype)"),
    GuardKind("focus", QuestionFocusGuard, 'what is asked about X: "what does X contain" is not "what is X" (nor '
              '"what is in X", "what is X made of")'),
    GuardKind("antonym", AntonymGuard, "an antonym pair (enable/disable, upload/download, before/after, add/remove, "
              "un- / dis- / de- prefixes, WordNet pairs) split across the two questions"),
    GuardKind("scope", ScopeGuard, "words of one exclusive group (daily/weekly/monthly, all/one, first/last, "
              "early/late, whole/part ...)"),
    GuardKind("entity", EntityGuard, "capitalised names, acronyms, quoted strings, versions or code identifiers "
              "(a name on each side that the other lacks is a swap)"),
    GuardKind("direction", DirectionGuard, 'two spans swapped around a connective ("from Boston to Denver" / '
              '"from Denver to Boston"); moving a whole clause is not a change'),
    GuardKind("bound", BoundGuard, 'a quantifier or bound ("at most", "per day", "only")'),
    GuardKind("complement", ComplementGuard, 'a complement ("outside", "without", "excluding")'),
    GuardKind("relative_time", RelativeTimeGuard, 'a time relative to now ("this week" / "next week")'),
    GuardKind("modality", ModalityGuard, 'permission against obligation or prediction ("can I" / "must I" / '
              '"will I")'),
    GuardKind("symbol", SymbolGuard, 'a code span, operator or meaningful case ("%Y" / "%y", "10 / 2" / '
              '"10 * 2", "MB" / "Mb")'),
    GuardKind("script", ScriptGuard, "what the word guards cannot read (symbols outside ASCII, lone letters of "
              "another alphabet, names in another script), which must be the same text"),
    GuardKind("substitution", SubstitutionGuard, "with most content words shared, a content word replaced (disk -> "
              'memory) or a modifier inserted between two shared words ("all running containers" / "all '
              'containers"); often a true paraphrase, so the verifier may overrule it', different_question=False),
    GuardKind("verifier", VerifierGuard, "an optional callable (a cross-encoder or NLI model) said no, or scored "
              "below its min_score; it runs last", different_question=False),
)
"""Every guard, in the order :meth:`GuardSet.default` runs them: the one table of guards."""

GUARD_REASONS: tuple[str, ...] = tuple(k.name for k in GUARDS)
"""Every rejection reason a default :class:`GuardSet` can report (the names of :data:`GUARDS`)."""

DIFFERENT_QUESTION: tuple[str, ...] = tuple(k.name for k in GUARDS if k.different_question)
"""The guards whose finding marks a different question (:attr:`GuardKind.different_question`): the
learned verifier refuses outright on each of them (its hard vetoes), so it only adds hits the guards
refuse for being too strict. Not in it: ``substitution`` (a replaced or inserted word: often a true
paraphrase, which the verifier may overrule) and ``verifier``."""


@dataclass(slots=True)
class GuardSet:
    """An ordered list of guards; :meth:`check` returns the first rejection.

    ``GuardSet.default()`` holds every guard of :data:`GUARDS`; pass ``verifier=`` to add the
    verifier last, or build a custom list (a :class:`Guard`; any object with ``name`` and
    ``check(query, candidate)`` works: it is given the defaults of ``below`` and ``reads_similarity``
    here, once, by :func:`~ragcache.semantic.decision.guard_protocol.declared_guard`).

    Raises:
        TypeError: a guard without ``name`` and ``check``.
    """

    guards: list[Guard] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.guards = [declared_guard(g) for g in self.guards]

    @classmethod
    def default(cls, verifier: Callable[[str, str], bool | float] | None = None, *,
                disable: Iterable[str] = ()) -> GuardSet:
        off = set(disable)
        unknown = off - {k.name for k in GUARDS}
        if unknown:
            raise ValueError(f"unknown guard names {sorted(unknown)}; choose from {[k.name for k in GUARDS]}")
        gs: list[Guard] = [k.guard() for k in GUARDS if k.guard is not VerifierGuard and k.name not in off]
        if verifier is not None and "verifier" not in off:
            gs.append(VerifierGuard(verifier))  # the last row: the one that takes an argument
        return cls(gs)

    @property
    def names(self) -> list[str]:
        return [g.name for g in self.guards]

    @property
    def floor(self) -> float | None:
        """The guards have no cosine gate of their own (:attr:`Decider.floor
        <ragcache.semantic.decision.policy.Decider.floor>`): the cache's default threshold applies."""
        return None

    def check(self, query: str, candidate: str, similarity: float | None = None) -> GuardVerdict:
        """First rejection among the guards, or an ok verdict. A guard with a ``below`` (the substitution
        guard's ``below=t``) only runs when ``similarity`` is not given or is below it; a guard with
        ``reads_similarity`` set (the question-type guard) is given ``similarity`` too. Both questions
        are compared without a request wrapper (:func:`~ragcache.semantic.text.request_core`)."""
        query, candidate = request_core(query), request_core(candidate)
        for g in self.guards:
            below = g.below
            if below is not None and similarity is not None and similarity >= below:
                continue
            # the question-type guard: loose pairs only when near
            detail = g.check(query, candidate, similarity) if g.reads_similarity else g.check(query, candidate)
            if detail is not None:
                return GuardVerdict(g.name, detail)
        return GuardVerdict()


def diff_words(a: str, b: str) -> list[str]:
    """Debug helper: a word-level diff of two questions (``-`` only in a, ``+`` only in b)."""
    return [d for d in difflib.ndiff(words(a), words(b)) if d[:1] in "+-"]
