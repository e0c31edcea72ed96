"""Training and held-out pairs for the semantic cache's pair model (:mod:`ragcache.semantic.decision.pair_model`).

Three sources, all deterministic (fixed seeds, no clock), so one command rebuilds the same pairs
(``python -m ragcache.app.train_pair_model --data ../shared/data``):

- **QQP** (``qqp_dev_20k.jsonl``, Quora's question text, non-commercial research licence; never copied
  into the repository): every pair that shares no question with ``qqp_dev.jsonl``, which is held out
  whole for reporting. A slice chosen by a hash of the pair (:func:`qqp_part`) is kept for choosing
  the decision threshold, never trained on.
- **Hard pairs** (``semantic_pairs_dev.jsonl``): the tuning part of the fixed split of
  ``benchmarks.semantic_split.split`` (seed 32, 30% of each kind held out). The held-out part is
  never trained on nor used to choose.
- **Made here** (:func:`synthetic_pairs`): hard negatives made from the guards' own knowledge applied to
  real questions (a negation, an antonym, a number, a unit, an entity, swapped roles, modality, scope,
  the kind of answer asked for, another topic word) and positives of the rewording kinds rules cannot
  read (a synonym, a function word, an answer-type rewording such as "What is the deadline for X?" /
  "When is X due?"), over workplace, product, travel and finance subjects written for this module.

Labels: ``same`` is true when the answer to ``a`` may be served for ``b``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ragcache.semantic.decision.guards import ANTONYM_PAIRS, SCOPE_GROUPS


@dataclass(frozen=True, slots=True)
class Pair:
    """One labelled pair: ``same`` when ``a``'s answer may be served for ``b``; ``kind`` names how it was made."""

    a: str
    b: str
    same: bool
    kind: str
    source: str


def read_jsonl(path: str | Path) -> list[dict]:
    """The rows of a JSON-lines file."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _norm(q: str) -> str:
    return " ".join(q.lower().split())


def qqp_part(a: str, b: str) -> str:
    """``"choose"`` for about 6% of pairs (a hash of the pair's text), else ``"train"``."""
    h = hashlib.sha256(f"{_norm(a)}\x00{_norm(b)}".encode()).digest()
    return "choose" if h[0] < 16 else "train"


def qqp_pairs(data: Path) -> dict[str, list[Pair]]:
    """``{"train", "choose", "heldout"}`` QQP pairs: ``heldout`` is ``qqp_dev.jsonl``; the other two come from
    ``qqp_dev_20k.jsonl`` without any pair sharing a question with the held-out file."""
    held = read_jsonl(data / "qqp_dev.jsonl")
    held_q = {_norm(r["a"]) for r in held} | {_norm(r["b"]) for r in held}
    out: dict[str, list[Pair]] = {"train": [], "choose": [], "heldout": []}
    out["heldout"] = [Pair(r["a"], r["b"], bool(r["same"]), "qqp", "qqp_dev") for r in held]
    for r in read_jsonl(data / "qqp_dev_20k.jsonl"):
        if _norm(r["a"]) in held_q or _norm(r["b"]) in held_q:
            continue
        out[qqp_part(r["a"], r["b"])].append(Pair(r["a"], r["b"], bool(r["same"]), "qqp", "qqp_dev_20k"))
    return out


def hard_pairs(data: Path) -> dict[str, list[Pair]]:
    """``{"tuning", "heldout"}`` of ``semantic_pairs_dev.jsonl`` by the fixed split of issue 32."""
    from ragcache.app.bench_cmd import load_benchmark

    split = load_benchmark("semantic_split").split  # the fixed split of issue 32, one definition

    rows = read_jsonl(data / "semantic_pairs_dev.jsonl")
    parts = split(rows)
    return {name: [Pair(rows[i]["a"], rows[i]["b"], bool(rows[i]["same"]), rows[i]["kind"], "hard_pairs")
                   for i in idx] for name, idx in parts.items()}


# --------------------------------------------------------------------------- made here

SUBJECTS: tuple[tuple[str, str], ...] = (
    # (noun phrase, the verb phrase "to ..." of doing it)
    ("the travel reimbursement", "claim the travel reimbursement"),
    ("the gym membership subsidy", "apply for the gym membership subsidy"),
    ("the expense report", "submit the expense report"),
    ("the visitor badge", "get a visitor badge"),
    ("the annual bonus", "receive the annual bonus"),
    ("the laptop replacement", "request a laptop replacement"),
    ("the team offsite", "sign up for the team offsite"),
    ("the shuttle bus", "take the shuttle bus"),
    ("the dental plan", "enroll in the dental plan"),
    ("the premium subscription", "cancel the premium subscription"),
    ("the shipping fee", "pay the shipping fee"),
    ("the refund", "get a refund"),
    ("the security deposit", "get back the security deposit"),
    ("the conference room", "book the conference room"),
    ("the company car", "use the company car"),
    ("the training budget", "spend the training budget"),
    ("the pension contribution", "change the pension contribution"),
    ("the support ticket", "open a support ticket"),
    ("the API key", "create an API key"),
    ("the database backup", "restore the database backup"),
    ("the VPN", "connect to the VPN"),
    ("the invoice", "download the invoice"),
    ("the student discount", "claim the student discount"),
    ("the baggage allowance", "check the baggage allowance"),
    ("the library card", "renew the library card"),
    ("the parental leave", "take parental leave"),
    ("the fitness class", "join the fitness class"),
    ("the loyalty points", "redeem the loyalty points"),
    ("the mortgage application", "file the mortgage application"),
    ("the passport renewal", "start the passport renewal"),
    ("the cloud storage plan", "upgrade the cloud storage plan"),
    ("the monthly newsletter", "subscribe to the monthly newsletter"),
    ("the bike lease", "end the bike lease"),
    ("the holiday request", "send the holiday request"),
    ("the warranty claim", "make a warranty claim"),
    ("the tax return", "file the tax return"),
)
"""Subjects for answer-type frames; written for this module."""

FRAMES: dict[str, tuple[str, ...]] = {
    # each group: frames that ask for the same answer about {x} (noun) / {v} (verb phrase)
    "amount": ("How much is {x}?", "What is the amount of {x}?", "How much money is {x}?",
               "What amount is {x}?", "How high is {x}?"),
    "deadline": ("What is the deadline for {x}?", "When is the deadline for {x}?", "By what date is {x} due?",
                 "When is {x} due?", "What is the due date for {x}?"),
    "who": ("Who approves {x}?", "Who is responsible for approving {x}?", "Who has to approve {x}?",
            "Which person approves {x}?", "Whose approval does {x} need?"),
    "where": ("Where do I find {x}?", "Where can I find {x}?", "Where is {x} located?",
              "In which place can I find {x}?"),
    "steps": ("How do I {v}?", "How can I {v}?", "What are the steps to {v}?", "What is the process to {v}?",
              "What do I need to do to {v}?", "How would I {v}?", "What is the procedure to {v}?"),
    "eligible": ("Who is eligible for {x}?", "Who qualifies for {x}?", "Who can get {x}?",
                 "Who is entitled to {x}?"),
    "why": ("Why do we have {x}?", "What is the reason for {x}?", "What is the purpose of {x}?",
            "Why does {x} exist?"),
    "permission": ("Can I {v}?", "Am I allowed to {v}?", "Is it possible to {v}?", "Is it OK to {v}?",
                   "Is it okay if I {v}?", "May I {v}?"),
    "how_long": ("How long does {x} take?", "How much time does {x} take?", "What is the processing time of {x}?",
                 "How long is the wait for {x}?"),
}
"""Answer-type groups: two frames of one group are a positive, of two groups a negative."""

SYNONYMS: tuple[tuple[str, str], ...] = tuple(
    tuple(p.split("/"))  # type: ignore[misc]
    for p in ["buy/purchase", "get/obtain", "fix/repair", "find/locate", "help/assist", "need/require",
              "allowed/permitted", "cost/price", "job/position", "car/vehicle", "quick/fast", "begin/commence",
              "change/modify", "show/display", "use/utilize", "end/finish", "talk/speak", "choose/select",
              "big/large", "small/little", "error/mistake", "shop/store", "mail/post", "answer/reply",
              "rule/regulation", "staff/employees", "boss/manager", "kid/child", "cheap/inexpensive",
              "whole/entire", "try/attempt", "check/verify", "send/submit", "go/travel", "ask/request",
              "build/construct", "show/demonstrate", "near/close to", "about/regarding", "enough/sufficient",
              "trip/journey", "flat/apartment", "movie/film", "doctor/physician", "sick/ill", "phone/telephone",
              "company/firm", "wage/salary", "photo/picture", "mend/repair", "remove/delete", "set up/configure",
              "book/reserve", "update/change", "package/parcel", "spot/space", "colleague/coworker",
              "holiday/vacation", "fee/charge", "quit/resign", "contact/reach", "turn on/enable",
              "turn off/disable", "link/connect", "file/submit", "look at/view", "see/view",
              "allowance/budget", "team member/colleague", "start/begin", "cancel/call off", "office/workplace"]
)
"""Word pairs of one meaning in these questions' contexts (the positive side of a replaced word)."""

FUNCTION_EDITS: tuple[tuple[str, str], ...] = (
    (" a week", " per week"), (" a month", " per month"), (" a day", " per day"), (" a year", " per year"),
    ("How do I ", "How can I "), ("How can I ", "How do I "), ("What is ", "What's "), ("What's ", "What is "),
    ("Can I ", "Am I able to "), ("Can I ", "Is it possible to "), (" do not ", " don't "), (" cannot ", " can't "),
    ("What are ", "Which are "), ("How do you ", "How does one "), (" in order to ", " to "), (" the ", " the "),
    ("Is there ", "Is there any "), ("Where can I ", "Where do I "), ("I want to ", "I would like to "),
    ("What is the best way to ", "How should I "), (" for ", " for "),
)
"""Edits that keep the meaning (a function word inserted, replaced or contracted)."""

WH_CLASSES: dict[str, str] = {"who": "Who", "when": "When", "where": "Where", "why": "Why", "how": "How"}
MODALS: tuple[tuple[str, str], ...] = (("can", "must"), ("can", "should"), ("should", "will"), ("may", "must"),
                                        ("can", "will"), ("could", "should"), ("must", "may"))
UNITS: tuple[tuple[str, str], ...] = (("days", "weeks"), ("hours", "minutes"), ("km", "miles"), ("kg", "pounds"),
                                       ("dollars", "euros"), ("months", "years"), ("GB", "MB"), ("meters", "feet"))
ENTITIES: tuple[str, ...] = ("Berlin", "Tokyo", "Canada", "Python", "Java", "Google", "Amazon", "Paris", "Linux",
                             "Windows", "India", "China", "Spain", "Excel", "Slack", "Zoom", "Madrid", "Oracle",
                             "Microsoft", "Apple", "Samsung", "Toyota", "Germany", "Brazil", "London", "Boston")

_WORD_ANTONYMS = [(x, y) for x, y in ANTONYM_PAIRS if len(x) >= 4 and len(y) >= 4]
"""Antonym pairs of words (prepositions such as in/out make questions that no one asks)."""

_AUX = re.compile(r"^(Is|Are|Can|Do|Does|Should|Will|Was|Were|Has|Have|Could|Would|Did)\b (\w+)")
_NUM = re.compile(r"\b\d+\b")
_CAP = re.compile(r"(?<=\s)([A-Z][a-z]{2,})\b")
_FROM_TO = re.compile(r"\bfrom (\w+(?: \w+)?) to (\w+(?: \w+)?)\b")


def _sub_word(q: str, old: str, new: str) -> str | None:
    pat = re.compile(rf"\b{re.escape(old)}\b", re.IGNORECASE)
    if not pat.search(q):
        return None

    def rep(m: re.Match) -> str:
        w = m.group(0)
        return new[:1].upper() + new[1:] if w[:1].isupper() else new

    out = pat.sub(rep, q, count=1)
    return out if out != q else None


def _sub_either(q: str, x: str, y: str) -> str | None:
    """``q`` with ``x`` replaced by ``y`` (:func:`_sub_word`), else ``y`` by ``x``; ``None`` when neither occurs."""
    return _sub_word(q, x, y) or _sub_word(q, y, x)


def negatives_of(q: str, rng: random.Random, vocab: list[str]) -> list[tuple[str, str]]:
    """``(changed question, kind)`` near misses of real question ``q``: each changes what a right answer is."""
    out: list[tuple[str, str]] = []
    m = _AUX.match(q)
    if m:
        out.append((q[:m.end(1)] + " not" + q[m.end(1):], "negation"))
    elif q.startswith(("How do I ", "How can I ")):
        out.append((q.replace(" I ", " I not ", 1) if rng.random() < 0.3 else
                    "Why can't I " + q.split(" I ", 1)[1], "negation"))
    for x, y in rng.sample(_WORD_ANTONYMS, len(_WORD_ANTONYMS)):
        c = _sub_either(q, x, y)
        if c:
            out.append((c, "antonym"))
            break
    nums = _NUM.findall(q)
    if nums:
        n = rng.choice(nums)
        out.append((re.sub(rf"\b{n}\b", str(int(n) + rng.choice([1, 2, 5, 10])), q, count=1), "number"))
    for s, t in UNITS:
        for a, b in ((s, t), (t, s)):
            c = _sub_word(q, a, b)
            if c:
                out.append((c, "unit"))
    for g in SCOPE_GROUPS:
        # sorted: a frozenset's order follows the hash seed, and the data must not
        present = [w for w in sorted(g) if re.search(rf"\b{w}\b", q, re.IGNORECASE)]
        if present:
            w = present[0]
            other = rng.choice(sorted(g - {w}))
            c = _sub_word(q, w, other)
            if c:
                out.append((c, "scope"))
            break
    caps = [c for c in _CAP.findall(q) if c not in ("I",)]
    if caps:
        e = rng.choice(caps)
        out.append((q.replace(e, rng.choice([x for x in ENTITIES if x != e]), 1), "entity"))
    ft = _FROM_TO.search(q)
    if ft and ft.group(1) != ft.group(2):
        out.append((q[:ft.start()] + f"from {ft.group(2)} to {ft.group(1)}" + q[ft.end():], "direction"))
    for s, t in MODALS:
        c = _sub_word(q, s, t)
        if c:
            out.append((c, "modality"))
            break
    first = q.split(" ", 1)
    if len(first) == 2 and first[0].lower() in WH_CLASSES:
        other = rng.choice([v for k, v in WH_CLASSES.items() if k != first[0].lower()])
        out.append((other + " " + first[1], "question_type"))
    cw = [w for w in re.findall(r"\b[a-z]{5,}\b", q) if w not in ("about", "there", "which", "would", "should")]
    if cw and vocab:
        w = rng.choice(cw)
        new = rng.choice(vocab)
        if new != w:
            out.append((re.sub(rf"\b{w}\b", new, q, count=1), "topic"))
    return out


def positives_of(q: str, rng: random.Random) -> list[tuple[str, str]]:
    """``(reworded question, kind)`` that keep the meaning of real question ``q``."""
    out: list[tuple[str, str]] = []
    for s, t in rng.sample(SYNONYMS, len(SYNONYMS)):
        c = _sub_either(q, s, t)
        if c:
            out.append((c, "synonym"))
            break
    for s, t in rng.sample(FUNCTION_EDITS, len(FUNCTION_EDITS)):
        if s in q and s != t:
            out.append((q.replace(s, t, 1), "function_word"))
            break
    composed = composed_rewording(q, rng)
    if composed is not None:
        out.append((composed, "composed"))
    return out


def composed_rewording(q: str, rng: random.Random) -> str | None:
    """``q`` reworded in two or three places at once (a function-word edit and one or two synonyms: "How do I
    reserve a parking spot?" / "How can I book a parking space?"), as people reword; ``None`` when fewer than two
    edits apply."""
    c, edits = q, 0
    for s, t in rng.sample(FUNCTION_EDITS, len(FUNCTION_EDITS)):
        if s in c and s != t:
            c, edits = c.replace(s, t, 1), 1
            break
    for s, t in rng.sample(SYNONYMS, len(SYNONYMS)):
        n = _sub_either(c, s, t)
        if n:
            c, edits = n, edits + 1
        if edits >= 3:
            break
    c = re.sub(r"\b([Aa]) (?=[aeiou])", r"\1n ", c)  # "a inexpensive" -> "an inexpensive"
    return c if edits >= 2 and c != q else None


_STOP = frozenset(("about", "there", "which", "would", "should", "could", "their", "where", "these", "those", "other",
                   "after", "before", "being", "doing", "having", "people", "thing", "things", "really", "something",
                   "anyone", "someone", "every", "while", "still", "since", "always", "never", "without", "within", "does",
                   "might", "goes", "uses"))


def word_neighbours(words: list[str], embed, *, k: int = 12) -> dict[str, list[tuple[str, float]]]:
    """For each word, its ``k`` nearest other words of ``words`` by the embedder's cosine (``embed(list) -> [n, d]``
    unit rows): the related words a near-miss question swaps in ("password" -> "username")."""
    import numpy as np

    vecs = np.asarray(embed(words), dtype=np.float32)
    out: dict[str, list[tuple[str, float]]] = {}
    for s in range(0, len(words), 512):
        sims = vecs[s:s + 512] @ vecs.T
        for r, w in enumerate(words[s:s + 512]):
            row = sims[r]
            top = np.argsort(-row)[: k + 1]
            out[w] = [(words[j], float(row[j])) for j in top if words[j] != w][:k]
    return out


def _noun_only(lex, w: str) -> bool:
    """``w`` is a WordNet noun (by its first base form) and no other part of speech: a thing a question asks about."""
    forms = lex.base_forms(w)
    return bool(forms) and set(lex._entry(forms[0])) == {"noun"}


def related_pairs(questions: list[str], embed, *, seed: int = 46, cap: int = 1500) -> list[Pair]:
    """Near misses that swap one content word for a *related* one (an embedding neighbour at cosine 0.35-0.75
    that WordNet does not list as a synonym and that shares no stem: "reset my password" / "reset my username"),
    and rewordings that swap it for a WordNet synonym of its first sense that the embedder also puts near (cosine
    >= 0.6: "purchase" / "buy"). At most ``cap`` of each; deterministic for a ``seed``."""
    from ragcache.semantic.decision.lexicon import lexicon
    from ragcache.semantic.text import stem

    rng = random.Random(seed)
    qs = sorted({q.strip() for q in questions if 4 <= len(q.split()) <= 18})
    rng.shuffle(qs)
    qs = qs[:8000]
    count: dict[str, int] = {}
    for q in qs:
        for w in re.findall(r"\b[a-z]{4,}\b", q):
            if w not in _STOP:
                count[w] = count.get(w, 0) + 1
    vocab = sorted(w for w, n in count.items() if n >= 3)
    nb = word_neighbours(vocab, embed)
    lex = lexicon()
    out: list[Pair] = []
    neg = pos = 0
    for q in qs:
        ws = [w for w in re.findall(r"\b[a-z]{4,}\b", q) if w in nb]
        if not ws:
            continue
        w = rng.choice(ws)
        cands = nb[w]
        if not _noun_only(lex, w):
            continue
        near = [(x, c) for x, c in cands if 0.4 <= c <= 0.8 and _noun_only(lex, x) and stem(x) != stem(w)
                and not set(lex.base_forms(x)) & set(lex.base_forms(w)) and not lex.synonyms(w, x)]
        syn: list[tuple[str, float]] = []
        if near and neg < cap:
            x = rng.choice(near)[0]
            out.append(Pair(q, re.sub(rf"\b{w}\b", x, q, count=1), False, "related_word", "made"))
            neg += 1
        if syn and pos < cap:
            x = rng.choice(syn)[0]
            out.append(Pair(q, re.sub(rf"\b{w}\b", x, q, count=1), True, "wordnet_synonym", "made"))
            pos += 1
    return out


def frame_pairs(rng: random.Random) -> list[Pair]:
    """Answer-type frames over :data:`SUBJECTS`: two frames of one group (same subject) are a positive; two groups,
    or two subjects in one frame, a negative."""
    out: list[Pair] = []
    groups = list(FRAMES)
    for x, v in SUBJECTS:
        fill = {"x": x, "v": v}
        for g in groups:
            fs = FRAMES[g]
            for _ in range(2):
                f1, f2 = rng.sample(fs, 2)
                out.append(Pair(f1.format(**fill), f2.format(**fill), True, f"frame_{g}", "made"))
            h = rng.choice([o for o in groups if o != g])
            out.append(Pair(rng.choice(fs).format(**fill), rng.choice(FRAMES[h]).format(**fill), False,
                            "frame_type", "made"))
            x2, v2 = rng.choice([s for s in SUBJECTS if s[0] != x])
            f = rng.choice(fs)
            out.append(Pair(f.format(**fill), f.format(x=x2, v=v2), False, "frame_topic", "made"))
            for c, kind in negatives_of(rng.choice(fs).format(**fill), rng, []):
                out.append(Pair(rng.choice(fs).format(**fill), c, False, kind, "made"))
    return out


KIND_CAP = 700
"""At most this many made pairs of one kind from real questions (:func:`synthetic_pairs`)."""


def synthetic_pairs(questions: Iterable[str], *, seed: int = 46, per_question: float = 0.5,
                    cap: int = KIND_CAP) -> list[Pair]:
    """Near misses and rewordings made from real ``questions`` (:func:`negatives_of`, :func:`positives_of`), at most
    ``cap`` of each kind (twice that for the two rewording kinds), plus :func:`frame_pairs`. About ``per_question``
    of the questions are used; deterministic for a ``seed``."""
    rng = random.Random(seed)
    qs = sorted({q.strip() for q in questions if 3 <= len(q.split()) <= 25})
    rng.shuffle(qs)
    qs = qs[: int(len(qs) * per_question)]
    vocab = sorted({w for q in qs[:2000] for w in re.findall(r"\b[a-z]{5,}\b", q)})
    out: list[Pair] = []
    count: dict[str, int] = {}

    def add(q: str, c: str, same: bool, kind: str) -> None:
        limit = 2 * cap if same else cap
        if c != q and count.get(kind, 0) < limit:
            count[kind] = count.get(kind, 0) + 1
            out.append(Pair(q, c, same, kind, "made"))

    for q in qs:
        for c, kind in negatives_of(q, rng, vocab):
            add(q, c, False, kind)
        for c, kind in positives_of(q, rng):
            add(q, c, True, kind)
    out += frame_pairs(rng)
    return out


def training_pairs(data: Path, *, seed: int = 46, qqp_negatives: float = 1.1, embed=None) -> dict[str, list[Pair]]:
    """``{"train", "choose", "qqp_heldout", "hard_heldout"}``: what the pair model is fitted on (every QQP
    duplicate of the train part, ``qqp_negatives`` times as many of its non-duplicates, the made pairs and the hard
    pairs' tuning part four times), what its threshold is chosen on (QQP's choose slice, 5% of the made pairs and
    the hard pairs' tuning part), and the two held-out sets. With ``embed`` (the packaged embedder's
    ``encode``), the made pairs include :func:`related_pairs`."""
    qqp = qqp_pairs(data)
    hard = hard_pairs(data)
    qs = [q for p in qqp["train"] for q in (p.a, p.b)]
    made = synthetic_pairs(qs, seed=seed)
    if embed is not None:
        made += related_pairs(qs, embed, seed=seed)
    rng = random.Random(seed)
    made_choose = [p for p in made if rng.random() < 0.05]
    chosen = set(map(id, made_choose))
    qtrain = [p for p in qqp["train"] if p.same]
    neg = [p for p in qqp["train"] if not p.same]
    qtrain += rng.sample(neg, min(len(neg), int(qqp_negatives * len(qtrain))))
    train = [*qtrain, *(p for p in made if id(p) not in chosen), *hard["tuning"] * 4]
    rng.shuffle(train)
    return {"train": train, "choose": [*qqp["choose"], *made_choose, *hard["tuning"]],
            "qqp_heldout": qqp["heldout"], "hard_heldout": hard["heldout"]}


__all__ = ["Pair", "composed_rewording", "hard_pairs", "negatives_of", "positives_of", "qqp_pairs", "synthetic_pairs", "training_pairs"]
