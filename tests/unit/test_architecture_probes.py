"""No probes of collaborators (issue 49 item 1): ragcache's parts meet through declared types.

A *probe* asks an object at run time whether it has a member: ``hasattr(x, "name")``, ``getattr(x, "name",
default)`` (three arguments; ``callable(getattr(x, "m", None))`` is one), and ``inspect.signature(f)``. When
``x`` is one of ragcache's own objects (an engine, a fingerprint, an embedder, a store, a guard, a backend...),
the probe is an interface nobody declared: a test double that lacks the member passes silently, a rename
breaks at run time, and the reader cannot tell which objects reach the line. These tests scan the library
(``ragcache/`` and both integration packages, tests excluded) and fail on:

- a probe of a member that one of ragcache's collaborator types declares (:data:`COLLABORATORS` and every
  ``typing.Protocol`` in the library): declare the member on the type the code holds and read it directly,
  or name the optional capability with a ``runtime_checkable`` protocol and ``isinstance``;
- any other probe not listed in :data:`THIRD_PARTY`, which names, module by module, the outside library
  whose objects are duck-typed there (transformers configs, LangChain messages, LlamaIndex nodes...).

Members a third-party object shares by name with a collaborator (a LangChain message's ``name``) are listed
in :data:`SAME_NAME`, each with why the receiver is not ragcache's. Both lists only shrink: an entry no line
needs fails :func:`test_every_exception_is_still_needed`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = [_ROOT / "ragcache", _ROOT / "integrations" / "langchain" / "langchain_ragcache",
             _ROOT / "integrations" / "llama_index" / "llama_index"]
SIGNATURE = "inspect.signature"
"""The attribute name a probe of a call's signature is recorded under."""
DYNAMIC = "*"
"""The attribute name a probe with a computed name (``getattr(x, name, None)``) is recorded under."""

COLLABORATORS = frozenset({
    "LocalEngine", "EngineKeys", "EngineConfig", "LocalBackend", "PrefixCache", "ChunkCache", "BoundChunkCache",
    "ModelFingerprint", "LoadedModel", "Embedder", "QuestionEmbedder", "SemanticPolicy", "SemanticCache",
    "CacheUsage", "Segment", "RagCache", "ChatRagCache",
})
"""ragcache classes whose objects are handed from part to part; with every ``Protocol`` class of the
library, their members are the names no probe may ask for."""

THIRD_PARTY: dict[str, tuple[str, frozenset[str]]] = {
    "ragcache/aio.py": ("a caller's async iterator (``aclose`` / ``close`` are optional on it)", frozenset({"close"})),
    "ragcache/app/argv.py": ("click's parameters, commands and usage errors", frozenset({
        "ctx", "get_command", "param_type_name"})),
    "ragcache/app/cli.py": ("``sys.stdin`` (a text stream may have no binary ``buffer``)", frozenset({"buffer"})),
    "ragcache/app/corpus.py": ("the API reference corpus reads any public object's signature and members",
                               frozenset({DYNAMIC, SIGNATURE})),
    "ragcache/app/output.py": ("``warnings.showwarning`` (marked once when the CLI wraps it)",
                               frozenset({"_ragcache"})),
    "ragcache/engine/attention.py": ("torch's private CPU flash-attention op (absent from some torch builds)",
                                     frozenset({"_scaled_dot_product_flash_attention_for_cpu"})),
    "ragcache/engine/blend/layers.py": ("a transformers attention module", frozenset({"scaling"})),
    "ragcache/engine/blend/prefill.py": ("transformers attention modules and model configs", frozenset({
        DYNAMIC, "num_key_value_heads", "scaling", "sliding_window", "use_sliding_window"})),
    "ragcache/engine/blend/selection.py": ("a transformers attention module", frozenset({"scaling"})),
    "ragcache/engine/chunk/cache.py": ("a transformers model config", frozenset({
        "bos_token_id", "head_dim", "num_key_value_heads"})),
    "ragcache/engine/decode.py": ("a transformers model and its generation config", frozenset({
        "eos_token_id", "generation_config"})),
    "ragcache/engine/keys.py": ("a transformers tokenizer", frozenset({"chat_template"})),
    "ragcache/engine/kv.py": ("a transformers model and config (attention implementation, RoPE fields; the "
                              "keep-attention flag is set on the model by ragcache)", frozenset({
        "_attn_implementation", "_ragcache_keep_attention", "rope_parameters", "set_attn_implementation"})),
    "ragcache/engine/prompt.py": ("a transformers tokenizer", frozenset({"name_or_path"})),
    "ragcache/engine/quant.py": ("transformers quantized cache layers and model configs", frozenset({
        "_quantized_keys", "_quantized_values", "_sink_kv", "head_dim"})),
    "ragcache/engine/rope.py": ("a transformers model config (RoPE fields differ by architecture and version)",
                                frozenset({"head_dim", "partial_rotary_factor", "rope_parameters", "rope_scaling",
                                           "rope_theta"})),
    "ragcache/engine/text_ids.py": ("a transformers tokenizer and its Rust backend", frozenset({
        "added_tokens_decoder", "all_special_ids", "backend_tokenizer", "to_str"})),
    "ragcache/engine/windowed.py": ("a transformers model config (window fields differ by architecture)",
                                    frozenset({"attention_chunk_size", "layer_types",
                                               "original_max_position_embeddings", "rope_parameters",
                                               "sliding_window", "use_sliding_window"})),
    "ragcache/identity.py": ("sentence-transformers modules, PEFT adapters, torch modules, HF configs, enums",
                             frozenset({"_modules", "active_adapters", "chat_template", "get_adapter_state_dict",
                                        "get_config_dict", "max_seq_length", "peft_config", "state_dict",
                                        "to_dict", "value"})),
    "ragcache/limits.py": ("a transformers model config (context-window fields by name)", frozenset({DYNAMIC})),
    "ragcache/models.py": ("transformers models, configs and tokenizers; a sentence-transformers model",
                           frozenset({DYNAMIC, "_commit_hash", "chat_template", "get_base_model",
                                      "get_embedding_dimension", "quantization_config"})),
    "ragcache/prompt/segments.py": ("LangChain documents and LlamaIndex nodes given as retrieved documents",
                                    frozenset({"excluded_llm_metadata_keys", "get_content", "id", "metadata",
                                               "node", "node_id", "page_content"})),
    "ragcache/providers/anthropic/backend.py": ("the anthropic SDK (its response, and which parameters the "
                                                "installed version declares)", frozenset({"usage", SIGNATURE})),
    "ragcache/providers/anthropic/blocks.py": ("a message of the anthropic SDK or a dict", frozenset({"content"})),
    "ragcache/providers/anthropic/usage.py": ("the anthropic SDK's usage object or a dict", frozenset({DYNAMIC})),
    "ragcache/providers/openai/backend.py": ("the openai SDK's response objects or dicts", frozenset({DYNAMIC})),
    "ragcache/providers/spec.py": ("a provider SDK's usage object or a dict", frozenset({DYNAMIC})),
    "ragcache/providers/table.py": ("a LangChain chat model's ``_llm_type``; a provider class by import path",
                                    frozenset({DYNAMIC, "_llm_type"})),
    "ragcache/semantic/embedding.py": ("sentence-transformers models and HF / Rust tokenizers under a user's "
                                       "embedder", frozenset({"backend_tokenizer", "get_vocab", "max_seq_length",
                                                              "model", "token_to_id", "tokenizer", "unk_token",
                                                              "unk_token_id"})),
    "ragcache/server/app.py": ("starlette's HTTP exceptions", frozenset({"detail", "headers", "status_code"})),
    "ragcache/testing/local_servers.py": ("``os`` (no ``geteuid`` on Windows) and subprocess errors",
                                          frozenset({"geteuid", "stderr"})),
    "integrations/langchain/langchain_ragcache/_keys.py": ("LangChain messages and documents", frozenset({
        "artifact", "name", "page_content", "status", "tool_calls"})),
    "integrations/langchain/langchain_ragcache/_messages.py": ("LangChain messages (pydantic fields by name)",
                                                               frozenset({DYNAMIC, "id"})),
    "integrations/langchain/langchain_ragcache/callbacks.py": ("LangChain generations and messages", frozenset({
        "message", "response_metadata"})),
    "integrations/langchain/langchain_ragcache/chat_models.py": ("LangChain generations and messages", frozenset({
        "message", "response_metadata"})),
    "integrations/langchain/langchain_ragcache/graph_cache.py": ("LangGraph graphs and nodes, functools.partial, "
                                                                 "pydantic models", frozenset({
        "args", "branches", "builder", "edges", "func", "keywords", "model_dump", "nodes", "runnable",
        "state_schema"})),
    "integrations/langchain/langchain_ragcache/middleware.py": ("LangChain runnables (``RunnableBinding.bound``, "
                                                                "``kwargs``), tool messages and chat models' "
                                                                "sampling fields by name", frozenset({
        DYNAMIC, "artifact", "bound", "kwargs"})),
    "integrations/langchain/langchain_ragcache/prompts.py": ("a LangChain chat model", frozenset({"model"})),
    "integrations/langchain/langchain_ragcache/results.py": ("LangChain generations and messages", frozenset({
        "generation_info", "invalid_tool_calls", "message", "response_metadata", "text", "tool_calls"})),
    "integrations/langchain/langchain_ragcache/usage.py": ("LangChain AI messages", frozenset({
        "response_metadata", "usage_metadata"})),
    "integrations/llama_index/llama_index/query_engine/ragcache/backend.py": (
        "LlamaIndex LLMs (their sampling fields differ by integration) and responses", frozenset({
            DYNAMIC, "additional_kwargs", "base_url", "max_new_tokens", "max_tokens", "message", "metadata",
            "model", "num_output", "raw", "stop", "temperature", "top_p", "usage"})),
    "integrations/llama_index/llama_index/query_engine/ragcache/base.py": (
        "LlamaIndex retrievers, indexes and ``Settings``", frozenset({"_llm", "as_retriever", "retrieve"})),
}
"""Module -> (the outside objects duck-typed there, the member names probed on them)."""

SAME_NAME: dict[tuple[str, str], str] = {
    ("ragcache/aio.py", "close"): "a caller's async iterator",
    ("ragcache/identity.py", "to_dict"): "a transformers config",
    ("ragcache/semantic/embedding.py", "encode"): "an HF tokenizers tokenizer",
    ("integrations/llama_index/llama_index/query_engine/ragcache/backend.py", "max_new_tokens"): "a LlamaIndex LLM field",
    ("integrations/llama_index/llama_index/query_engine/ragcache/backend.py", "top_p"): "a LlamaIndex LLM field",
    ("integrations/llama_index/llama_index/query_engine/ragcache/backend.py", "raw"): "a LlamaIndex response",
    ("ragcache/engine/keys.py", "chat_template"): "a transformers tokenizer's template",
    ("ragcache/engine/chunk/cache.py", "head_dim"): "a transformers config field",
    ("ragcache/engine/quant.py", "head_dim"): "a transformers config field",
    ("ragcache/engine/rope.py", "head_dim"): "a transformers config field",
    ("ragcache/identity.py", "chat_template"): "a transformers tokenizer's template",
    ("ragcache/identity.py", "max_seq_length"): "a sentence-transformers model's window",
    ("ragcache/models.py", "chat_template"): "a transformers tokenizer's template",
    ("ragcache/prompt/segments.py", "id"): "a LangChain document's id",
    ("ragcache/prompt/segments.py", "metadata"): "a LangChain document's or LlamaIndex node's metadata",
    ("ragcache/semantic/embedding.py", "model"): "a sentence-transformers wrapper's inner model",
    ("ragcache/semantic/embedding.py", "tokenizer"): "a sentence-transformers model's tokenizer",
    ("ragcache/semantic/embedding.py", "max_seq_length"): "a sentence-transformers model's window",
    ("integrations/langchain/langchain_ragcache/_keys.py", "name"): "a LangChain message's name",
    ("integrations/langchain/langchain_ragcache/_messages.py", "id"): "a LangChain message's id",
    ("integrations/langchain/langchain_ragcache/prompts.py", "model"): "a LangChain chat model's model name",
    ("integrations/langchain/langchain_ragcache/results.py", "text"): "a LangChain generation's text",
    ("integrations/llama_index/llama_index/query_engine/ragcache/backend.py", "model"): "a LlamaIndex LLM's model",
    ("integrations/llama_index/llama_index/query_engine/ragcache/backend.py", "metadata"): "LlamaIndex LLM metadata",
    ("integrations/llama_index/llama_index/query_engine/ragcache/backend.py", "stop"): "a LlamaIndex LLM field",
    ("integrations/llama_index/llama_index/query_engine/ragcache/backend.py", "temperature"): "a LlamaIndex LLM field",
    ("integrations/llama_index/llama_index/query_engine/ragcache/backend.py", "usage"): "a LlamaIndex raw response",
    ("integrations/llama_index/llama_index/query_engine/ragcache/backend.py", "max_tokens"): "a LlamaIndex LLM field",
}
"""(module, member) -> why a probe there of a name some collaborator also declares reads a third-party object."""


def probes(source: str) -> list[tuple[int, str, str]]:
    """``(line, receiver, member)`` of each probe in ``source``: ``hasattr(x, "m")``, a three-argument
    ``getattr(x, "m", d)`` (``m`` is :data:`DYNAMIC` when computed) and ``inspect.signature(...)``
    (member :data:`SIGNATURE`). Probes of ``self`` / ``cls`` and of dunder members (``__index__``,
    ``__fspath__``: the language's own protocols) are not collaborator probes and are left out."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "signature" and isinstance(f.value, ast.Name) \
                and f.value.id == "inspect":
            out.append((node.lineno, "", SIGNATURE))
        elif isinstance(f, ast.Name) and (f.id == "hasattr" and len(node.args) == 2
                                          or f.id == "getattr" and len(node.args) == 3):
            receiver, name = ast.unparse(node.args[0]), node.args[1]
            member = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else DYNAMIC
            if receiver in ("self", "cls") or member.startswith("__") and member.endswith("__"):
                continue
            out.append((node.lineno, receiver, member))
    return sorted(out)


def _members(cls: ast.ClassDef) -> set[str]:
    """Public names a class body declares: methods, properties, annotated and assigned class attributes,
    and ``self.<name> = ...`` in its methods."""
    out: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.add(node.name)
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) \
                        and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    out.add(sub.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return {n for n in out if not n.startswith("_")}


def collaborator_members(sources: dict[str, str]) -> dict[str, set[str]]:
    """Member name -> the collaborator classes (``COLLABORATORS`` and every ``Protocol``) declaring it."""
    out: dict[str, set[str]] = {}
    for source in sources.values():
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.ClassDef):
                continue
            protocol = any(ast.unparse(b).rpartition(".")[2] == "Protocol" for b in node.bases)
            if protocol or node.name in COLLABORATORS:
                for m in _members(node):
                    out.setdefault(m, set()).add(node.name)
    return out


def library_sources() -> dict[str, str]:
    return {f.relative_to(_ROOT).as_posix(): f.read_text(encoding="utf-8")
            for root in _PACKAGES for f in sorted(root.rglob("*.py"))}


def violations(sources: dict[str, str], third_party: dict[str, tuple[str, frozenset[str]]],
               same_name: dict[tuple[str, str], str]) -> list[str]:
    """``"module:line: why"`` for each probe of a collaborator member and each unlisted probe."""
    members = collaborator_members(sources)
    out = []
    for rel, source in sources.items():
        listed = third_party.get(rel, ("", frozenset()))[1]
        for line, receiver, member in probes(source):
            shown = f"{receiver}.{member}" if receiver else member
            if member in members and (rel, member) not in same_name:
                out.append(f"{rel}:{line}: probes {shown}, a member of {min(members[member])}: declare it "
                           "on the type held there and read it directly")
            elif member not in listed and (rel, member) not in same_name:
                out.append(f"{rel}:{line}: probes {shown}: declare it on a ragcache type, or list the outside "
                           "library it duck-types in THIRD_PARTY")
    return out


def test_the_scan_finds_every_form_of_probe():
    src = ('"""hasattr(engine, "x") in a docstring."""\n'
           "a = hasattr(engine, 'drain_chunk_queue')\n"
           "b = getattr(engine, 'context_window', 0)\n"
           "c = getattr(engine, 'context_window')\n"
           "d = callable(getattr(store, 'sight_many', None))\n"
           "e = inspect.signature(fn).parameters\n"
           "f = getattr(self, 'budget', None)\n"
           "g = hasattr(type(n), '__index__')\n"
           "h = getattr(cfg, field, None)\n"
           "# hasattr(x, 'y') in a comment\n")
    assert probes(src) == [(2, "engine", "drain_chunk_queue"), (3, "engine", "context_window"),
                           (5, "store", "sight_many"), (6, "", SIGNATURE), (9, "cfg", DYNAMIC)]


def test_a_probe_of_a_collaborator_fails_even_where_its_module_is_listed():
    sources = {
        "pkg/engine.py": "class LocalEngine:\n    def drain_chunk_queue(self):\n        pass\n"
                         "    def __init__(self):\n        self.context_window = 1\n",
        "pkg/store.py": "from typing import Protocol\nclass Sightings(Protocol):\n    def sight_many(self): ...\n",
        "pkg/app.py": "ok = hasattr(engine, 'drain_chunk_queue')\nn = getattr(engine, 'context_window', 0)\n"
                      "s = hasattr(store, 'sight_many')\nt = getattr(config, 'rope_theta', 1e4)\n"
                      "u = getattr(tok, 'chat_template', None)\n",
    }
    listed = {"pkg/app.py": ("transformers", frozenset({"rope_theta", "context_window"}))}
    found = violations(sources, listed, {})
    assert [v.split(": ")[0] for v in found] == ["pkg/app.py:1", "pkg/app.py:2", "pkg/app.py:3", "pkg/app.py:5"]
    assert "a member of LocalEngine" in found[0] and "a member of Sightings" in found[2]
    assert "list the outside library" in found[3]
    assert violations(sources, listed, {("pkg/app.py", "context_window"): "a config field"})[1].startswith(
        "pkg/app.py:3")


def test_the_collaborators_are_found():
    members = collaborator_members(library_sources())
    for name in ("context_window", "fingerprint", "generate", "lookup", "store", "get_many", "stats"):
        assert name in members, name


@pytest.mark.parametrize("root", _PACKAGES, ids=lambda p: p.name)
def test_no_module_probes_a_collaborator(root):
    sources = library_sources()
    found = [v for v in violations(sources, THIRD_PARTY, SAME_NAME)
             if (_ROOT / v.split(":")[0]).is_relative_to(root)]
    assert not found, "a probe of one of ragcache's own objects (docs/design/architecture.md, 'Typed seams'):\n" \
        + "\n".join(found)


def test_every_exception_is_still_needed():
    """An entry whose probe is gone is removed, so both lists only shrink."""
    sources = library_sources()
    used = {(rel, m) for rel, src in sources.items() for _, _, m in probes(src)}
    stale = [f"{rel}: {m}" for rel, (_, ms) in THIRD_PARTY.items() for m in sorted(ms) if (rel, m) not in used]
    stale += [f"{rel}: {m}" for (rel, m) in SAME_NAME if (rel, m) not in used]
    assert not stale, f"no line probes these any more; drop them from THIRD_PARTY / SAME_NAME: {stale}"
