"""Deprecated alias: the Anthropic client moved to :mod:`ragcache.providers.anthropic`."""

from ragcache._moved import alias_package

alias_package(__name__, "ragcache.providers.anthropic")
