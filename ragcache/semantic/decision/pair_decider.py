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

from typing import Any

from ragcache.semantic.decision.checks import DEFAULT_THRESHOLD
from ragcache.semantic.decision.guards import DIFFERENT_QUESTION, GuardSet, GuardVerdict
from ragcache.semantic.decision.qtype import (
    QuestionTypeGuard,
    compatible,
    question_opener,
    question_type,
)
from ragcache.semantic.text import exact_form, request_core

SOFT_GUARDS: tuple[str, ...] = ("question_type", "focus", "substitution")
"""Guards whose findings the pair model judges (a rewording rules cannot read); every other guard of
:data:`~ragcache.semantic.decision.guards.DIFFERENT_QUESTION` stays a hard veto."""

HARD_VETOES: tuple[str, ...] = tuple(n for n in DIFFERENT_QUESTION if n not in SOFT_GUARDS)
"""The guards that refuse whatever the model says (the kinds pair models are known to miss)."""

PAIR_REASON = "verifier"
"""The refusal reason when the pair model says no (the ``verifier`` row of the guard table)."""

_NOUN_OPENERS = frozenset({"what", "whats", "which"})


def explicit_type_clash(query: str, candidate: str) -> str | None:
    """The question-type refusal that stays a hard veto: both questions open with an interrogative or auxiliary
    of their own (not "what / which + noun", whose kind of answer is read from the noun) and the two kinds of
    answer are not compatible (:func:`~ragcache.semantic.decision.qtype.compatible`): "Who founded X?" / "When was
    X founded?", "How many days ..." / "How much ...", "Is X open?" / "When is X open?". ``None`` otherwise."""
    a, b = question_type(query), question_type(candidate)
    if compatible(a, b):
        return None
    oa, ob = question_opener(query), question_opener(candidate)
    if oa in _NOUN_OPENERS or ob in _NOUN_OPENERS:
        return None  # "what is the deadline" asks when, by a noun: the pair model reads it
    return f"question type {a} vs {b}"


class PairDecider:
    """``check(query, candidate, similarity) -> GuardVerdict``: the hard vetoes, then the pair model.

    Args:
        model: a :class:`~ragcache.semantic.decision.pair_model.PairModel` (default: the shipped one, loaded on
            the first pair that needs it).
        threshold: the model's probability at which a candidate is served (default: the card's).
        floor: the cosine gate (the cache's default threshold; default: the card's).

    A refusal names the first hard veto that refused (``number``, ``negation`` ...), ``question_type`` for an
    :func:`explicit_type_clash`, or ``verifier`` with the model's score.
    """

    name = "pair_model"

    def __init__(self, model: Any = None, *, threshold: float | None = None, floor: float | None = None) -> None:
        from ragcache.semantic.decision.pair_model import load_card

        card = load_card()
        self._model = model
        self.threshold = card.threshold if threshold is None else float(threshold)
        self.floor = card.floor if floor is None else float(floor)
        self.rules_gate = DEFAULT_THRESHOLD
        self._all = GuardSet.default()
        self._vetoes = GuardSet([g for g in self._all.guards if g.name in HARD_VETOES])
        self._qtype = QuestionTypeGuard()

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

    def check(self, query: str, candidate: str, similarity: float | None = None) -> GuardVerdict:
        if exact_form(query) == exact_form(candidate):
            return GuardVerdict()  # the same text: an exact repeat is served
        veto = self._vetoes.check(query, candidate, similarity)
        if not veto.ok:
            return veto
        q, c = request_core(query), request_core(candidate)
        clash = explicit_type_clash(q, c)
        if clash is None and similarity is not None and similarity < self._qtype.loose_from:
            clash = self._qtype.check(q, c, similarity)  # below the floor only the same type, whatever the model says
        if clash is not None:
            return GuardVerdict("question_type", clash)
        rules = self._all.check(query, candidate, similarity)
        if rules.ok and similarity is not None and similarity >= self.rules_gate:
            return rules  # the rules' own yes at their gate (the decision before the pair model) stays a yes
        if not self.model.fits(q, c):
            return rules  # longer than the model reads: every guard decides
        p = self.model.score(q, c)
        if p < self.threshold:
            return GuardVerdict(PAIR_REASON, f"pair model {p:.3f} < {self.threshold:.3f}")
        return GuardVerdict()


__all__ = ["HARD_VETOES", "PAIR_REASON", "SOFT_GUARDS", "PairDecider", "explicit_type_clash"]
