"""Word-order guards: ``direction`` (two spans swapped around a connective) and ``substitution``
(a content word replaced, or a modifier inserted, between otherwise shared words).

Part of :mod:`ragcache.semantic.decision.guards` (which re-exports both and documents the guard order);
split out because both work on word alignments rather than on word sets.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ragcache.semantic.decision.guard_protocol import Guard
from ragcache.semantic.decision.lexicon import lexicon
from ragcache.semantic.text import (
    NEGATIONS,
    STOPWORDS,
    abbreviation,
    content_words,
    spelled_as_digits,
    split_words,
    stem,
    tokens_match,
)

SYNONYMS: dict[str, str] = {
    "int": "integer", "ints": "integers", "str": "string", "strs": "strings", "repo": "repository",
    "repos": "repositories", "config": "configuration", "configs": "configurations", "db": "database",
    "dbs": "databases", "app": "application", "apps": "applications", "info": "information",
    "dir": "directory", "dirs": "directories", "env": "environment", "envs": "environments",
}
"""Extra words the substitution guard treats as the same (word -> canonical word), on top of WordNet:
by default the short forms of technical words WordNet lacks ("int" / "integer", "repo" / "repository",
"env" / "environment"), each with one meaning in a question. Pass ``SubstitutionGuard(synonyms={...})``
for a domain's own equivalents ("line" / "row"), or ``{}`` for WordNet alone."""


_SYMMETRIC_JOIN = frozenset({"or", "vs", "versus"})
_SYMMETRIC_FRAME = frozenset({"between", "compare", "compared", "comparing", "comparison", "both", "difference",
                              "differences", "similarities", "similarity"})
"""A swap of two alternatives ("buy a house or rent" / "rent or buy a house", "list vs tuple") asks the
same; so does a swap around "and" after a symmetric frame ("the difference between a list and a tuple");
elsewhere "and" keeps its order ("drink and drive" is not "drive and drink")."""


def _symmetric(words_: list[str], join: list[str]) -> bool:
    """Whether spans joined by ``join`` in ``words_`` may be exchanged (see :data:`_SYMMETRIC_FRAME`)."""
    join = [w for w in join if w not in _ARTICLES]
    if len(join) != 1:
        return False
    return join[0] in _SYMMETRIC_JOIN or (join[0] == "and" and bool(_SYMMETRIC_FRAME & set(words_)))


_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b")


def _content_swap(query: str, candidate: str) -> str | None:
    """Same content words with exactly two of them exchanged ("diesel in a petrol engine" vs
    "petrol in a diesel engine", "Is Alice Bob's manager?" vs "Is Bob Alice's manager?"), whatever
    the function words around them; a possessive ``'s`` does not make another word."""
    query, candidate = _POSSESSIVE.sub("", query), _POSSESSIVE.sub("", candidate)
    a, b = _stems(content_words(query)), _stems(content_words(candidate))
    if len(a) != len(b) or a == b or sorted(a) != sorted(b):
        return None
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    if len(diff) == 2:
        i, j = diff
        if a[i] == b[j] and a[j] == b[i] and not _compound_rewrite(query, candidate, a[i], a[j]) \
                and not _joined_symmetrically(query, a[i], a[j]) and not _phrases_moved(query, candidate, a[i], a[j]):
            return f"swapped {a[i]!r} and {a[j]!r}"
    return None


_OWNER_MARK = re.compile(r"(?<=[a-z0-9])'s\b|(?<=[a-z0-9]s)'(?![a-z0-9])")


def _owners(text: str) -> set[tuple[tuple[str, ...], tuple[str, ...]]]:
    """``(owner, owned)`` pairs of stemmed content-word runs: "the customer's account manager" and "the
    account manager of the customer" both give ``(("customer",), ("account", "manager"))``. A run is the
    content words next to the ``'s`` (or ``s'``) or around "of"; "what's", "it's" have no owner."""
    toks = re.findall(r"'s|[a-z0-9]+", _OWNER_MARK.sub(" 's", text.lower().replace("\u2019", "'")))

    def content(t: str) -> bool:
        return t not in ("'s", "of") and t not in STOPWORDS and t not in NEGATIONS and t not in _ARTICLES

    def run(i: int, step: int) -> tuple[str, ...]:
        out = []
        while 0 <= i < len(toks) and content(toks[i]):
            out.append(toks[i])
            i += step
        return tuple(_stems(out[::step]))

    pairs = set()
    for k, t in enumerate(toks):
        if t == "'s":
            owner, owned = run(k - 1, -1), run(k + 1, 1)
        elif t == "of":
            j = k + 1
            while j < len(toks) and toks[j] in _ARTICLES:
                j += 1
            owner, owned = run(j, 1), run(k - 1, -1)
        else:
            continue
        if owner and owned:
            pairs.add((owner, owned))
    return pairs


def _possessive_swap(query: str, candidate: str) -> str | None:
    """The same content words with owner and owned exchanged ("the customer's account manager" / "the
    account manager's customer", "... the customer of the account manager"): a possessive or "of"
    rotation of word runs, which the two-word exchange of :func:`_content_swap` does not see."""
    if sorted(_stems(content_words(_POSSESSIVE.sub("", query)))) != \
            sorted(_stems(content_words(_POSSESSIVE.sub("", candidate)))):
        return None
    a, b = _owners(query), _owners(candidate)
    for owner, owned in sorted(a - b):  # sorted: one reason in every process
        if (owned, owner) in b - a:
            return f"owner and owned exchanged: {' '.join(owner)!r} / {' '.join(owned)!r}"
    return None


_PREPOSITIONS = frozenset({"to", "from", "into", "onto", "in", "on", "at", "for", "with", "by", "via", "through",
                           "towards", "toward", "before", "after", "under", "over"})


def _phrases_moved(query: str, candidate: str, x: str, y: str) -> bool:
    """"get from the station to the office" / "get to the office from the station": each of the two
    words keeps its own preposition, and the prepositions differ, so whole phrases moved; nothing swapped."""
    def prep(text: str, w: str) -> str:
        ws = [t for t in split_words(text) if t not in _ARTICLES]
        st = _stems(ws)
        i = st.index(w)
        return ws[i - 1] if i and ws[i - 1] in _PREPOSITIONS else ""

    px, py = prep(query, x), prep(query, y)
    return bool(px and py and px != py and prep(candidate, x) == px and prep(candidate, y) == py)


def _stems(ws: list[str]) -> list[str]:
    """Stems of ``ws`` with short forms read as the words they stand for (:data:`SYNONYMS`), as
    :func:`_content_swap` compares them."""
    return [stem(SYNONYMS.get(w, w)) for w in ws]


def _joined_symmetrically(text: str, x: str, y: str) -> bool:
    """Whether the content words ``x`` and ``y`` (stemmed) are two alternatives joined in ``text``."""
    ws = split_words(text)
    st = _stems(ws)
    if x not in st or y not in st:
        return False
    i, j = sorted((st.index(x), st.index(y)))
    return _symmetric(ws, ws[i + 1:j])


_OF = re.compile(r"^(?:of|for)(?: (?:the|a|an|my|your|our|their|this|that))?$")


def _compound_rewrite(query: str, candidate: str, x: str, y: str) -> bool:
    """"the language of the app" / "the app language": one side joins the two words with "of" (or
    "for"), the other puts them side by side in the other order, as a compound: a rewording."""
    for p, q in ((query, candidate), (candidate, query)):
        wp, wq = _stems(split_words(p)), _stems(split_words(q))
        for u, v in ((x, y), (y, x)):
            if u in wp and v in wp and (v, u) in set(itertools.pairwise(wq)):
                i, j = wp.index(u), wp.index(v)
                if i < j and _OF.match(" ".join(wp[i + 1:j])):
                    return True
    return False


_ARTICLES = frozenset({"a", "an", "the", "my", "your", "our", "their", "his", "her", "its"})

_AUX = frozenset({"do", "does", "did", "will", "would", "should", "can", "could", "must", "shall", "may", "might",
                  "has", "have", "had", "is", "are", "was", "were"})
_BE = frozenset({"is", "are", "was", "were"})
_SUBJECT_START = frozenset({"i", "you", "we", "they", "he", "she", "it", "me", "us", "them", "the", "a", "an", "my",
                            "our", "your", "his", "her", "their", "this", "that", "these", "those", "someone",
                            "somebody", "everyone", "everybody", "each", "every", "all", "any", "our"})


def wh_role(text: str) -> str | None:
    """The role of "who" in a who-question: ``"subject"`` ("Who reports to the manager?", "Who should
    escalate to me?"), ``"object"`` ("Who does the manager report to?", "Who should I escalate to?",
    "Whom do I call?"), or ``None`` (not a who-question, or "Who is the manager?", where "who" is a
    complement of "is"). The object form has a subject between the auxiliary and the verb."""
    toks = re.findall(r"[A-Za-z][\w'’-]*", text)
    ws = [t.lower() for t in toks]
    if not ws or ws[0] not in ("who", "whom"):
        return None
    if ws[0] == "whom":
        return "object"
    if len(ws) < 3 or ws[1] not in _AUX:
        return "subject" if len(ws) >= 2 else None
    has_subject = ws[2] in _SUBJECT_START or toks[2][:1].isupper()
    if ws[1] in _BE and not any(w.endswith("ing") for w in ws[2:]):
        return None  # "Who is the on-call engineer?": no verb for "who" to be the subject or object of
    return "object" if has_subject else "subject"


_TO_FROM = re.compile(r"\b(to|towards|into|from)\s+(?:(?:the|a|an|my|your|our|their|his|her|its|this|that)\s+)?"
                      r"([A-Za-z][\w-]*)")


def _to_from_swap(query: str, candidate: str) -> str | None:
    """"a flight to Paris" / "a flight from Paris": the same word after "to" on one side and after
    "from" on the other (an infinitive "to" is never followed by the word the other side takes "from")."""
    def ends(text: str) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {"to": set(), "from": set()}
        for prep, word in _TO_FROM.findall(text):
            out["from" if prep.lower() == "from" else "to"].add(stem(word.lower()))
        return out

    a, b = ends(query), ends(candidate)
    flipped = ((a["to"] - a["from"]) & (b["from"] - b["to"])) | ((a["from"] - a["to"]) & (b["to"] - b["from"]))
    flipped -= STOPWORDS | {"each", "one"}  # "compare to each other" / "differ from one another"
    return f"'to' / 'from' {sorted(flipped)}" if flipped else None


_PERSON = {**dict.fromkeys(("i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "ourselves"), "speaker"),
           **dict.fromkeys(("you", "your", "yours", "yourself", "yourselves"), "addressee")}


_WAY_OF_ASKING_PERSON = re.compile(r"\s*(?:how|what\s+(?:do|does|should|can|would)\s+(?:i|you|we|one)\s+do)\b")


def _person_swap(query: str, candidate: str) -> str | None:
    """The speaker and the one addressed exchanged over the same words ("Can I send you the invoice?" /
    "Can you send me the invoice?", "Did I get paid?" / "Did you get paid?"). In a "how ... I / you"
    question, whose "you" is usually anyone ("How do you reset a password?" asks "How do I ..."), only
    an exchange of both counts: each side names both the speaker and the one addressed, in other
    places ("How do I give you access?" / "How do you give me access?")."""
    wa, wb = split_words(query), split_words(candidate)
    pa = [_PERSON[w] for w in wa if w in _PERSON]
    pb = [_PERSON[w] for w in wb if w in _PERSON]
    if not pa or not pb or pa == pb or len(pa) != len(pb):
        return None  # a person word added ("comes to mind" / "comes to your mind") is no exchange
    if any(_WAY_OF_ASKING_PERSON.match(t) for t in (query.lower(), candidate.lower())) and not (
            set(pa) == set(pb) == {"speaker", "addressee"}):
        return None  # "How do I reset my password?" / "How do you reset your password?": the generic "you"
    rest_a = [w for w in wa if w not in _PERSON and w not in _ARTICLES]
    rest_b = [w for w in wb if w not in _PERSON and w not in _ARTICLES]
    return f"persons {pa} vs {pb}" if rest_a == rest_b else None


def _role_swap(query: str, candidate: str) -> str | None:
    """The same content words with "who" the subject on one side and the object on the other ("Who
    reports to the manager?" / "Who does the manager report to?", "Who did the manager choose?" / "Who
    chose the manager?": an irregular past is its verb, :meth:`Lexicon.verb_base`): the roles are reversed."""
    ra, rb = wh_role(query), wh_role(candidate)
    if ra is None or rb is None or ra == rb:
        return None
    if [w for w in split_words(query) if w not in _ARTICLES] == [w for w in split_words(candidate) if w not in _ARTICLES]:
        return None  # "Who does the payroll?" / "Who does payroll?": only an article differs

    lex = lexicon()

    def key(w: str) -> str:  # "escalates" / "escalate", "hired" / "hire"
        w = stem(SYNONYMS.get(w, w))
        return (w[:-2] if w.endswith("ed") and len(w) > 4 else w).rstrip("e")

    def keys(text: str) -> list[str]:  # "chose" / "choose", "taught" / "teach"; before stop words go ("told": "tell")
        ws = [lex.verb_base(w) for w in split_words(_POSSESSIVE.sub("", text))]
        return sorted(key(w) for w in ws if w not in STOPWORDS and w not in NEGATIONS)

    a, b = keys(query), keys(candidate)
    return f"'who' as {ra} vs as {rb}" if a == b and a else None


@dataclass(slots=True)
class DirectionGuard(Guard):
    """Two spans swapped around a connective change direction.

    With articles removed, if the query is ``P X M Y S`` and the candidate
    ``P Y M X S`` with ``M`` non-empty and content words in both X and Y, the
    questions ask opposite directions ("merge main into my branch" vs "merge my
    branch into main"). A clause moved to the other end (``M`` empty) is a
    reordering and passes. Two content words exchanged whatever lies between them
    (:func:`_content_swap`), owner and owned exchanged ("the customer's account manager" / "the account
    manager's customer", :func:`_possessive_swap`), "who" turned from subject to object over the same words
    (:func:`wh_role`) or one word reached "to" on one side and left "from" on the other
    (:func:`_to_from_swap`), or the speaker and the one addressed exchanged over the same words
    (:func:`_person_swap`) are reversals too.
    """

    name: str = "direction"

    def check(self, query: str, candidate: str) -> str | None:
        swap = (_content_swap(query, candidate) or _possessive_swap(query, candidate) or _role_swap(query, candidate)
                or _to_from_swap(query, candidate) or _person_swap(query, candidate))
        if swap is not None:
            return swap
        a = [SYNONYMS.get(w, w) for w in split_words(query) if w not in _ARTICLES]  # "int" / "integer": one word
        b = [SYNONYMS.get(w, w) for w in split_words(candidate) if w not in _ARTICLES]
        if len(a) != len(b) or a == b or sorted(a) != sorted(b):
            return None
        i = 0
        while a[i] == b[i]:
            i += 1
        j = len(a)
        while a[j - 1] == b[j - 1]:
            j -= 1
        wa, wb = a[i:j], b[i:j]
        n = len(wa)

        def has_content(span: list[str]) -> bool:
            return any(w not in STOPWORDS and w not in NEGATIONS for w in span)

        for x in range(1, n):
            for y in range(1, n - x):
                m = n - x - y
                if m <= 0:
                    continue
                X, M, Y = wa[:x], wa[x : x + m], wa[x + m :]
                if wb == Y + M + X and has_content(X) and has_content(Y) and not _symmetric(a, M):
                    return f"swapped {' '.join(X)!r} and {' '.join(Y)!r} around {' '.join(M)!r}"
        return None


def _align(ca: list[str], cb: list[str]) -> list[str]:
    """Rewrite ``cb`` so that words matching a word of ``ca`` (stem, typo or abbreviation) are spelt as in ``ca``."""
    out = []
    for w in cb:
        if w in ca:
            out.append(w)
            continue
        m = next((x for x in ca if tokens_match(x, w) or abbreviation(x, w)), None)
        out.append(m if m is not None else w)
    return out


PARTICLES = frozenset({"up", "out", "off", "on", "down", "in", "over", "back", "away", "into", "for"})
"""Particles that make a phrasal verb with the word before them ("set up", "find out", "turn off")."""

PHRASAL: dict[str, frozenset[str]] = {k: frozenset(v.split(",")) for k, v in {
    "set_up": "configure,install,establish,setup,create,arrange", "turn_on": "enable,activate,start",
    "turn_off": "disable,deactivate,stop", "switch_on": "enable,activate", "switch_off": "disable,deactivate",
    "sign_up": "register,enroll,enrol,signup", "sign_in": "login,log_in", "log_in": "login,sign_in,signin",
    "log_out": "logout,sign_out,signout", "look_up": "search,find,check", "find_out": "discover,learn,determine",
    "figure_out": "determine,solve,understand", "carry_out": "perform,execute,conduct", "give_up": "quit,abandon",
    "back_up": "backup,save", "shut_down": "shutdown,close", "put_off": "postpone,delay", "call_off": "cancel",
    "get_rid": "remove,delete,eliminate", "fill_out": "complete", "fill_in": "complete", "pick_up": "collect",
    "hand_in": "submit", "turn_in": "submit", "come_back": "return", "go_back": "return", "speed_up": "accelerate",
    "clean_up": "clean,tidy", "make_up": "invent", "point_out": "indicate", "leave_out": "omit,exclude",
    "look_for": "search,seek", "wake_up": "awaken", "print_out": "print", "write_down": "note,record",
}.items()}
"""Phrasal verbs and one-word verbs with the same meaning, where WordNet lacks the pair (it has
"find_out" ~ "discover" but not "set_up" ~ "configure"). Keys are ``verb_particle``."""


def phrasal_synonyms(verb: str, particle: str, word: str) -> bool:
    """Whether the phrasal verb ``verb particle`` means ``word`` (the table above, then WordNet), or
    ``word`` with the same particle is a phrasal verb of the same meaning ("switch on" / "turn on":
    both mean "enable" in the table)."""
    key = f"{stem(verb)}_{particle}"
    if word in PHRASAL.get(key, ()) or stem(word) in PHRASAL.get(key, ()):
        return True
    if PHRASAL.get(key, frozenset()) & PHRASAL.get(f"{stem(word)}_{particle}", frozenset()):
        return True
    lex = lexicon()
    return word.isalpha() and (lex.synonyms(f"{verb}_{particle}", word) or lex.synonyms(key, word))


def _drop_phrasal_pairs(seq: list[str], only: list[str], other: list[str]) -> tuple[list[str], list[str]]:
    """Remove a phrasal verb of the words ``seq`` (its content words unshared, in ``only``: "get"
    of "get rid of" is a stop word) and the one word of ``other`` it means ("set up" / "configure")."""
    only, other = list(only), list(other)
    for v, p in itertools.pairwise(seq):
        if not (p in PARTICLES or f"{stem(v)}_{p}" in PHRASAL):
            continue
        mine = [u for u in (v, p) if u not in STOPWORDS]
        if mine and (all(u in only for u in mine) or (v in mine and v in only and p in mine and p not in only)):
            mine = [u for u in mine if u in only]  # a particle on both sides stays shared
            w = next((w for w in other if phrasal_synonyms(v, p, w)), None)
            if w is not None:
                for u in mine:
                    only.remove(u)
                other.remove(w)
    return only, other


def _drop_synonym_pairs(only_a: list[str], only_b: list[str]) -> tuple[list[str], list[str]]:
    """Remove (x, y) pairs that WordNet calls synonyms, greedily; the rest stay replacements."""
    lex = lexicon()
    rest_b = list(only_b)
    keep_a = []
    for x in only_a:
        y = next((y for y in rest_b if x.isalpha() and y.isalpha() and lex.synonyms(x, y)), None)
        if y is None:
            keep_a.append(x)
        else:
            rest_b.remove(y)
    return keep_a, rest_b


@dataclass(slots=True)
class SubstitutionGuard(Guard):
    """Mostly shared content words with one of them replaced or a modifier inserted.

    Content words are compared after stop words are dropped and typos aligned.
    When at least ``min_shared`` of the longer question's content words are
    shared (as a multiset), or of the shorter one's with at most two words differing
    on either side ("print in color" vs "print in black and white"), a replaced word on each side ("disk" vs "memory")
    rejects; so does a word inserted between two words that are adjacent in the
    other question ("all running containers" vs "all containers"). A replaced word that is a
    WordNet synonym of the word it replaces (a shared synset among the frequent senses of both:
    "film" / "movie", "autumn" / "fall", "abroad" / "overseas") is not a replacement
    (``wordnet=False`` turns this off); ``synonyms`` maps further words to a canonical word
    before comparing (empty by default). A phrasal verb and the one word it means ("set up" /
    "configure", "find out" / "discover": :data:`PHRASAL`, then WordNet) are not a replacement.
    The guard runs at every similarity (``below=None``): skipped at cosine >= 0.94, it let
    replaced words through where the cosine was high; ``below=t`` skips it at or above ``t``.
    """

    name: str = "substitution"
    min_shared: float = 0.5
    synonyms: Mapping[str, str] = field(default_factory=lambda: dict(SYNONYMS))
    wordnet: bool = True
    below: float | None = None

    def _words(self, text: str) -> list[str]:
        """Content words, numbers in words as digits ("thirty" = "30": the number guard compares values)."""
        return [self.synonyms.get(w, w) for w in content_words(spelled_as_digits(text)) if w != "one"]

    def check(self, query: str, candidate: str) -> str | None:
        ca = self._words(query)
        cb = _align(ca, self._words(candidate))
        if not ca or not cb:
            return None
        rest_b = list(cb)
        only_a = []
        for w in ca:
            if w in rest_b:
                rest_b.remove(w)
            else:
                only_a.append(w)
        only_b = rest_b
        if self.wordnet and only_a and only_b:
            only_a, only_b = _drop_phrasal_pairs(split_words(query), only_a, only_b)
            only_b, only_a = _drop_phrasal_pairs(split_words(candidate), only_b, only_a)
            only_a, only_b = _drop_synonym_pairs(only_a, only_b)
        shared = len(ca) - len(only_a)
        framed = shared / max(len(ca), len(cb)) >= self.min_shared or (
            shared / min(len(ca), len(cb)) >= self.min_shared and max(len(only_a), len(only_b)) <= 2)
        if shared == 0 or not framed:
            return None
        if only_a and only_b:
            return f"replaced {only_a} with {only_b}"
        longer, shorter, extra = (ca, cb, only_a) if only_a else (cb, ca, only_b)
        if not extra:
            return None
        pairs = set(itertools.pairwise(shorter))
        for k in range(1, len(longer) - 1):
            if longer[k] in extra:
                left = longer[k - 1]
                r = k + 1
                while r < len(longer) and longer[r] in extra:
                    r += 1
                if r < len(longer) and left not in extra and (left, longer[r]) in pairs:
                    return f"inserted {longer[k:r]} between {left!r} and {longer[r]!r}"
        return None


_SLOT_FILLERS = frozenset({"per", "each", "much", "under", "exactly", "actually", "currently", "usually", "generally", "normally",
                           "basically", "typically", "ok", "okay", "allowed", "permitted"})
"""Words a slot may gain or lose without changing the question ("two days a week" / "per week", "Can I ..." /
"Am I allowed to ...", "covered by" / "covered under"; "at all" is dropped before aligning); the modality and bound
guards read the words that do change it ("only", "must")."""


_QUESTION_PHRASE = frozenset({"time", "amount", "number", "way", "kind", "sort", "much", "many"})
"""Words of a question phrase that may be reworded where it opens both questions ("At what time" / "When",
"What is the amount of" / "How much", "In what way" / "How"): the question-type guards compare the types."""


_WH = frozenset({"what", "when", "where", "who", "whom", "whose", "which", "how", "why"})
_TENSE_PAIRS = frozenset(frozenset(p.split("/")) for p in (
    "does/did", "do/did", "is/was", "are/were", "has/had", "have/had", "will/did", "does/will", "do/will"))


def _frame_kept(span_a: list[str], span_b: list[str], lead: bool) -> bool:
    """Whether a span of function words beside a slot leaves the frame as it was: the question phrase
    reworded where it opens both questions ("At what time" / "When"), or a tense ("does" / "did"). A
    modal or a preposition reworded ("How do I" / "How can I", "by phone" / "over the phone") is a
    rewording of the frame: then the pair is not one slot filled differently."""
    if lead and _WH & set(span_a) and _WH & set(span_b):
        return True
    return len(span_a) == len(span_b) == 1 and frozenset((span_a[0], span_b[0])) in _TENSE_PAIRS


_ANSWER_NOUNS = frozenset({"time", "times", "hour", "hours", "date", "amount", "number", "way"})
"""Nouns that name the kind of answer ("opening hours", "the date"): part of a reworded question phrase."""


@dataclass(slots=True)
class SlotGuard(Guard):
    """The two questions are one frame with one slot filled differently: a minimal edit.

    The words of both (numbers in words as digits; typos, stems and abbreviations aligned to the first
    question's spelling) are aligned by :class:`difflib.SequenceMatcher`; the pair is a *slot edit* when
    exactly one differing span (replaced, inserted or deleted) changes content, at least ``min_shared`` words
    and a ``min_share`` (0.4) of the longer question are shared around the spans, and that span holds a content
    word on either side that is not a synonym of one on the other (WordNet, :data:`PHRASAL`, :data:`SYNONYMS`):
    "Can I bring my dog to the office?" / "... my child ...", "Are glasses covered?" / "Are contact lenses
    covered?", "the daily meal allowance when travelling" / "... when travelling abroad". A span of function
    words only ("two days a week" / "two days per week") changes no content, nor does a reworded question phrase
    that opens both questions ("At what time does" / "When does"). So a slot edit dressed in a rewording
    elsewhere (at most ``max_spans`` spans in all) is still one: "At what time does the nightly backup job run?"
    / "When does the nightly backup job finish?", "When does the job stop?" / "When did the job fail?".

    Why a rule here: minimal pairs are where learned pair models are known to fail (they score a one-word swap
    in a shared frame as a paraphrase; PAWS, Zhang et al. 2019, §1 and §5), while a true rewording changes the
    frame in more than one place. The :class:`~ragcache.semantic.decision.pair_decider.PairDecider` runs it as a
    hard veto under the ``substitution`` reason; it is not part of the rules' default set (whose substitution
    guard already refuses these and more).
    """

    name: str = "substitution"
    min_shared: int = 3
    min_share: float = 0.4
    max_spans: int = 3
    synonyms: Mapping[str, str] = field(default_factory=lambda: dict(SYNONYMS))

    def _words(self, text: str) -> list[str]:
        ws = [self.synonyms.get(w, w) for w in split_words(spelled_as_digits(text))]
        return [w for i, w in enumerate(ws) if not ((w == "at" and ws[i + 1:i + 2] == ["all"]) or
                                                     (w == "all" and ws[i - 1:i] == ["at"] and i > 0))]  # "at all"

    def check(self, query: str, candidate: str) -> str | None:
        import difflib

        a = self._words(query)
        b = _align(a, self._words(candidate))
        ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
        edits = [op for op in ops if op[0] != "equal"]
        if not edits or len(edits) > self.max_spans:
            return None
        shared = sum(i2 - i1 for tag, i1, i2, _, _ in ops if tag == "equal")
        if shared < self.min_shared or shared < self.min_share * max(len(a), len(b)):
            return None
        reworded = edits[0][1] == 0 and edits[0][3] == 0  # the question phrase itself is reworded
        slots, other = [], []
        for _, i1, i2, j1, j2 in edits:
            lead = i1 == 0 and j1 == 0
            span = (a[i1:i2], b[j1:j2])
            if self._content(query, candidate, *span, lead=lead, answer_noun=reworded):
                slots.append(span)
            else:
                other.append((span, lead))
        if len(slots) != 1:  # none: a rewording of function words; two or more: a rewording of the frame
            return None
        if len(edits) > 1 and not all(_frame_kept(sa, sb, lead) for (sa, sb), lead in other):
            return None  # the frame is reworded too (a modal, a preposition): a rewording in several places
        span_a, span_b = slots[0]
        return f"one slot differs: {' '.join(span_a) or '(nothing)'} / {' '.join(span_b) or '(nothing)'}"

    def _content(self, query: str, candidate: str, span_a: list[str], span_b: list[str], *, lead: bool,
                 answer_noun: bool) -> bool:
        """Whether a differing span changes content: a word on either side that is not a function word, a
        filler, a synonym of one on the other side (WordNet, :data:`PHRASAL`) or, in a span that opens both
        questions (``lead``), a word of the question phrase (:data:`_QUESTION_PHRASE`: "At what time" /
        "When"); where the question phrase is reworded (``answer_noun``), a noun naming the answer's kind
        elsewhere is part of it ("What are the canteen's opening hours?" / "When is the canteen open?")."""
        skip = _SLOT_FILLERS | (_QUESTION_PHRASE if lead else frozenset()) | (_ANSWER_NOUNS if answer_noun else
                                                                              frozenset())
        only_a = [w for w in span_a if w not in STOPWORDS and w not in NEGATIONS and w not in skip]
        only_b = [w for w in span_b if w not in STOPWORDS and w not in NEGATIONS and w not in skip]
        if only_a and only_b:
            only_a, only_b = _drop_phrasal_pairs(split_words(query), only_a, only_b)
            only_b, only_a = _drop_phrasal_pairs(split_words(candidate), only_b, only_a)
            only_a, only_b = _drop_synonym_pairs(only_a, only_b)
        return bool(only_a or only_b)


_SPEAKER_SUBJECT = frozenset({"i", "im", "ive", "id", "ill", "we", "were", "weve"})
_SPEAKER_OBLIQUE = frozenset({"me", "my", "mine", "myself", "us", "our", "ours", "ourselves"})


@dataclass(slots=True)
class SpeakerRoleGuard(Guard):
    """The speaker changes role between two questions about the same things: the one who acts on one side
    ("How do **I** pay money I owe to the tax office?", "Can **I** see the bill payer's call history?") is only
    acted on or an owner on the other ("How does the tax office pay **me** ...?", "Can the bill payer see **my** call
    history?"). One side names the speaker as a subject only (I, we), the other as an object or owner only (me, my,
    us, our), and at least ``min_shared`` of the shorter side's content words (stems) are shared.

    A rewording that keeps the speaker's role names it the same way or both ways ("How do I change my password?" /
    "How can my password be changed?" is not refused: the first names both). Pair models read such swapped roles as
    paraphrases (the words are the same), so the :class:`~ragcache.semantic.decision.pair_decider.PairDecider` runs
    this as a hard veto, under the ``direction`` reason (the guard that reads roles)."""

    name: str = "direction"
    min_shared: float = 0.6

    def check(self, query: str, candidate: str) -> str | None:
        wa, wb = split_words(query), split_words(candidate)
        sa, oa = bool(_SPEAKER_SUBJECT & set(wa)), bool(_SPEAKER_OBLIQUE & set(wa))
        sb, ob = bool(_SPEAKER_SUBJECT & set(wb)), bool(_SPEAKER_OBLIQUE & set(wb))
        if not ((sa and not oa and ob and not sb) or (oa and not sa and sb and not ob)):
            return None
        ca, cb = {stem(w) for w in content_words(query)}, {stem(w) for w in content_words(candidate)}
        if not ca or not cb or len(ca & cb) < self.min_shared * min(len(ca), len(cb)):
            return None
        return "the speaker acts on one side and is acted on (or owns) on the other"


_IRREGULAR_PARTICIPLES: dict[str, str] = {k: v for k, v in (p.split(":") for p in (
    "made:make done:do taken:take given:give written:write sent:send paid:pay held:hold built:build bought:buy "
    "caught:catch chosen:choose driven:drive eaten:eat found:find known:know lost:lose seen:see sold:sell told:tell "
    "won:win shown:show spent:spend brought:bring kept:keep met:meet beaten:beat bitten:bite hidden:hide "
    "ridden:ride stolen:steal struck:strike taught:teach led:lead lent:lend owed:owe").split())}
"""Irregular past participles and their verbs ("paid by" / "pays"), for the voice check."""


def _passive_agent(ws: list[str]) -> tuple[str, str] | None:
    """``(participle, agent head)`` of the first "<participle> ... by <agent>" in the words ``ws``, else ``None``."""
    for i, t in enumerate(ws):
        if t != "by" or i == 0:
            continue
        part = next((x for x in reversed(ws[max(0, i - 6):i])
                     if (x.endswith("ed") and len(x) > 3) or x in _IRREGULAR_PARTICIPLES), None)
        if part is None:
            continue
        agent: list[str] = []
        for x in ws[i + 1:i + 5]:
            if x in STOPWORDS:
                if agent:
                    break
                continue
            agent.append(x)
        if agent:
            return part, agent[-1]
    return None


def _verb_of(part: str, ws: list[str]) -> int | None:
    """Index in ``ws`` of the active verb of participle ``part`` ("caused" -> "causes", "paid" -> "pays")."""
    base = _IRREGULAR_PARTICIPLES.get(part)
    roots = {base} if base else ({part[:-2], part[:-1]} if part.endswith("ed") else {part})
    for k, t in enumerate(ws):
        if t == part or any(len(r) >= 2 and t.startswith(r) and len(t) - len(r) <= 2 for r in roots):
            return k
    return None


@dataclass(slots=True)
class VoiceRoleGuard(Guard):
    """A passive with its agent on one side ("damage caused to the rental car **by another driver**") and the
    active on the other with that agent after the verb, where the object stands ("damage the rental car causes to
    another driver's car"): the roles are swapped. The active rewording that keeps them ("Is physiotherapy covered
    by my health insurance?" / "Does my health insurance cover physiotherapy?": the agent before the verb, as its
    subject) is not refused, nor is a pair whose active side does not use the participle's verb.

    Pair models read such pairs as paraphrases (the same words); the
    :class:`~ragcache.semantic.decision.pair_decider.PairDecider` runs this as a hard veto under ``direction``."""

    name: str = "direction"

    def check(self, query: str, candidate: str) -> str | None:
        for x, y in ((query, candidate), (candidate, query)):
            wx, wy = split_words(x), split_words(y)
            found = _passive_agent(wx)
            if found is None or _passive_agent(wy) is not None:
                continue
            part, agent = found
            verb = _verb_of(part, wy)
            where = next((k for k, t in enumerate(wy) if stem(t) == stem(agent)), None)
            if verb is not None and where is not None and where > verb:
                return f"{agent!r} acts on one side ({part} by {agent}) and is acted on on the other"
        return None
