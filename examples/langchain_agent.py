"""A LangChain v1 agent on ragcache's middleware: semantic cache and a prompt-cache-friendly layout.

Two parts, both offline:

1. ``run_cached_agent``: ``create_agent`` over a retriever tool with :class:`RagCacheMiddleware`;
   ask, ask again reworded (served from the semantic cache, no model call), ask the negated
   question (a miss: the guards refuse it).
2. ``run_session``: a 10-turn support session with changing documents and a system prompt that
   carries the current time, sent with ``ChatAnthropic`` to ragcache's local Anthropic-compatible
   server (Anthropic's prompt-caching rules), once with :class:`RagPromptLayoutMiddleware` and once
   with ``langchain_anthropic``'s ``AnthropicPromptCachingMiddleware``; prints the share of input
   tokens read from the cache on each request.

    python examples/langchain_agent.py [--turns 10] [--model ragcache/tiny-random-llama]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import AgentMiddleware  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.messages import HumanMessage, SystemMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from langchain_ragcache import ChatRagCache, RagCacheSemanticCache, RagPrompt  # noqa: E402
from langchain_ragcache.middleware import RagCacheMiddleware, RagPromptLayoutMiddleware  # noqa: E402

DOCUMENTS = [
    Document(id="refunds", metadata={"source": "policies/refunds.md"}, page_content=(
        "Refunds: once a returned bike reaches our warehouse, we inspect it within two business days and issue "
        "the refund to the original payment method. Refunds take up to 14 days to appear on a card statement.")),
    Document(id="returns", metadata={"source": "policies/returns.md"}, page_content=(
        "Returns: bikes can be returned within 30 days of delivery if they have been ridden less than 50 km. "
        "Start a return from the Orders page; we email a prepaid shipping label.")),
    Document(id="warranty", metadata={"source": "policies/warranty.md"}, page_content=(
        "Warranty: every Northwind frame has a lifetime warranty for the original owner. Components are covered "
        "for two years. The warranty does not cover crash damage or normal wear.")),
    Document(id="shipping", metadata={"source": "policies/shipping.md"}, page_content=(
        "Shipping: orders ship from Portland within three business days. Delivery to the continental United "
        "States takes five to seven days; Canada takes seven to ten days.")),
    Document(id="assembly", metadata={"source": "guides/assembly.md"}, page_content=(
        "Assembly: attach the front wheel, the handlebar and the pedals with the included 15 mm wrench and 4 mm "
        "hex key. Assembly takes about 30 minutes.")),
    Document(id="sizing", metadata={"source": "guides/sizing.md"}, page_content=(
        "Sizing: riders from 160 to 170 cm fit a small frame, 170 to 180 cm a medium frame, and 180 to 190 cm "
        "a large frame.")),
]

RULES = [
    "Greet the customer only in the first turn of a conversation and never repeat the greeting.",
    "Answer from the shop's policy documents; if they do not contain the answer, say so and offer a human agent.",
    "Quote prices, distances and durations exactly as the documents state them, with their units.",
    "Never promise a refund, a replacement or a delivery date that the documents do not support.",
    "Ask for the order number before discussing a specific order, and never ask for card details.",
    "Keep answers to three sentences unless the customer asks for step-by-step instructions.",
    "For assembly questions, list the tools first, then the steps in order, one step per line.",
    "For sizing questions, ask for the rider's height and inseam when they are not given.",
    "For warranty claims, explain what is covered, what is excluded, and how to start a claim.",
    "If the customer is upset, acknowledge the problem in one sentence before answering.",
    "Do not discuss competitors' products, prices or policies, even when asked directly.",
    "Use the search_policies tool when the documents in the conversation do not cover the question.",
    "Use the order_status tool only with an order number the customer gave in this conversation.",
    "Write in plain English; avoid jargon, and explain any technical term you cannot avoid.",
    "Never invent a policy; when two documents disagree, cite both and offer a human agent.",
    "Close every answer by asking whether there is anything else you can help with.",
]
SYSTEM = ("You are the support agent of Northwind Bikes, a direct-to-consumer bicycle shop based in Portland, "
          "Oregon. Follow these rules in every turn:\n" + "\n".join(f"{i + 1}. {r}" for i, r in enumerate(RULES * 3)))

QUESTIONS = [
    "How long does a refund take?", "Can I return a bike I rode 20 km?", "Is crash damage covered?",
    "How long is delivery to Canada?", "What tools do I need to assemble it?", "I am 175 cm, which frame fits?",
    "When is my refund issued?", "Who pays for the return label?", "Are the gears under warranty?",
    "Where do orders ship from?",
]


@tool(response_format="content_and_artifact")
def search_policies(query: str) -> tuple[str, list[Document]]:
    """Search the shop's policy documents for the query."""
    words = set(query.lower().split())
    docs = sorted(DOCUMENTS, key=lambda d: -len(words & set(d.page_content.lower().split())))[:2]
    return "\n\n".join(d.page_content for d in docs), docs


@tool
def order_status(order_id: str) -> str:
    """Look up an order's status by its number."""
    return f"Order {order_id} shipped on Monday."


class CurrentTime(AgentMiddleware):
    """Puts the current time into the system prompt, as many agents do (the value changes per request)."""

    def __init__(self, clock: Callable[[], str]) -> None:
        super().__init__()
        self.clock = clock

    def _with_time(self, request: Any) -> Any:
        text = (request.system_prompt or "") + f"\nCurrent time: {self.clock()}."
        return request.override(system_message=SystemMessage(content=text))

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(self._with_time(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(self._with_time(request))


def fake_clock(start: str = "2026-11-30 10:41:07", step_s: int = 37) -> Callable[[], str]:
    t = [dt.datetime.fromisoformat(start)]

    def now() -> str:
        out = t[0].strftime("%Y-%m-%d %H:%M:%S")
        t[0] += dt.timedelta(seconds=step_s)
        return out

    return now


def turn_message(i: int) -> HumanMessage:
    """Turn ``i``: two retrieved documents (changing every turn, canonical layout) and the question."""
    docs = [DOCUMENTS[i % len(DOCUMENTS)], DOCUMENTS[(i + 2) % len(DOCUMENTS)]]
    return RagPrompt().invoke({"question": QUESTIONS[i % len(QUESTIONS)], "context": docs}).to_messages()[-1]


def run_session(*, turns: int = 10, layout: str = "ragcache", current_time: bool = True, model: str | None = None,
                engine: Any = None, max_tokens: int = 8, min_tokens: int = 256,
                quiet: bool = False) -> list[dict[str, Any]]:
    """A ``turns``-turn session against the local Anthropic server; one row per request with the
    input tokens, cache read / write and the breakpoints the request carried.

    ``layout``: ``"ragcache"`` (:class:`RagPromptLayoutMiddleware`), ``"langchain-anthropic"``
    (``AnthropicPromptCachingMiddleware``) or ``"none"``. ``min_tokens``: the server's and the
    middleware's minimum cacheable prefix (Anthropic's is 1,024 tokens for Sonnet). ``engine``: the
    server's :class:`~ragcache.LocalEngine` (default: the shared engine of ``model``).
    """
    from langchain_anthropic import ChatAnthropic
    from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware

    from langchain_ragcache.chat_models import shared_engine
    from ragcache.server.app import running_server

    engine = engine or (shared_engine(model) if model else shared_engine())
    mws: list[Any] = [CurrentTime(fake_clock())] if current_time else []
    if layout == "ragcache":
        mws.append(RagPromptLayoutMiddleware())
    elif layout == "langchain-anthropic":
        mws.append(AnthropicPromptCachingMiddleware(ttl="5m"))
    elif layout != "none":
        raise ValueError(f"layout must be 'ragcache', 'langchain-anthropic' or 'none', got {layout!r}")
    rows = []
    with running_server(engine, min_tokens=min_tokens) as url:
        llm = ChatAnthropic(model="claude-sonnet-4-6", base_url=url, api_key="local", max_tokens=max_tokens,
                            temperature=0.0, max_retries=0)
        agent = create_agent(llm, tools=[search_policies, order_status], system_prompt=SYSTEM, middleware=mws,
                             checkpointer=InMemorySaver())
        thread = {"configurable": {"thread_id": f"session-{layout}"}}
        for i in range(turns):
            out = agent.invoke({"messages": [turn_message(i)]}, config=thread)["messages"][-1]
            um = out.usage_metadata or {}
            det = um.get("input_token_details") or {}
            rc = out.response_metadata.get("ragcache") or {}
            written = (det.get("cache_creation") or 0) + sum(  # per-TTL counts when langchain-anthropic splits them
                det.get(k) or 0 for k in ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"))
            rows.append({"turn": i + 1, "input_tokens": um.get("input_tokens", 0),
                         "cache_read": det.get("cache_read") or 0, "cache_creation": written,
                         "breakpoints": rc.get("breakpoints")})
    if not quiet:
        share = read_share(rows)
        print(f"\n{layout} (current time in system prompt: {current_time}): read share from request 2 = {share:.3f}")
        for r in rows:
            print(f"  turn {r['turn']:2d}  input {r['input_tokens']:5d}  read {r['cache_read']:5d}  "
                  f"write {r['cache_creation']:5d}  breakpoints {r['breakpoints']}")
    return rows


def read_share(rows: list[dict[str, Any]]) -> float:
    """Tokens read from the cache over all input tokens, from the second request on."""
    later = rows[1:]
    total = sum(r["input_tokens"] for r in later)
    return sum(r["cache_read"] for r in later) / total if total else 0.0


def run_cached_agent(*, model: str | None = None, max_tokens: int = 24, quiet: bool = False) -> list[dict[str, Any]]:
    """An agent over the retriever tool with :class:`RagCacheMiddleware` on the local ChatRagCache."""
    # short demo budgets cut answers; path=None: in memory, so every run starts empty
    mw = RagCacheMiddleware(RagCacheSemanticCache(path=None, cache_truncated=True))
    llm = ChatRagCache(max_tokens=max_tokens, **({"model": model} if model else {}))
    agent = create_agent(llm, tools=[search_policies], system_prompt=SYSTEM[:400], middleware=[mw])
    rows = []
    for label, q in (("ask", "Is crash damage covered by the warranty?"),
                     ("reworded", "Is crash damage covered by the warranty at all?"),
                     ("negated", "Is crash damage not covered by the warranty?")):
        before = mw.model_calls
        msg = agent.invoke({"messages": [HumanMessage(q)]})["messages"][-1]
        rc = msg.response_metadata.get("ragcache") or {}
        rows.append({"step": label, "question": q, "layer": rc.get("layer"), "model_calls": mw.model_calls - before,
                     "similarity": rc.get("similarity"), "id": msg.id, "answer": msg.text.strip()})
    if not quiet:
        for r in rows:
            print(f"  {r['step']:9s} layer={r['layer']!s:13s} model calls={r['model_calls']}  {r['answer'][:60]!r}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--model", default=None, help="model for the local engine (default: embedded SmolLM2-135M)")
    args = ap.parse_args()
    print("Agent with RagCacheMiddleware:")
    run_cached_agent(model=args.model)
    for current_time in (True, False):
        for layout in ("ragcache", "langchain-anthropic"):
            run_session(turns=args.turns, layout=layout, current_time=current_time, model=args.model)


if __name__ == "__main__":
    main()
