"""What produced a KV cache: digests of every weight file, and of any adapter on the model.

Every KV and answer key starts from :class:`~ragcache.models.ModelFingerprint`. Its
``revision`` for a local model folder is :func:`folder_digest`: the sha256 of every weight
file in the folder (all safetensors / bin / pt shards, not only the first) and of
``config.json``; its ``adapters`` are :func:`adapter_identities`: for each PEFT / LoRA
adapter on the model, its name, configuration and a digest of its weights as loaded.

Hashing a multi-gigabyte model on every load would be slow, so :class:`DigestCache` keeps
each file's sha256 in a small JSON file keyed by the resolved path, and reuses it only while the
file's device, inode, size, mtime *and ctime* (nanoseconds) are all unchanged. The ctime is
what makes this safe: the kernel sets it on every write, truncation, rename and metadata change
(``utime`` included) and no user program can set it back, so a weight file rewritten in place
with the same size, inode and a restored mtime is noticed and hashed again. A file whose mtime
or ctime is within :data:`RACY_SECONDS` of the moment it was hashed is not cached ("racy"
entries, as in git's index): a later edit in the same clock tick could otherwise keep every
timestamp. Where the platform has no change time (Windows, whose ``st_ctime`` is the creation
time) nothing is cached and every file is hashed at every load. What the cache still trusts:
that the system clock is not set back and that nothing writes the disk below the file system.

The chat template is part of the identity too (:func:`template_digest`): it decides the prompt
the model sees, so a template edited in the folder (``chat_template.jinja``,
``additional_chat_templates/``, or ``chat_template`` in ``tokenizer_config.json``) or set in memory
(``tokenizer.chat_template = ...``) gives another fingerprint, answer partition and KV keys.
:func:`folder_chat_template` reads it from a folder the way transformers loads it, so the
fingerprint can be known before the model is loaded.

So are the files that decide tokenization and decoding besides the weights (:func:`tokenizer_digest`:
``tokenizer.json``, ``tokenizer_config.json``, ``generation_config.json`` and the other
:data:`TOKENIZER_FILES`): an edited normaliser or end-of-sequence setting changes the answers, so it
changes the fingerprint's :attr:`~ModelFingerprint.digest` (never its ``weights_digest``).

What no digest can see: weights changed in memory after loading (``merge_and_unload``,
training steps, ``model.load_state_dict``). Such a model needs a new ``namespace``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ragcache.atomic import atomic_write_json
from ragcache.hashing import canonical_json, hash_value

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack")
"""File endings of weight files; every such file at the top of a model folder is hashed."""
CONFIG_FILES = ("config.json", "adapter_config.json")
"""Non-weight files that change the computed KV (architecture, RoPE, adapter targets)."""
RACY_SECONDS = 2.0
"""A digest is cached only for files last modified and changed (mtime, ctime) at least this long before hashing."""
STAT_TRUSTED = os.name == "posix"
"""Whether file stats carry a kernel-set change time (ctime) that :class:`DigestCache` can trust."""
_CACHE_FORMAT = "ragcache-file-digests-v1"  # entries gained ctime_ns and dev: older entries lack them and are hashed again
_IGNORED_ADAPTER_KEYS = {"base_model_name_or_path", "revision", "inference_mode", "auto_mapping", "init_lora_weights"}
"""Adapter config keys that do not change what the loaded adapter computes (where it was
loaded from, training-only switches, how its weights were first initialised)."""


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in ``chunk``-byte blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def identity_files(folder: str | Path) -> list[Path]:
    """The files of a model folder that decide its KV: weight files and config files, sorted.

    Only the top level is read (transformers loads from there; ``original/`` copies of the
    weights in some hub repositories are not loaded and not hashed).

    Raises:
        ValueError: ``folder`` is not a directory.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a directory: give a model folder")
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and (p.name in CONFIG_FILES or p.name.endswith(WEIGHT_SUFFIXES)))


def _signature(st: os.stat_result) -> dict[str, int]:
    """What must be unchanged for a remembered digest to be reused (see the module docstring)."""
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino,
            "dev": st.st_dev}


EMBEDDER_SKIPPED = ("README", "LICENSE", "NOTICE", "data_config.json", "train_script.py")
"""Names (prefixes) of files in an embedder folder that cannot change a vector: model cards,
licences, training records. Everything else (modules.json, every module's config and weights,
tokenizer files, sentence-transformers and pooling configs, ...) is part of the identity."""


def embedder_identity_files(folder: str | Path) -> list[Path]:
    """Every file of a sentence-transformers folder that can change a vector, sorted, recursively
    (module folders such as ``1_Pooling`` and ``2_Dense`` included); hidden files and folders,
    Markdown files and :data:`EMBEDDER_SKIPPED` are left out.

    Raises:
        ValueError: ``folder`` is not a directory.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a directory: give an embedder folder")
    out = []
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        if not p.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        if p.suffix.lower() == ".md" or p.name.startswith(EMBEDDER_SKIPPED):
            continue
        out.append(p)
    return sorted(out, key=lambda q: q.relative_to(folder).as_posix())


def embedder_folder_digest(folder: str | Path, cache_file: str | Path | None = None) -> str:
    """Digest of :func:`embedder_identity_files` (names relative to ``folder``, sizes, sha256)."""
    folder = Path(folder)
    cache = DigestCache(cache_file)
    try:
        return files_digest(embedder_identity_files(folder), cache, root=folder)
    finally:
        try:
            cache.flush()
        except OSError as e:  # a read-only home only costs speed
            log.warning("cannot write the file digest cache %s: %s", cache_file, e)


def module_identity(model: Any) -> str:
    """Digest of an in-memory sentence-transformers model (no folder to hash): each module's type,
    configuration and weights, and the maximum sequence length."""
    rows = []
    for name, module in getattr(model, "_modules", {}).items():
        get_cfg = getattr(module, "get_config_dict", None)
        cfg = _plain(get_cfg()) if callable(get_cfg) else None
        state = module.state_dict() if hasattr(module, "state_dict") else {}
        rows.append([name, f"{type(module).__module__}.{type(module).__qualname__}", cfg,
                     _tensor_digest(state) if state else None])
    return hash_value(["ragcache-st-modules-v1", rows, _plain(getattr(model, "max_seq_length", None))])


class DigestCache:
    """sha256 of files, remembered in a JSON file by (path, device, inode, size, mtime_ns, ctime_ns).

    Args:
        path: the JSON file (written atomically with :mod:`ragcache.atomic`); ``None`` keeps
            the digests in memory only.

    Attributes:
        hashed: files read and hashed by this object (cache misses).
    """

    def __init__(self, path: str | Path | None) -> None:
        self.path = None if path is None else Path(path)
        self.hashed = 0
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, Any]] = self._read()
        self._dirty = False

    def _read(self) -> dict[str, dict[str, Any]]:
        if self.path is None or not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("format") != _CACHE_FORMAT or not isinstance(data.get("files"), dict):
                raise ValueError("unknown format")
            return dict(data["files"])
        except (OSError, ValueError, AttributeError) as e:
            log.warning("file digest cache %s is unreadable (%s); hashing files again", self.path, e)
            return {}

    def digest(self, file: str | Path) -> str:
        """Hex sha256 of ``file``; from the cache when its device, inode, size, mtime and ctime are
        unchanged (never on a platform without a trustworthy ctime, :data:`STAT_TRUSTED`)."""
        file = Path(file).resolve()
        st = file.stat()
        sig = _signature(st)
        key = str(file)
        with self._lock:
            e = self._entries.get(key)
            if STAT_TRUSTED and e is not None and all(e.get(k) == v for k, v in sig.items()):
                return str(e["sha256"])
        hashed_at = time.time_ns()
        digest = sha256_file(file)
        with self._lock:
            self.hashed += 1
            settled = hashed_at - max(st.st_mtime_ns, st.st_ctime_ns) >= RACY_SECONDS * 1e9
            if STAT_TRUSTED and _signature(file.stat()) == sig and settled:
                self._entries[key] = {**sig, "sha256": digest}
                self._dirty = True
            else:  # changed while or just before hashing: do not trust its stat for it
                self._entries.pop(key, None)
        return digest

    def flush(self) -> None:
        """Write new digests to :attr:`path` (merged with entries other processes wrote meanwhile); nothing
        when its folder cannot be written (a read-only home)."""
        from ragcache.home import writable

        with self._lock:
            if self.path is None or not self._dirty or not writable(self.path.parent):
                return  # nothing new, or a read-only home: the digests are computed again next time
            merged = {**self._read(), **self._entries}
            merged = {k: v for k, v in merged.items() if os.path.exists(k)}
            atomic_write_json(self.path, {"format": _CACHE_FORMAT, "files": merged}, indent=None)
            self._entries, self._dirty = merged, False


def files_digest(files: Iterable[str | Path], cache: DigestCache | None = None, *, root: Path | None = None) -> str:
    """One hex digest over ``(name, size, sha256)`` of each file (names relative to ``root``)."""
    cache = cache or DigestCache(None)
    rows = []
    for f in files:
        f = Path(f)
        name = str(f.relative_to(root)) if root is not None else f.name
        rows.append([name, f.stat().st_size, cache.digest(f)])
    return hash_value(["ragcache-files-v1", rows])


def folder_digest(folder: str | Path, cache_file: str | Path | None = None) -> str:
    """Digest of a model folder's weight and config files (:func:`identity_files`).

    Args:
        folder: a Hugging Face model folder (``config.json`` + weight shards) or an adapter
            folder (``adapter_config.json`` + ``adapter_model.safetensors``).
        cache_file: JSON file of remembered file digests (see :class:`DigestCache`).

    Raises:
        ValueError: the folder holds no weight file.
    """
    folder = Path(folder)
    files = identity_files(folder)
    if not any(f.name.endswith(WEIGHT_SUFFIXES) for f in files):
        raise ValueError(f"{folder} holds no weight file ({', '.join('*' + s for s in WEIGHT_SUFFIXES)})")
    cache = DigestCache(cache_file)
    try:
        return files_digest(files, cache, root=folder)
    finally:
        try:
            cache.flush()
        except OSError as e:  # a read-only home only costs speed
            log.warning("cannot write the file digest cache %s: %s", cache_file, e)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "generation_config.json", "vocab.json", "merges.txt", "tokenizer.model", "vocab.txt")
"""Files of a model folder that decide tokenization and decoding besides the weights (:func:`tokenizer_digest`)."""


def tokenizer_digest(folder: str | Path, cache_file: str | Path | None = None) -> str:
    """Digest of the :data:`TOKENIZER_FILES` present at the top of ``folder`` (names, sizes, sha256;
    a folder with none of them has a digest of its own). ``cache_file`` as :func:`folder_digest`'s.

    Raises:
        ValueError: ``folder`` is not a directory.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a directory: give a model folder")
    files = [folder / n for n in TOKENIZER_FILES if (folder / n).is_file()]
    cache = DigestCache(cache_file)
    try:
        return hash_value(["ragcache-tokenizer-files-v1", files_digest(files, cache, root=folder)])
    finally:
        try:
            cache.flush()
        except OSError as e:  # a read-only home only costs speed
            log.warning("cannot write the file digest cache %s: %s", cache_file, e)


CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
TOKENIZER_CONFIG = "tokenizer_config.json"


def template_digest(template: Any) -> str:
    """Hex sha256 of a chat template as a tokenizer holds it (``tokenizer.chat_template``): a string,
    a dict of named templates (order-free), or ``None`` (no template: a digest of its own).

    Raises:
        TypeError: anything else.
    """
    if template is not None and not isinstance(template, str | dict):
        raise TypeError(f"a chat template is a string, a dict of named strings or None; got {type(template).__name__}")
    return hash_value(["ragcache-chat-template-v1", template])


def folder_chat_template(folder: str | Path) -> str | dict[str, str] | None:
    """The chat template transformers' tokenizer will hold when loaded from ``folder``
    (transformers 5, ``PreTrainedTokenizerBase.from_pretrained``): ``chat_template.jinja`` (name
    ``default``) and every ``additional_chat_templates/<name>.jinja``; a lone default is a string,
    several a dict. Without template files, ``chat_template`` of ``tokenizer_config.json`` (a string,
    or a list of ``{"name", "template"}``, made a dict). ``None`` when the folder has no template.

    Raises:
        ValueError: ``tokenizer_config.json`` is not valid JSON.
    """
    folder = Path(folder)
    found: dict[str, str] = {}
    if (folder / CHAT_TEMPLATE_FILE).is_file():
        found["default"] = (folder / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    extra = folder / CHAT_TEMPLATE_DIR
    for f in sorted(extra.glob("*.jinja")) if extra.is_dir() else ():
        found[f.name.removesuffix(".jinja")] = f.read_text(encoding="utf-8")
    if found:
        return found["default"] if list(found) == ["default"] else found
    cfg_file = folder / TOKENIZER_CONFIG
    if not cfg_file.is_file():
        return None
    try:
        template = json.loads(cfg_file.read_text(encoding="utf-8")).get("chat_template")
    except (json.JSONDecodeError, AttributeError) as e:
        raise ValueError(f"{cfg_file} is not a JSON object ({e})") from None
    if isinstance(template, list | tuple):
        return {t["name"]: t["template"] for t in template}
    return template


@dataclass(frozen=True, slots=True)
class ModelFingerprint:
    """Identity of a loaded model: every KV and answer cache key starts from :attr:`digest`.

    Attributes:
        name: model name or path as given.
        revision: for a local folder, the digest of every weight file and ``config.json``
            (:func:`ragcache.identity.folder_digest`); for a hub id, the commit hash; for the embedded
            model as ragcache converts it, ``source:<digest>`` of what the conversion is a function of
            (the GGUF's sha256, the recipe, the library versions; :mod:`ragcache.models`), known before
            the conversion.
        dtype: compute dtype, e.g. ``"float32"``.
        adapters: one entry per PEFT / LoRA adapter on the model (name, config digest and
            weights digest, :func:`ragcache.identity.adapter_identities`); ``()`` without adapters.
        template: digest of the chat template the tokenizer holds
            (:func:`ragcache.identity.template_digest`); ``None``: not known (left out of the digest).
        tokenizer: digest of the tokenizer and generation-config files (:func:`ragcache.identity.tokenizer_digest`);
            ``None``: covered by :attr:`revision` (the embedded model's ``source:`` revision) or not known
            (left out of the digest).

    A model whose weights are changed in memory after loading (merged adapters, training,
    ``load_state_dict``) keeps its fingerprint: give such an engine a new ``namespace``.
    """

    name: str
    revision: str
    dtype: str
    adapters: tuple[str, ...] = ()
    template: str | None = None
    tokenizer: str | None = None

    @property
    def digest(self) -> str:
        """Hex sha256 of (name, revision, dtype[, adapters][, chat template][, tokenizer files]): every KV
        and answer key."""
        extra = {} if self.template is None else {"chat_template": self.template}
        if self.tokenizer is not None:
            extra["tokenizer"] = self.tokenizer
        if not extra:
            return self.weights_digest
        fields = [self.name, self.revision, self.dtype, list(self.adapters), extra]
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()

    @property
    def weights_digest(self) -> str:
        """Hex sha256 of (name, revision, dtype[, adapters]), the chat template and tokenizer left out: the key of
        records that measure the weights alone (blend calibration), unchanged since 0.2."""
        fields: list = [self.name, self.revision, self.dtype]
        if self.adapters:
            fields.append(list(self.adapters))
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()

    def with_template(self, chat_template: Any) -> ModelFingerprint:
        """This fingerprint for a tokenizer holding ``chat_template`` (``tokenizer.chat_template``:
        a string, a dict of named templates, or ``None``)."""
        t = template_digest(chat_template)
        return self if t == self.template else replace(self, template=t)

    def with_adapters_of(self, model: Any) -> ModelFingerprint:
        """This fingerprint with :attr:`adapters` read from ``model`` (a PeftModel or a
        transformers model with loaded adapters); unchanged when they already match."""
        adapters = adapter_identities(model)
        return self if adapters == self.adapters else replace(self, adapters=adapters)

    def __str__(self) -> str:
        extra = f"+{len(self.adapters)} adapter(s)" if self.adapters else ""
        tpl = f"+template {self.template[:8]}" if self.template else ""
        tok = f"+tokenizer {self.tokenizer[:8]}" if self.tokenizer else ""
        return f"{self.name}@{self.revision[:12]}/{self.dtype}{extra}{tpl}{tok}"


@dataclass(slots=True)
class LoadedModel:
    """A causal LM, its tokenizer and its fingerprint (its chat template filled in from the
    tokenizer when the fingerprint does not say it, :meth:`ModelFingerprint.with_template`)."""

    model: Any
    tokenizer: Any
    fingerprint: ModelFingerprint

    def __post_init__(self) -> None:
        if self.fingerprint.template is None and self.tokenizer is not None:
            self.fingerprint = self.fingerprint.with_template(getattr(self.tokenizer, "chat_template", None))


def _tensor_digest(state: dict[str, Any]) -> str:
    """sha256 over (name, dtype, shape, bytes) of each tensor, in name order."""
    import torch

    h = hashlib.sha256(b"ragcache-tensors-v1")
    for name in sorted(state):
        t = state[name].detach().to("cpu").contiguous()
        head = canonical_json([name, str(t.dtype), list(t.shape)]).encode()
        h.update(len(head).to_bytes(8, "little") + head)
        data = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def _adapter_state(model: Any, name: str) -> dict[str, Any]:
    try:  # PeftModel
        from peft import get_peft_model_state_dict

        return dict(get_peft_model_state_dict(model, adapter_name=name))
    except Exception:  # noqa: BLE001 - not a PeftModel, or peft missing: fall through
        pass
    getter = getattr(model, "get_adapter_state_dict", None)  # transformers' PEFT integration
    if getter is not None:
        return dict(getter(name))
    return {k: v for k, v in model.state_dict().items() if f".{name}." in k or k.endswith(f".{name}")}


def _plain(value: Any) -> Any:
    """JSON-ready copy with sets sorted (a set's order follows Python's per-process string hash)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return sorted((_plain(v) for v in value), key=repr)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return getattr(value, "value", None) if hasattr(value, "value") else str(value)


def adapter_identities(model: Any) -> tuple[str, ...]:
    """Identity of each PEFT adapter on ``model`` (a ``PeftModel`` or a transformers model
    with ``load_adapter``), as ``"name:config-sha256:weights-sha256"`` strings; the active
    adapters are marked ``"active:"`` so enabling another adapter changes the identity.

    The weights digest is taken from the tensors in memory, so it covers adapters loaded
    from files or built in code alike. ``()`` for a model without adapters.
    """
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not configs:
        return ()
    active = getattr(model, "active_adapters", None)
    if callable(active):
        active = active()
    if isinstance(active, str):
        active = [active]
    active = set(active or [])
    out = []
    for name in sorted(configs):
        cfg = configs[name]
        cfg_dict = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(vars(cfg))
        cfg_dict = {k: v for k, v in cfg_dict.items() if k not in _IGNORED_ADAPTER_KEYS}
        cfg_digest = hashlib.sha256(json.dumps(_plain(cfg_dict), sort_keys=True).encode()).hexdigest()
        state = _adapter_state(model, name)
        if not state:
            raise ValueError(f"adapter {name!r} has no weights ragcache can read; give the engine a new namespace "
                             "instead of relying on the fingerprint")
        flag = "active" if name in active else "inactive"
        out.append(f"{flag}:{name}:{cfg_digest}:{_tensor_digest(state)}")
    return tuple(out)


__all__ = ["LoadedModel", "ModelFingerprint", "CHAT_TEMPLATE_DIR", "CHAT_TEMPLATE_FILE", "CONFIG_FILES", "folder_chat_template", "template_digest", "DigestCache", "EMBEDDER_SKIPPED", "RACY_SECONDS", "STAT_TRUSTED", "WEIGHT_SUFFIXES",
           "adapter_identities", "embedder_folder_digest", "embedder_identity_files", "files_digest", "folder_digest",
           "identity_files", "module_identity", "sha256_file", "TOKENIZER_FILES", "tokenizer_digest"]
