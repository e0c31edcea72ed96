"""Issue 32, section 3: a lint warning (VolatileTextMoved, PossiblyVolatileDate, the layout's
UserWarning) names the caller's line, not langsmith/run_helpers.py or a ragcache module, whether
ragcache is called directly or through the LangChain adapters."""

from __future__ import annotations

import inspect
import warnings

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda
from langchain_ragcache import RagPrompt, RagPromptLayoutMiddleware

from ragcache.prompt.layout import PromptLayout
from ragcache.prompt.volatile import PossiblyVolatileDate, VolatileTextMoved, move_volatile

SYSTEM = "You are the ops assistant. Today is 2026-12-01. Answer from the runbook only."
DOCS = [Document(id="b", page_content="Backups run nightly at 02:30 UTC.")]


def _where(category, call) -> tuple[list[tuple[str, int]], int]:
    """Run ``call`` (a lambda on the caller's line) and return where each ``category`` warning points."""
    line = inspect.currentframe().f_back.f_lineno
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        call()
    return [(w.filename, w.lineno) for w in rec if issubclass(w.category, category)], line


def _assert_here(found: list[tuple[str, int]], line: int) -> None:
    assert found, "no warning"
    assert all(f == __file__ and n == line for f, n in found), (found, __file__, line)


def test_direct_calls() -> None:
    _assert_here(*_where(VolatileTextMoved, lambda: move_volatile(SYSTEM)))
    _assert_here(*_where(VolatileTextMoved, lambda: PromptLayout.build(question="q?", system=SYSTEM, lint="move")))
    _assert_here(*_where(UserWarning, lambda: PromptLayout.build(question="q?", system=SYSTEM, lint="warn")))
    _assert_here(*_where(PossiblyVolatileDate, lambda: PromptLayout.build(question="q?", system="Released 2024-07-26.",
                                                                           lint="raise")))
    docs = [{"id": "a", "text": "x", "metadata": {"score": 0.5}}]
    _assert_here(*_where(VolatileTextMoved, lambda: PromptLayout.build(question="q?", documents=docs, lint="move")))


def test_through_rag_prompt_and_a_chain() -> None:
    inputs = {"question": "When do backups run?", "context": DOCS}
    _assert_here(*_where(VolatileTextMoved, lambda: RagPrompt(system=SYSTEM).invoke(inputs)))
    chain = RagPrompt(system=SYSTEM) | RunnableLambda(lambda v: v.to_messages())
    _assert_here(*_where(VolatileTextMoved, lambda: chain.invoke(inputs)))
    _assert_here(*_where(VolatileTextMoved, lambda: chain.batch([inputs])))
    chain2 = RagPrompt(system="Released 2024-07-26. Be brief.") | RunnableLambda(lambda v: v.to_messages())
    _assert_here(*_where(PossiblyVolatileDate, lambda: chain2.invoke(inputs)))


def test_through_an_async_chain_names_the_callers_line_or_the_adapter_step() -> None:
    # An async chain runs each step in a task: the warning names the line that drives the event loop
    # (the caller's asyncio.run) when it is on the step's stack, else the adapter line that built the
    # layout; never langsmith, langchain-core, ragcache's core or an installed package in between.
    import asyncio

    chain = RagPrompt(system=SYSTEM) | RunnableLambda(lambda v: v.to_messages())
    inputs = {"question": "When do backups run?", "context": DOCS}
    line = inspect.currentframe().f_lineno + 3
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        asyncio.run(chain.ainvoke(inputs))
    (w,) = [w for w in rec if issubclass(w.category, VolatileTextMoved)]
    if w.filename == __file__:
        assert w.lineno == line, (w.lineno, line)
    else:
        assert w.filename.replace("\\", "/").endswith("langchain_ragcache/prompts.py"), w.filename
        src = inspect.getsource(RagPrompt.layout).splitlines()
        assert "PromptLayout.build(" in src[w.lineno - inspect.getsourcelines(RagPrompt.layout)[1]]


def test_an_installed_package_under_the_stdlib_folder_is_not_passed_through(tmp_path):
    """A system / pyenv install keeps site-packages inside the standard library's folder: a package
    there is not the standard library, so a frame in it is not walked past."""
    from ragcache.prompt.volatile import passes_through

    stdlib = str(tmp_path / "lib" / "python3.11") + "/"
    framework = stdlib + "site-packages/langchain_core/"
    skip = (stdlib, framework)
    assert passes_through(stdlib + "asyncio/events.py", skip)
    assert passes_through(framework + "runnables/base.py", skip)
    assert not passes_through(stdlib + "site-packages/pytest_asyncio/plugin.py", skip)
    assert not passes_through(stdlib + "dist-packages/myapp/main.py", skip)
    assert not passes_through(str(tmp_path / "app" / "main.py"), skip)


def test_through_the_layout_middleware() -> None:
    from langchain.agents.middleware import ModelRequest, ModelResponse

    model = ChatAnthropic(model="claude-sonnet-4-6", api_key="unused", base_url="http://127.0.0.1:9")
    req = ModelRequest(model=model, messages=[HumanMessage("When do backups run?")],
                       system_message=SystemMessage(SYSTEM), tools=[], model_settings={})
    mw = RagPromptLayoutMiddleware()
    _assert_here(*_where(VolatileTextMoved, lambda: mw.layout(req)))
    handler = lambda r: ModelResponse(result=[AIMessage("ok")])
    _assert_here(*_where(VolatileTextMoved, lambda: mw.wrap_model_call(req, handler)))
