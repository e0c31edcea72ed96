"""Every part the model reads is in the key: a user message's ``name`` and a system message's non-text
blocks (break-it items 3 and 4)."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from ragcache.request import key_messages

QUESTION = "What is my name?"
CAT = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "Y2F0LnBuZw=="}}
DOG = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "ZG9nLnBuZw=="}}


def _partition(messages, **kw):
    return key_messages(messages, **kw).request(model="m", params={"max_tokens": 8}).partition


def _user(text=QUESTION, name=None):
    return {"role": "user", "content": text, **({} if name is None else {"name": name})}


@pytest.mark.parametrize("before", [[], [{"role": "system", "content": "Be brief."}],
                                    [_user("Hi", "carol"), {"role": "assistant", "content": "Hello."}]])
def test_the_askers_name_is_in_the_partition_not_in_the_question(before):
    bob, alice = (key_messages([*before, _user(name=n)]) for n in ("bob", "alice"))
    assert bob.question == alice.question == QUESTION  # the embedded question is the same text
    assert _partition([*before, _user(name="bob")]) != _partition([*before, _user(name="alice")])
    assert _partition([*before, _user(name="bob")]) != _partition([*before, _user()])
    assert _partition([*before, _user(name="bob")]) == _partition([*before, _user(name="bob")])


def test_a_name_on_an_earlier_user_turn_or_a_trailing_volatile_turn_is_in_the_partition():
    def chat(first, last):
        return [_user("Hi", first), {"role": "assistant", "content": "Hello."}, _user(),
                {"role": "user", "content": [{"type": "text", "text": "Today is Monday.",
                                              "ragcache_kind": "volatile"}], **({"name": last} if last else {})}]

    assert _partition(chat("bob", None)) != _partition(chat("alice", None))
    assert _partition(chat(None, "bob")) != _partition(chat(None, "alice"))
    assert _partition(chat(None, "bob")) == _partition(chat(None, "bob"))


def _system(text, *blocks, first=True):
    content = [{"type": "text", "text": text}, *blocks] if first else [*blocks, {"type": "text", "text": text}]
    return {"role": "system", "content": content}


def test_a_system_message_with_an_image_keeps_its_text():
    yes = key_messages([_system("Always answer YES", CAT), _user("Is it safe?")])
    no = key_messages([_system("Always answer NO", CAT), _user("Is it safe?")])
    assert yes.layout.system_text != no.layout.system_text and "Always answer YES" in yes.layout.system_text
    assert yes.request(model="m").partition != no.request(model="m").partition


@pytest.mark.parametrize("a, b", [
    ([_system("Describe the picture.", CAT)], [_system("Describe the picture.", DOG)]),
    ([_system("Describe the picture.", CAT)], [_system("Describe the picture.")]),
    ([_system("Describe the picture.", CAT)], [_system("Describe the picture.", CAT, first=False)]),
    ([_system("Describe the picture.", CAT, DOG)], [_system("Describe the picture.", DOG, CAT)]),
    ([{**_system("Describe the picture."), "name": "a"}], [{**_system("Describe the picture."), "name": "b"}]),
])
def test_a_system_messages_other_parts_are_in_the_partition(a, b):
    assert _partition([*a, _user("What animal is it?")]) != _partition([*b, _user("What animal is it?")])
    assert _partition([*a, _user("What animal is it?")]) == _partition([*a, _user("What animal is it?")])


def test_provider_markers_on_a_system_image_do_not_change_the_key():
    marked = {**CAT, "cache_control": {"type": "ephemeral"}}
    assert (_partition([_system("Describe the picture.", CAT), _user("What animal is it?")])
            == _partition([_system("Describe the picture.", marked), _user("What animal is it?")]))


def test_a_plain_request_keys_as_before():
    plain = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}, "Cite sources."]},
             _user("Hi"), {"role": "assistant", "content": "Hello."}, _user("How long do refunds take?")]
    keyed = key_messages(plain)
    assert keyed.layout.system_text == "Be brief.\n\nCite sources."
    assert "user_names" not in keyed.extra and "system_parts" not in keyed.extra
    # digests recorded before names and system blocks were keyed: a request without them keys as it did
    brief = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How long do refunds take?"}]
    digest = key_messages(brief).request(model="m", params={"max_tokens": 3}).partition.digest
    assert digest == "795819102b9cce58b546ca957a5d3a3e4d93231724b96aa66f915749f345c9c3"


def test_langchain_messages_carry_names_and_system_blocks():
    from langchain_ragcache._keys import key_messages as lc_key

    def part(messages):
        return lc_key(messages).request(model="m").partition

    assert part([HumanMessage(QUESTION, name="bob")]) != part([HumanMessage(QUESTION, name="alice")])
    assert part([HumanMessage(QUESTION, additional_kwargs={"name": "bob"})]) == part([HumanMessage(QUESTION, name="bob")])
    assert part([HumanMessage("Hi", name="bob"), AIMessage("Hello."), HumanMessage(QUESTION)]) != part(
        [HumanMessage("Hi", name="alice"), AIMessage("Hello."), HumanMessage(QUESTION)])
    cat = {"type": "image_url", "image_url": {"url": "data:image/png;base64,Y2F0LnBuZw=="}}
    dog = {"type": "image_url", "image_url": {"url": "data:image/png;base64,ZG9nLnBuZw=="}}
    assert part([SystemMessage([{"type": "text", "text": "Describe it."}, cat]), HumanMessage("Which animal?")]) != part(
        [SystemMessage([{"type": "text", "text": "Describe it."}, dog]), HumanMessage("Which animal?")])
    text_only = lc_key([SystemMessage([{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]),
                        HumanMessage(QUESTION)])
    assert text_only.layout.system_text == "Be brief." and not text_only.extra  # m.text, as before
    unnamed = [SystemMessage([{"type": "text", "text": "Be "}, {"type": "text", "text": "brief"}]), HumanMessage("Hi"),
               AIMessage("Yo", name="bot"), HumanMessage("How long?")]
    assert part(unnamed).digest == "1082a757c415e60cf94f3ad9bb40266378fc810c2b5cb64fb8d4d6652bdf2e29"  # as before
