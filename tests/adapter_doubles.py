"""LangChain doubles of the adapter contract tests (the answer-path contract over LangChain, LlamaIndex
and the Anthropic proxy; the sampled-replay rule over the same entry points): the scripted model behind
LangChain's chat model interface, and an Answer read back from a LangChain message. Imports
langchain-core; a test module skips on a missing framework before importing this one. The LlamaIndex
and proxy doubles are in :mod:`contract_entries`."""

from __future__ import annotations

import asyncio
from functools import reduce
from operator import add
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from contract_entries import Text
from ragcache.answering import Answer
from ragcache.backend import CacheUsage
from ragcache.provenance import Provenance
from ragcache.testing.answer_contract import ScriptedBackend

DOCS = ["Backups run nightly at 02:30 UTC and are kept for 30 days.",
        "Deploys go out on Tuesdays after the change review meeting."]
SYSTEM = "Answer from the documents. Be brief."


def usage_of(d: Any) -> CacheUsage:
    return CacheUsage(**{k: v for k, v in dict(d or {}).items() if k in CacheUsage.__dataclass_fields__})


# ---------------------------------------------------------------------------------------------- LangChain
NATIVE = {"stop": ("finish_reason", "stop"), "length": ("finish_reason", "length"),
          "content_filter": ("finish_reason", "content_filter"), "refusal": ("stop_reason", "refusal"),
          "incomplete": ("finish_reason", None)}


class ScriptedChat(BaseChatModel):
    """A LangChain chat model over the scripted model: provider-style native end reasons, and
    ragcache's record of the layer (as ChatRagCache reports it)."""

    backend: Any = None

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": "scripted-1", "max_tokens": 64}

    @property
    def blend_setting(self) -> str | None:  # ragcache.backend.Blending, as ChatRagCache (the middleware reads it)
        return self.backend.blend_setting

    def _generate(self, messages: list, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        from langchain_ragcache.usage import usage_metadata

        r = self.backend.generate(Text(" ".join(m.text for m in messages)), max_new_tokens=64, temperature=0.0)
        key, native = NATIVE[r.finish_reason]
        msg = AIMessage(r.text, usage_metadata=usage_metadata(r.usage), response_metadata={
            key: native, "model_name": "scripted-1",
            "ragcache": {"layer": r.layer, "approximate": r.approximate, "recompute_ratio": r.recompute_ratio,
                         "blend_setting": r.blend_setting, "usage": r.usage.to_dict()}})
        return ChatResult(generations=[ChatGeneration(message=msg)])


def lc_answer(question: str, msg: Any) -> Answer:
    """An Answer read from a LangChain message: ragcache's record, the finish reason in ragcache's words."""
    from langchain_ragcache.results import finish_reason_of

    rec = msg.response_metadata["ragcache"]
    finish = rec.get("finish_reason") or finish_reason_of(msg)
    return Answer(question, msg.text, rec["layer"], usage_of(rec.get("usage")),
                  provenance=Provenance.from_metadata({**rec, "finish_reason": finish}))


def scripted_chat_rag_cache(backend: ScriptedBackend, *, declares_blend: bool = False, **fields: Any) -> Any:
    """ChatRagCache (the tiny random engine for its identity; ``fields`` as its own) whose answer comes
    from the scripted ``backend`` in one piece, through its stream (``_pieces`` / ``_apieces``) and
    ``invoke``. ``declares_blend``: it answers at the scripted model's blend setting, as the engine's
    would be; else at the tiny engine's."""
    from langchain_ragcache import ChatRagCache
    from langchain_ragcache.chat_models import TINY_RANDOM_MODEL, shared_engine

    class Scripted(ChatRagCache):
        def _pieces(self, messages: Any, stop: Any, opts: Any, kwargs: Any, box: dict) -> Any:
            r = backend.generate(Text(" ".join(m.text for m in messages)), max_new_tokens=0, temperature=0.0)
            yield r.text
            box["result"] = r
            yield r

        async def _apieces(self, messages: Any, stop: Any, opts: Any, kwargs: Any, box: dict) -> Any:
            for item in self._pieces(messages, stop, opts, kwargs, box):
                yield item

        if declares_blend:
            def _blend_for(self, kwargs: Any) -> Any:
                return backend.blend_setting

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
            *_, r = self._pieces(messages, stop, {}, kw, {})
            return ChatResult(generations=[ChatGeneration(message=self._final(r)[1])])

    return Scripted(engine=shared_engine(TINY_RANDOM_MODEL, chunk_cache=False), **fields)


def lc_call(model: Any, messages: list, mode: str) -> Any:
    """A LangChain chat model's message for ``messages``: ``stream`` and ``astream`` add up the chunks;
    any other mode is ``invoke``."""
    if mode == "stream":
        return reduce(add, model.stream(messages))
    if mode == "astream":
        async def run() -> Any:
            return reduce(add, [c async for c in model.astream(messages)])

        return asyncio.run(run())
    return model.invoke(messages)
