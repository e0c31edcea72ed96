"""The default hit decision: hard vetoes where models are weak, the pair model where rules are.

A candidate at or above the cosine gate (the card's ``floor``) is served when

1. no **hard veto** refuses it: the guards whose finding marks another question and that pair models
   are known to miss (numbers and units, negation, antonyms, entities, swapped roles, bounds,
   complements, relative times, modality, symbols and scripts; :data:`HARD_VETOES`), and the question
   type where both questions name their kind of answer with an interrogative of their own ("Who founded
   X?" / "When was X founded?"; :func:`explicit_type_clash`) or, below the cosine floor of 0.5
   (:data:`~ragcache.limits.THRESHOLD_FLOOR`), where the two types are not the same;
2. and either every guard accepts it at the rules' own gate (cosine >= 0.94,
   :data:`~ragcache.semantic.decision.checks.DEFAULT_THRESHOLD`: the decision before the pair model, whose yes stays
   a yes), or the **pair model** (:class:`~ragcache.semantic.decision.pair_model.PairModel`, a cross-encoder trained
   for this decision) gives a probability at or above the card's ``threshold``.

What the pair model judges and the rules refused before: a reworded content word or an inserted
function word (the ``substitution`` guard: "How much is the parking fee?" / "What is the amount of
the parking fee?"), an answer-type rewording where one side names the answer by a noun ("What is the
deadline for timesheets?" / "When are timesheets due?"; ``question_type``), and what a "what"
question asks about its subject (``focus``). A pair longer than the model's window, or an exact repeat,
is decided without it (every guard, or served).

Only for the packaged all-MiniLM-L6-v2 embedder (the model's base and the vectors its floor was
chosen on); :func:`ragcache.semantic.decision.policy.make_decider` falls back to the guards for any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragcache.semantic.decision.checks import DEFAULT_THRESHOLD
from ragcache.semantic.decision.guards import DIFFERENT_QUESTION, GuardSet, GuardVerdict
from ragcache.semantic.decision.order_guards import SlotGuard, SpeakerRoleGuard, VoiceRoleGuard
from ragcache.semantic.decision.qtype import (
    QuestionTypeGuard,
    compatible,
    question_opener,
    question_type,
)
from ragcache.semantic.text import exact_form, request_core, split_words

SOFT_GUARDS: tuple[str, ...] = ("question_type", "focus", "substitution")
"""Guards whose findings the pair model judges (a rewording rules cannot read); every other guard of
:data:`~ragcache.semantic.decision.guards.DIFFERENT_QUESTION` stays a hard veto."""

HARD_VETOES: tuple[str, ...] = tuple(n for n in DIFFERENT_QUESTION if n not in SOFT_GUARDS)
"""The guards that refuse whatever the model says (the kinds pair models are known to miss)."""

PAIR_REASON = "verifier"
"""The refusal reason when the pair model says no (the ``verifier`` row of the guard table)."""

_NOUN_OPENERS = frozenset({"what", "whats", "which"})
_FRAMED_TYPES = frozenset({"how", "why", "who", "where", "where_access"})
"""Types a "what / which" question names by a frame as plainly as an interrogative would ("what should I do to",
"what is the reason", "which person", "what city do you live in"): a clash with them stays a hard veto."""
_AGENT_OPENERS = frozenset({"who", "whom"})
_WHOSE_AGENT = frozenset({"responsibility", "job", "role", "task", "duty", "decision", "call", "turn"})
"""After "whose", the nouns that make it ask for an agent as "who" does ("Whose job is it to ...?" / "Who ...?")."""


def _whose_clash(query: str, candidate: str) -> str | None:
    """"Whose" against "who" / "whom": an owner is not an agent ("Who approves my holiday request?" / "Whose holiday
    requests do I approve?", "Whose approval does X need?" / "Who is eligible for X?"), unless "whose" names a duty
    ("Whose responsibility is X?" / "Who is responsible for X?")."""
    oa, ob = question_opener(query), question_opener(candidate)
    if (oa == "whose") == (ob == "whose") or {oa, ob} - {"whose", *_AGENT_OPENERS}:
        return None
    words = split_words(query if oa == "whose" else candidate)
    i = words.index("whose") if "whose" in words else None
    if i is not None and i + 1 < len(words) and words[i + 1] in _WHOSE_AGENT:
        return None
    return "question type whose (an owner) vs who (an agent)"


def explicit_type_clash(query: str, candidate: str) -> str | None:
    """The question-type refusal that stays a hard veto: both questions open with an interrogative or auxiliary
    of their own (not "what / which + noun", whose kind of answer is read from the noun) and the two kinds of
    answer are not compatible (:func:`~ragcache.semantic.decision.qtype.compatible`): "Who founded X?" / "When was
    X founded?", "How many days ..." / "How much ...", "Is X open?" / "When is X open?". ``None`` otherwise."""
    whose = _whose_clash(query, candidate)
    if whose is not None:
        return whose
    a, b = question_type(query), question_type(candidate)
    if compatible(a, b):
        return None
    oa, ob = question_opener(query), question_opener(candidate)
    if (oa in _NOUN_OPENERS and a not in _FRAMED_TYPES) or (ob in _NOUN_OPENERS and b not in _FRAMED_TYPES):
        return None  # "what is the deadline" asks when, by a noun: the pair model reads it
    return f"question type {a} vs {b}"


@dataclass(frozen=True, slots=True)
class Stage:
    """Where :meth:`PairDecider.stage` leaves a pair: decided without the model (``verdict``), or waiting for the
    model's probability, to be compared with :meth:`PairDecider.needed` for its ``route``.

    Attributes:
        verdict: the decision when the model is not asked (an exact repeat, a hard veto, a type clash, a pair
            longer than the model's window), else ``None``.
        route: ``"plain"`` (the card's threshold), ``"slot"`` (a slot edit: the card's ``slot_threshold``) or
            ``"rules_yes"`` (every guard accepts at their gate: the model need only agree, ``agree``); empty
            when ``verdict`` is set.
        slot: the slot edit found (for the refusal's detail), else ``None``.
    """

    verdict: GuardVerdict | None
    route: str = ""
    slot: str | None = None


class PairDecider:
    """``check(query, candidate, similarity) -> GuardVerdict``: the hard vetoes, then the pair model.

    Args:
        model: a :class:`~ragcache.semantic.decision.pair_model.PairModel` (default: the shipped one, loaded on
            the first pair that needs it).
        threshold: the model's probability at which a candidate is served (default: the card's).
        floor: the cosine gate (the cache's default threshold; default: the card's).

    The decision, in order (:meth:`stage`, then the model): an exact repeat is served; a hard veto
    (:data:`HARD_VETOES`) or an :func:`explicit_type_clash` refuses; a pair longer than the model's window is
    decided by every guard; otherwise the model's probability must reach the card's ``slot_threshold`` for a slot
    edit (:class:`~ragcache.semantic.decision.order_guards.SlotGuard`: "my dog" / "my child"), ``agree`` where
    every guard accepts at cosine 0.94 (the rules' yes stands unless the model disagrees: "How should I prepare
    ..." / "How will I prepare ..."), else the card's ``threshold``.

    A refusal names the first hard veto that refused (``number``, ``negation`` ...), ``question_type`` for an
    :func:`explicit_type_clash`, ``substitution`` for a slot edit the model is not sure of, or ``verifier`` with
    the model's score.
    """

    name = "pair_model"

    def __init__(self, model: Any = None, *, threshold: float | None = None, floor: float | None = None) -> None:
        from ragcache.semantic.decision.pair_model import load_card

        card = load_card()
        self._model = model
        self.threshold = card.threshold if threshold is None else float(threshold)
        self.floor = card.floor if floor is None else float(floor)
        self.slot_threshold = card.slot_threshold
        self.agree = card.agree
        self.rules_gate = DEFAULT_THRESHOLD
        self._all = GuardSet.default()
        self._vetoes = GuardSet([g for g in self._all.guards if g.name in HARD_VETOES])
        self._soft = GuardSet([g for g in self._all.guards if g.name not in HARD_VETOES])  # the rest, in order
        self._qtype = QuestionTypeGuard()
        self._slot = SlotGuard()
        self._speaker = SpeakerRoleGuard()
        self._voice = VoiceRoleGuard()

    @property
    def model(self) -> Any:
        """The pair model (the shipped one is loaded on first use)."""
        if self._model is None:
            from ragcache.semantic.decision.pair_model import shared_pair_model

            self._model = shared_pair_model()
        return self._model

    @property
    def names(self) -> list[str]:
        """The checks run, in order: the hard vetoes, the explicit question type, then the model."""
        return [*self._vetoes.names, "question_type", PAIR_REASON]

    def score(self, query: str, candidate: str) -> float | None:
        """The pair model's probability for the two questions as the cache compares them (request wrappers
        dropped), or ``None`` when the pair is longer than its window."""
        q, c = request_core(query), request_core(candidate)
        return self.model.score(q, c) if self.model.fits(q, c) else None

    def stage(self, query: str, candidate: str, similarity: float | None = None) -> Stage:
        """Everything the decision reads before the model: a :class:`Stage` with a verdict, or the route whose
        probability the model must reach. One order for the cache (:meth:`check`), the threshold chooser and the
        benchmark, which batch the model calls."""
        if exact_form(query) == exact_form(candidate):
            return Stage(GuardVerdict())  # the same text: an exact repeat is served
        veto = self._vetoes.check(query, candidate, similarity)
        if not veto.ok:
            return Stage(veto)
        q, c = request_core(query), request_core(candidate)
        swapped = self._speaker.check(q, c) or self._voice.check(q, c)
        if swapped is not None:
            return Stage(GuardVerdict("direction", swapped))
        clash = explicit_type_clash(q, c)
        if clash is None and similarity is not None and similarity < self._qtype.loose_from:
            clash = self._qtype.check(q, c, similarity)  # below the floor only the same type, whatever the model says
        if clash is not None:
            return Stage(GuardVerdict("question_type", clash))
        if not self.model.fits(q, c):
            return Stage(self._soft.check(query, candidate, similarity))  # longer than the model reads: every guard
        slot = self._slot.check(q, c) or self._slot.check(c, q)
        if slot is not None:
            return Stage(None, "slot", slot)
        rules = self._soft.check(query, candidate, similarity)  # the hard vetoes passed above: every guard's verdict
        if rules.ok and similarity is not None and similarity >= self.rules_gate:
            if split_words(q) == split_words(c):
                return Stage(rules)  # the same words (case, spacing, punctuation aside; the symbol guard read those)
            return Stage(None, "rules_yes")
        return Stage(None, "plain")

    def needed(self, route: str, threshold: float | None = None) -> float:
        """The probability a pair on ``route`` must reach (``threshold`` in place of the card's, for a sweep)."""
        t = self.threshold if threshold is None else threshold
        if route == "slot":
            return max(self.slot_threshold, t)
        if route == "rules_yes":
            return self.agree
        return t

    def check(self, query: str, candidate: str, similarity: float | None = None) -> GuardVerdict:
        st = self.stage(query, candidate, similarity)
        if st.verdict is not None:
            return st.verdict
        p = self.model.score(request_core(query), request_core(candidate))
        need = self.needed(st.route)
        if p >= need:
            return GuardVerdict()
        if st.route == "slot":
            return GuardVerdict("substitution", f"{st.slot} (pair model {p:.3f} < {need:.3f})")
        return GuardVerdict(PAIR_REASON, f"pair model {p:.3f} < {need:.3f}")


__all__ = ["HARD_VETOES", "PAIR_REASON", "SOFT_GUARDS", "PairDecider", "Stage", "explicit_type_clash"]
