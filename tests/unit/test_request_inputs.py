"""Request options a caller may get wrong (RagCache.prepare, PromptLayout.build): a TypeError for a
wrong type, a ValueError for a wrong value, each naming the option, before any lookup or backend call,
and nothing stored is touched."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from pipeline_doubles import DOCS, EchoBackend, echo_rag

from ragcache import PromptLayout

Q = "When do orders ship?"


@pytest.mark.parametrize(("bad", "exc"), [(1.5, ValueError), ("abc", TypeError), ("64", TypeError),
                                          (math.nan, ValueError), (math.inf, ValueError), (True, TypeError),
                                          ([64], TypeError)])
def test_max_new_tokens_that_is_not_an_integer_is_named(bad, exc):
    backend = EchoBackend()
    rag = echo_rag(backend)
    with pytest.raises(exc, match="max_new_tokens must be an integer >= 1"):
        rag.answer(Q, DOCS[:1], max_new_tokens=bad)
    with pytest.raises(exc, match="max_new_tokens must be an integer >= 1"):
        asyncio.run(rag.aanswer(Q, DOCS[:1], max_new_tokens=bad))
    with pytest.raises(exc, match="max_new_tokens must be an integer >= 1"):
        echo_rag(max_new_tokens=bad).answer(Q, DOCS[:1])
    assert backend.calls == 0 and len(rag.semantic) == 0


@pytest.mark.parametrize(("bad", "exc"), [(math.nan, ValueError), (-0.1, ValueError), (-1, ValueError),
                                          ("hot", TypeError), (None, TypeError), (True, TypeError)])
def test_temperature_that_is_not_a_number_at_least_zero_is_named(bad, exc):
    backend = EchoBackend()
    rag = echo_rag(backend)
    if bad is not None:  # None means "the RagCache default" per call
        with pytest.raises(exc, match="temperature must be a number >= 0"):
            rag.answer(Q, DOCS[:1], temperature=bad)
    with pytest.raises(exc, match="temperature must be a number >= 0"):
        echo_rag(backend, temperature=bad).answer(Q, DOCS[:1])
    assert backend.calls == 0


@pytest.mark.parametrize("ok", [dict(max_new_tokens=np.int64(8)), dict(max_new_tokens=8.0),
                                dict(temperature=np.float32(0.5)), dict(temperature=1)])
def test_numpy_and_integral_values_still_work(ok):
    rag = echo_rag()
    assert rag.answer(Q, DOCS[:1], **ok).layer == "model"
    # a sampled request without a seed is a fresh draw (one replay rule at every entry point)
    assert rag.answer(Q, DOCS[:1], **ok).layer == ("model" if "temperature" in ok else "semantic")


@pytest.mark.parametrize("kw, match", [
    (dict(system=5), "system must be a str"), (dict(system=b"sys"), "system must be a str"),
    (dict(volatile=5), "volatile must be a str"), (dict(volatile=["today"]), "volatile must be a str"),
    (dict(tools=[5]), r"tools\[0\] must be a tool definition"),
    (dict(tools=[{"name": "a"}, "b"]), r"tools\[1\] must be a tool definition"),
    (dict(tools="search"), "tools must be a list"), (dict(tools={"name": "a"}), "tools must be a list"),
    (dict(tools=5), "tools must be a list"),
])
def test_layout_parts_of_the_wrong_type_are_named(kw, match):
    with pytest.raises(TypeError, match=match):
        PromptLayout.build(question=Q, **kw)
    backend = EchoBackend()
    with pytest.raises(TypeError, match=match):
        echo_rag(backend).answer(Q, DOCS[:1], **kw)
    assert backend.calls == 0


def test_tools_from_any_iterable_of_dicts_still_work():
    tools = ({"name": "search", "input_schema": {}},)
    a = PromptLayout.build(question=Q, tools=tools)
    b = PromptLayout.build(question=Q, tools=iter(list(tools)))
    assert a.render() == b.render() and "search" in a.render()
