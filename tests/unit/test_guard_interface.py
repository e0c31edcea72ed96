"""The guard interface (:class:`ragcache.semantic.decision.guard_protocol.Guard`): every member a guard set
reads is declared, with its default; ragcache's guards declare them by subclassing, a guard of one's own
with ``name`` and ``check`` alone is given the defaults once, when its guard set is built."""

from __future__ import annotations

import pytest

from ragcache.semantic import SemanticCache, partition_key
from ragcache.semantic.decision.guard_protocol import Guard, declared_guard
from ragcache.semantic.decision.guards import GUARDS, GuardSet
from ragcache.semantic.decision.order_guards import SlotGuard, SpeakerRoleGuard, SubstitutionGuard, VoiceRoleGuard
from ragcache.semantic.decision.qtype import QuestionTypeGuard
from ragcache.testing import HashingEmbedder


class Refuses:
    """A guard of one's own: ``name`` and ``check`` alone; it refuses every pair and records what it got."""

    name = "refuses"

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def check(self, query: str, candidate: str) -> str | None:
        self.calls.append((query, candidate))
        return "always"


class RefusesBelow(Refuses):
    """With a ``below`` but no ``reads_similarity`` (the contract's similarity floor)."""

    name = "refuses_below"
    below = 0.5


class ReadsIt:
    """With ``reads_similarity`` but no ``below``: its check is given the similarity."""

    name = "reads_it"
    reads_similarity = True

    def __init__(self) -> None:
        self.seen: list[float | None] = []

    def check(self, query: str, candidate: str, similarity: float | None = None) -> str | None:
        self.seen.append(similarity)
        return None


def test_every_guard_of_ragcache_declares_the_members_and_is_kept_as_it_is():
    guards = [k.guard(lambda q, c: True) if k.name == "verifier" else k.guard() for k in GUARDS]
    guards += [SlotGuard(), SpeakerRoleGuard(), VoiceRoleGuard()]  # the pair decider's own
    gs = GuardSet(list(guards))
    for g, kept in zip(guards, gs.guards, strict=True):
        assert isinstance(g, Guard) and kept is g, g
        want_below, want_reads = (None, g.name == "question_type")
        assert (g.below, g.reads_similarity) == (want_below, want_reads), g.name
        assert not hasattr(g, "__dict__"), g.name  # the slots dataclasses stay slotted
    assert SubstitutionGuard(below=0.9).below == 0.9 and QuestionTypeGuard().reads_similarity


@pytest.mark.parametrize("sim,runs", [(None, True), (0.2, True), (0.49, True), (0.5, False), (0.9, False)])
def test_a_guard_of_ones_own_gets_the_defaults_and_keeps_its_below(sim, runs):
    plain, floor = Refuses(), RefusesBelow()
    assert not isinstance(plain, Guard) and not isinstance(floor, Guard)
    gs = GuardSet([floor, plain])
    assert all(isinstance(g, Guard) for g in gs.guards) and gs.names == ["refuses_below", "refuses"]
    assert [(g.below, g.reads_similarity) for g in gs.guards] == [(0.5, False), (None, False)]
    verdict = gs.check("How do I pay?", "How do I pay online?", sim)
    assert verdict.reason == ("refuses_below" if runs else "refuses") and verdict.detail == "always"
    assert len(floor.calls) == int(runs) and len(plain.calls) == int(not runs)  # the first refusal ends the check


@pytest.mark.parametrize("sim", [None, 0.3, 0.97])
def test_a_guard_of_ones_own_that_reads_the_similarity_is_given_it(sim):
    g = ReadsIt()
    assert GuardSet([g]).check("a question", "another question", sim).ok
    assert g.seen == [sim]


class _ForgotName(Guard):
    """Subclasses the base and forgets its name: refused when the set is built, not at the first lookup."""

    def check(self, query, candidate):
        return None


class _EmptyName(_ForgotName):
    name = ""


@pytest.mark.parametrize("bad", [object(), "number", type("NoCheck", (), {"name": "x"})(),
                                 type("NoName", (), {"check": lambda self, q, c: None})(), _ForgotName(),
                                 _EmptyName(), type("NotStr", (), {"name": 3, "check": lambda self, q, c: None})()])
def test_a_guard_without_name_and_check_is_refused_when_the_set_is_built(bad):
    with pytest.raises(TypeError, match="name .* and check"):
        GuardSet([bad])
    with pytest.raises(TypeError, match="subclass ragcache.semantic.Guard"):
        declared_guard(bad)


@pytest.mark.parametrize("cls", [_ForgotName, SlotGuard, QuestionTypeGuard])
def test_a_guard_class_is_refused_with_the_instance_to_pass(cls):
    with pytest.raises(TypeError, match=rf"{cls.__name__} is a guard class, not a guard: pass an instance"):
        GuardSet([cls])


def test_a_cache_runs_a_guard_of_ones_own():
    reader = ReadsIt()
    with SemanticCache(embedder=HashingEmbedder(), threshold=0.5, guards=GuardSet([reader])) as open_, \
            SemanticCache(embedder=HashingEmbedder(), threshold=0.5, guards=GuardSet([Refuses()])) as shut:
        pk = partition_key(namespace="own-guard", model="m")
        for c in (open_, shut):
            c.store("How do I pay by card?", "Settings > Billing", partition=pk)
        assert open_.lookup("How do I pay by card", partition=pk).answer == "Settings > Billing"
        assert reader.seen[-1] > 0.5  # given the similarity
        assert shut.lookup("How do I pay by card", partition=pk) is None
        assert shut.candidates_for("How do I pay by card", partition=pk)[0].verdict.reason == "refuses"


def test_the_guards_have_no_floor_of_their_own():
    from ragcache.semantic.decision.policy import DEFAULT_THRESHOLD

    assert GuardSet().floor is None and GuardSet.default().floor is None
    with SemanticCache(embedder=HashingEmbedder(), guards="rules") as c:
        assert c.threshold == DEFAULT_THRESHOLD
