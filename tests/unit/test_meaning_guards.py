"""Near-miss kinds the guards and the verifier once served (issue: trust from the field): a bound or
quantifier added or removed, a spatial or set complement, a time relative to now pointing
elsewhere. Each kind on its own inputs, both directions, through the packaged MiniLM with the
default guards and with ``guards="verifier"``; true paraphrases of each kind still hit. And the
verifier's hard vetoes cover every "different question" finding of the guards."""

from __future__ import annotations

import pytest

from guard_cases import assert_refused, both, caches, embedder, kind_cases  # noqa: F401 - fixtures
from ragcache.semantic import partition_key
from ragcache.semantic.decision.guards import DIFFERENT_QUESTION, GuardSet
from ragcache.semantic.text import normalize_question

BOUND = [
    ("How many copies does the backup keep?", "How many copies does the backup keep at most?"),
    ("How many guests can I invite?", "How many guests can I invite at least?"),
    ("How many API calls can I make per day?", "How many API calls can I make?"),
    ("What is the maximum upload size?", "What is the upload size?"),
    ("How long does a refund take on average?", "How long does a refund take?"),
    ("How much did we spend on cloud in total?", "How much did we spend on cloud?"),
    ("What is the minimum order value?", "What is the order value?"),
    ("Can I bring up to 3 bags?", "Can I bring 3 bags?"),
    ("How many sessions can run at once, no more than how many?", "How many sessions can run at once?"),
    ("How many emails can I send a day?", "How many emails can I send a month?"),
]
COMPLEMENT = [
    ("How many employees does Acme have in Europe?", "How many employees does Acme have outside Europe?"),
    ("Can I use the VPN inside the office?", "Can I use the VPN outside the office?"),
    ("Which files are in the backup?", "Which files are excluded from the backup?"),
    ("What is the price including tax?", "What is the price excluding tax?"),
    ("Which countries ship within the EU?", "Which countries ship beyond the EU?"),
    ("Who can access the repo?", "Who can access the repo other than admins?"),
    ("Which users have a license?", "Which users are without a license?"),
    ("What does the plan cover in network?", "What does the plan cover out of network?"),
]
RELATIVE_TIME = [
    ("How do I rotate keys this week?", "How do I rotate keys next week?"),
    ("What were sales last month?", "What were sales this month?"),
    ("What is the revenue target for this quarter?", "What is the revenue target for next quarter?"),
    ("Who is on call today?", "Who is on call tomorrow?"),
    ("What was the uptime yesterday?", "What is the uptime today?"),
    ("Which holidays do we get this year?", "Which holidays do we get next year?"),
    ("What is the budget for the current fiscal year?", "What is the budget for the previous fiscal year?"),
    ("Who is on call today?", "Who is on call?"),
]
PARAPHRASES = [  # same kind of words on both sides: must still pass the new guards
    ("What is the maximum upload size?", "What is the max upload size?"),
    ("Can I bring at most 3 bags?", "Can I bring no more than 3 bags?"),
    ("How many emails can I send per day?", "How many emails can I send daily?"),
    ("How many employees work outside Europe?", "How many staff work outside of Europe?"),
    ("Who is on call this week?", "Who is on call during the current week?"),
    ("What were sales last month?", "What were the sales for the previous month?"),
]
KINDS = {"bound": BOUND, "complement": COMPLEMENT, "relative_time": RELATIVE_TIME}


CASES = kind_cases(KINDS)


@pytest.mark.parametrize(("kind", "stored", "asked"), CASES)
def test_the_guard_names_the_kind(kind, stored, asked):
    gs = GuardSet([g for g in GuardSet.default().guards if g.name == kind])
    assert gs.check(normalize_question(asked), normalize_question(stored)).reason == kind


@pytest.mark.parametrize(("kind", "stored", "asked"), CASES)
def test_refused_by_the_guards_and_the_verifier(caches, kind, stored, asked):
    assert_refused(caches, kind, stored, asked)


@pytest.mark.parametrize(("a", "b"), both(PARAPHRASES))
def test_paraphrases_pass_the_new_guards(a, b):
    gs = GuardSet([g for g in GuardSet.default().guards if g.name in KINDS or g.name == "symbol"])
    assert gs.check(normalize_question(a), normalize_question(b)).ok


def test_spelled_numbers_equal_digits(caches):
    pairs = [("Is the return window 30 days?", "Is the return window thirty days?"),
             ("Can I get a refund within fourteen days?", "Can I get a refund within 14 days?"),
             ("Do I need twenty-one credits to graduate?", "Do I need 21 credits to graduate?"),
             ("Is the trial seven days long?", "Is the trial 7 days long?"),
             ("Can I add five hundred users?", "Can I add 500 users?")]
    low = caches["guards at 0.5"]
    for i, (a, b) in enumerate(both(pairs)):
        assert GuardSet.default().check(normalize_question(a), normalize_question(b)).ok, (a, b)
        pk = partition_key(namespace=f"num-{i}", model="m")
        low.store(a, "A", partition=pk)
        assert low.lookup(b, partition=pk) is not None, (a, b)
    wrong = [("Is the return window 30 days?", "Is the return window thirty-one days?"),
             ("Can I add five hundred users?", "Can I add 5000 users?")]
    for a, b in both(wrong):
        assert GuardSet.default().check(a, b).reason == "number"


# ------------------------------------------------------------------ the verifier's vetoes

SAMPLES = [*(p for ps in KINDS.values() for p in ps), *PARAPHRASES,
           ("Is the API rate limited?", "Is the API not rate limited?"),
           ("How do I enable 2FA?", "How do I disable 2FA?"),
           ("What does %Y print?", "What does %y print?"),
           ("Who founded Apple?", "When was Apple founded?"),
           ("Flights from Boston to Denver?", "Flights from Denver to Boston?"),
           ("Is the bucket 1-2 public?", "Is the bucket 2-1 public?"),
           ("How do I sort a list in pandas?", "How do I sort a list in polars?"),
           ("What is daily usage?", "What is monthly usage?"),
           ("How do I reset a Gmail password?", "How do I reset an Outlook password?")]


def test_vetoes_are_a_superset_of_the_guards_different_question_findings(embedder):
    from ragcache.semantic.decision.features import guard_findings
    from ragcache.semantic.decision.verifier import default_verifier

    v = default_verifier(embedder)
    assert v is not None
    assert set(DIFFERENT_QUESTION) <= set(v.veto_names)
    default_names = set(GuardSet.default().names)
    assert set(DIFFERENT_QUESTION) <= default_names and "substitution" not in DIFFERENT_QUESTION
    vetoes = GuardSet([g for g in GuardSet.default().guards if g.name in v.veto_names])
    for a, b in both(SAMPLES):
        found = {n for n, refused in guard_findings(GuardSet.default().guards, a, b).items()
                 if refused and n in DIFFERENT_QUESTION}
        vetoed = {n for n, refused in guard_findings(vetoes.guards, a, b).items() if refused}
        assert found <= vetoed, (a, b, found - vetoed)
        if found:
            assert not v.check(a, b, 0.99).ok, (a, b)
