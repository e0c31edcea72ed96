"""Deprecated alias: the OpenAI-compatible client moved to :mod:`ragcache.providers.openai`."""

from ragcache._moved import alias_package

alias_package(__name__, "ragcache.providers.openai")
