"""langchain-tests' ChatModelUnitTests for ChatRagCache (no model is loaded: engines load lazily)."""

from __future__ import annotations

from langchain_ragcache import ChatRagCache
from langchain_ragcache.chat_models import TINY_RANDOM_MODEL
from langchain_tests.unit_tests import ChatModelUnitTests


class TestChatRagCacheUnit(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[ChatRagCache]:
        return ChatRagCache

    @property
    def chat_model_params(self) -> dict:
        return {"model": TINY_RANDOM_MODEL}

    @property
    def standard_chat_model_params(self) -> dict:
        # A short decode budget: the suite checks structure, not long answers.
        return {**super().standard_chat_model_params, "max_tokens": 8}
