"""Near-miss kinds a new-user trial found served at the defaults: permission against obligation
("Can I ...?" / "Must I ...?"), a clock time's half of the day ("10 am" / "10 pm"), and reversed roles
("Who reports to the manager?" / "Who does the manager report to?", "Alice's manager" / "Bob's",
"a flight to Paris" / "from Paris"). Each kind on several inputs, both directions: the guard names
the kind, the packaged MiniLM with the default guards and with ``guards="verifier"`` refuses, and
true paraphrases of each kind still pass the guards."""

from __future__ import annotations

import pytest

from guard_cases import assert_refused, both, caches, embedder, kind_cases  # noqa: F401 - fixtures
from ragcache.semantic.decision.guards import DIFFERENT_QUESTION, GuardSet, meridiems
from ragcache.semantic.decision.meaning_guards import modalities
from ragcache.semantic.decision.order_guards import wh_role
from ragcache.semantic.text import normalize_question

MODALITY = [
    ("Can engineers be on call for two weeks in a row?", "Must engineers be on call for two weeks in a row?"),
    ("Can bikes be returned within 30 days?", "Must bikes be returned within 30 days?"),
    ("Can I book business class for a 7 hour flight?", "Should I book business class for a 7 hour flight?"),
    ("Can I book business class for a 7 hour flight?", "Do I have to book business class for a 7 hour flight?"),
    ("Can I expense a taxi?", "Must I expense a taxi?"),
    ("Can contractors join the on-call rotation?", "Must contractors join the on-call rotation?"),
    ("May I carry over unused vacation days?", "Must I carry over unused vacation days?"),
    ("Do managers have to approve vacation requests?", "Can managers approve vacation requests?"),
    ("Do I have to include the receipt to get a refund?", "Can I include the receipt to get a refund?"),
    ("Should I submit receipts with my expenses?", "Can I submit receipts with my expenses?"),
    ("Is a receipt required for a taxi expense?", "Is a receipt allowed for a taxi expense?"),
    ("Am I allowed to work from home on Fridays?", "Am I required to work from home on Fridays?"),
    ("Can I get a refund?", "Should I get a refund?"),
    ("Can I expense a taxi?", "Do I need to expense a taxi?"),
    ("How many days can I work remotely per week?", "How many days do I have to work remotely per week?"),
    ("How often can I change my password?", "How often should I change my password?"),
    ("How long can I keep a rental car?", "How long must I keep a rental car?"),
    ("What documents do I need to bring on my first day?", "What documents can I bring on my first day?"),
]
MERIDIEM = [
    ("Does the on-call week start at 10 am?", "Does the on-call week start at 10 pm?"),
    ("Is the office open at 9 am?", "Is the office open at 9 pm?"),
    ("Can I expense a meal at 11 pm?", "Can I expense a meal at 11 am?"),
    ("Is the office open at 9am?", "Is the office open at 9pm?"),
    ("Does the shift end at 6 a.m.?", "Does the shift end at 6 p.m.?"),
    ("Is the standup at 10:30 AM?", "Is the standup at 10:30 PM?"),
    ("Does the backup run at 2 in the morning?", "Does the backup run at 2 in the afternoon?"),
    ("Does the store open at 9 o'clock in the morning?", "Does the store open at 9 o'clock at night?"),
]
ROLES = [
    ("Who reports to the engineering manager?", "Who does the engineering manager report to?"),
    ("Who escalates to the engineering manager?", "Who does the engineering manager escalate to?"),
    ("Who should I escalate to?", "Who should escalate to me?"),
    ("Who should I call if the site is down?", "Who should call me if the site is down?"),
    ("Who does Alice manage?", "Who manages Alice?"),
    ("Is Alice Bob's manager?", "Is Bob Alice's manager?"),
    ("Does Acme's team report to Globex's?", "Does Globex's team report to Acme's?"),
    ("How much does a flight to Paris cost?", "How much does a flight from Paris cost?"),
    ("How long is the train ride to London?", "How long is the train ride from London?"),
    ("Can I transfer money to my savings account?", "Can I transfer money from my savings account?"),
    ("How do I migrate data into the warehouse?", "How do I migrate data from the warehouse?"),
    ("Can I reassign a ticket to another team?", "Can I reassign a ticket from another team?"),
    ("Who did the director hire?", "Who hired the director?"),
    ("Can I send you the invoice?", "Can you send me the invoice?"),
    ("Should I approve your timesheet?", "Should you approve my timesheet?"),
    ("Do I owe you money?", "Do you owe me money?"),
    ("Did I get paid for overtime?", "Did you get paid for overtime?"),
    ("Can I approve my own expenses?", "Can you approve my own expenses?"),
]
KINDS = {"modality": MODALITY, "number": MERIDIEM, "direction": ROLES}
PARAPHRASES = [
    ("Can I return a bike within 30 days?", "Is it possible to return a bike within 30 days?"),
    ("Can I return a bike within 30 days?", "Am I allowed to return a bike within 30 days?"),
    ("Must I include a receipt?", "Do I have to include a receipt?"),
    ("Do I need to include a receipt?", "Is a receipt required?"),
    ("How do I return a bike?", "How can I return a bike?"),
    ("How can I reset my password?", "How should I reset my password?"),
    ("What can I do to get my money back?", "What should I do to get my money back?"),
    ("Where can I learn Hadoop?", "Where should I learn Hadoop?"),
    ("Can you tell me whether I must file a receipt?", "Must I file a receipt?"),
    ("Can I take leave in May?", "Am I allowed to take leave in May?"),
    ("Does the office open at 9 am?", "Does the office open at 9 in the morning?"),
    ("Does the office open at 9 am?", "Does the office open at 9 a.m.?"),
    ("Who approves vacation requests?", "Who is the approver of vacation requests?"),
    ("Who is the engineering manager?", "Who is the manager of engineering?"),
    ("Who do I call when the site is down?", "Who should I call when the site is down?"),
    ("What is the difference between Alice and Bob's plans?", "What is the difference between Bob and Alice's plans?"),
    ("How do I get to the office from the station?", "How do I get from the station to the office?"),
    ("How do I convert a string to an integer?", "How do I turn a string into an integer?"),
    ("Who should I contact about a broken monitor?", "Who can I contact about a broken monitor?"),
    ("When can I expect my refund?", "When should I expect my refund?"),
    ("Which number should I call for IT support?", "Which number can I call for IT support?"),
    ("Should I be able to see the shared drive?", "Can I see the shared drive?"),
    ("Who does the payroll?", "Who does payroll?"),
    ("Who has the authority to approve refunds?", "Who has authority to approve refunds?"),
    ("Does the store open at 9 o'clock in the morning?", "Does the store open at 9am?"),
    ("How should a teacher keep order in class?", "How can a teacher keep order in class?"),
    ("What can I learn in 2 minutes that can be useful?", "What can I learn in 2 minutes that should be useful?"),
    ("How do I reset my password?", "How do you reset your password?"),
    ("What comes to mind when you think of Seoul?", "What comes to your mind when you think of Seoul?"),
    ("How do Taekwondo and Karate compare to each other?", "How do Taekwondo and Karate differ from each other?"),
]


CASES = kind_cases(KINDS)


@pytest.mark.parametrize(("kind", "stored", "asked"), CASES)
def test_the_guard_names_the_kind(kind, stored, asked):
    verdict = GuardSet.default().check(normalize_question(asked), normalize_question(stored))
    assert verdict.reason == kind, verdict
    assert kind in DIFFERENT_QUESTION


@pytest.mark.parametrize(("kind", "stored", "asked"), CASES)
def test_refused_by_the_guards_and_the_verifier(caches, kind, stored, asked):
    assert_refused(caches, kind, stored, asked)


@pytest.mark.parametrize(("a", "b"), both(PARAPHRASES))
def test_paraphrases_pass_these_guards(a, b):
    gs = GuardSet([g for g in GuardSet.default().guards if g.name in KINDS])
    assert gs.check(normalize_question(a), normalize_question(b)).ok


@pytest.mark.parametrize(("text", "kinds"), [
    ("Can I go?", {"permission"}), ("Must I go?", {"obligation"}), ("Do I need a visa?", {"obligation"}),
    ("I need copies of my bills, where do I find them?", set()), ("How can I go?", set()),
    ("Can you tell me the refund policy?", set()), ("Can I take leave in May?", {"permission"}),
    ("What is the policy in May?", set()), ("May I leave early?", {"permission"}),
    ("Is it possible to pay later?", {"permission"}), ("Should I pay later?", {"obligation"}),
])
def test_modalities(text, kinds):
    assert modalities(text) == kinds


@pytest.mark.parametrize(("text", "halves"), [
    ("at 10 am", ["am"]), ("at 10pm", ["pm"]), ("from 9 a.m. to 5 p.m.", ["am", "pm"]), ("at 10", []),
    ("I am 10 years old", []), ("at 7 in the evening", ["pm"]), ("Am I late?", []),
])
def test_meridiems(text, halves):
    assert meridiems(text) == halves


@pytest.mark.parametrize(("text", "role"), [
    ("Who reports to Alice?", "subject"), ("Who does Alice report to?", "object"), ("Whom do I call?", "object"),
    ("Who should escalate to me?", "subject"), ("Who should I escalate to?", "object"),
    ("Who is the manager?", None), ("Who is Alice reporting to?", "object"), ("Who is reporting to Alice?", "subject"),
    ("What is the manager's name?", None),
])
def test_wh_role(text, role):
    assert wh_role(text) == role
