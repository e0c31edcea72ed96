"""RagCacheSemanticCache in front of a chat model that reads a message's ``name`` and a system message's
images: one user's (or one picture's) answer is never served for another (break-it items 3 and 4)."""

from __future__ import annotations

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_ragcache import RagCacheSemanticCache

CAT = {"type": "image_url", "image_url": {"url": "data:image/png;base64,Y2F0LnBuZw=="}}
DOG = {"type": "image_url", "image_url": {"url": "data:image/png;base64,ZG9nLnBuZw=="}}


class Echo(BaseChatModel):
    """Answers with the last message's name and the image URLs of the system message, as a model
    that reads them would; counts its calls."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "echo-names"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.calls += 1
        images = [b["image_url"]["url"] for m in messages if m.type == "system" and isinstance(m.content, list)
                  for b in m.content if isinstance(b, dict) and b.get("type") == "image_url"]
        text = f"{messages[-1].name} {' '.join(images)}".strip()
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text, response_metadata={
            "finish_reason": "stop"}))])


def test_bobs_answer_is_not_served_to_alice(embedder):
    model = Echo(cache=RagCacheSemanticCache(embedder=embedder))
    assert model.invoke([HumanMessage("What is my name?", name="bob")]).content == "bob"
    assert model.invoke([HumanMessage("What is my name?", name="alice")]).content == "alice"
    assert model.invoke([HumanMessage("What is my name?", name="bob")]).content == "bob"
    assert model.calls == 2  # bob's second ask is a hit


def test_a_system_image_is_part_of_the_key(embedder):
    model = Echo(cache=RagCacheSemanticCache(embedder=embedder))

    def ask(image):
        return model.invoke([SystemMessage([{"type": "text", "text": "Say which animal the picture shows."}, image]),
                             HumanMessage("Which animal is it?")]).content

    cat, dog = ask(CAT), ask(DOG)
    assert cat.endswith(CAT["image_url"]["url"]) and dog.endswith(DOG["image_url"]["url"])
    assert ask(CAT) == cat and model.calls == 2  # the same picture again is a hit
